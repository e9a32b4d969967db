//! The keystream batches the x86-64 kernels fill: up to twenty 64-byte blocks, kept in
//! 32-byte lanes or XORed straight into a message, with Poly1305 riding along.

use zeroize::Zeroize;

use std::ops::Range;

use crate::poly1305::Poly1305;
use crate::x86::Simd;

/// The most blocks a batch that carries a MAC holds.
pub(crate) const MAC_BATCH_BLOCKS: usize = 8;

/// The most blocks one batch holds.
pub(crate) const MAX_BATCH_BLOCKS: usize = 20;
/// Lanes of a batch with room for [`MAX_BATCH_BLOCKS`] (two 32-byte lanes per block).
pub(crate) const MAX_LANES: usize = 2 * MAX_BATCH_BLOCKS;

/// One 32-byte piece of a batch: a vector register.
pub(crate) type Lane = core::arch::x86_64::__m256i;

/// What a batch does with its keystream (in lanes of 32 bytes, two per block).
pub(crate) enum Job<'a> {
    /// Store every lane; the slice has room for all of them.
    Keep(&'a mut [Lane]),
    /// XOR the keystream into a message.
    Xor(Xor<'a>),
}

/// A batch that XORs its keystream into `buf` from byte `at` on, whole lanes only, as many
/// as `buf` has room for:
///
/// * with `head`, the batch's first block (block 0: the AEAD's Poly1305 key) goes there
///   instead, and the XOR starts with the second;
/// * the lanes after those XORed in go to `spill`, as many as it holds (the keystream of a
///   short last lane of `buf`, and past it); the rest are dropped;
/// * with `mac`, the kernel first absorbs the whole 16-byte blocks of its range of `buf` into
///   the Poly1305, between the ChaCha20 rounds: an open authenticates ciphertext before
///   the same batch decrypts it.
pub(crate) struct Xor<'a> {
    pub(crate) head: Option<&'a mut [Lane; 2]>,
    pub(crate) buf: &'a mut [u8],
    pub(crate) at: usize,
    pub(crate) spill: &'a mut [Lane; SPILL],
    pub(crate) mac: Option<(&'a mut Poly1305, Range<usize>)>,
}

/// Lanes of keystream an [`Xor`] batch keeps after the message's whole lanes: its short
/// last lane and what follows (`open_in_place_with_tail`'s tail, if it fits).
pub(crate) const SPILL: usize = 4;

impl Xor<'_> {
    /// Hand the batch's `lanes` out as the fields say (see [`Xor`]).
    #[inline(always)]
    pub(crate) fn emit<L: Copy>(
        &mut self,
        lanes: &[L],
        store: impl Fn(&mut Lane, L),
        xor: impl Fn(&mut [u8], L),
    ) {
        let mut lanes = lanes;
        if let Some(head) = self.head.as_mut() {
            store(&mut head[0], lanes[0]);
            store(&mut head[1], lanes[1]);
            lanes = &lanes[2..];
        }
        let data = self.buf.get_mut(self.at..).unwrap_or_default();
        let whole = (data.len() / 32).min(lanes.len());
        for (d, lane) in data.chunks_exact_mut(32).zip(lanes) {
            xor(d, *lane);
        }
        let rest = &lanes[whole..];
        for (i, s) in self.spill.iter_mut().enumerate() {
            if i < rest.len() {
                store(s, rest[i]);
            }
        }
    }
}

/// Keystream for up to `LANES / 2` consecutive blocks. Wiped on drop.
pub(crate) struct Batch<const LANES: usize = MAX_LANES>(pub(crate) [Lane; LANES]);

impl<const LANES: usize> Batch<LANES> {
    pub(crate) fn new() -> Self {
        Batch([bytemuck::Zeroable::zeroed(); LANES])
    }

    /// XOR keystream bytes `skip..skip + data.len()` into `data`, on `simd`'s vectors.
    #[inline]
    pub(crate) fn xor_into(&self, simd: Simd, skip: usize, data: &mut [u8]) {
        xor_lanes(simd, &self.0, skip, data);
    }
}

/// XOR the keystream bytes `skip..skip + data.len()` of `lanes` into `data`.
#[inline]
pub(crate) fn xor_lanes(simd: Simd, lanes: &[Lane], skip: usize, data: &mut [u8]) {
    let keystream: &[u8] = bytemuck::cast_slice(lanes);
    simd.xor(&keystream[skip..skip + data.len()], data);
}

impl<const LANES: usize> Drop for Batch<LANES> {
    fn drop(&mut self) {
        self.0.zeroize();
    }
}

/// `data ^= keystream`, byte by byte (which the compiler turns into the widest vectors the
/// build allows).
#[inline(always)]
pub(crate) fn xor(keystream: &[u8], data: &mut [u8]) {
    for (d, k) in data.iter_mut().zip(keystream) {
        *d ^= *k;
    }
}

/// Blocks needed to cover `bytes` bytes of keystream.
pub(crate) fn blocks_for(bytes: usize) -> usize {
    bytes.div_ceil(64)
}
