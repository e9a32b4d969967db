//! Arbitrary bytes as a hybrid public key: parse or refuse, never panic; whatever parses
//! re-encodes to the same bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use nyx_crypto::kem::HybridPublicKey;

fuzz_target!(|data: &[u8]| {
    if let Ok(key) = HybridPublicKey::from_bytes(data) {
        assert_eq!(&key.to_bytes()[..], data);
    }
});
