//! The AEAD that seals a session's datagrams: ChaCha20-Poly1305 (RFC 8439) from `ring`,
//! whose BoringSSL assembly absorbs Poly1305 between the ChaCha20 rounds.
//!
//! The cipher is the one [`crate::aead`] implements (nyx-chacha), so the wire is unchanged;
//! only the implementation differs. For one link datagram (1 159 payload bytes, 9 of
//! associated data) ring seals in about 0.73 µs and opens in 0.78 where nyx-chacha takes
//! 0.87-0.91 and 0.99-1.08 on this AVX2 machine (docs/benchmarks.md). The onion layers keep
//! nyx-chacha: they need its partial keystreams and suffixed tags, which ring does not offer.
//!
//! Keys: `ring` does not wipe its key objects, so none is kept. Each call builds one on the
//! stack from the session's zeroized epoch key (about 30 ns) and drops it; the epoch key
//! itself is the only long-lived copy and is wiped as before.
//!
//! A failed open zeroes the payload (ring's behaviour: no unauthenticated plaintext is left
//! in the buffer), so a caller that tries another key must restore the datagram first.

use ring::aead::{Aad, CHACHA20_POLY1305, LessSafeKey, Nonce, Tag, UnboundKey};

use super::TAG_LEN;
use crate::Error;
use crate::aead::NONCE_LEN;

fn key(raw: &[u8; 32]) -> Result<LessSafeKey, Error> {
    UnboundKey::new(&CHACHA20_POLY1305, raw)
        .map(LessSafeKey::new)
        .map_err(|_| Error::AuthenticationFailed)
}

/// Encrypt `payload` in place under `raw` and `nonce`; the tag covers `aad` and the
/// ciphertext.
pub(super) fn seal(
    raw: &[u8; 32],
    nonce: [u8; NONCE_LEN],
    aad: &[u8],
    payload: &mut [u8],
) -> Result<[u8; TAG_LEN], Error> {
    let tag = key(raw)?
        .seal_in_place_separate_tag(Nonce::assume_unique_for_key(nonce), Aad::from(aad), payload)
        .map_err(|_| Error::AuthenticationFailed)?;
    let mut out = [0u8; TAG_LEN];
    out.copy_from_slice(tag.as_ref());
    Ok(out)
}

/// Check `tag` over `aad` and the ciphertext in `payload` and decrypt it in place. On
/// failure `payload` is zeroed.
pub(super) fn open(
    raw: &[u8; 32],
    nonce: [u8; NONCE_LEN],
    aad: &[u8],
    payload: &mut [u8],
    tag: &[u8],
) -> Result<(), Error> {
    let tag = Tag::try_from(tag).map_err(|_| Error::AuthenticationFailed)?;
    key(raw)?
        .open_in_place_separate_tag(
            Nonce::assume_unique_for_key(nonce),
            Aad::from(aad),
            tag,
            payload,
            0..,
        )
        .map(|_| ())
        .map_err(|_| Error::AuthenticationFailed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// The same cipher as nyx-chacha's (the wire is unchanged): equal ciphertext and tag
        /// for any key, nonce, associated data and length, and each opens the other's.
        #[test]
        fn seals_what_nyx_chacha_seals(
            raw in any::<[u8; 32]>(),
            nonce in any::<[u8; 12]>(),
            aad in proptest::collection::vec(any::<u8>(), 0..24),
            msg in proptest::collection::vec(any::<u8>(), 0..1400),
        ) {
            let mut ours = msg.clone();
            let tag = seal(&raw, nonce, &aad, &mut ours).unwrap();
            let mut theirs = msg.clone();
            let their_tag = nyx_chacha::seal_in_place(&raw, &nonce, &aad, &mut theirs).unwrap();
            prop_assert_eq!(&ours, &theirs);
            prop_assert_eq!(tag, their_tag);
            open(&raw, nonce, &aad, &mut theirs, &their_tag).unwrap();
            prop_assert_eq!(&theirs, &msg);
            nyx_chacha::open_in_place(&raw, &nonce, &aad, &mut ours, &tag).unwrap();
            prop_assert_eq!(&ours, &msg);
        }
    }

    /// RFC 8439 section 2.8.2: the AEAD test vector, through this module.
    #[test]
    fn rfc_8439_aead_vector() {
        let raw: [u8; 32] = std::array::from_fn(|i| 0x80 + i as u8);
        let nonce = [
            0x07, 0, 0, 0, 0x40, 0x41, 0x42, 0x43, 0x44, 0x45, 0x46, 0x47,
        ];
        let aad = [
            0x50, 0x51, 0x52, 0x53, 0xc0, 0xc1, 0xc2, 0xc3, 0xc4, 0xc5, 0xc6, 0xc7,
        ];
        let plain = b"Ladies and Gentlemen of the class of '99: If I could offer you only one tip for the future, sunscreen would be it.";
        let mut buf = plain.to_vec();
        let tag = seal(&raw, nonce, &aad, &mut buf).unwrap();
        assert_eq!(
            tag,
            [
                0x1a, 0xe1, 0x0b, 0x59, 0x4f, 0x09, 0xe2, 0x6a, 0x7e, 0x90, 0x2e, 0xcb, 0xd0, 0x60,
                0x06, 0x91
            ]
        );
        assert_eq!(buf[..8], [0xd3, 0x1a, 0x8d, 0x34, 0x64, 0x8e, 0x60, 0xdb]);
        open(&raw, nonce, &aad, &mut buf, &tag).unwrap();
        assert_eq!(&buf[..], &plain[..]);
    }

    #[test]
    fn a_failed_open_is_an_error_and_leaves_no_plaintext() {
        let raw = [9u8; 32];
        let mut buf = *b"sixteen bytes ok";
        let mut tag = seal(&raw, [0; 12], b"", &mut buf).unwrap();
        tag[0] ^= 1;
        assert_eq!(
            open(&raw, [0; 12], b"", &mut buf, &tag),
            Err(Error::AuthenticationFailed)
        );
        assert_eq!(buf, [0u8; 16]);
        assert_eq!(
            open(&raw, [0; 12], b"", &mut buf, &tag[..15]),
            Err(Error::AuthenticationFailed),
            "a short tag is an error, not a panic"
        );
    }
}
