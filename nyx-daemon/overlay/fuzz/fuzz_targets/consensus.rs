//! Arbitrary bytes as a consensus and as a vote: typed errors, never a panic; a consensus that
//! decodes encodes back to the same bytes; nothing verifies without a pinned signer's key.
#![no_main]

use libfuzzer_sys::fuzz_target;
use nyx_crypto::identity::IdentityKey;
use nyx_overlay::directory::consensus::{UnverifiedConsensus, Vote};

fuzz_target!(|data: &[u8]| {
    let pinned = [IdentityKey::from_seed(&[7; 32]).public()];
    if let Ok(c) = UnverifiedConsensus::decode(data) {
        assert_eq!(c.encode(), data);
        assert!(c.verify(&pinned, 1_800_000_000, None).is_err());
    }
    assert!(Vote::decode(data, &pinned).is_err());
});
