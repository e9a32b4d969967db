//! CREATE messages into a relay, both raw and as a genuine CREATE XORed with the input (so
//! that the decapsulation and key schedule are reached, not just the header checks): typed
//! errors, never a panic, and a modified CREATE never yields the client's keys.
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use nyx_core::NodeId;
use nyx_crypto::hop::{CREATE_LEN, HopInitiator, HopResponder, OnionKey, ReplayCache};
use nyx_crypto::kem::HybridSecretKey;

const RELAY: NodeId = NodeId::from_bytes([2; 32]);

fn keys() -> &'static [OnionKey; 1] {
    static KEYS: OnceLock<[OnionKey; 1]> = OnceLock::new();
    KEYS.get_or_init(|| [OnionKey::new(HybridSecretKey::from_seed(&[1; 96]))])
}

fn respond(msg: &[u8]) -> Option<[u8; 65]> {
    let mut cache = ReplayCache::new(4);
    HopResponder::new(RELAY, keys())
        .respond_with(msg, &mut cache, &[3; 32])
        .ok()
        .map(|(_, created)| created)
}

fuzz_target!(|data: &[u8]| {
    let _ = respond(data);
    let (sent, create) = HopInitiator::new(RELAY, keys()[0].public().clone())
        .start_with(&[4; 32], &[5; 32], &[6; 32])
        .expect("start");
    let mut msg = *create;
    let mut changed = false;
    for (b, d) in msg.iter_mut().zip(data.iter().take(CREATE_LEN)) {
        *b ^= d;
        changed |= *d != 0;
    }
    if let Some(created) = respond(&msg) {
        let agreed = sent.finish(&created).is_ok();
        assert_eq!(agreed, !changed, "a modified CREATE produced matching keys");
    }
});
