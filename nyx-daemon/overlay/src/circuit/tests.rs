//! Deterministic simulation of overlays exchanging messages in memory: a network of nodes,
//! a clock the test advances, and hooks to drop, modify, duplicate or capture messages.

use std::collections::{HashSet, VecDeque};
use std::time::Duration;

use nyx_core::{NodeId, Timestamp};
use nyx_crypto::identity::IdentityKey;
use nyx_crypto::onion_keys::{OnionKeyRing, RotationPolicy};

use super::*;

mod lossy;

const UNIX_NOW: u64 = 1_800_000_000;

#[derive(Debug, Clone)]
enum Msg {
    Cell(Vec<u8>),
    Control(Vec<u8>),
}

struct Node {
    id: NodeId,
    overlay: Overlay,
    spec: HopSpec,
    /// Exit behaviour: echo every payload back.
    echo: bool,
    events: Vec<Event>,
}

type Tap = Box<dyn FnMut(NodeId, NodeId, &mut Msg) -> usize>;

struct Net {
    nodes: Vec<Node>,
    now: Timestamp,
    wire: VecDeque<(NodeId, NodeId, Msg)>,
    dead: HashSet<NodeId>,
    /// Called for every message in flight: may modify it; returns how many copies to
    /// deliver (0 drops it, 2 duplicates it).
    tap: Option<Tap>,
}

fn test_config() -> OverlayConfig {
    OverlayConfig {
        build_timeout: Duration::from_secs(2),
        keepalive: Duration::from_millis(300),
        link_timeout: Duration::from_secs(1),
        timer_granularity: Duration::from_millis(50),
        truncated_grace: Duration::from_millis(500),
        ..OverlayConfig::default()
    }
}

fn node(seed: u8, config: OverlayConfig) -> Node {
    let identity = IdentityKey::from_seed(&[seed; 32]);
    let mut ring = OnionKeyRing::new(RotationPolicy::default()).unwrap();
    ring.rotate(&identity, UNIX_NOW).unwrap();
    let spec = HopSpec {
        node: identity.node_id(),
        onion_key: ring.certs()[0].onion_key().clone(),
    };
    let overlay = Overlay::new(
        identity.node_id(),
        ring,
        config,
        [seed; 32],
        Timestamp::ZERO,
    )
    .unwrap();
    Node {
        id: identity.node_id(),
        overlay,
        spec,
        echo: true,
        events: Vec::new(),
    }
}

impl Net {
    fn new(n: u8) -> Net {
        Net::with_config(n, test_config())
    }

    fn with_config(n: u8, config: OverlayConfig) -> Net {
        Net {
            nodes: (1..=n).map(|i| node(i, config.clone())).collect(),
            now: Timestamp::ZERO,
            wire: VecDeque::new(),
            dead: HashSet::new(),
            tap: None,
        }
    }

    fn idx(&self, id: NodeId) -> usize {
        self.nodes.iter().position(|n| n.id == id).unwrap()
    }

    fn path(&self, hops: &[usize]) -> Vec<HopSpec> {
        hops.iter().map(|&i| self.nodes[i].spec.clone()).collect()
    }

    /// Move everything until nothing is left in flight.
    fn settle(&mut self) {
        for _ in 0..10_000 {
            let mut moved = false;
            for i in 0..self.nodes.len() {
                let from = self.nodes[i].id;
                while let Some(out) = self.nodes[i].overlay.poll_output() {
                    moved = true;
                    match out {
                        Output::Cell { to, cell } => {
                            self.wire.push_back((from, to, Msg::Cell(cell.to_vec())));
                        }
                        Output::Control { to, msg } => {
                            self.wire.push_back((from, to, Msg::Control(msg)));
                        }
                        Output::Connect { peer } => {
                            let now = self.now;
                            if self.dead.contains(&peer) {
                                self.nodes[i].overlay.connect_failed(peer, now);
                            } else {
                                self.nodes[i].overlay.link_up(peer, now);
                                let j = self.idx(peer);
                                self.nodes[j].overlay.link_up(from, now);
                            }
                        }
                        Output::Disconnect { .. } => {}
                    }
                }
                while let Some(ev) = self.nodes[i].overlay.poll_event() {
                    moved = true;
                    if let Event::ExitData { exit, payload } = &ev
                        && self.nodes[i].echo
                    {
                        let now = self.now;
                        self.nodes[i]
                            .overlay
                            .send_backward(*exit, payload, now)
                            .unwrap();
                    }
                    self.nodes[i].events.push(ev);
                }
            }
            while let Some((from, to, mut msg)) = self.wire.pop_front() {
                moved = true;
                if self.dead.contains(&from) || self.dead.contains(&to) {
                    continue;
                }
                let copies = match self.tap.as_mut() {
                    Some(tap) => tap(from, to, &mut msg),
                    None => 1,
                };
                let j = self.idx(to);
                for _ in 0..copies {
                    match &msg {
                        Msg::Cell(c) => self.nodes[j].overlay.handle_cell(from, c, self.now),
                        Msg::Control(m) => self.nodes[j].overlay.handle_control(from, m, self.now),
                    }
                }
            }
            if !moved {
                return;
            }
        }
        panic!("the network did not settle");
    }

