//! The AEAD that seals a session's datagrams: ChaCha20-Poly1305 (RFC 8439), from whichever
//! of two implementations is faster on this CPU.
//!
//! * `ring` (BoringSSL's assembly, Poly1305 absorbed between the ChaCha20 rounds) on CPUs
//!   without AVX-512 IFMA: for one link datagram (1 159 payload bytes, 9 of associated data)
//!   it seals in about 0.73 µs and opens in 0.78 where nyx-chacha took 0.87-0.91 and
//!   0.99-1.08 on an AVX2 machine (docs/benchmarks.md, session 45);
//! * nyx-chacha (the crate's [`crate::aead`] cipher) where its AVX-512 IFMA backend runs: its
//!   512-bit keystream and vector Poly1305 sealed the same datagram in 0.49-0.53 µs against
//!   ring's 0.63-0.72, and opened it in 0.57-0.59 against 0.67-0.77 (session 46), where ring
//!   0.17 runs its AVX2 code.
//!
//! Both compute the same bytes (tested below for any input), so the wire does not depend
//! on which one a node runs, and the choice is made once per process. The onion layers
//! always use nyx-chacha: they need its partial keystreams and suffixed tags, which ring does
//! not offer.
//!
//! Keys: `ring` does not wipe its key objects, so none is kept. Each call builds one on the
//! stack from the session's zeroized epoch key (about 30 ns) and drops it; the epoch key
//! itself is the only long-lived copy and is wiped as before. nyx-chacha takes the epoch
//! key as it is.
//!
//! A failed open zeroes the payload, whichever implementation ran (ring's behaviour: no
//! unauthenticated plaintext is left in the buffer), so a caller that tries another key
//! must restore the datagram first.

use std::sync::OnceLock;

use nyx_chacha::Backend;
use ring::aead::{Aad, CHACHA20_POLY1305, LessSafeKey, Nonce, Tag, UnboundKey};

use super::TAG_LEN;
use crate::Error;
use crate::aead::NONCE_LEN;

/// The two implementations of the one cipher.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Implementation {
    Ring,
    /// nyx-chacha on its AVX-512 IFMA backend (chosen only where the CPU has it; elsewhere,
    /// which only the tests ask for, nyx-chacha runs its portable backend instead).
    NyxChacha,
}

impl Implementation {
    /// The faster on this CPU, decided once.
    fn fastest() -> Self {
        static FASTEST: OnceLock<Implementation> = OnceLock::new();
        *FASTEST.get_or_init(|| match Backend::detect() {
            Backend::Avx512Ifma => Implementation::NyxChacha,
            _ => Implementation::Ring,
        })
    }
}

fn ring_key(raw: &[u8; 32]) -> Result<LessSafeKey, Error> {
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
    seal_with(Implementation::fastest(), raw, nonce, aad, payload)
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
    open_with(Implementation::fastest(), raw, nonce, aad, payload, tag)
}

fn seal_with(
    imp: Implementation,
    raw: &[u8; 32],
    nonce: [u8; NONCE_LEN],
    aad: &[u8],
    payload: &mut [u8],
) -> Result<[u8; TAG_LEN], Error> {
    match imp {
        Implementation::Ring => {
            let tag = ring_key(raw)?
                .seal_in_place_separate_tag(
                    Nonce::assume_unique_for_key(nonce),
                    Aad::from(aad),
                    payload,
                )
                .map_err(|_| Error::AuthenticationFailed)?;
            let mut out = [0u8; TAG_LEN];
            out.copy_from_slice(tag.as_ref());
            Ok(out)
        }
        Implementation::NyxChacha => Ok(nyx_chacha::seal_in_place_with(
            Backend::Avx512Ifma,
            raw,
            &nonce,
            aad,
            payload,
        )?),
    }
}

