//! Which kernel computes the keystream, chosen once per operation from what the CPU
//! reports, and the 512-byte keystream batch every kernel fills.

use zeroize::Zeroize;

use std::ops::Range;

use crate::poly1305::Poly1305;
use crate::portable;

/// A ChaCha20 implementation. [`Backend::detect`] picks the fastest this CPU supports; the
/// explicit choice exists for tests and benchmarks. Asking for a backend the CPU lacks is
/// safe: it runs the portable code instead.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Backend {
    /// Plain Rust, one block at a time; runs everywhere.
    Portable,
    /// Eight blocks at a time in 256-bit AVX2 registers (x86-64 CPUs from 2013 on).
    Avx2,
    /// As [`Backend::Avx2`], plus AVX-512VL's rotate instruction and its 32 vector
    /// registers, still on 256-bit vectors, and sixteen blocks at a time in 512-bit ones for
    /// long keystream (x86-64 CPUs with AVX-512: Intel from 2017, AMD from Zen 4).
    Avx512Vl,
    /// As [`Backend::Avx512Vl`], with Poly1305 four blocks at a time in vector lanes on
    /// AVX-512 IFMA's 52-bit multipliers (Intel from Ice Lake, AMD from Zen 4).
    Avx512Ifma,
}

impl Backend {
    /// Every backend, slowest first.
    pub const ALL: [Backend; 4] = [
        Backend::Portable,
        Backend::Avx2,
        Backend::Avx512Vl,
        Backend::Avx512Ifma,
    ];

    /// The fastest backend this CPU supports.
    pub fn detect() -> Backend {
        Backend::ALL
            .into_iter()
            .rev()
            .find(|b| b.is_available())
            .unwrap_or(Backend::Portable)
    }

    /// Whether this CPU can run the backend.
    pub fn is_available(self) -> bool {
        match self {
            Backend::Portable => true,
            #[cfg(target_arch = "x86_64")]
            Backend::Avx2 => crate::x86::Simd::avx2().is_some(),
            #[cfg(target_arch = "x86_64")]
            Backend::Avx512Vl => crate::x86::Simd::avx512vl().is_some(),
            #[cfg(target_arch = "x86_64")]
            Backend::Avx512Ifma => crate::x86::Simd::avx512ifma().is_some(),
            #[cfg(not(target_arch = "x86_64"))]
            _ => false,
        }
    }

    /// A short name for reports and benchmark ids.
    pub fn name(self) -> &'static str {
        match self {
            Backend::Portable => "portable",
            Backend::Avx2 => "avx2",
            Backend::Avx512Vl => "avx512vl",
            Backend::Avx512Ifma => "avx512ifma",
        }
    }

    /// The kernel to run: this backend if the CPU has it, else the portable one.
    pub(crate) fn kernel(self) -> Kernel {
        match self {
            Backend::Portable => Kernel::Portable,
            #[cfg(target_arch = "x86_64")]
            Backend::Avx2 => crate::x86::Simd::avx2().map_or(Kernel::Portable, Kernel::Simd),
            #[cfg(target_arch = "x86_64")]
            Backend::Avx512Vl => {
                crate::x86::Simd::avx512vl().map_or(Kernel::Portable, Kernel::Simd)
            }
            #[cfg(target_arch = "x86_64")]
            Backend::Avx512Ifma => {
                crate::x86::Simd::avx512ifma().map_or(Kernel::Portable, Kernel::Simd)
            }
            #[cfg(not(target_arch = "x86_64"))]
            _ => Kernel::Portable,
        }
    }
}

/// A backend whose CPU support has been checked.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Kernel {
    Portable,
    #[cfg(target_arch = "x86_64")]
    Simd(crate::x86::Simd),
}