    /// Advance the clock in timer steps, settling after each.
    fn advance(&mut self, by: Duration) {
        let end = self.now + by;
        while self.now < end {
            self.now += Duration::from_millis(50);
            for n in &mut self.nodes {
                if !self.dead.contains(&n.id) {
                    n.overlay.handle_timeout(self.now);
                }
            }
            self.settle();
        }
    }

    fn events(&mut self, i: usize) -> Vec<Event> {
        std::mem::take(&mut self.nodes[i].events)
    }

    fn build(&mut self, client: usize, hops: &[usize]) -> CircuitHandle {
        let path = self.path(hops);
        let now = self.now;
        let c = self.nodes[client].overlay.build(path, now).unwrap();
        self.settle();
        c
    }
}

fn data_of(events: &[Event], circuit: CircuitHandle) -> Vec<Vec<u8>> {
    events
        .iter()
        .filter_map(|e| match e {
            Event::Data {
                circuit: c,
                payload,
            } if *c == circuit => Some(payload.to_vec()),
            _ => None,
        })
        .collect()
}

#[test]
fn three_hop_circuit_builds_and_echoes() {
    let mut net = Net::new(5);
    let c = net.build(0, &[1, 2, 3]);
    assert_eq!(net.events(0), vec![Event::Built { circuit: c }]);
    assert_eq!(net.nodes[0].overlay.path(c).unwrap().len(), 3);
    for i in 1..=3 {
        assert_eq!(net.nodes[i].overlay.relay_circuits(), 1, "relay {i}");
    }
    for len in [0usize, 1, 100, MAX_FORWARD_BODY] {
        let payload: Vec<u8> = (0..len).map(|i| i as u8).collect();
        net.nodes[0].overlay.send(c, &payload).unwrap();
        net.settle();
        let exit_events = net.events(3);
        assert!(
            matches!(&exit_events[..], [Event::ExitData { payload: p, .. }] if p[..] == payload[..])
        );
        assert_eq!(data_of(&net.events(0), c), vec![payload]);
    }
    // Only the exit saw payloads; the others relayed.
    assert!(net.events(1).is_empty() && net.events(2).is_empty());
    let s = net.nodes[2].overlay.stats();
    // EXTEND fragments to the middle were delivered there, EXTENDED from it originated.
    assert_eq!((s.relayed_forward, s.relayed_backward), (4, 4));
}

#[test]
fn one_and_two_hop_circuits_work_too() {
    let mut net = Net::new(4);
    let one = net.build(0, &[1]);
    let two = net.build(0, &[2, 3]);
    let ev = net.events(0);
    assert!(
        ev.contains(&Event::Built { circuit: one }) && ev.contains(&Event::Built { circuit: two })
    );
    net.nodes[0].overlay.send(one, b"one").unwrap();
    net.nodes[0].overlay.send(two, b"two").unwrap();
    net.settle();
    let ev = net.events(0);
    assert_eq!(data_of(&ev, one), vec![b"one".to_vec()]);
    assert_eq!(data_of(&ev, two), vec![b"two".to_vec()]);
}

