//! ChaCha20-Poly1305 (RFC 8439 section 2.8), in place, with no allocation.
//!
//! The cipher itself is [`nyx_chacha`] (NyxNet's implementation: eight or sixteen ChaCha20
//! blocks at a time in AVX2 or AVX-512VL registers, a message's last one to four blocks four
//! at a time, chosen at run time, with Poly1305
//! absorbed between the rounds; elsewhere RustCrypto's `chacha20` keystream, NEON on AArch64,
//! and nyx-chacha's scalar Poly1305). This module holds the key type
//! nyx-crypto passes around and the compositions the onion layers use. The composition is
//! RFC 8439's: the one-time Poly1305 key is the first 32 bytes of keystream block 0, the
//! message is encrypted from block 1 on, and the tag covers
//! `aad || pad16 || ciphertext || pad16 || le64(len(aad)) || le64(len(ciphertext))`.
//!
//! Checked against RFC 8439's vectors and Project Wycheproof's (`tests/kat_rfc.rs`,
//! `tests/kat_wycheproof.rs`) and differentially against RustCrypto's `chacha20poly1305`
//! crate (`aead/tests.rs`; nyx-chacha checks every backend the same way).
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

#[cfg(test)]
mod tests;

use std::fmt;

use nyx_chacha::{Backend, ChaCha20};
use zeroize::Zeroizing;

use crate::Error;
pub(crate) use nyx_chacha::Poly1305;

/// Bytes in a key.
pub const KEY_LEN: usize = nyx_chacha::KEY_LEN;
/// Bytes in a nonce.
pub const NONCE_LEN: usize = nyx_chacha::NONCE_LEN;
/// Bytes in a tag.
pub const TAG_LEN: usize = nyx_chacha::TAG_LEN;
/// The longest message one (key, nonce) pair can encrypt: ChaCha20's 32-bit block counter
/// starts at 1 for the message, so 2^32 − 1 blocks of 64 bytes.
pub const MAX_MESSAGE_LEN: u64 = nyx_chacha::MAX_MESSAGE_LEN;

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
    seal_with_tail(key, nonce, aad, buf, &mut [])
}

/// [`seal_in_place`], then XOR the keystream that follows the message into `tail`: the
/// slack of a backward onion cell.
pub(crate) fn seal_with_tail(
    key: &[u8; KEY_LEN],
    nonce: &[u8; NONCE_LEN],
    aad: &[u8],
    buf: &mut [u8],
    tail: &mut [u8],
) -> Result<[u8; TAG_LEN], Error> {
    Ok(nyx_chacha::seal_in_place_with_tail(
        Backend::detect(),
        key,
        nonce,
        aad,
        buf,
        tail,
    )?)
}

/// [`seal_in_place`] with a tag over the ciphertext followed by `suffix` (authenticated,
/// not encrypted): a forward onion layer, whose tag covers the filler its hop will find
/// after the ciphertext.
pub(crate) fn seal_with_suffix(
    key: &[u8; KEY_LEN],
    nonce: &[u8; NONCE_LEN],
    aad: &[u8],
    buf: &mut [u8],
    suffix: &[u8],
) -> Result<[u8; TAG_LEN], Error> {
    Ok(nyx_chacha::seal_in_place_with_suffix(
        Backend::detect(),
        key,
        nonce,
        aad,
        buf,
        suffix,
    )?)
}

/// [`ChaCha20Poly1305::open_in_place`] for a key held elsewhere.
pub(crate) fn open_in_place(
    key: &[u8; KEY_LEN],
    nonce: &[u8; NONCE_LEN],
    aad: &[u8],
    buf: &mut [u8],
    tag: &[u8],
) -> Result<(), Error> {
    open_with_tail(key, nonce, aad, buf, tag, &mut [])
}

/// [`open_in_place`], then (only if the tag is good) XOR the keystream that follows the
/// ciphertext into `tail`: the onion layers' filler.
pub(crate) fn open_with_tail(
    key: &[u8; KEY_LEN],
    nonce: &[u8; NONCE_LEN],
    aad: &[u8],
    buf: &mut [u8],
    tag: &[u8],
    tail: &mut [u8],
) -> Result<(), Error> {
    let tag: &[u8; TAG_LEN] = tag.try_into().map_err(|_| Error::AuthenticationFailed)?;
    nyx_chacha::open_in_place_with_tail(Backend::detect(), key, nonce, aad, buf, tag, tail)?;
    Ok(())
}

impl fmt::Debug for ChaCha20Poly1305 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ChaCha20Poly1305 { key: <redacted> }")
    }
}

/// The keystream for (`key`, `nonce`) positioned at block 1, and the Poly1305 state keyed
/// with block 0's first 32 bytes.
pub(crate) fn start(key: &[u8; KEY_LEN], nonce: &[u8; NONCE_LEN]) -> (ChaCha20, Poly1305) {
    nyx_chacha::keystream_and_mac(key, nonce)
}

/// XOR the keystream for (`key`, `nonce`) into `data`, starting `offset` bytes into the
/// message, i.e. at byte `64 + offset` of the ChaCha20 stream (block 0 is the Poly1305 key).
pub(crate) fn xor_keystream_at(
    key: &[u8; KEY_LEN],
    nonce: &[u8; NONCE_LEN],
    offset: u64,
    data: &mut [u8],
) -> Result<(), Error> {
    Ok(nyx_chacha::xor_keystream(key, nonce, 64 + offset, data)?)
}

/// Absorb the two lengths and produce the tag.
pub(crate) fn finish(mac: Poly1305, aad_len: usize, ct_len: usize) -> [u8; TAG_LEN] {
    nyx_chacha::finish_tag(mac, aad_len, ct_len)
}

impl From<nyx_chacha::Error> for Error {
    fn from(e: nyx_chacha::Error) -> Self {
        match e {
            nyx_chacha::Error::AuthenticationFailed => Error::AuthenticationFailed,
            nyx_chacha::Error::MessageTooLong { len } => Error::PayloadTooLong { len },
            other => Error::Cipher(other),
        }
    }
}
