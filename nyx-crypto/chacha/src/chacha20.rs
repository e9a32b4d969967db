//! ChaCha20 (RFC 8439 section 2.4) as a keystream that can be positioned at any byte.

use std::fmt;

use zeroize::Zeroizing;

use crate::backend::{Backend, Batch, Job, Kernel, MAX_BATCH_BLOCKS, blocks_for};
use crate::{Error, KEY_LEN, NONCE_LEN};

/// One past the last keystream byte: the block counter is 32 bits.
const STREAM_END: u64 = (1u64 << 32) * 64;

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

/// The ChaCha20 keystream of one (key, nonce), positioned at a byte offset. Applying it
/// XORs keystream into data and moves the position on; eight or sixteen blocks are computed
/// at a time and kept, so consecutive calls within them cost one computation. Key material is
/// wiped on drop and never printed.
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
    state: Zeroizing<[u32; 16]>,
    kernel: Kernel,
    offset: u64,
    /// The first block and the number of blocks `batch` holds.
    cached: Option<(u64, usize)>,
    batch: Batch,
}

impl ChaCha20 {
    /// The keystream for (`key`, `nonce`) at offset 0, on the fastest backend.
    pub fn new(key: &[u8; KEY_LEN], nonce: &[u8; NONCE_LEN]) -> Self {
        Self::with_backend(Backend::detect(), key, nonce)
    }

    /// As [`ChaCha20::new`] on a chosen backend.
    pub fn with_backend(backend: Backend, key: &[u8; KEY_LEN], nonce: &[u8; NONCE_LEN]) -> Self {
        Self::with_kernel(backend.kernel(), Zeroizing::new(state(key, nonce)))
    }

    pub(crate) fn with_kernel(kernel: Kernel, state: Zeroizing<[u32; 16]>) -> Self {
        ChaCha20 {
            state,
            kernel,
            offset: 0,
            cached: None,
            batch: Batch::new(),
        }
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
    pub fn apply_keystream(&mut self, mut data: &mut [u8]) -> Result<(), Error> {
        let end = self
            .offset
            .checked_add(data.len() as u64)
            .filter(|end| *end <= STREAM_END)
            .ok_or(Error::KeystreamExhausted {
                offset: self.offset.saturating_add(data.len() as u64),
            })?;
        while !data.is_empty() {
            let block = self.offset / 64;
            // block < 2^32 because offset < end <= STREAM_END.
            let blocks = self.load(block, blocks_for((self.offset % 64) as usize + data.len()));
            let first = self.cached.map_or(block, |(first, _)| first);
            let skip = (self.offset - first * 64) as usize;
            let n = (blocks * 64 - skip).min(data.len());
            let (now, rest) = data.split_at_mut(n);
            self.batch.xor_into(self.kernel, skip, now);
            self.offset += n as u64;
            data = rest;
        }
        debug_assert_eq!(self.offset, end);
        Ok(())
    }
}

impl ChaCha20 {
    /// Make the kept batch cover `block` (below 2^32), computing `wanted` blocks from it if
    /// it does not. Returns how many blocks the batch holds.
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

    /// The first 32 bytes of block 0 (the AEAD's one-time Poly1305 key), computing and
    /// keeping a whole batch from block 0 so that the message's keystream follows from it.
    pub(crate) fn block0_head(&mut self) -> &[u8; 32] {
        self.load(0, MAX_BATCH_BLOCKS);
        bytemuck::cast_ref(&self.batch.0[0])
    }
}

impl fmt::Debug for ChaCha20 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ChaCha20")
            .field("offset", &self.offset)
            .finish_non_exhaustive()
    }
}