#[test]
fn many_circuits_share_relays() {
    let mut net = Net::new(6);
    let mut circuits = Vec::new();
    for k in 0..20 {
        let hops = [1 + k % 5, 1 + (k + 1) % 5, 1 + (k + 2) % 5];
        let client = if k % 2 == 0 {
            0
        } else {
            hops.iter()
                .map(|h| h % 5 + 1)
                .find(|c| !hops.contains(c))
                .unwrap()
        };
        circuits.push((client, net.build(client, &hops)));
    }
    for (k, (client, c)) in circuits.iter().enumerate() {
        net.nodes[*client]
            .overlay
            .send(*c, format!("circuit {k}").as_bytes())
            .unwrap();
    }
    net.settle();
    let mut all = Vec::new();
    for i in 0..6 {
        all.extend(net.events(i));
    }
    for (k, (_, c)) in circuits.iter().enumerate() {
        assert!(
            all.contains(&Event::Built { circuit: *c }),
            "circuit {k} built"
        );
        let got: Vec<_> = all
            .iter()
            .filter_map(|e| match e {
                Event::Data { circuit, payload }
                    if circuit == c && payload[..] == *format!("circuit {k}").as_bytes() =>
                {
                    Some(())
                }
                _ => None,
            })
            .collect();
        assert_eq!(got.len(), 1, "circuit {k}");
    }
}

/// The tap flips one bit of the first cell sent from `from` to `to` (a relay tampering).
fn flip_first_cell(from: NodeId, to: NodeId) -> Tap {
    let mut flipped = false;
    Box::new(move |f, t, msg| {
        if let Msg::Cell(cell) = msg
            && f == from
            && t == to
            && !flipped
        {
            cell[600] ^= 0x10;
            flipped = true;
        }
        1
    })
}

#[test]
fn a_tampered_forward_cell_destroys_the_circuit_at_the_next_hop_and_the_owner_learns_why() {
    let mut net = Net::new(4);
    let c = net.build(0, &[1, 2, 3]);
    net.events(0);
    let (entry, middle) = (net.nodes[1].id, net.nodes[2].id);
    // The entry modifies a cell for the exit: the middle, the next hop to remove a layer,
    // refuses it and destroys the circuit both ways.
    net.tap = Some(flip_first_cell(entry, middle));
    net.nodes[0].overlay.send(c, b"tampered").unwrap();
    net.settle();
    let stats = net.nodes[2].overlay.stats();
    assert_eq!(stats.dropped_unauthenticated, 1);
    assert_eq!(stats.circuits_tampered, 1);
    assert!(net.events(3).is_empty(), "nothing reached the exit");
    for i in 1..=3 {
        assert_eq!(net.nodes[i].overlay.relay_circuits(), 0, "relay {i}");
    }
    // DESTROY reached the entry, which told the owner with TRUNCATED naming the middle.
    assert_eq!(
        net.events(0),
        vec![Event::Destroyed {
            circuit: c,
            reason: DestroyReason::Tampered,
            hop: Some(1),
            relay: Some(middle),
        }]
    );
    assert_eq!(net.nodes[0].overlay.own_circuits(), 0);
    assert!(matches!(
        net.nodes[0].overlay.send(c, b"genuine"),
        Err(Error::NoSuchCircuit)
    ));
}

#[test]
fn a_tampered_backward_cell_destroys_the_circuit_at_the_owner() {
    let mut net = Net::new(4);
    let c = net.build(0, &[1, 2, 3]);
    net.events(0);
    let (client, entry) = (net.nodes[0].id, net.nodes[1].id);
    // The entry modifies the exit's echo on its way to the owner. Relays do not authenticate
    // backward cells; the owner does, and destroys the circuit.
    net.tap = Some(flip_first_cell(entry, client));
    net.nodes[0].overlay.send(c, b"echo me").unwrap();
    net.settle();
    let stats = net.nodes[0].overlay.stats();
    assert_eq!(stats.dropped_unauthenticated, 1);
    assert_eq!(stats.circuits_tampered, 1);
    assert_eq!(
        net.events(0),
        vec![Event::Destroyed {
            circuit: c,
            reason: DestroyReason::Tampered,
            hop: None,
            relay: None,
        }]
    );
    assert_eq!(net.nodes[0].overlay.own_circuits(), 0);
    for i in 1..=3 {
        assert_eq!(net.nodes[i].overlay.relay_circuits(), 0, "relay {i}");
    }
    // The exit, which had delivered the payload, hears why its circuit ended.
    let exit_events = net.events(3);
    assert!(
        exit_events.iter().any(|e| matches!(
            e,
            Event::ExitClosed {
                reason: DestroyReason::Tampered,
                ..
            }
        )),
        "{exit_events:?}"
    );
}