impl Kernel {
    /// Keystream blocks `counter..` for `job`: [`Kernel::batch_len`]`(wanted, ..)` of them.
    /// Returns the number of blocks.
    #[inline]
    pub(crate) fn batch(
        self,
        state: &[u32; 16],
        counter: u32,
        wanted: usize,
        job: &mut Job<'_>,
    ) -> usize {
        match self {
            Kernel::Portable => portable::batch(state, counter, wanted, job),
            #[cfg(target_arch = "x86_64")]
            Kernel::Simd(simd) => simd.batch(state, counter, wanted, job),
        }
    }

    /// How many blocks a batch computes when `wanted` are asked for: at least
    /// `min(wanted, 8)` and one, at most [`MAX_BATCH_BLOCKS`], and with a MAC riding
    /// along, at most eight (the vector kernels compute eight, or sixteen on 512-bit
    /// vectors when more than eight are wanted and no MAC rides along; the portable one
    /// what is wanted).
    #[inline]
    pub(crate) fn batch_len(self, wanted: usize, with_mac: bool) -> usize {
        match self {
            Kernel::Portable => wanted.clamp(
                1,
                if with_mac {
                    MAC_BATCH_BLOCKS
                } else {
                    MAX_BATCH_BLOCKS
                },
            ),
            #[cfg(target_arch = "x86_64")]
            Kernel::Simd(simd) => simd.batch_len(wanted, with_mac),
        }
    }

    /// `data ^= keystream` (of the same length).
    #[inline]
    pub(crate) fn xor(self, keystream: &[u8], data: &mut [u8]) {
        match self {
            Kernel::Portable => xor(keystream, data),
            #[cfg(target_arch = "x86_64")]
            Kernel::Simd(simd) => simd.xor(keystream, data),
        }
    }

    /// Whether Poly1305 runs in vector lanes (AVX-512 IFMA) rather than on the scalar
    /// multiplier.
    pub(crate) fn mac_in_vectors(self) -> bool {
        match self {
            Kernel::Portable => false,
            #[cfg(target_arch = "x86_64")]
            Kernel::Simd(simd) => simd.mac_in_vectors(),
        }
    }

    /// Absorb `data` into `poly`, zero-padding a short last block (the AEAD's padding):
    /// four blocks at a time in vector lanes where the CPU has them.
    #[inline]
    pub(crate) fn absorb(self, poly: &mut Poly1305, data: &[u8]) {
        match self {
            Kernel::Portable => poly.update_padded(data),
            #[cfg(target_arch = "x86_64")]
            Kernel::Simd(simd) => simd.absorb(poly, data),
        }
    }
}

/// The most blocks a batch that carries a MAC holds.
pub(crate) const MAC_BATCH_BLOCKS: usize = 8;

/// The most blocks one batch holds.
pub(crate) const MAX_BATCH_BLOCKS: usize = 16;
/// Lanes of a batch with room for [`MAX_BATCH_BLOCKS`] (two 32-byte lanes per block).
pub(crate) const MAX_LANES: usize = 2 * MAX_BATCH_BLOCKS;

/// One 32-byte piece of a batch: a vector register where there is one.
#[cfg(target_arch = "x86_64")]
pub(crate) type Lane = core::arch::x86_64::__m256i;
/// One 32-byte piece of a batch.
#[cfg(not(target_arch = "x86_64"))]
pub(crate) type Lane = [u64; 4];

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

    /// XOR keystream bytes `skip..skip + data.len()` into `data`, on `kernel`'s vectors.
    #[inline]
    pub(crate) fn xor_into(&self, kernel: Kernel, skip: usize, data: &mut [u8]) {
        xor_lanes(kernel, &self.0, skip, data);
    }
}

/// XOR the keystream bytes `skip..skip + data.len()` of `lanes` into `data`.
#[inline]
pub(crate) fn xor_lanes(kernel: Kernel, lanes: &[Lane], skip: usize, data: &mut [u8]) {
    let keystream: &[u8] = bytemuck::cast_slice(lanes);
    kernel.xor(&keystream[skip..skip + data.len()], data);
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
