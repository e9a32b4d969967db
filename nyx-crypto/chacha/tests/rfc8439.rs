//! RFC 8439's test vectors (sections 2.3.2, 2.4.2 and 2.8.2), on every backend this CPU
//! runs (on CPUs other than x86-64, the portable one). Poly1305's vectors
//! (section 2.5.2, appendix A.3) are unit tests of `poly1305.rs`. Project Wycheproof's
//! ChaCha20-Poly1305 vectors run through nyx-crypto (`nyx-crypto/tests/kat_wycheproof.rs`).
#![allow(clippy::unwrap_used)]

use nyx_chacha::{Backend, ChaCha20};

fn unhex(s: &str) -> Vec<u8> {
    let s: String = s.split_whitespace().collect();
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

const SUNSCREEN: &[u8] = b"Ladies and Gentlemen of the class of '99: If I could offer you \
only one tip for the future, sunscreen would be it.";

fn backends() -> impl Iterator<Item = Backend> {
    Backend::ALL.into_iter().filter(|b| b.is_available())
}

/// Section 2.3.2: the block function with key 00..1f, nonce 00000009 0000004a 00000000 and
/// block counter 1 (byte offset 64), read from the middle of the stream too.
#[test]
fn section_2_3_2_block() {
    let key: [u8; 32] = core::array::from_fn(|i| i as u8);
    let nonce: [u8; 12] = unhex("000000090000004a00000000").try_into().unwrap();
    let want = unhex(
        "10f1e7e4d13b5915500fdd1fa32071c4 c7d1f4c733c068030422aa9ac3d46c4e
         d2826446079faa0914c2d705d98b02a2 b5129cd1de164eb9cbd083e8a2503c4e",
    );
    for backend in backends() {
        let mut block = [0u8; 64];
        let mut stream = ChaCha20::with_backend(backend, &key, &nonce);
        stream.seek(64);
        stream.apply_keystream(&mut block).unwrap();
        assert_eq!(block[..], want, "backend {backend:?}");
        let mut middle = [0u8; 20];
        stream.seek(64 + 30);
        stream.apply_keystream(&mut middle).unwrap();
        assert_eq!(middle[..], want[30..50], "backend {backend:?}");
    }
}

/// Section 2.4.2: ChaCha20 encryption with key 00..1f, nonce 00000000 0000004a 00000000 and
/// initial counter 1 (byte offset 64).
#[test]
fn section_2_4_2_encryption() {
    let key: [u8; 32] = core::array::from_fn(|i| i as u8);
    let nonce: [u8; 12] = unhex("000000000000004a00000000").try_into().unwrap();
    let want = unhex(
        "6e2e359a2568f98041ba0728dd0d6981 e97e7aec1d4360c20a27afccfd9fae0b
         f91b65c5524733ab8f593dabcd62b357 1639d624e65152ab8f530c359f0861d8
         07ca0dbf500d6a6156a38e088a22b65e 52bc514d16ccf806818ce91ab7793736
         5af90bbf74a35be6b40b8eedf2785e42 874d",
    );
    for backend in backends() {
        let mut buf = SUNSCREEN.to_vec();
        let mut stream = ChaCha20::with_backend(backend, &key, &nonce);
        stream.seek(64);
        stream.apply_keystream(&mut buf).unwrap();
        assert_eq!(buf, want, "backend {backend:?}");
    }
}

/// Section 2.8.2: AEAD_CHACHA20_POLY1305.
#[test]
fn section_2_8_2_aead() {
    let key: [u8; 32] = unhex("808182838485868788898a8b8c8d8e8f909192939495969798999a9b9c9d9e9f")
        .try_into()
        .unwrap();
    let nonce: [u8; 12] = unhex("070000004041424344454647").try_into().unwrap();
    let aad = unhex("50515253c0c1c2c3c4c5c6c7");
    let ciphertext = unhex(
        "d31a8d34648e60db7b86afbc53ef7ec2 a4aded51296e08fea9e2b5a736ee62d6
         3dbea45e8ca9671282fafb69da92728b 1a71de0a9e060b2905d6a5b67ecd3b36
         92ddbd7f2d778b8c9803aee328091b58 fab324e4fad675945585808b4831d7bc
         3ff4def08e4b7a9de576d26586cec64b 6116",
    );
    let tag: [u8; 16] = unhex("1ae10b594f09e26a7e902ecbd0600691")
        .try_into()
        .unwrap();
    for backend in backends() {
        let mut buf = SUNSCREEN.to_vec();
        let got = nyx_chacha::seal_in_place_with(backend, &key, &nonce, &aad, &mut buf).unwrap();
        assert_eq!((&buf, got), (&ciphertext, tag), "backend {backend:?}");
        nyx_chacha::open_in_place_with(backend, &key, &nonce, &aad, &mut buf, &tag).unwrap();
        assert_eq!(buf, SUNSCREEN, "backend {backend:?}");
    }
}