#[test]
fn replayed_cells_are_dropped_and_the_circuit_lives_on() {
    let mut net = Net::new(4);
    let c = net.build(0, &[1, 2, 3]);
    net.events(0);
    net.tap = Some(Box::new(
        |_, _, msg| if matches!(msg, Msg::Cell(_)) { 2 } else { 1 },
    ));
    net.nodes[0].overlay.send(c, b"once").unwrap();
    net.settle();
    // Every hop refused the second copy of the forward cell; the client refused the second
    // copy of each backward cell (the relays re-wrap duplicates with fresh counters, but the
    // exit's origin counter repeats). A replay is not tampering: nothing is destroyed.
    for i in 1..=3 {
        let stats = net.nodes[i].overlay.stats();
        assert!(stats.dropped_replayed >= 1, "relay {i}");
        assert_eq!(stats.dropped_unauthenticated, 0, "relay {i}");
        assert_eq!(net.nodes[i].overlay.relay_circuits(), 1, "relay {i}");
    }
    let echoes = data_of(&net.events(0), c);
    assert_eq!(echoes, vec![b"once".to_vec()]);
    let stats = net.nodes[0].overlay.stats();
    assert!(stats.dropped_replayed >= 1);
    assert_eq!(stats.dropped_unauthenticated, 0);
    assert_eq!(stats.circuits_tampered, 0);
    net.tap = None;
    net.nodes[0].overlay.send(c, b"again").unwrap();
    net.settle();
    assert_eq!(data_of(&net.events(0), c), vec![b"again".to_vec()]);
}

#[test]
fn garbage_and_strangers_are_counted_not_fatal() {
    let mut net = Net::new(4);
    let c = net.build(0, &[1, 2, 3]);
    net.events(0);
    let stranger = NodeId::from_bytes([0xEE; 32]);
    let relay = &mut net.nodes[2].overlay;
    let now = Timestamp::from_secs(1);
    relay.handle_cell(stranger, &[1, 2, 3], now);
    relay.handle_cell(stranger, &[0u8; LINK_CELL_LEN], now);
    let mut unknown = vec![0x5Au8; LINK_CELL_LEN];
    unknown[..4].copy_from_slice(&77u32.to_be_bytes());
    relay.handle_cell(stranger, &unknown, now);
    relay.handle_control(stranger, &[], now);
    relay.handle_control(stranger, &[42, 1, 2], now);
    let s = relay.stats();
    assert_eq!(
        (
            s.dropped_malformed,
            s.dropped_unknown_circuit,
            s.bad_control
        ),
        (2, 1, 2)
    );
    net.nodes[0].overlay.send(c, b"still fine").unwrap();
    net.settle();
    assert_eq!(data_of(&net.events(0), c), vec![b"still fine".to_vec()]);
}

#[test]
fn a_vanished_middle_relay_destroys_circuits_within_the_link_timeout() {
    let mut net = Net::new(4);
    let c = net.build(0, &[1, 2, 3]);
    net.events(0);
    let middle = net.nodes[2].id;
    net.dead.insert(middle);
    // The entry probes after `keepalive` and gives up `link_timeout` later; TRUNCATED then
    // reaches the client from the entry, naming the middle (path position 1).
    net.advance(Duration::from_millis(1500));
    let ev = net.events(0);
    assert!(
        ev.contains(&Event::Destroyed {
            circuit: c,
            reason: DestroyReason::LinkLost,
            hop: Some(1),
            relay: Some(middle),
        }),
        "{ev:?}"
    );
    assert_eq!(net.nodes[1].overlay.relay_circuits(), 0);
    assert_eq!(net.nodes[0].overlay.own_circuits(), 0);
    // The exit forgot it too (its previous hop vanished).
    assert_eq!(net.nodes[3].overlay.relay_circuits(), 0);
}

#[test]
fn unreachable_hop_fails_the_build_and_names_it() {
    let mut net = Net::new(4);
    let exit = net.nodes[3].id;
    net.dead.insert(exit);
    let c = net.build(0, &[1, 2, 3]);
    let ev = net.events(0);
    assert_eq!(
        ev,
        vec![Event::Failed {
            circuit: c,
            reason: DestroyReason::ConnectFailed,
            hop: Some(2),
            relay: Some(exit),
        }]
    );
    net.advance(Duration::from_secs(1));
    for i in 1..=2 {
        assert_eq!(net.nodes[i].overlay.relay_circuits(), 0, "relay {i}");
    }
}

