//! Builds over links that lose cells: a lost EXTEND fragment or EXTENDED is resent on the
//! owner's schedule (`resend.rs`), and the hop that extended answers a repeat from its cache.

use super::*;

/// The tap drops the first cell sent from `from` to `to`.
fn drop_first_cell(from: NodeId, to: NodeId) -> Tap {
    let mut dropped = false;
    Box::new(move |f, t, msg| {
        if matches!(msg, Msg::Cell(_)) && f == from && t == to && !dropped {
            dropped = true;
            return 0;
        }
        1
    })
}

/// The tap drops each cell with probability `percent`/100 (a fixed xorshift sequence);
/// control messages travel reliably, as the transports carry them.
fn lose_cells(percent: u64, seed: u64) -> Tap {
    let mut x = seed | 1;
    Box::new(move |_, _, msg| {
        if !matches!(msg, Msg::Cell(_)) {
            return 1;
        }
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        usize::from(x % 100 >= percent)
    })
}

#[test]
fn a_lost_extend_fragment_is_resent_and_the_build_completes() {
    let mut net = Net::new(4);
    let (client, entry) = (net.nodes[0].id, net.nodes[1].id);
    // The first cell the owner sends is the first fragment of the EXTEND to the middle.
    net.tap = Some(drop_first_cell(client, entry));
    let c = net.build(0, &[1, 2, 3]);
    assert!(net.events(0).is_empty(), "the build waits for the resend");
    net.advance(Duration::from_millis(100));
    assert_eq!(net.events(0), vec![Event::Built { circuit: c }]);
    assert_eq!(net.nodes[0].overlay.stats().extends_resent, 1);
    // The entry got the second fragment twice: once alone, once with the resent first.
    assert_eq!(net.nodes[1].overlay.stats().protocol_errors, 0);
    net.nodes[0].overlay.send(c, b"after a resend").unwrap();
    net.settle();
    assert_eq!(data_of(&net.events(0), c), vec![b"after a resend".to_vec()]);
}

#[test]
fn a_lost_extended_is_answered_again_without_a_second_create() {
    let mut net = Net::new(4);
    let (client, entry) = (net.nodes[0].id, net.nodes[1].id);
    // The first cell back to the owner is the entry's EXTENDED.
    net.tap = Some(drop_first_cell(entry, client));
    let c = net.build(0, &[1, 2, 3]);
    assert!(net.events(0).is_empty());
    net.advance(Duration::from_millis(100));
    assert_eq!(net.events(0), vec![Event::Built { circuit: c }]);
    // Both resent fragments reached the entry; it answered each from its cache (the owner
    // used the first answer and ignored the second) and the middle saw one CREATE.
    assert_eq!(net.nodes[0].overlay.stats().extends_resent, 1);
    assert_eq!(net.nodes[1].overlay.stats().extends_repeated, 2);
    assert_eq!(net.nodes[2].overlay.stats().creates_answered, 1);
    assert_eq!(net.nodes[0].overlay.stats().protocol_errors, 0);
    net.nodes[0].overlay.send(c, b"one circuit").unwrap();
    net.settle();
    assert_eq!(data_of(&net.events(0), c), vec![b"one circuit".to_vec()]);
}

#[test]
fn another_extend_after_extending_is_still_refused() {
    let mut net = Net::new(5);
    let c = net.build(0, &[1, 2]);
    net.events(0);
    // The last hop (relay 2) extended to nobody; the entry (relay 1) extended once with
    // handshake 1. An EXTEND with a new handshake id asks it for a second branch.
    let other = net.nodes[4].id;
    let create = [0u8; nyx_crypto::hop::CREATE_LEN];
    for f in &wire::extend_fragments(7, &other, &create) {
        net.nodes[0]
            .overlay
            .client_send_relay(c.0, 0, wire::RelayCommand::Extend, f)
            .unwrap();
    }
    net.settle();
    let entry = net.nodes[1].overlay.stats();
    assert_eq!((entry.protocol_errors, entry.extends_repeated), (2, 0));
    assert_eq!(net.nodes[4].overlay.relay_circuits(), 0);
}

