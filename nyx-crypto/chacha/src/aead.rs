//! ChaCha20-Poly1305 (RFC 8439 section 2.8) in place: the one-time Poly1305 key is the
//! first 32 bytes of keystream block 0, the message is encrypted from block 1 on, and the tag
//! covers `aad || pad16 || ciphertext || pad16 || le64(len(aad)) || le64(len(ciphertext))`.
//!
//! Each operation goes to the backend's implementation: the x86-64 kernels with Poly1305
//! stitched between their rounds (`stitched.rs`), or the portable one (`portable.rs`). Both
//! leave the caller's buffer as it was when a tag fails.

use subtle::ConstantTimeEq;

use crate::backend::{Backend, Kernel};
use crate::chacha20::ChaCha20;
use crate::poly1305::Poly1305;
use crate::{Error, KEY_LEN, MAX_MESSAGE_LEN, NONCE_LEN, TAG_LEN, portable};

/// Encrypt `buf` in place and return the tag over `aad` and the ciphertext, on the fastest
/// backend. A (key, nonce) pair must never seal two messages.
pub fn seal_in_place(
    key: &[u8; KEY_LEN],
    nonce: &[u8; NONCE_LEN],
    aad: &[u8],
    buf: &mut [u8],
) -> Result<[u8; TAG_LEN], Error> {
    seal_in_place_with(Backend::detect(), key, nonce, aad, buf)
}

/// [`seal_in_place`] on a chosen backend.
pub fn seal_in_place_with(
    backend: Backend,
    key: &[u8; KEY_LEN],
    nonce: &[u8; NONCE_LEN],
    aad: &[u8],
    buf: &mut [u8],
) -> Result<[u8; TAG_LEN], Error> {
    seal_in_place_with_tail(backend, key, nonce, aad, buf, &mut [])
}

/// [`seal_in_place_with`], and then XOR the keystream that follows the message into `tail`
/// (for constructions that use it: NyxNet's backward onion cells encrypt their slack this
/// way). The keystream after a message of one batch or less comes from the batch that
/// encrypted the message's end, so a short tail costs no extra ChaCha20 blocks.
pub fn seal_in_place_with_tail(
    backend: Backend,
    key: &[u8; KEY_LEN],
    nonce: &[u8; NONCE_LEN],
    aad: &[u8],
    buf: &mut [u8],
    tail: &mut [u8],
) -> Result<[u8; TAG_LEN], Error> {
    seal(backend, key, nonce, aad, buf, tail, &[])
}

/// [`seal_in_place_with`], with a tag that covers `buf`'s ciphertext followed by `suffix`
/// as one field, as if `suffix` were ciphertext too: the tag an [`open_in_place`] of
/// `ciphertext ‖ suffix` accepts. `suffix` is authenticated, not encrypted: for
/// constructions where bytes the sealer does not encrypt will follow the ciphertext when
/// it is opened (NyxNet's forward onion layers: the filler that the relays before the
/// opener append). One pass, on the stitched kernels where the CPU has them.
pub fn seal_in_place_with_suffix(
    backend: Backend,
    key: &[u8; KEY_LEN],
    nonce: &[u8; NONCE_LEN],
    aad: &[u8],
    buf: &mut [u8],
    suffix: &[u8],
) -> Result<[u8; TAG_LEN], Error> {
    seal(backend, key, nonce, aad, buf, &mut [], suffix)
}

fn seal(
    backend: Backend,
    key: &[u8; KEY_LEN],
    nonce: &[u8; NONCE_LEN],
    aad: &[u8],
    buf: &mut [u8],
    tail: &mut [u8],
    suffix: &[u8],
) -> Result<[u8; TAG_LEN], Error> {
    check_len(buf.len())?;
    crate::chacha20::stream_end(64 + buf.len() as u64, tail.len())?;
    Ok(match backend.kernel() {
        Kernel::Portable => portable::seal(key, nonce, aad, buf, tail, suffix),
        #[cfg(target_arch = "x86_64")]
        Kernel::Simd(kernel) => {
            use crate::stitched::{CELL, NARROW, WIDE, one_batch, seal, wide_batches};
            let state = zeroize::Zeroizing::new(crate::chacha20::simd::state(key, nonce));
            if one_batch(kernel, 64 + buf.len() + tail.len()) {
                seal::<CELL>(kernel, &state, aad, buf, tail, suffix)
            } else if wide_batches(kernel, 64 + buf.len() + tail.len()) {
                seal::<WIDE>(kernel, &state, aad, buf, tail, suffix)
            } else {
                seal::<NARROW>(kernel, &state, aad, buf, tail, suffix)
            }
        }
    })
}

