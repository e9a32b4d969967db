//! ChaCha20 (RFC 8439 section 2.4) as a keystream that can be positioned at any byte.

use std::fmt;

use crate::backend::{Backend, Kernel};
use crate::poly1305::Poly1305;
use crate::portable::Keystream;
use crate::{Error, KEY_LEN, NONCE_LEN};

/// One past the last keystream byte: the block counter is 32 bits.
pub(crate) const STREAM_END: u64 = (1u64 << 32) * 64;

/// The ChaCha20 keystream of one (key, nonce), positioned at a byte offset. Applying it
/// XORs keystream into data and moves the position on; the x86-64 kernels compute four, eight,
/// sixteen or twenty blocks at a time and keep them, so consecutive calls within them cost one
/// computation. Key material is wiped on drop and never printed.
///
/// ```
/// use nyx_chacha::ChaCha20;
///
/// let mut data = [0u8; 100];
/// let mut stream = ChaCha20::new(&[1; 32], &[2; 12]);
/// stream.apply_keystream(&mut data)?;
/// // The same bytes, drawn from an offset.
/// let mut tail = [0u8; 36];
/// let mut at = ChaCha20::new(&[1; 32], &[2; 12]);
/// at.seek(64);
/// at.apply_keystream(&mut tail)?;
/// assert_eq!(tail, data[64..]);
/// # Ok::<(), nyx_chacha::Error>(())
/// ```
pub struct ChaCha20 {
    offset: u64,
    stream: Stream,
}

/// The backend's keystream. On x86-64 the kernels' variant holds a 1.25 KiB batch and the
/// portable one much less; boxing would allocate, and this crate does not.
#[allow(clippy::large_enum_variant)]
enum Stream {
    Portable(Keystream),
    #[cfg(target_arch = "x86_64")]
    Simd(simd::Stream),
}

impl ChaCha20 {
    /// The keystream for (`key`, `nonce`) at offset 0, on the fastest backend.
    pub fn new(key: &[u8; KEY_LEN], nonce: &[u8; NONCE_LEN]) -> Self {
        Self::with_backend(Backend::detect(), key, nonce)
    }

    /// As [`ChaCha20::new`] on a chosen backend.
    pub fn with_backend(backend: Backend, key: &[u8; KEY_LEN], nonce: &[u8; NONCE_LEN]) -> Self {
        let stream = match backend.kernel() {
            Kernel::Portable => Stream::Portable(Keystream::new(key, nonce)),
            #[cfg(target_arch = "x86_64")]
            Kernel::Simd(kernel) => Stream::Simd(simd::Stream::new(
                kernel,
                zeroize::Zeroizing::new(simd::state(key, nonce)),
            )),
        };
        ChaCha20 { offset: 0, stream }
    }

    /// Move to byte `offset` of the keystream.
    pub fn seek(&mut self, offset: u64) {
        self.offset = offset;
    }

    /// The current byte offset.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// XOR the keystream from the current offset into `data` and advance past it. Fails,
    /// changing nothing, if the keystream would run past its 2^32 blocks (256 GiB).
    pub fn apply_keystream(&mut self, data: &mut [u8]) -> Result<(), Error> {
        let end = stream_end(self.offset, data.len())?;
        match &mut self.stream {
            Stream::Portable(stream) => stream.apply(self.offset, data),
            #[cfg(target_arch = "x86_64")]
            Stream::Simd(stream) => stream.apply(self.offset, data),
        }
        self.offset = end;
        Ok(())
    }

    /// Poly1305 keyed with the first 32 bytes of block 0 (the AEAD's one-time key); on the
    /// x86-64 kernels a whole batch from block 0 is computed and kept, so that the message's
    /// keystream follows from it.
    pub(crate) fn mac(&mut self) -> Poly1305 {
        match &mut self.stream {
            Stream::Portable(stream) => stream.mac(),
            #[cfg(target_arch = "x86_64")]
            Stream::Simd(stream) => Poly1305::new(stream.block0_head()),
        }
    }
}

/// XOR the keystream for (`key`, `nonce`) from byte `offset` on into `data`, on the fastest
/// backend: as [`ChaCha20::new`], [`ChaCha20::seek`] and [`ChaCha20::apply_keystream`] in one
/// call, for a caller that needs the keystream once. From a block's start the x86-64 kernels
/// XOR each batch straight into `data`, keeping no copy of it. Fails, changing nothing, if
/// the keystream would run past its 2^32 blocks.
///
/// ```
/// let mut data = [0u8; 100];
/// nyx_chacha::xor_keystream(&[1; 32], &[2; 12], 64, &mut data)?;
/// let mut same = [0u8; 164];
/// nyx_chacha::ChaCha20::new(&[1; 32], &[2; 12]).apply_keystream(&mut same)?;
/// assert_eq!(data, same[64..]);
/// # Ok::<(), nyx_chacha::Error>(())
/// ```
pub fn xor_keystream(
    key: &[u8; KEY_LEN],
    nonce: &[u8; NONCE_LEN],
    offset: u64,
    data: &mut [u8],
) -> Result<(), Error> {
    xor_keystream_with(Backend::detect(), key, nonce, offset, data)
}

