//! Arbitrary bytes as an onion-key certificate (received from the directory): refused or
//! accepted, never a panic; whatever verifies re-encodes to the same bytes.
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use nyx_crypto::identity::{IdentityKey, IdentityPublic};
use nyx_crypto::onion_cert::OnionKeyCert;

fn identity() -> &'static IdentityPublic {
    static ID: OnceLock<IdentityPublic> = OnceLock::new();
    ID.get_or_init(|| IdentityKey::from_seed(&[1; 32]).public())
}

fuzz_target!(|data: &[u8]| {
    if let Ok(cert) = OnionKeyCert::verify(data, identity()) {
        assert_eq!(&cert.to_bytes()[..], data);
    }
});
