//! Differential and negative tests of the AEAD through nyx-crypto's key type. RFC 8439 and
//! Wycheproof vectors are in `tests/kat_rfc.rs` and `tests/kat_wycheproof.rs`; nyx-chacha
//! tests each backend and its Poly1305 the same way.

use chacha20poly1305::aead::{AeadInOut, KeyInit};
use proptest::prelude::*;

use super::*;

fn reference_seal(key: &[u8; 32], nonce: &[u8; 12], aad: &[u8], msg: &[u8]) -> (Vec<u8>, [u8; 16]) {
    let cipher = chacha20poly1305::ChaCha20Poly1305::new(&(*key).into());
    let mut ct = msg.to_vec();
    let tag = cipher
        .encrypt_inout_detached(&(*nonce).into(), aad, ct.as_mut_slice().into())
        .unwrap();
    (ct, tag.into())
}

/// Messages whose bytes are mostly 0xff or 0x00 drive the accumulator to its carry and
/// reduction edges; uniform bytes cover the rest.
fn message() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..600),
        proptest::collection::vec(prop_oneof![Just(0xffu8), Just(0u8), any::<u8>()], 0..600),
    ]
}

fn key() -> impl Strategy<Value = [u8; 32]> {
    prop_oneof![
        any::<[u8; 32]>(),
        Just([0xff; 32]),
        any::<[u8; 32]>().prop_map(|mut k| {
            k[..16].fill(0xff);
            k
        }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn seal_matches_rustcrypto(k in key(), nonce in any::<[u8; 12]>(), aad in message(), msg in message()) {
        let (ct, tag) = reference_seal(&k, &nonce, &aad, &msg);
        let mut buf = msg.clone();
        let ours = ChaCha20Poly1305::new(&k).seal_in_place(&nonce, &aad, &mut buf).unwrap();
        prop_assert_eq!(&buf, &ct);
        prop_assert_eq!(ours, tag);
        ChaCha20Poly1305::new(&k).open_in_place(&nonce, &aad, &mut buf, &ours).unwrap();
        prop_assert_eq!(buf, msg);
    }

    #[test]
    fn any_flip_is_refused_and_leaves_the_buffer(
        k in any::<[u8; 32]>(),
        msg in proptest::collection::vec(any::<u8>(), 1..300),
        aad in proptest::collection::vec(any::<u8>(), 1..40),
        which in 0usize..3,
        at in any::<prop::sample::Index>(),
        bit in 0u8..8,
    ) {
        let cipher = ChaCha20Poly1305::new(&k);
        let nonce = [3u8; 12];
        let mut ct = msg.clone();
        let mut tag = cipher.seal_in_place(&nonce, &aad, &mut ct).unwrap();
        let mut aad = aad;
        match which {
            0 => { let i = at.index(ct.len()); ct[i] ^= 1 << bit }
            1 => { let i = at.index(aad.len()); aad[i] ^= 1 << bit }
            _ => { let i = at.index(TAG_LEN); tag[i] ^= 1 << bit }
        }
        let before = ct.clone();
        prop_assert_eq!(
            cipher.open_in_place(&nonce, &aad, &mut ct, &tag),
            Err(Error::AuthenticationFailed)
        );
        prop_assert_eq!(ct, before);
    }
}

#[test]
fn wrong_nonce_or_key_is_refused() {
    let cipher = ChaCha20Poly1305::new(&[1; 32]);
    let mut buf = *b"cell payload";
    let tag = cipher.seal_in_place(&[0; 12], b"", &mut buf).unwrap();
    let mut copy = buf;
    assert_eq!(
        cipher.open_in_place(&[1; 12], b"", &mut copy, &tag),
        Err(Error::AuthenticationFailed)
    );
    assert_eq!(
        ChaCha20Poly1305::new(&[2; 32]).open_in_place(&[0; 12], b"", &mut copy, &tag),
        Err(Error::AuthenticationFailed)
    );
}

#[test]
fn short_tag_is_refused_without_panicking() {
    let cipher = ChaCha20Poly1305::new(&[1; 32]);
    let mut buf = [0u8; 8];
    let tag = cipher.seal_in_place(&[0; 12], b"", &mut buf).unwrap();
    assert_eq!(
        cipher.open_in_place(&[0; 12], b"", &mut buf, &tag[..15]),
        Err(Error::AuthenticationFailed)
    );
    assert_eq!(
        cipher.open_in_place(&[0; 12], b"", &mut buf, &[]),
        Err(Error::AuthenticationFailed)
    );
}

#[test]
fn empty_message_has_a_tag() {
    let cipher = ChaCha20Poly1305::new(&[9; 32]);
    let tag = cipher
        .seal_in_place(&[0; 12], b"only aad", &mut [])
        .unwrap();
    let (_, reference) = reference_seal(&[9; 32], &[0; 12], b"only aad", &[]);
    assert_eq!(tag, reference);
}

#[test]
fn debug_does_not_show_the_key() {
    let shown = format!("{:?}", ChaCha20Poly1305::new(&[0xab; 32]));
    assert!(!shown.contains("ab") && !shown.contains("171"), "{shown}");
}