#[test]
fn silent_hop_times_out_the_build() {
    let mut net = Net::new(4);
    let exit = net.nodes[3].id;
    // Every CREATE to the exit is lost.
    net.tap = Some(Box::new(move |_, to, msg| {
        usize::from(!(to == exit && matches!(msg, Msg::Control(m) if m[0] == 1)))
    }));
    let c = net.build(0, &[1, 2, 3]);
    // Meanwhile the owner resends its EXTEND to the middle, which ignores the repeats: its
    // CREATE is out, and the link carries that reliably.
    net.advance(Duration::from_millis(400));
    let resent = net.nodes[0].overlay.stats().extends_resent;
    assert!(resent >= 2, "{resent}");
    let middle = net.nodes[2].overlay.stats();
    assert_eq!(middle.extends_repeated, 2 * resent, "{middle:?}");
    assert_eq!(middle.protocol_errors, 0);
    assert!(net.events(0).is_empty(), "not built, not failed yet");
    net.advance(Duration::from_millis(1700));
    let ev = net.events(0);
    assert!(
        ev.contains(&Event::Failed {
            circuit: c,
            reason: DestroyReason::Timeout,
            hop: Some(2),
            relay: Some(exit)
        }),
        "{ev:?}"
    );
    net.advance(Duration::from_millis(100));
    assert_eq!(net.nodes[1].overlay.relay_circuits(), 0);
    assert_eq!(net.nodes[2].overlay.relay_circuits(), 0);
}

#[test]
fn close_propagates_to_every_hop_and_destroy_reaches_the_owner() {
    let mut net = Net::new(4);
    let c = net.build(0, &[1, 2, 3]);
    net.nodes[0].overlay.close(c, net.now).unwrap();
    net.settle();
    for i in 1..=3 {
        assert_eq!(net.nodes[i].overlay.relay_circuits(), 0, "relay {i}");
    }
    assert!(matches!(
        net.nodes[0].overlay.send(c, b"x"),
        Err(Error::NoSuchCircuit)
    ));
    // The other way: the middle destroys (e.g. it shuts down); the owner hears the reason.
    let c = net.build(0, &[1, 2, 3]);
    net.events(0);
    let now = net.now;
    let middle_id = net.nodes[2].id;
    let middle = &mut net.nodes[2].overlay;
    let id = *middle.relays.keys().next().unwrap();
    middle.relay_destroy(id, DestroyReason::Shutdown, now);
    net.settle();
    assert_eq!(
        net.events(0),
        vec![Event::Destroyed {
            circuit: c,
            reason: DestroyReason::Shutdown,
            hop: Some(1),
            relay: Some(middle_id)
        }]
    );
    assert_eq!(net.nodes[3].overlay.relay_circuits(), 0);
}

#[test]
fn circuits_expire_after_their_lifetime_with_warning() {
    let config = OverlayConfig {
        max_circuit_lifetime: Duration::from_secs(3),
        rotate_before: Duration::from_secs(1),
        ..test_config()
    };
    let mut net = Net::with_config(4, config);
    let c = net.build(0, &[1, 2, 3]);
    net.events(0);
    net.advance(Duration::from_millis(2100));
    assert_eq!(net.events(0), vec![Event::Expiring { circuit: c }]);
    net.advance(Duration::from_secs(1));
    assert_eq!(
        net.events(0),
        vec![Event::Destroyed {
            circuit: c,
            reason: DestroyReason::Expired,
            hop: None,
            relay: None
        }]
    );
    assert_eq!(net.nodes[2].overlay.relay_circuits(), 0);
}

#[test]
fn create_flood_is_rate_limited_per_peer() {
    let config = OverlayConfig {
        circuit_creates: nyx_core::rate::Quota::from_rate(1.0, 5).unwrap(),
        ..test_config()
    };
    let mut net = Net::with_config(4, config);
    let mut failed = 0;
    for _ in 0..20 {
        net.build(0, &[1]);
    }
    for e in net.events(0) {
        if matches!(
            e,
            Event::Failed {
                reason: DestroyReason::ResourceLimit,
                ..
            }
        ) {
            failed += 1;
        }
    }
    assert_eq!(failed, 15);
    assert_eq!(net.nodes[1].overlay.stats().creates_rate_limited, 15);
    // Another client is not starved.
    let other = net.build(2, &[1]);
    assert_eq!(net.events(2), vec![Event::Built { circuit: other }]);
}