/// Build `n` three-hop circuits from node 0 over relays 1-5 and report how many were built
/// within the build timeout.
fn built_at_loss(config: OverlayConfig, percent: u64, n: usize) -> (usize, OverlayStats) {
    let mut net = Net::with_config(6, config.clone());
    net.tap = Some(lose_cells(percent, 0x9e37_79b9_7f4a_7c15));
    let mut circuits = Vec::new();
    for k in 0..n {
        let hops = [1 + k % 5, 1 + (k + 1) % 5, 1 + (k + 2) % 5];
        circuits.push(net.build(0, &hops));
    }
    net.advance(config.build_timeout + Duration::from_millis(100));
    let events = net.events(0);
    let built = circuits
        .iter()
        .filter(|&&c| events.contains(&Event::Built { circuit: c }))
        .count();
    (built, net.nodes[0].overlay.stats())
}

#[test]
fn builds_complete_at_twenty_percent_cell_loss() {
    let config = OverlayConfig {
        build_timeout: Duration::from_secs(10),
        ..test_config()
    };
    let (built, stats) = built_at_loss(config.clone(), 20, 20);
    assert_eq!(built, 20, "{stats:?}");
    assert!(stats.extends_resent > 0);
    // Without resends (the first wait is the whole build timeout) many builds fail on the
    // same losses.
    let never = OverlayConfig {
        extend_resend: config.build_timeout * 2,
        ..config
    };
    let (built, stats) = built_at_loss(never, 20, 20);
    assert_eq!(stats.extends_resent, 0);
    assert!(built <= 15, "{built} built without resends");
}

#[test]
fn a_circuit_reports_its_last_build_step_unless_that_was_resent() {
    let mut net = Net::new(4);
    let (client, entry) = (net.nodes[0].id, net.nodes[1].id);
    // The simulated network takes no time: a clean build's last step took none.
    let clean = net.build(0, &[1, 2]);
    assert_eq!(
        net.nodes[0].overlay.circuit_rtt(clean),
        Some(Duration::ZERO)
    );
    // The EXTEND to this circuit's exit (its last step) is resent: no sample.
    net.tap = Some(drop_first_cell(client, entry));
    let resent = net.build(0, &[1, 3]);
    assert_eq!(
        net.nodes[0].overlay.circuit_rtt(resent),
        None,
        "not built yet"
    );
    net.advance(Duration::from_millis(100));
    assert!(net.events(0).contains(&Event::Built { circuit: resent }));
    assert_eq!(net.nodes[0].overlay.circuit_rtt(resent), None);
    // A circuit another node owns, or none at all, has no round trip here.
    assert_eq!(net.nodes[1].overlay.circuit_rtt(clean), None);
}

#[test]
fn a_lost_truncated_is_sent_again_when_the_extend_is_resent() {
    let mut net = Net::new(4);
    let (entry, middle, exit) = (net.nodes[1].id, net.nodes[2].id, net.nodes[3].id);
    net.dead.insert(exit);
    // The middle cannot reach the exit; its TRUNCATED (its first cell back) is lost.
    net.tap = Some(drop_first_cell(middle, entry));
    let c = net.build(0, &[1, 2, 3]);
    assert!(net.events(0).is_empty());
    // The owner's resent EXTEND brings it again, long before the build timeout (2 s).
    net.advance(Duration::from_millis(100));
    assert_eq!(
        net.events(0),
        vec![Event::Failed {
            circuit: c,
            reason: DestroyReason::ConnectFailed,
            hop: Some(2),
            relay: Some(exit),
        }]
    );
    assert!(net.nodes[2].overlay.stats().extends_repeated >= 1);
}