/// Check `tag` over `aad` and the ciphertext in `buf` and decrypt `buf` in place, on the
/// fastest backend. On failure `buf` is left as it was.
pub fn open_in_place(
    key: &[u8; KEY_LEN],
    nonce: &[u8; NONCE_LEN],
    aad: &[u8],
    buf: &mut [u8],
    tag: &[u8; TAG_LEN],
) -> Result<(), Error> {
    open_in_place_with_tail(Backend::detect(), key, nonce, aad, buf, tag, &mut [])
}

/// [`open_in_place`] on a chosen backend.
pub fn open_in_place_with(
    backend: Backend,
    key: &[u8; KEY_LEN],
    nonce: &[u8; NONCE_LEN],
    aad: &[u8],
    buf: &mut [u8],
    tag: &[u8; TAG_LEN],
) -> Result<(), Error> {
    open_in_place_with_tail(backend, key, nonce, aad, buf, tag, &mut [])
}

/// [`open_in_place_with`], and then, if the tag was good, XOR the keystream that follows
/// the message into `tail` (for constructions that use it: NyxNet's onion layers derive
/// their filler this way). On failure neither `buf` nor `tail` changes.
pub fn open_in_place_with_tail(
    backend: Backend,
    key: &[u8; KEY_LEN],
    nonce: &[u8; NONCE_LEN],
    aad: &[u8],
    buf: &mut [u8],
    tag: &[u8; TAG_LEN],
    tail: &mut [u8],
) -> Result<(), Error> {
    check_len(buf.len())?;
    match backend.kernel() {
        Kernel::Portable => portable::open(key, nonce, aad, buf, tag, tail),
        #[cfg(target_arch = "x86_64")]
        Kernel::Simd(kernel) => {
            use crate::stitched::{NARROW, WIDE, open, wide_batches};
            let state = zeroize::Zeroizing::new(crate::chacha20::simd::state(key, nonce));
            if wide_batches(kernel, 64 + buf.len() + tail.len()) {
                open::<WIDE>(kernel, state, aad, buf, tag, tail)
            } else {
                open::<NARROW>(kernel, state, aad, buf, tag, tail)
            }
        }
    }
}

/// For constructions that compose the AEAD themselves: the keystream positioned at the
/// message's first byte (block 1) and Poly1305 keyed from block 0. Finish with
/// [`finish_tag`].
pub fn keystream_and_mac(key: &[u8; KEY_LEN], nonce: &[u8; NONCE_LEN]) -> (ChaCha20, Poly1305) {
    let mut stream = ChaCha20::new(key, nonce);
    let mac = stream.mac();
    stream.seek(64);
    (stream, mac)
}

/// Absorb the two lengths and produce the tag.
pub fn finish_tag(mut mac: Poly1305, aad_len: usize, ct_len: usize) -> [u8; TAG_LEN] {
    tag_with_lengths(&mut mac, aad_len, ct_len)
}

/// [`finish_tag`] in place.
pub(crate) fn tag_with_lengths(mac: &mut Poly1305, aad_len: usize, ct_len: usize) -> [u8; TAG_LEN] {
    let mut lens = [0u8; 16];
    lens[..8].copy_from_slice(&(aad_len as u64).to_le_bytes());
    lens[8..].copy_from_slice(&(ct_len as u64).to_le_bytes());
    mac.update_padded(&lens);
    mac.tag()
}

/// Absorb `ct ‖ suffix` as one AEAD field, zero-padded at its end only: `absorb` takes
/// `ct`'s whole blocks (on the backend's fastest code), the scalar code the block where the
/// two meet and the rest of `suffix`.
pub(crate) fn absorb_with_suffix(
    mac: &mut Poly1305,
    ct: &[u8],
    suffix: &[u8],
    absorb: impl FnOnce(&mut Poly1305, &[u8]),
) {
    if suffix.is_empty() {
        absorb(mac, ct);
        return;
    }
    let whole = ct.len() / 16 * 16;
    absorb(mac, &ct[..whole]);
    let rest = &ct[whole..];
    let joined = (16 - rest.len()).min(suffix.len());
    let mut block = [0u8; 16];
    block[..rest.len()].copy_from_slice(rest);
    block[rest.len()..rest.len() + joined].copy_from_slice(&suffix[..joined]);
    // A whole block unless `suffix` ends inside it (then this is the field's padded end).
    mac.update_padded(&block[..rest.len() + joined]);
    mac.update_padded(&suffix[joined..]);
}

/// Whether the computed tag equals the received one: one comparison of all 128 bits, in
/// constant time.
pub(crate) fn tag_matches(expected: &[u8; TAG_LEN], tag: &[u8; TAG_LEN]) -> bool {
    u128::from_le_bytes(*expected)
        .ct_eq(&u128::from_le_bytes(*tag))
        .into()
}

fn check_len(len: usize) -> Result<(), Error> {
    if len as u64 > MAX_MESSAGE_LEN {
        return Err(Error::MessageTooLong { len });
    }
    Ok(())
}