/// Peers are free to mint (a client shows a fresh identity on each link), so CREATEs are
/// also limited across all peers: many peers within their own rates still cannot make the
/// relay decapsulate more than `all_creates` allows.
#[test]
fn creates_from_many_peers_are_limited_together() {
    let config = OverlayConfig {
        all_creates: nyx_core::rate::Quota::from_rate(1.0, 4).unwrap(),
        ..test_config()
    };
    let mut net = Net::with_config(5, config);
    for client in [0, 2, 3, 4] {
        net.build(client, &[1]);
        net.build(client, &[1]);
    }
    let built: usize = [0, 2, 3, 4]
        .iter()
        .map(|c| {
            net.events(*c)
                .iter()
                .filter(|e| matches!(e, Event::Built { .. }))
                .count()
        })
        .sum();
    assert_eq!(built, 4, "the shared burst of 4");
    assert_eq!(net.nodes[1].overlay.stats().creates_rate_limited, 4);
}

#[test]
fn limits_change_while_running() {
    let mut net = Net::with_config(4, test_config());
    let before = net.nodes[1].overlay.limits();
    let tight = crate::circuit::LiveLimits {
        circuit_creates: nyx_core::rate::Quota::from_rate(1.0, 2).unwrap(),
        max_relay_circuits: 100,
        ..before
    };
    net.nodes[1].overlay.set_limits(&tight).unwrap();
    assert_eq!(net.nodes[1].overlay.limits(), tight);
    for _ in 0..6 {
        net.build(0, &[1]);
    }
    let built = net
        .events(0)
        .iter()
        .filter(|e| matches!(e, Event::Built { .. }))
        .count();
    assert_eq!(built, 2, "the new burst of 2 CREATEs holds");
    assert_eq!(net.nodes[1].overlay.stats().creates_rate_limited, 4);
    // The relayed-circuit cap applies to new CREATEs at once.
    let capped = crate::circuit::LiveLimits {
        max_relay_circuits: 2,
        ..before
    };
    net.nodes[1].overlay.set_limits(&capped).unwrap();
    net.build(2, &[1]);
    assert!(matches!(
        net.events(2).as_slice(),
        [Event::Failed {
            reason: DestroyReason::ResourceLimit,
            ..
        }]
    ));
}

#[test]
fn bad_paths_are_refused() {
    let mut net = Net::new(3);
    let me = net.nodes[0].spec.clone();
    let a = net.nodes[1].spec.clone();
    let o = &mut net.nodes[0].overlay;
    assert!(matches!(
        o.build(vec![], Timestamp::ZERO),
        Err(Error::BadPath { .. })
    ));
    assert!(matches!(
        o.build(vec![me], Timestamp::ZERO),
        Err(Error::BadPath { .. })
    ));
    assert!(matches!(
        o.build(vec![a.clone(), a.clone()], Timestamp::ZERO),
        Err(Error::BadPath { .. })
    ));
    assert!(matches!(
        o.build(vec![a.clone(); 4], Timestamp::ZERO),
        Err(Error::BadPath { .. })
    ));
}

#[test]
fn sending_before_built_or_too_much_is_an_error() {
    let mut net = Net::new(4);
    let path = net.path(&[1, 2, 3]);
    let c = net.nodes[0].overlay.build(path, Timestamp::ZERO).unwrap();
    assert!(matches!(
        net.nodes[0].overlay.send(c, b"x"),
        Err(Error::CircuitNotOpen)
    ));
    net.settle();
    let big = vec![0u8; MAX_FORWARD_BODY + 1];
    assert!(matches!(
        net.nodes[0].overlay.send(c, &big),
        Err(Error::PayloadTooLarge { .. })
    ));
}

#[test]
fn extend_to_the_previous_hop_is_refused() {
    let mut net = Net::new(3);
    // 1 -> 2 -> 1 would make relay 2 extend back to its previous hop.
    let path = vec![net.nodes[1].spec.clone(), net.nodes[2].spec.clone()];
    let c = net.nodes[0].overlay.build(path, net.now).unwrap();
    net.settle();
    net.events(0);
    // Paths with a repeated relay are refused by `build`, so craft the EXTEND by hand: the
    // last hop (relay 2) is asked to extend back to its previous hop (relay 1).
    assert_eq!(net.nodes[0].overlay.own_circuits(), 1);
    let prev = net.nodes[1].id;
    let create = [0u8; nyx_crypto::hop::CREATE_LEN];
    let frags = wire::extend_fragments(9, &prev, &create);
    let client = &mut net.nodes[0].overlay;
    for f in &frags {
        client
            .client_send_relay(c.0, 1, wire::RelayCommand::Extend, f)
            .unwrap();
    }
    net.settle();
    assert!(net.nodes[2].overlay.stats().protocol_errors >= 1);
    assert_eq!(net.nodes[2].overlay.relay_circuits(), 0);
}

