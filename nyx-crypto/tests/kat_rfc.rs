//! Known-answer tests from the RFCs that define the primitives nyx-crypto uses.
//!
//! * ChaCha20-Poly1305: RFC 8439, section 2.8.2 ("Example and Test Vector for
//!   AEAD_CHACHA20_POLY1305").
//! * X25519: RFC 7748, section 5.2 (two scalar-multiplication vectors and the iterated test
//!   after 1 and 1 000 iterations) and section 6.1 (the Diffie-Hellman example).

use nyx_crypto::aead::ChaCha20Poly1305;
use x25519_dalek::{X25519_BASEPOINT_BYTES, x25519};

fn unhex(s: &str) -> Vec<u8> {
    let s: String = s.split_whitespace().collect();
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex digit"))
        .collect()
}

fn unhex32(s: &str) -> [u8; 32] {
    unhex(s).try_into().expect("32 bytes")
}

#[test]
fn rfc8439_2_8_2_aead_chacha20_poly1305() {
    let key = unhex32("808182838485868788898a8b8c8d8e8f909192939495969798999a9b9c9d9e9f");
    let nonce: [u8; 12] = unhex("070000004041424344454647").try_into().unwrap();
    let aad = unhex("50515253c0c1c2c3c4c5c6c7");
    let plaintext = b"Ladies and Gentlemen of the class of '99: If I could offer you only one tip \
for the future, sunscreen would be it.";
    let ciphertext = unhex(
        "d31a8d34648e60db7b86afbc53ef7ec2 a4aded51296e08fea9e2b5a736ee62d6
         3dbea45e8ca9671282fafb69da92728b 1a71de0a9e060b2905d6a5b67ecd3b36
         92ddbd7f2d778b8c9803aee328091b58 fab324e4fad675945585808b4831d7bc
         3ff4def08e4b7a9de576d26586cec64b 6116",
    );
    let tag = unhex("1ae10b594f09e26a7e902ecbd0600691");

    let cipher = ChaCha20Poly1305::new(&key);
    let mut buf = plaintext.to_vec();
    let got_tag = cipher.seal_in_place(&nonce, &aad, &mut buf).unwrap();
    assert_eq!(buf, ciphertext);
    assert_eq!(got_tag.as_slice(), tag.as_slice());
    cipher.open_in_place(&nonce, &aad, &mut buf, &tag).unwrap();
    assert_eq!(buf, plaintext);

    // The same vector with one bit of the ciphertext, the tag or the AAD changed is refused.
    let mut tampered = ciphertext.clone();
    tampered[10] ^= 1;
    assert!(
        cipher
            .open_in_place(&nonce, &aad, &mut tampered, &tag)
            .is_err()
    );
    let mut bad_tag = tag.clone();
    bad_tag[15] ^= 0x80;
    let mut ct = ciphertext.clone();
    assert!(
        cipher
            .open_in_place(&nonce, &aad, &mut ct, &bad_tag)
            .is_err()
    );
    let mut other_aad = aad.clone();
    other_aad[0] ^= 1;
    assert!(
        cipher
            .open_in_place(&nonce, &other_aad, &mut ct, &tag)
            .is_err()
    );
}

#[test]
fn rfc7748_5_2_scalar_multiplication() {
    let vectors = [
        (
            "a546e36bf0527c9d3b16154b82465edd62144c0ac1fc5a18506a2244ba449ac4",
            "e6db6867583030db3594c1a424b15f7c726624ec26b3353b10a903a6d0ab1c4c",
            "c3da55379de9c6908e94ea4df28d084f32eccf03491c71f754b4075577a28552",
        ),
        (
            "4b66e9d4d1b4673c5ad22691957d6af5c11b6421e0ea01d42ca4169e7918ba0d",
            "e5210f12786811d3f4b7959d0538ae2c31dbe7106fc03c3efc4cd549c715a493",
            "95cbde9476e8907d7aade45cb4b873f88b595a68799fa152e6f8f7647aac7957",
        ),
    ];
    for (scalar, u, expected) in vectors {
        assert_eq!(x25519(unhex32(scalar), unhex32(u)), unhex32(expected));
    }
}

#[test]
fn rfc7748_5_2_iterated() {
    let mut k = X25519_BASEPOINT_BYTES;
    let mut u = X25519_BASEPOINT_BYTES;
    let mut step = || {
        let r = x25519(k, u);
        u = k;
        k = r;
        k
    };
    assert_eq!(
        step(),
        unhex32("422c8e7a6227d7bca1350b3e2bb7279f7897b87bb6854b783c60e80311ae3079")
    );
    let mut last = [0u8; 32];
    for _ in 1..1000 {
        last = step();
    }
    assert_eq!(
        last,
        unhex32("684cf59ba83309552800ef566f2f4d3c1c3887c49360e3875f2eb94d99532c51")
    );
}

#[test]
fn rfc7748_6_1_diffie_hellman() {
    let alice = unhex32("77076d0a7318a57d3c16c17251b26645df4c2f87ebc0992ab177fba51db92c2a");
    let bob = unhex32("5dab087e624a8a4b79e17f8b83800ee66f3bb1292618b6fd1c2f8b27ff88e0eb");
    let alice_pub = x25519(alice, X25519_BASEPOINT_BYTES);
    let bob_pub = x25519(bob, X25519_BASEPOINT_BYTES);
    assert_eq!(
        alice_pub,
        unhex32("8520f0098930a754748b7ddcb43ef75a0dbf3a0d26381af4eba4a98eaa9b4e6a")
    );
    assert_eq!(
        bob_pub,
        unhex32("de9edb7d7b7dc1b4d35b61c2ece435373f8343c85b78674dadfc7e146f882b4f")
    );
    let shared = unhex32("4a5d9d5ba4ce2de1728e3bf480350f25e07e21c947d19e3376f09b3c1e161742");
    assert_eq!(x25519(alice, bob_pub), shared);
    assert_eq!(x25519(bob, alice_pub), shared);
}
