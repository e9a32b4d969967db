//! ChaCha20-Poly1305 (RFC 8439 section 2.8), in place, with no allocation.
//!
//! ChaCha20 comes from RustCrypto's `chacha20` crate (it picks its AVX2 or SSE2 backend at run
//! time); Poly1305 is NyxNet's own scalar implementation (its module, `aead/poly1305.rs`,
//! explains why: the portable build of RustCrypto's is about five times slower at cell size). The composition is
//! RFC 8439's: the one-time Poly1305 key is the first 32 bytes of keystream block 0, the
//! message is encrypted from block 1 on, and the tag covers
//! `aad || pad16 || ciphertext || pad16 || le64(len(aad)) || le64(len(ciphertext))`.
//!
//! Checked against RFC 8439's vectors and Project Wycheproof's (`tests/kat_rfc.rs`,
//! `tests/kat_wycheproof.rs`) and differentially against RustCrypto's `chacha20poly1305`
//! crate (`aead/tests.rs`).
//!
//! ```
//! use nyx_crypto::aead::ChaCha20Poly1305;
//!
//! let cipher = ChaCha20Poly1305::new(&[7u8; 32]);
//! let nonce = [0u8; 12];
//! let mut buf = *b"attack at dawn";
//! let tag = cipher.seal_in_place(&nonce, b"header", &mut buf)?;
//! cipher.open_in_place(&nonce, b"header", &mut buf, &tag)?;
//! assert_eq!(&buf, b"attack at dawn");
//! # Ok::<(), nyx_crypto::Error>(())
//! ```

pub(crate) mod poly1305;
#[cfg(test)]
mod tests;

use std::fmt;

use chacha20::ChaCha20;
use chacha20::cipher::{KeyIvInit, StreamCipher, StreamCipherSeek};
use subtle::ConstantTimeEq;
use zeroize::Zeroizing;

use crate::Error;
use poly1305::Poly1305;

/// Bytes in a key.
pub const KEY_LEN: usize = 32;
/// Bytes in a nonce.
pub const NONCE_LEN: usize = 12;
/// Bytes in a tag.
pub const TAG_LEN: usize = poly1305::TAG_LEN;
/// The longest message one (key, nonce) pair can encrypt: ChaCha20's 32-bit block counter
/// starts at 1 for the message, so 2^32 − 1 blocks of 64 bytes.
pub const MAX_MESSAGE_LEN: u64 = ((1u64 << 32) - 1) * 64;

/// A ChaCha20-Poly1305 key. The key is wiped on drop and never printed.
pub struct ChaCha20Poly1305 {
    key: Zeroizing<[u8; KEY_LEN]>,
}

impl ChaCha20Poly1305 {
    /// A cipher under `key`.
    pub fn new(key: &[u8; KEY_LEN]) -> Self {
        ChaCha20Poly1305 {
            key: Zeroizing::new(*key),
        }
    }

    /// Encrypt `buf` in place and return the tag over `aad` and the ciphertext. A (key, nonce)
    /// pair must never seal two messages.
    pub fn seal_in_place(
        &self,
        nonce: &[u8; NONCE_LEN],
        aad: &[u8],
        buf: &mut [u8],
    ) -> Result<[u8; TAG_LEN], Error> {
        seal_in_place(&self.key, nonce, aad, buf)
    }

    /// Check `tag` over `aad` and the ciphertext in `buf`, then decrypt `buf` in place. On
    /// failure `buf` is left as it was.
    pub fn open_in_place(
        &self,
        nonce: &[u8; NONCE_LEN],
        aad: &[u8],
        buf: &mut [u8],
        tag: &[u8],
    ) -> Result<(), Error> {
        open_in_place(&self.key, nonce, aad, buf, tag)
    }
}

/// [`ChaCha20Poly1305::seal_in_place`] for a key held elsewhere.
pub(crate) fn seal_in_place(
    key: &[u8; KEY_LEN],
    nonce: &[u8; NONCE_LEN],
    aad: &[u8],
    buf: &mut [u8],
) -> Result<[u8; TAG_LEN], Error> {
    check_len(buf.len())?;
    let (mut stream, mut mac) = start(key, nonce);
    mac.update_padded(aad);
    stream.apply_keystream(buf);
    mac.update_padded(buf);
    Ok(finish(mac, aad.len(), buf.len()))
}

/// [`ChaCha20Poly1305::open_in_place`] for a key held elsewhere.
pub(crate) fn open_in_place(
    key: &[u8; KEY_LEN],
    nonce: &[u8; NONCE_LEN],
    aad: &[u8],
    buf: &mut [u8],
    tag: &[u8],
) -> Result<(), Error> {
    let mut stream = open_start(key, nonce, aad, buf, tag)?;
    stream.apply_keystream(buf);
    Ok(())
}

impl fmt::Debug for ChaCha20Poly1305 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ChaCha20Poly1305 { key: <redacted> }")
    }
}

/// Check `tag` over `aad || ciphertext` and return the keystream positioned at the ciphertext's
/// first byte (block 1), so a caller can decrypt and then keep drawing keystream past the
/// ciphertext (the onion layers do: their filler is the keystream after the message).
pub(crate) fn open_start(
    key: &[u8; KEY_LEN],
    nonce: &[u8; NONCE_LEN],
    aad: &[u8],
    ciphertext: &[u8],
    tag: &[u8],
) -> Result<ChaCha20, Error> {
    check_len(ciphertext.len())?;
    let (stream, mut mac) = start(key, nonce);
    mac.update_padded(aad);
    mac.update_padded(ciphertext);
    let expected = finish(mac, aad.len(), ciphertext.len());
    if tag.len() != TAG_LEN || !bool::from(expected.ct_eq(tag)) {
        return Err(Error::AuthenticationFailed);
    }
    Ok(stream)
}

/// The keystream for (`key`, `nonce`) positioned at block 1, and the Poly1305 state keyed
/// with block 0's first 32 bytes.
pub(crate) fn start(key: &[u8; KEY_LEN], nonce: &[u8; NONCE_LEN]) -> (ChaCha20, Poly1305) {
    let mut stream = ChaCha20::new(key.into(), nonce.into());
    let mut block0 = Zeroizing::new([0u8; 64]);
    stream.apply_keystream(block0.as_mut_slice());
    let mut otk = [0u8; poly1305::KEY_LEN];
    otk.copy_from_slice(&block0[..poly1305::KEY_LEN]);
    let mac = Poly1305::new(&otk);
    zeroize::Zeroize::zeroize(&mut otk);
    (stream, mac)
}

/// The keystream for (`key`, `nonce`) positioned `offset` bytes into the message, i.e. at
/// byte `64 + offset` of the ChaCha20 stream (block 0 is the Poly1305 key).
pub(crate) fn keystream_at(key: &[u8; KEY_LEN], nonce: &[u8; NONCE_LEN], offset: u64) -> ChaCha20 {
    let mut stream = ChaCha20::new(key.into(), nonce.into());
    stream.seek(64 + offset);
    stream
}

/// Absorb the two lengths and produce the tag.
pub(crate) fn finish(mut mac: Poly1305, aad_len: usize, ct_len: usize) -> [u8; TAG_LEN] {
    let mut lens = [0u8; 16];
    lens[..8].copy_from_slice(&(aad_len as u64).to_le_bytes());
    lens[8..].copy_from_slice(&(ct_len as u64).to_le_bytes());
    mac.update_padded(&lens);
    mac.finalize()
}

fn check_len(len: usize) -> Result<(), Error> {
    if len as u64 > MAX_MESSAGE_LEN {
        return Err(Error::PayloadTooLong { len });
    }
    Ok(())
}
