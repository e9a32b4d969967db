//! Unit tests of the hybrid KEM.

use super::*;
use proptest::prelude::*;

const LABEL: &[u8] = b"nyx/v1/test";

fn seed(byte: u8) -> [u8; SEED_LEN] {
    let mut s = [0u8; SEED_LEN];
    for (i, b) in s.iter_mut().enumerate() {
        *b = byte.wrapping_add(i as u8);
    }
    s
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[test]
fn both_sides_derive_the_same_key() {
    let sk = HybridSecretKey::generate().unwrap();
    let (ct, sender) = sk.public().encapsulate().unwrap();
    let receiver = sk.decapsulate(&ct).unwrap();
    assert_eq!(
        *sender.combine(LABEL, b"ctx"),
        *receiver.combine(LABEL, b"ctx")
    );
    let (ct2, _) = sk.public().encapsulate().unwrap();
    assert_ne!(ct, ct2, "fresh randomness per encapsulation");
}

/// Our own vector: fixed seed and encapsulation randomness give fixed bytes, so any change to
/// the encoding or the combiner shows up here. (Values recorded from this implementation on
/// 2026-11-21; ML-KEM itself is checked against CCTV in tests/kat_mlkem.rs, X25519 against
/// RFC 7748 in tests/kat_rfc.rs.)
#[test]
fn fixed_seed_vector() {
    let sk = HybridSecretKey::from_seed(&seed(1));
    let (ct, secrets) = sk.public().encapsulate_with(&[2; 32], &[3; 32]).unwrap();
    let pk_hash = hex(&Sha256::digest(&sk.public().to_bytes()[..]));
    let ct_hash = hex(&Sha256::digest(&ct[..]));
    let key = hex(&*secrets.combine(LABEL, b"context"));
    assert_eq!(pk_hash, PK_SHA256);
    assert_eq!(ct_hash, CT_SHA256);
    assert_eq!(key, KEY);
    assert_eq!(
        hex(&*sk.decapsulate(&ct).unwrap().combine(LABEL, b"context")),
        KEY
    );
}

const PK_SHA256: &str = "cc0c7ffc3ad9f59abd18ca61601d2aa983b68cb3e2a6d72be23b53c0e046cbaf";
const CT_SHA256: &str = "3acdb9cf44d20e192571f78f359fbce14591b2ea11888329f0f5869156e654fd";
const KEY: &str = "d20c99b41f874923bde2880608426c8828d5a5627205505647648c6c13e645aa";

/// An attacker who broke one primitive (modelled by handing them that shared secret) still
/// lacks the key: it depends on the other secret too.
#[test]
fn breaking_one_primitive_is_not_enough() {
    let sk = HybridSecretKey::from_seed(&seed(7));
    let (ct, secrets) = sk.public().encapsulate_with(&[8; 32], &[9; 32]).unwrap();
    let key = secrets.combine(LABEL, b"ctx");
    let true_m = *secrets.mlkem;
    let true_x = *secrets.x25519;
    for guess in [[0u8; 32], [0xff; 32], true_x] {
        // Knows the X25519 secret, guesses the ML-KEM one.
        if guess != true_m {
            assert_ne!(
                *secrets.with_parts(guess, true_x).combine(LABEL, b"ctx"),
                *key
            );
        }
    }
    for guess in [[0u8; 32], [0xff; 32], true_m] {
        // Knows the ML-KEM secret, guesses the X25519 one.
        if guess != true_x {
            assert_ne!(
                *secrets.with_parts(true_m, guess).combine(LABEL, b"ctx"),
                *key
            );
        }
    }
    // And the key is bound to the transcript: another context, label or key pair differs.
    assert_ne!(*secrets.combine(LABEL, b"ctx2"), *key);
    assert_ne!(*secrets.combine(b"nyx/v1/other", b"ctx"), *key);
    let other = HybridSecretKey::from_seed(&seed(8));
    let wrong = other.decapsulate(&ct).unwrap();
    assert_ne!(*wrong.combine(LABEL, b"ctx"), *key);
}

#[test]
fn any_flipped_ciphertext_bit_changes_the_key() {
    let sk = HybridSecretKey::from_seed(&seed(3));
    let (ct, secrets) = sk.public().encapsulate_with(&[4; 32], &[5; 32]).unwrap();
    let key = secrets.combine(LABEL, b"");
    // Every bit of the X25519 part, every 13th of the ML-KEM part (all of them take seconds).
    let bits = (0..MLKEM_CT_LEN * 8)
        .step_by(13)
        .chain(MLKEM_CT_LEN * 8..CIPHERTEXT_LEN * 8);
    for bit in bits {
        let mut bad = ct;
        bad[bit / 8] ^= 1 << (bit % 8);
        match sk.decapsulate(&bad) {
            Ok(s) => assert_ne!(*s.combine(LABEL, b""), *key, "bit {bit}"),
            Err(e) => assert_eq!(e, Error::InvalidPublicKey, "bit {bit}"),
        }
    }
}

#[test]
fn malformed_inputs_are_typed_errors() {
    let sk = HybridSecretKey::from_seed(&seed(1));
    assert_eq!(
        sk.decapsulate(&[0u8; 100]).unwrap_err(),
        Error::BadLength {
            what: "hybrid ciphertext",
            expected: CIPHERTEXT_LEN,
            got: 100
        }
    );
    assert!(matches!(
        HybridPublicKey::from_bytes(&[0u8; 5]),
        Err(Error::BadLength { got: 5, .. })
    ));
    // FIPS 203 modulus check: a coefficient encoded as 4095 (>= q = 3329) is refused.
    let mut bad = *sk.public().to_bytes();
    bad[0] = 0xff;
    bad[1] |= 0x0f;
    assert_eq!(
        HybridPublicKey::from_bytes(&bad),
        Err(Error::InvalidPublicKey)
    );
    // A low-order X25519 point, on either side, is refused.
    let mut ct = [0u8; CIPHERTEXT_LEN];
    ct[..MLKEM_CT_LEN].copy_from_slice(&sk.public().encapsulate().unwrap().0[..MLKEM_CT_LEN]);
    assert_eq!(sk.decapsulate(&ct).unwrap_err(), Error::InvalidPublicKey);
    let mut weak = *sk.public().to_bytes();
    weak[MLKEM_PK_LEN..].fill(0);
    let weak = HybridPublicKey::from_bytes(&weak).unwrap();
    assert_eq!(weak.encapsulate().unwrap_err(), Error::InvalidPublicKey);
}

#[test]
fn debug_output_is_redacted() {
    let sk = HybridSecretKey::from_seed(&seed(1));
    let (_, secrets) = sk.public().encapsulate().unwrap();
    assert_eq!(format!("{secrets:?}"), "SharedSecrets(<redacted>)");
    let text = format!("{sk:?}");
    assert!(
        text.starts_with("HybridSecretKey { public: HybridPublicKey(sha256:"),
        "{text}"
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]
    #[test]
    fn public_key_encoding_round_trips(byte in any::<u8>()) {
        let sk = HybridSecretKey::from_seed(&seed(byte));
        let parsed = HybridPublicKey::from_bytes(&sk.public().to_bytes()[..]).unwrap();
        prop_assert_eq!(&parsed, sk.public());
        let (ct, s1) = parsed.encapsulate().unwrap();
        prop_assert_eq!(*s1.combine(LABEL, b"x"), *sk.decapsulate(&ct).unwrap().combine(LABEL, b"x"));
    }
}
