//! Project Wycheproof vectors for ChaCha20-Poly1305, run against nyx-crypto's own AEAD
//! (`nyx_crypto::aead`, which sessions and onion layers use). Valid cases must seal to the
//! given ciphertext and tag and open back; invalid ones (modified tags, ciphertexts, lengths)
//! must be refused. Origin of the data: `tests/data/README.md`.

use aead::dev::TestVector;
use nyx_crypto::Error;
use nyx_crypto::aead::{ChaCha20Poly1305, TAG_LEN};

aead::dev::blobby::parse_into_structs!(
    include_bytes!("data/wycheproof_chacha20poly1305_pass.blb");
    static PASS: &[TestVector { key, nonce, aad, plaintext, ciphertext }];
);
aead::dev::blobby::parse_into_structs!(
    include_bytes!("data/wycheproof_chacha20poly1305_fail.blb");
    static FAIL: &[TestVector { key, nonce, aad, plaintext, ciphertext }];
);

fn cipher(tv: &TestVector) -> (ChaCha20Poly1305, [u8; 12]) {
    let key: [u8; 32] = tv.key.try_into().expect("32-byte key");
    let nonce: [u8; 12] = tv.nonce.try_into().expect("12-byte nonce");
    (ChaCha20Poly1305::new(&key), nonce)
}

#[test]
fn wycheproof_chacha20poly1305_valid() {
    assert!(PASS.len() > 100, "{} vectors", PASS.len());
    for (i, tv) in PASS.iter().enumerate() {
        let (cipher, nonce) = cipher(tv);
        let (ct, tag) = tv.ciphertext.split_at(tv.plaintext.len());
        let mut buf = tv.plaintext.to_vec();
        let got = cipher.seal_in_place(&nonce, tv.aad, &mut buf).unwrap();
        assert_eq!(buf, ct, "vector {i}: ciphertext");
        assert_eq!(&got[..], tag, "vector {i}: tag");
        cipher.open_in_place(&nonce, tv.aad, &mut buf, tag).unwrap();
        assert_eq!(buf, tv.plaintext, "vector {i}: plaintext");
    }
}

#[test]
fn wycheproof_chacha20poly1305_invalid() {
    assert!(!FAIL.is_empty());
    for (i, tv) in FAIL.iter().enumerate() {
        let (cipher, nonce) = cipher(tv);
        let split = tv.ciphertext.len().saturating_sub(TAG_LEN);
        let (ct, tag) = tv.ciphertext.split_at(split);
        let mut buf = ct.to_vec();
        assert_eq!(
            cipher.open_in_place(&nonce, tv.aad, &mut buf, tag),
            Err(Error::AuthenticationFailed),
            "vector {i}"
        );
        assert_eq!(buf, ct, "vector {i}: buffer changed on failure");
    }
}