/// A one-hop directory circuit needs no onion key: CREATE_FAST over the link, payloads both
/// ways, and the relay counts it like any CREATE.
#[test]
fn directory_circuit_builds_without_an_onion_key() {
    let mut net = Net::new(2);
    let relay = net.nodes[1].id;
    let now = net.now;
    let c = net.nodes[0].overlay.build_directory(relay, now).unwrap();
    net.settle();
    assert_eq!(net.events(0), vec![Event::Built { circuit: c }]);
    assert_eq!(net.nodes[0].overlay.path(c), Some(vec![relay]));
    net.nodes[0].overlay.send(c, b"GET consensus").unwrap();
    net.settle();
    assert!(matches!(
        &net.events(1)[..],
        [Event::ExitData { payload, .. }] if &payload[..] == b"GET consensus"
    ));
    assert_eq!(data_of(&net.events(0), c), vec![b"GET consensus".to_vec()]);
    assert_eq!(net.nodes[1].overlay.stats().creates_answered, 1);
    let me = net.nodes[0].id;
    assert!(matches!(
        net.nodes[0].overlay.build_directory(me, now),
        Err(Error::BadPath { .. })
    ));
}

/// A CREATED_FAST answering a CREATE (or an altered one) does not build the circuit.
#[test]
fn mismatched_or_altered_fast_answers_fail_the_build() {
    let mut net = Net::new(2);
    // Alter the confirmation of every CREATED_FAST.
    net.tap = Some(Box::new(|_, _, msg| {
        if let Msg::Control(m) = msg
            && m.first() == Some(&7)
        {
            let last = m.len() - 1;
            m[last] ^= 1;
        }
        1
    }));
    let relay = net.nodes[1].id;
    let now = net.now;
    let c = net.nodes[0].overlay.build_directory(relay, now).unwrap();
    net.settle();
    assert!(matches!(
        &net.events(0)[..],
        [Event::Failed { circuit, reason: DestroyReason::Protocol, .. }] if *circuit == c
    ));
    net.tap = None;
    // A CREATED_FAST for a circuit that sent CREATE is a protocol error, not a build.
    let c = net.build(0, &[1]);
    assert_eq!(net.events(0), vec![Event::Built { circuit: c }]);
    let circ = net.nodes[0]
        .overlay
        .link_circuit_ids()
        .into_iter()
        .find(|(peer, _)| *peer == relay)
        .map(|(_, circ)| circ)
        .unwrap();
    let bad_before = net.nodes[0].overlay.stats().bad_control;
    let forged = wire::Control::CreatedFast {
        circ,
        created: [1; nyx_crypto::fast_hop::FAST_CREATED_LEN],
    };
    net.nodes[0]
        .overlay
        .handle_control(relay, &forged.encode(), now);
    assert_eq!(net.nodes[0].overlay.stats().bad_control, bad_before + 1);
}

/// A client-only overlay (`relay: false`) refuses every CREATE and CREATE_FAST with DESTROY,
/// relays nothing, and still builds its own circuits through relays.
#[test]
fn a_client_only_node_relays_nothing_but_builds_its_own() {
    let mut net = Net::new(4);
    let client_config = OverlayConfig {
        relay: false,
        ..test_config()
    };
    net.nodes[1] = node(2, client_config);
    // Through the client: its CREATE is refused, the build fails at that hop.
    let c = net.build(0, &[1, 2]);
    assert!(
        matches!(
            &net.events(0)[..],
            [Event::Failed { circuit, reason: DestroyReason::Protocol, .. }] if *circuit == c
        ),
        "a client answered a CREATE"
    );
    let client = net.nodes[1].id;
    let now = net.now;
    let d = net.nodes[0].overlay.build_directory(client, now).unwrap();
    net.settle();
    assert!(
        matches!(
            &net.events(0)[..],
            [Event::Failed { circuit, reason: DestroyReason::Protocol, .. }] if *circuit == d
        ),
        "a client answered a CREATE_FAST"
    );
    assert_eq!(net.nodes[1].overlay.relay_circuits(), 0);
    assert_eq!(net.nodes[1].overlay.stats().creates_refused, 2);
    // Its own circuits are unaffected.
    let own = net.build(1, &[0, 2, 3]);
    assert_eq!(net.events(1), vec![Event::Built { circuit: own }]);
}

