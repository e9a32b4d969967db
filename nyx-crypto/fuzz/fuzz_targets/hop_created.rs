//! Arbitrary CREATED messages into a client waiting for one: always refused (a random
//! message cannot carry the key confirmation), never a panic.
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use nyx_core::NodeId;
use nyx_crypto::hop::HopInitiator;
use nyx_crypto::kem::{HybridPublicKey, HybridSecretKey};

fn onion() -> &'static HybridPublicKey {
    static KEY: OnceLock<HybridPublicKey> = OnceLock::new();
    KEY.get_or_init(|| HybridSecretKey::from_seed(&[1; 96]).public().clone())
}

fuzz_target!(|data: &[u8]| {
    let (sent, _) = HopInitiator::new(NodeId::from_bytes([2; 32]), onion().clone())
        .start_with(&[4; 32], &[5; 32], &[6; 32])
        .expect("start");
    assert!(sent.finish(data).is_err());
});
