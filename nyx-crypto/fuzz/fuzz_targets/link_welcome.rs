//! Arbitrary WELCOME messages into a waiting link initiator: always refused, never a panic.
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use nyx_core::{NodeId, Timestamp};
use nyx_crypto::identity::IdentityKey;
use nyx_crypto::kem::{HybridPublicKey, HybridSecretKey};
use nyx_crypto::link::LinkInitiator;
use nyx_crypto::session::RekeyPolicy;

fn peer_key() -> &'static HybridPublicKey {
    static KEY: OnceLock<HybridPublicKey> = OnceLock::new();
    KEY.get_or_init(|| HybridSecretKey::from_seed(&[1; 96]).public().clone())
}

fuzz_target!(|data: &[u8]| {
    let me = IdentityKey::from_seed(&[3; 32]);
    let (sent, _) = LinkInitiator::new(&me, NodeId::from_bytes([2; 32]), peer_key().clone())
        .start_with(&[4; 32], &[5; 32], &[6; 32])
        .expect("start");
    assert!(
        sent.finish(data, RekeyPolicy::default(), Timestamp::ZERO)
            .is_err()
    );
});
