//! Project Wycheproof's ChaCha20-Poly1305 vectors on every backend this CPU runs. Valid cases
//! must seal to the given ciphertext and tag and open back; invalid ones must be refused with
//! the buffer unchanged. The data files are nyx-crypto's (origin: `nyx-crypto/tests/data/README.md`).
#![allow(clippy::unwrap_used)]

use aead::dev::TestVector;
use nyx_chacha::{Backend, Error};

aead::dev::blobby::parse_into_structs!(
    include_bytes!("../../tests/data/wycheproof_chacha20poly1305_pass.blb");
    static PASS: &[TestVector { key, nonce, aad, plaintext, ciphertext }];
);
aead::dev::blobby::parse_into_structs!(
    include_bytes!("../../tests/data/wycheproof_chacha20poly1305_fail.blb");
    static FAIL: &[TestVector { key, nonce, aad, plaintext, ciphertext }];
);

fn backends() -> impl Iterator<Item = Backend> {
    Backend::ALL.into_iter().filter(|b| b.is_available())
}

#[test]
fn valid_vectors() {
    assert!(PASS.len() > 100, "{} vectors", PASS.len());
    for backend in backends() {
        for (i, tv) in PASS.iter().enumerate() {
            let key: [u8; 32] = tv.key.try_into().unwrap();
            let nonce: [u8; 12] = tv.nonce.try_into().unwrap();
            let (ct, tag) = tv.ciphertext.split_at(tv.plaintext.len());
            let mut buf = tv.plaintext.to_vec();
            let got = nyx_chacha::seal_in_place_with(backend, &key, &nonce, tv.aad, &mut buf);
            assert_eq!(buf, ct, "{backend:?} vector {i}: ciphertext");
            assert_eq!(&got.unwrap()[..], tag, "{backend:?} vector {i}: tag");
            let tag: [u8; 16] = tag.try_into().unwrap();
            nyx_chacha::open_in_place_with(backend, &key, &nonce, tv.aad, &mut buf, &tag).unwrap();
            assert_eq!(buf, tv.plaintext, "{backend:?} vector {i}: plaintext");
        }
    }
}

#[test]
fn invalid_vectors() {
    assert!(!FAIL.is_empty());
    for backend in backends() {
        let mut tested = 0;
        for (i, tv) in FAIL.iter().enumerate() {
            let (Ok(key), Ok(nonce)) =
                (<[u8; 32]>::try_from(tv.key), <[u8; 12]>::try_from(tv.nonce))
            else {
                continue; // wrong key or nonce sizes: the types refuse them before any backend
            };
            let split = tv.ciphertext.len().saturating_sub(16);
            let (ct, tag) = tv.ciphertext.split_at(split);
            let Ok(tag) = <[u8; 16]>::try_from(tag) else {
                continue; // a short tag: refused by its type
            };
            let mut buf = ct.to_vec();
            assert_eq!(
                nyx_chacha::open_in_place_with(backend, &key, &nonce, tv.aad, &mut buf, &tag),
                Err(Error::AuthenticationFailed),
                "{backend:?} vector {i}"
            );
            assert_eq!(buf, ct, "{backend:?} vector {i}: buffer changed on failure");
            tested += 1;
        }
        assert!(
            tested * 2 > FAIL.len(),
            "{tested} of {} invalid vectors reached the cipher",
            FAIL.len()
        );
    }
}