/// [`xor_keystream`] on a chosen backend.
pub fn xor_keystream_with(
    backend: Backend,
    key: &[u8; KEY_LEN],
    nonce: &[u8; NONCE_LEN],
    offset: u64,
    data: &mut [u8],
) -> Result<(), Error> {
    stream_end(offset, data.len())?;
    match backend.kernel() {
        #[cfg(target_arch = "x86_64")]
        Kernel::Simd(kernel) if offset.is_multiple_of(64) => {
            let state = zeroize::Zeroizing::new(simd::state(key, nonce));
            // Below 2^32 whenever `data` is not empty (checked above).
            simd::xor_from_block(kernel, &state, (offset / 64) as u32, data);
            Ok(())
        }
        _ => {
            let mut stream = ChaCha20::with_backend(backend, key, nonce);
            stream.seek(offset);
            stream.apply_keystream(data)
        }
    }
}

/// Where `len` bytes of keystream from `offset` end, if that is within the stream.
pub(crate) fn stream_end(offset: u64, len: usize) -> Result<u64, Error> {
    offset
        .checked_add(len as u64)
        .filter(|end| *end <= STREAM_END)
        .ok_or(Error::KeystreamExhausted {
            offset: offset.saturating_add(len as u64),
        })
}

impl fmt::Debug for ChaCha20 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ChaCha20")
            .field("offset", &self.offset)
            .finish_non_exhaustive()
    }
}

/// The keystream on the x86-64 kernels: batches of four, eight, sixteen or twenty blocks,
/// the last one kept.
#[cfg(target_arch = "x86_64")]
pub(crate) mod simd {
    use zeroize::Zeroizing;

    use crate::batch::{Batch, Job, MAX_BATCH_BLOCKS, SPILL, Xor, blocks_for, xor_lanes};
    use crate::x86::Simd;
    use crate::{KEY_LEN, NONCE_LEN};

    /// The initial state for (`key`, `nonce`): constants, key, counter 0, nonce.
    #[inline]
    pub(crate) fn state(key: &[u8; KEY_LEN], nonce: &[u8; NONCE_LEN]) -> [u32; 16] {
        let mut s = [0u32; 16];
        s[..4].copy_from_slice(&[0x6170_7865, 0x3320_646e, 0x7962_2d32, 0x6b20_6574]);
        for (w, b) in s[4..12].iter_mut().zip(key.chunks_exact(4)) {
            *w = u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
        }
        for (w, b) in s[13..].iter_mut().zip(nonce.chunks_exact(4)) {
            *w = u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
        }
        s
    }

    /// XOR the keystream from block `first` on into `buf`, each batch straight from the
    /// kernel (whole 32-byte lanes; a short last lane from the batch's spill). The caller
    /// has checked that the blocks lie within the stream.
    pub(crate) fn xor_from_block(kernel: Simd, state: &[u32; 16], first: u32, buf: &mut [u8]) {
        let len = buf.len();
        let mut spill = Batch::<SPILL>::new();
        let (mut at, mut counter) = (0, first);
        while at < len {
            let wanted = blocks_for(len - at).min(MAX_BATCH_BLOCKS);
            let mut job = Job::Xor(Xor {
                head: None,
                buf: &mut *buf,
                at,
                spill: &mut spill.0,
                mac: None,
            });
            let held = kernel.batch(state, counter, wanted, &mut job);
            let end = len.min(at + held * 64);
            let whole = at + (end - at) / 32 * 32;
            if whole < end {
                xor_lanes(kernel, &spill.0, 0, &mut buf[whole..end]);
            }
            at = end;
            counter = counter.wrapping_add(held as u32);
        }
    }

    pub(crate) struct Stream {
        state: Zeroizing<[u32; 16]>,
        kernel: Simd,
        /// The first block and the number of blocks `batch` holds.
        cached: Option<(u64, usize)>,
        batch: Batch,
    }

    impl Stream {
        pub(crate) fn new(kernel: Simd, state: Zeroizing<[u32; 16]>) -> Self {
            Stream {
                state,
                kernel,
                cached: None,
                batch: Batch::new(),
            }
        }

        /// XOR keystream bytes `offset..` into `data`; the caller has checked that they
        /// lie within the stream.
        pub(crate) fn apply(&mut self, mut offset: u64, mut data: &mut [u8]) {
            while !data.is_empty() {
                let block = offset / 64;
                // block < 2^32 because offset < end <= STREAM_END.
                let blocks = self.load(block, blocks_for((offset % 64) as usize + data.len()));
                let first = self.cached.map_or(block, |(first, _)| first);
                let skip = (offset - first * 64) as usize;
                let n = (blocks * 64 - skip).min(data.len());
                let (now, rest) = data.split_at_mut(n);
                self.batch.xor_into(self.kernel, skip, now);
                offset += n as u64;
                data = rest;
            }
        }

        /// Make the kept batch cover `block` (below 2^32), computing `wanted` blocks from it
        /// if it does not. Returns how many blocks the batch holds.
        fn load(&mut self, block: u64, wanted: usize) -> usize {
            match self.cached {
                Some((first, blocks)) if block >= first && block - first < blocks as u64 => blocks,
                _ => {
                    let wanted = wanted.min(MAX_BATCH_BLOCKS);
                    let mut job = Job::Keep(&mut self.batch.0);
                    let blocks = self
                        .kernel
                        .batch(&self.state, block as u32, wanted, &mut job);
                    self.cached = Some((block, blocks));
                    blocks
                }
            }
        }

        /// The first 32 bytes of block 0, computing and keeping a whole batch from block 0.
        pub(crate) fn block0_head(&mut self) -> &[u8; 32] {
            self.load(0, MAX_BATCH_BLOCKS);
            bytemuck::cast_ref(&self.batch.0[0])
        }
    }
}
