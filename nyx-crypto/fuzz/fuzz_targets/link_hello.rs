//! Arbitrary HELLO messages into a link responder: typed errors, never a panic.
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use nyx_core::{NodeId, Timestamp};
use nyx_crypto::hop::ReplayCache;
use nyx_crypto::kem::HybridSecretKey;
use nyx_crypto::link::{LinkKey, LinkResponder};
use nyx_crypto::session::RekeyPolicy;

fn keys() -> &'static [LinkKey; 1] {
    static KEYS: OnceLock<[LinkKey; 1]> = OnceLock::new();
    KEYS.get_or_init(|| [LinkKey::new(HybridSecretKey::from_seed(&[1; 96]))])
}

fuzz_target!(|data: &[u8]| {
    let mut cache = ReplayCache::new(4);
    let _ = LinkResponder::new(NodeId::from_bytes([2; 32]), keys()).respond(
        data,
        &mut cache,
        RekeyPolicy::default(),
        Timestamp::ZERO,
    );
});
