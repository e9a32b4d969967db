//! Arbitrary link cells and control messages from a peer into a relay that carries a live
//! circuit: no panic, and the circuit still works afterwards.
#![no_main]

use libfuzzer_sys::fuzz_target;
use nyx_core::Timestamp;
use nyx_crypto::identity::IdentityKey;
use nyx_crypto::onion_keys::{OnionKeyRing, RotationPolicy};
use nyx_overlay::circuit::{HopSpec, Output, Overlay, OverlayConfig, wire};

fn node(seed: u8) -> (Overlay, HopSpec) {
    let identity = IdentityKey::from_seed(&[seed; 32]);
    let mut ring = OnionKeyRing::new(RotationPolicy::default()).unwrap();
    ring.rotate(&identity, 1_800_000_000).unwrap();
    let spec = HopSpec { node: identity.node_id(), onion_key: ring.certs()[0].onion_key().clone() };
    let o = Overlay::new(identity.node_id(), ring, OverlayConfig::default(), [7; 32], Timestamp::ZERO).unwrap();
    (o, spec)
}

/// The relay's side of a one-hop circuit from a client, and the client's CREATE exchange.
fn setup() -> (Overlay, Overlay, nyx_overlay::circuit::CircuitHandle) {
    let (mut client, _) = node(1);
    let (mut relay, spec) = node(2);
    let now = Timestamp::from_secs(1);
    let c = client.build(vec![spec], now).unwrap();
    for _ in 0..4 {
        while let Some(out) = client.poll_output() {
            match out {
                Output::Connect { peer } => {
                    client.link_up(peer, now);
                    relay.link_up(client.node_id(), now);
                }
                Output::Control { msg, .. } => relay.handle_control(client.node_id(), &msg, now),
                Output::Cell { cell, .. } => relay.handle_cell(client.node_id(), &cell, now),
                Output::Disconnect { .. } => {}
            }
        }
        while let Some(out) = relay.poll_output() {
            if let Output::Control { msg, .. } = out {
                client.handle_control(relay.node_id(), &msg, now);
            }
        }
    }
    (client, relay, c)
}

fuzz_target!(|data: &[u8]| {
    // Pure decoders first.
    let _ = wire::Control::decode(data);
    let _ = wire::read_relay(data);
    let _ = wire::parse_fragment(data);
    let _ = wire::link_cell_id(data);

    let (mut client, mut relay, c) = setup();
    let from = client.node_id();
    let now = Timestamp::from_secs(2);
    // The input is a sequence of (kind, length u16, bytes) messages from the client's link.
    let mut rest = data;
    while rest.len() >= 3 {
        let kind = rest[0];
        let len = usize::from(u16::from_be_bytes([rest[1], rest[2]])).min(rest.len() - 3);
        let msg = &rest[3..3 + len];
        rest = &rest[3 + len..];
        if kind & 1 == 0 {
            relay.handle_cell(from, msg, now);
        } else {
            relay.handle_control(from, msg, now);
        }
        relay.handle_timeout(now);
        while relay.poll_output().is_some() {}
        while relay.poll_event().is_some() {}
    }
    // A fuzzer-made DESTROY, or a cell on the circuit that failed authentication (tampering),
    // may have closed the circuit legitimately; otherwise it works.
    if relay.relay_circuits() == 1 {
        client.send(c, b"still alive").unwrap();
        if let Some(Output::Cell { cell, .. }) = client.poll_output() {
            let before = relay.stats().delivered;
            relay.handle_cell(from, &cell, now);
            assert_eq!(relay.stats().delivered, before + 1);
        }
    }
});
