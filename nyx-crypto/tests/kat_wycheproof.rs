//! Project Wycheproof vectors for ChaCha20-Poly1305, run against the AEAD nyx-crypto's sessions
//! use. Valid cases must seal and open to the given ciphertext and tag; invalid ones (modified
//! tags, ciphertexts, lengths) must be rejected. Origin of the data: `tests/data/README.md`.

use chacha20poly1305::ChaCha20Poly1305;

aead::new_pass_test!(
    wycheproof_chacha20poly1305_valid,
    "wycheproof_chacha20poly1305_pass",
    ChaCha20Poly1305
);
aead::new_fail_test!(
    wycheproof_chacha20poly1305_invalid,
    "wycheproof_chacha20poly1305_fail",
    ChaCha20Poly1305
);