/// `n` circuit ids drawn for `peer` (none of them taken, so nothing is skipped).
fn draw_ids(overlay: &mut Overlay, peer: NodeId, n: usize) -> Vec<u32> {
    (0..n).map(|_| overlay.alloc_circ_id(peer)).collect()
}

#[test]
fn circuit_ids_are_random_in_the_half_the_node_ids_give() {
    let mut overlay = node(1, test_config()).overlay;
    let below = NodeId::from_bytes([0x00; 32]);
    let above = NodeId::from_bytes([0xff; 32]);
    for (peer, top) in [(below, 0x8000_0000), (above, 0)] {
        let ids = draw_ids(&mut overlay, peer, 4096);
        assert!(ids.iter().all(|id| id & 0x8000_0000 == top && *id != 0));
        // Not a counter, not a constant step: consecutive differences almost never repeat.
        let steps: HashSet<u32> = ids.windows(2).map(|w| w[1].wrapping_sub(w[0])).collect();
        assert!(steps.len() > 4000, "{} distinct steps", steps.len());
        assert_eq!(ids.iter().collect::<HashSet<_>>().len(), ids.len());
        // Each of the 31 free bits is set in about half of the ids.
        for bit in 0..31 {
            let set = ids.iter().filter(|id| *id & (1 << bit) != 0).count();
            assert!((1800..=2300).contains(&set), "bit {bit} set {set} times");
        }
    }
}

#[test]
fn a_client_only_node_draws_the_top_bit_too() {
    let config = OverlayConfig {
        relay: false,
        ..test_config()
    };
    let mut overlay = node(1, config).overlay;
    let ids = draw_ids(&mut overlay, NodeId::from_bytes([0x00; 32]), 256);
    let high = ids.iter().filter(|id| *id & 0x8000_0000 != 0).count();
    assert!((64..=192).contains(&high), "{high} of 256 with the top bit");
}

#[test]
fn seeds_one_bit_apart_draw_different_circuit_ids() {
    // The SplitMix64 ids before used `seed | 1`: seeds 2 and 3 drew the same ids.
    let peer = NodeId::from_bytes([0x00; 32]);
    let ids_for = |seed: [u8; 32]| {
        let identity = IdentityKey::from_seed(&[1; 32]);
        let ring = OnionKeyRing::new(RotationPolicy::default()).unwrap();
        let mut o = Overlay::new(
            identity.node_id(),
            ring,
            test_config(),
            seed,
            Timestamp::ZERO,
        )
        .unwrap();
        draw_ids(&mut o, peer, 8)
    };
    let base = ids_for([2; 32]);
    assert_eq!(ids_for([2; 32]), base, "a fixed seed reproduces the ids");
    for byte in [0, 31] {
        let mut seed = [2; 32];
        seed[byte] ^= 1;
        let other = ids_for(seed);
        assert!(base.iter().zip(&other).all(|(a, b)| a != b), "byte {byte}");
    }
}

#[test]
fn circuit_ids_in_use_on_the_link_are_skipped() {
    let peer = NodeId::from_bytes([0x00; 32]);
    let other_peer = NodeId::from_bytes([0x01; 32]);
    // Three overlays with the same seed draw the same sequence.
    let first_two = draw_ids(&mut node(1, test_config()).overlay, peer, 2);
    let mut taken = node(1, test_config()).overlay;
    taken
        .shared
        .insert_slot((peer, first_two[0]), Slot::Client(99), Timestamp::ZERO);
    assert_eq!(
        taken.alloc_circ_id(peer),
        first_two[1],
        "the id in use is skipped"
    );
    let mut elsewhere = node(1, test_config()).overlay;
    elsewhere.shared.insert_slot(
        (other_peer, first_two[0]),
        Slot::Client(99),
        Timestamp::ZERO,
    );
    assert_eq!(
        elsewhere.alloc_circ_id(peer),
        first_two[0],
        "ids are per link: one in use on another link is free here"
    );
}
