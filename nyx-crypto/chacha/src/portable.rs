//! The portable backend, for every CPU the x86-64 kernels do not cover (other
//! architectures, and x86-64 without AVX2): the keystream from RustCrypto's `chacha20` crate,
//! then Poly1305 from `poly1305.rs`, one after the other.
//!
//! Why `chacha20`: it has vector code where this crate has none (NEON on AArch64; SSE2 or
//! AVX2, picked at run time, on x86), and it is the reference the x86-64 kernels are tested
//! against; this crate's own one-block-at-a-time Rust, which it replaces, ran at 0.72x
//! RustCrypto's AEAD for 1280 B on x86-64. Its block-level core is used rather than its
//! stream wrapper, which refuses the counter's last value (block 2^32 − 1) that RFC 8439
//! and the other backends allow.
//!
//! Why not RustCrypto's `chacha20poly1305` whole: its Poly1305 (`poly1305` 0.9) has vector
//! code only for x86 AVX2, and otherwise runs 26-bit limbs on 32-bit multiplies, where
//! `poly1305.rs` uses 64-bit ones; on x86-64 this composition is the faster of the two
//! (docs/benchmarks.md). No AArch64 machine has measured either.

use chacha20::cipher::array::Array;
use chacha20::cipher::consts::U64;
use chacha20::cipher::{KeyIvInit, StreamCipherCore};
use chacha20::variants::Ietf;
use chacha20::{ChaChaCore, R20};
use zeroize::Zeroizing;

use crate::aead::{absorb_with_suffix, tag_matches, tag_with_lengths};
use crate::chacha20::stream_end;
use crate::poly1305::Poly1305;
use crate::{Error, KEY_LEN, NONCE_LEN, TAG_LEN};

/// ChaCha20's keystream from RustCrypto's core (its state is wiped on drop: the
/// `zeroize` feature).
pub(crate) struct Keystream(ChaChaCore<R20, Ietf>);

impl Keystream {
    pub(crate) fn new(key: &[u8; KEY_LEN], nonce: &[u8; NONCE_LEN]) -> Self {
        Keystream(ChaChaCore::new(key.into(), nonce.into()))
    }

    /// XOR keystream bytes `offset..offset + data.len()` into `data`; the caller has checked
    /// that they lie within the stream (`stream_end`).
    pub(crate) fn apply(&mut self, offset: u64, mut data: &mut [u8]) {
        if data.is_empty() {
            return;
        }
        let (mut block, skip) = (offset / 64, (offset % 64) as usize);
        if skip != 0 {
            let (head, rest) = data.split_at_mut((64 - skip).min(data.len()));
            self.partial(block, skip, head);
            (data, block) = (rest, block + 1);
        }
        let (whole, rest) = Array::<u8, U64>::slice_as_chunks_mut(data);
        if !whole.is_empty() {
            // Below 2^32: the caller checked that the data ends within the stream.
            self.0.set_block_pos(block as u32);
            self.0.apply_keystream_blocks(whole);
            block += whole.len() as u64;
        }
        if !rest.is_empty() {
            self.partial(block, 0, rest);
        }
    }

    /// XOR bytes `skip..skip + data.len()` of keystream block `block` into `data`.
    fn partial(&mut self, block: u64, skip: usize, data: &mut [u8]) {
        let mut keystream = Zeroizing::new([0u8; 64]);
        self.0.set_block_pos(block as u32);
        self.0.write_keystream_block((&mut *keystream).into());
        for (d, k) in data.iter_mut().zip(&keystream[skip..]) {
            *d ^= *k;
        }
    }

    /// Poly1305 keyed with the first 32 bytes of block 0.
    pub(crate) fn mac(&mut self) -> Poly1305 {
        let mut key = Zeroizing::new([0u8; 32]);
        self.apply(0, &mut *key);
        Poly1305::new(&key)
    }
}

/// Encrypt `buf` (of a length `check_len` allowed), XOR the keystream after it into `tail`
/// (the caller checked that it lies within the stream) and return the tag over the
/// ciphertext followed by `suffix`.
pub(crate) fn seal(
    key: &[u8; KEY_LEN],
    nonce: &[u8; NONCE_LEN],
    aad: &[u8],
    buf: &mut [u8],
    tail: &mut [u8],
    suffix: &[u8],
) -> [u8; TAG_LEN] {
    let mut stream = Keystream::new(key, nonce);
    let mut mac = stream.mac();
    stream.apply(64, buf);
    stream.apply(64 + buf.len() as u64, tail);
    mac.update_padded(aad);
    absorb_with_suffix(&mut mac, buf, suffix, |mac, ct| mac.update_padded(ct));
    tag_with_lengths(&mut mac, aad.len(), buf.len() + suffix.len())
}

/// Check `tag` and only then decrypt `buf` and XOR the keystream after it into `tail`.
pub(crate) fn open(
    key: &[u8; KEY_LEN],
    nonce: &[u8; NONCE_LEN],
    aad: &[u8],
    buf: &mut [u8],
    tag: &[u8; TAG_LEN],
    tail: &mut [u8],
) -> Result<(), Error> {
    let mut stream = Keystream::new(key, nonce);
    let mut mac = stream.mac();
    mac.update_padded(aad);
    mac.update_padded(buf);
    if !tag_matches(&tag_with_lengths(&mut mac, aad.len(), buf.len()), tag) {
        return Err(Error::AuthenticationFailed);
    }
    let at = 64 + buf.len() as u64;
    stream_end(at, tail.len())?;
    stream.apply(64, buf);
    stream.apply(at, tail);
    Ok(())
}