fn open_with(
    imp: Implementation,
    raw: &[u8; 32],
    nonce: [u8; NONCE_LEN],
    aad: &[u8],
    payload: &mut [u8],
    tag: &[u8],
) -> Result<(), Error> {
    let opened = match imp {
        Implementation::Ring => match Tag::try_from(tag) {
            Ok(tag) => ring_key(raw)?
                .open_in_place_separate_tag(
                    Nonce::assume_unique_for_key(nonce),
                    Aad::from(aad),
                    tag,
                    payload,
                    0..,
                )
                .map(|_| ())
                .map_err(|_| Error::AuthenticationFailed),
            Err(_) => Err(Error::AuthenticationFailed),
        },
        Implementation::NyxChacha => match <&[u8; TAG_LEN]>::try_from(tag) {
            Ok(tag) => {
                nyx_chacha::open_in_place_with(Backend::Avx512Ifma, raw, &nonce, aad, payload, tag)
                    .map_err(Error::from)
            }
            Err(_) => Err(Error::AuthenticationFailed),
        },
    };
    if opened.is_err() {
        // One contract for both: nothing unauthenticated (nor the ciphertext) stays.
        payload.fill(0);
    }
    opened
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const BOTH: [Implementation; 2] = [Implementation::Ring, Implementation::NyxChacha];

    proptest! {
        /// One cipher (the wire does not depend on the CPU): ring and nyx-chacha give equal
        /// ciphertext and tag for any key, nonce, associated data and length, each opens the
        /// other's, and the module's own entry points (whichever this CPU runs) agree too.
        #[test]
        fn both_implementations_seal_the_same_bytes(
            raw in any::<[u8; 32]>(),
            nonce in any::<[u8; 12]>(),
            aad in proptest::collection::vec(any::<u8>(), 0..24),
            msg in proptest::collection::vec(any::<u8>(), 0..1400),
        ) {
            let mut by_ring = msg.clone();
            let ring_tag = seal_with(Implementation::Ring, &raw, nonce, &aad, &mut by_ring).unwrap();
            let mut by_nyx = msg.clone();
            let nyx_tag = seal_with(Implementation::NyxChacha, &raw, nonce, &aad, &mut by_nyx).unwrap();
            prop_assert_eq!(&by_ring, &by_nyx);
            prop_assert_eq!(ring_tag, nyx_tag);
            let mut by_fastest = msg.clone();
            prop_assert_eq!(seal(&raw, nonce, &aad, &mut by_fastest).unwrap(), ring_tag);
            prop_assert_eq!(&by_fastest, &by_ring);
            open_with(Implementation::Ring, &raw, nonce, &aad, &mut by_nyx, &nyx_tag).unwrap();
            prop_assert_eq!(&by_nyx, &msg);
            open_with(Implementation::NyxChacha, &raw, nonce, &aad, &mut by_ring, &ring_tag).unwrap();
            prop_assert_eq!(&by_ring, &msg);
            open(&raw, nonce, &aad, &mut by_fastest, &ring_tag).unwrap();
            prop_assert_eq!(&by_fastest, &msg);
        }
    }

    /// RFC 8439 section 2.8.2: the AEAD test vector, through each implementation.
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
        for imp in BOTH {
            let mut buf = plain.to_vec();
            let tag = seal_with(imp, &raw, nonce, &aad, &mut buf).unwrap();
            assert_eq!(
                tag,
                [
                    0x1a, 0xe1, 0x0b, 0x59, 0x4f, 0x09, 0xe2, 0x6a, 0x7e, 0x90, 0x2e, 0xcb, 0xd0,
                    0x60, 0x06, 0x91
                ],
                "{imp:?}"
            );
            assert_eq!(buf[..8], [0xd3, 0x1a, 0x8d, 0x34, 0x64, 0x8e, 0x60, 0xdb]);
            open_with(imp, &raw, nonce, &aad, &mut buf, &tag).unwrap();
            assert_eq!(&buf[..], &plain[..]);
        }
    }

    #[test]
    fn a_failed_open_is_an_error_and_leaves_no_plaintext() {
        let raw = [9u8; 32];
        for imp in BOTH {
            let mut buf = *b"sixteen bytes ok";
            let mut tag = seal_with(imp, &raw, [0; 12], b"", &mut buf).unwrap();
            tag[0] ^= 1;
            assert_eq!(
                open_with(imp, &raw, [0; 12], b"", &mut buf, &tag),
                Err(Error::AuthenticationFailed),
                "{imp:?}"
            );
            assert_eq!(buf, [0u8; 16], "{imp:?}: the payload is zeroed");
            let mut buf = *b"sixteen bytes ok";
            let tag = seal_with(imp, &raw, [0; 12], b"", &mut buf).unwrap();
            assert_eq!(
                open_with(imp, &raw, [0; 12], b"", &mut buf, &tag[..15]),
                Err(Error::AuthenticationFailed),
                "{imp:?}: a short tag is an error, not a panic"
            );
            assert_eq!(buf, [0u8; 16], "{imp:?}: zeroed for a short tag too");
        }
    }
}
