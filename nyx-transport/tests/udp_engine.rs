//! The UDP transport's engine between two nodes, datagrams moved by the test (optionally
//! through the fault shim): handshake with and without cookies, cells both ways, and
//! garbage, replays and floods that are dropped and counted without disturbing a live link.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::net::SocketAddr;

use bytes::Bytes;
use std::sync::Arc;
use std::time::Duration;

use nyx_core::Timestamp;
use nyx_core::rate::Quota;
use nyx_crypto::identity::IdentityKey;
use nyx_crypto::kem::HybridSecretKey;
use nyx_crypto::link::LinkKey;
use nyx_transport::fault::{FaultConfig, FaultShim};
use nyx_transport::udp::{UdpConfig, UdpEngine, UdpEvent};

const A: &str = "127.0.0.2:4000";
const B: &str = "127.0.0.3:4000";

struct Node {
    id: Arc<IdentityKey>,
    key: HybridSecretKey,
    engine: UdpEngine,
    addr: SocketAddr,
}

fn node(seed: u8, addr: &str, config: UdpConfig) -> Node {
    let id = Arc::new(IdentityKey::from_seed(&[seed; 32]));
    let key = HybridSecretKey::from_seed(&[seed; 96]);
    let engine = UdpEngine::new(
        config,
        id.clone(),
        vec![LinkKey::new(HybridSecretKey::from_seed(&[seed; 96]))],
        Timestamp::ZERO,
    )
    .unwrap();
    Node {
        id,
        key,
        engine,
        addr: addr.parse().unwrap(),
    }
}

/// The shims of the two directions (A to B, B to A).
type Shims<'a> = (&'a mut FaultShim<Vec<u8>>, &'a mut FaultShim<Vec<u8>>);

/// Move datagrams between the two (through a shim each way if given) for `steps` ms.
fn run(
    a: &mut Node,
    b: &mut Node,
    mut shim: Option<Shims<'_>>,
    start: u64,
    steps: u64,
) -> (Vec<UdpEvent>, Vec<UdpEvent>) {
    let (mut ea, mut eb) = (Vec::new(), Vec::new());
    for ms in start..start + steps {
        let now = Timestamp::from_millis(ms);
        for fwd in [true, false] {
            let (src, dst) = if fwd {
                (&mut *a, &mut *b)
            } else {
                (&mut *b, &mut *a)
            };
            while let Some((_, dgram)) = src.engine.poll_transmit() {
                match shim.as_mut() {
                    Some((ab, ba)) => {
                        if fwd {
                            ab.push(now, dgram.to_vec())
                        } else {
                            ba.push(now, dgram.to_vec())
                        }
                    }
                    None => {
                        dst.engine.handle_datagram(src.addr, &dgram, now);
                    }
                }
            }
        }
        if let Some((ab, ba)) = shim.as_mut() {
            while let Some(d) = ab.pop_due(now) {
                b.engine.handle_datagram(a.addr, &d, now);
            }
            while let Some(d) = ba.pop_due(now) {
                a.engine.handle_datagram(b.addr, &d, now);
            }
        }
        a.engine.handle_timeout(now);
        b.engine.handle_timeout(now);
        while let Some(e) = a.engine.poll_event() {
            ea.push(e);
        }
        while let Some(e) = b.engine.poll_event() {
            eb.push(e);
        }
    }
    (ea, eb)
}

/// A fresh node 1 at A (a restarted A, or one with another session) that has sent B a HELLO.
fn dialling(b: &Node, at: Timestamp) -> Node {
    let mut a = node(1, A, UdpConfig::default());
    a.engine
        .connect(b.id.node_id(), b.key.public().clone(), b.addr, at)
        .unwrap();
    a
}

fn connect(a: &mut Node, b: &mut Node) {
    let (peer, key) = (b.id.node_id(), b.key.public().clone());
    a.engine
        .connect(peer, key, b.addr, Timestamp::ZERO)
        .unwrap();
}

#[test]
fn handshake_then_cells_both_ways_with_identities() {
    let (mut a, mut b) = (
        node(1, A, UdpConfig::default()),
        node(2, B, UdpConfig::default()),
    );
    connect(&mut a, &mut b);
    let (ea, eb) = run(&mut a, &mut b, None, 0, 5);
    assert_eq!(
        ea,
        vec![UdpEvent::Connected {
            peer: b.id.node_id(),
            addr: b.addr
        }]
    );
    assert_eq!(
        eb,
        vec![UdpEvent::Connected {
            peer: a.id.node_id(),
            addr: a.addr
        }],
        "B learns who dialled"
    );
    for i in 0..20u8 {
        a.engine
            .send_cell(b.addr, &[i; 1152], Timestamp::from_millis(10))
            .unwrap();
        b.engine
            .send_cell(a.addr, &[!i; 1152], Timestamp::from_millis(10))
            .unwrap();
    }
    let (ea, eb) = run(&mut a, &mut b, None, 10, 2);
    assert_eq!(eb.len(), 20);
    assert_eq!(
        eb[3],
        UdpEvent::Cell {
            peer: a.id.node_id(),
            data: Bytes::from(vec![3; 1152])
        }
    );
    assert_eq!(
        ea[3],
        UdpEvent::Cell {
            peer: b.id.node_id(),
            data: Bytes::from(vec![!3; 1152])
        }
    );
    assert_eq!(a.engine.stats().cells_out, 20);
    assert_eq!(b.engine.stats().cells_in, 20);
    assert_eq!(
        b.engine.stats().cookies_sent,
        0,
        "no load: no cookie round trip"
    );
}

#[test]
fn under_load_the_responder_asks_for_a_cookie_first() {
    let strict = UdpConfig {
        cookie_threshold: 0,
        ..UdpConfig::default()
    };
    let (mut a, mut b) = (node(1, A, UdpConfig::default()), node(2, B, strict));
    connect(&mut a, &mut b);
    let (ea, eb) = run(&mut a, &mut b, None, 0, 5);
    assert_eq!(b.engine.stats().cookies_sent, 1);
    assert!(matches!(ea[..], [UdpEvent::Connected { .. }]));
    assert!(matches!(eb[..], [UdpEvent::Connected { .. }]));

    // A stranger spraying HELLOs without a cookie costs B one HMAC each and no handshake.
    let mut mallory = node(3, "127.0.0.9:1", UdpConfig::default());
    mallory
        .engine
        .connect(
            b.id.node_id(),
            b.key.public().clone(),
            b.addr,
            Timestamp::ZERO,
        )
        .unwrap();
    let (_, hello) = mallory.engine.poll_transmit().unwrap();
    for i in 0..100 {
        b.engine
            .handle_datagram(mallory.addr, &hello, Timestamp::from_millis(10 + i));
    }
    assert_eq!(b.engine.stats().cookies_sent, 101);
    assert_eq!(b.engine.stats().handshakes_ok, 1);
}

/// A node at `addr` (seeded `seed`) that dials `b`; it and its first HELLO.
fn dialler(seed: u8, addr: SocketAddr, b: &Node, now: Timestamp) -> (Node, Vec<u8>) {
    let mut m = node(seed, &addr.to_string(), UdpConfig::default());
    m.engine
        .connect(b.id.node_id(), b.key.public().clone(), b.addr, now)
        .unwrap();
    let (_, hello) = m.engine.poll_transmit().unwrap();
    (m, hello.to_vec())
}

#[test]
fn one_source_cannot_flood_handshakes() {
    let config = UdpConfig {
        hello_per_source: Quota::per_second(3).unwrap(),
        ..UdpConfig::default()
    };
    let mut b = node(2, B, config);
    for i in 0..20u8 {
        // Twenty different initiators behind one /24.
        let addr: SocketAddr = format!("10.0.0.{}:5000", i + 1).parse().unwrap();
        let (_, hello) = dialler(30 + i, addr, &b, Timestamp::ZERO);
        b.engine
            .handle_datagram(addr, &hello, Timestamp::from_millis(1));
    }
    let s = b.engine.stats();
    // The prefix's burst of 3 is answered (a WELCOME each); the other 17 never reach the
    // decapsulation: they are asked to prove their address (a COOKIE, 17 bytes for 1 282).
    assert_eq!(s.cookies_sent, 17, "{s:?}");
    let mut welcomes = 0;
    let mut cookies = Vec::new();
    while let Some((to, d)) = b.engine.poll_transmit() {
        welcomes += usize::from(d[0] == 0x03);
        if d[0] == 0x02 {
            cookies.push((to, d.to_vec()));
        }
    }
    assert_eq!(welcomes, 3);
    // Those that come back with their cookie have the prefix's budget for proven sources:
    // 3 more handshakes, the other 14 dropped.
    for (i, (to, cookie)) in cookies.iter().enumerate() {
        let (mut m, _) = dialler(60 + i as u8, *to, &b, Timestamp::ZERO);
        m.engine
            .handle_datagram(b.addr, cookie, Timestamp::from_millis(2));
        let (_, hello) = m.engine.poll_transmit().unwrap();
        b.engine
            .handle_datagram(*to, &hello, Timestamp::from_millis(2));
    }
    let s = b.engine.stats();
    assert_eq!(s.rate_limited, 14, "{s:?}");
    let mut welcomes = 0;
    while let Some((_, d)) = b.engine.poll_transmit() {
        welcomes += usize::from(d[0] == 0x03);
    }
    assert_eq!(welcomes, 3);
}

/// Spoofed HELLOs without cookies in a victim's prefix, under the load threshold, use up
/// that prefix's budget for unproven sources; the victim is asked for a cookie and, with
/// it, gets its handshake.
#[test]
fn spoofed_hellos_in_a_prefix_cannot_lock_its_initiators_out() {
    let mut b = node(2, B, UdpConfig::default());
    for i in 0..30u8 {
        let spoofed: SocketAddr = format!("10.9.9.{}:5000", i + 1).parse().unwrap();
        let (_, hello) = dialler(100 + i, spoofed, &b, Timestamp::ZERO);
        b.engine
            .handle_datagram(spoofed, &hello, Timestamp::from_millis(1));
    }
    while b.engine.poll_transmit().is_some() {}
    let victim: SocketAddr = "10.9.9.200:5000".parse().unwrap();
    let (mut v, hello) = dialler(200, victim, &b, Timestamp::from_millis(2));
    b.engine
        .handle_datagram(victim, &hello, Timestamp::from_millis(3));
    let mut connected = false;
    for _ in 0..4 {
        while let Some((_, d)) = v.engine.poll_transmit() {
            b.engine
                .handle_datagram(victim, &d, Timestamp::from_millis(3));
        }
        while let Some((_, d)) = b.engine.poll_transmit() {
            v.engine
                .handle_datagram(b.addr, &d, Timestamp::from_millis(3));
        }
        while let Some(e) = v.engine.poll_event() {
            connected |= matches!(e, UdpEvent::Connected { .. });
        }
    }
    assert!(connected, "{:?}", b.engine.stats());
}

#[test]
fn garbage_and_replays_are_dropped_counted_and_harmless() {
    let (mut a, mut b) = (
        node(1, A, UdpConfig::default()),
        node(2, B, UdpConfig::default()),
    );
    connect(&mut a, &mut b);
    run(&mut a, &mut b, None, 0, 5);
    a.engine
        .send_cell(b.addr, b"live", Timestamp::from_millis(6))
        .unwrap();
    let (_, data) = a.engine.poll_transmit().unwrap();

    // Random bytes of every length, truncated handshakes, a replayed DATA, a replayed HELLO.
    let mut x = 0x1234_5678u32;
    for len in 0..1500 {
        let junk: Vec<u8> = (0..len)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                x as u8
            })
            .collect();
        b.engine
            .handle_datagram(a.addr, &junk, Timestamp::from_millis(7));
        b.engine.handle_datagram(
            "127.0.0.99:1".parse().unwrap(),
            &junk,
            Timestamp::from_millis(7),
        );
    }
    b.engine
        .handle_datagram(a.addr, &[0x01; 100], Timestamp::from_millis(7));
    b.engine
        .handle_datagram(a.addr, &data, Timestamp::from_millis(7));
    b.engine
        .handle_datagram(a.addr, &data, Timestamp::from_millis(7));
    let mut cells = Vec::new();
    while let Some(e) = b.engine.poll_event() {
        cells.push(e);
    }
    assert_eq!(
        cells,
        vec![UdpEvent::Cell {
            peer: a.id.node_id(),
            data: Bytes::from_static(b"live")
        }],
        "exactly one delivery"
    );
    let s = b.engine.stats();
    assert!(s.dropped_malformed > 0 && s.dropped_auth > 0, "{s:?}");

    // The live link still works both ways.
    a.engine
        .send_cell(b.addr, b"after", Timestamp::from_millis(8))
        .unwrap();
    b.engine
        .send_cell(a.addr, b"reply", Timestamp::from_millis(8))
        .unwrap();
    let (ea, eb) = run(&mut a, &mut b, None, 8, 2);
    assert_eq!(
        eb,
        vec![UdpEvent::Cell {
            peer: a.id.node_id(),
            data: Bytes::from_static(b"after")
        }]
    );
    assert_eq!(
        ea,
        vec![UdpEvent::Cell {
            peer: b.id.node_id(),
            data: Bytes::from_static(b"reply")
        }]
    );
}

#[test]
fn ten_percent_loss_and_reordering_do_not_break_the_link() {
    let (mut a, mut b) = (
        node(1, A, UdpConfig::default()),
        node(2, B, UdpConfig::default()),
    );
    let faults = FaultConfig {
        loss: 0.10,
        reorder: 0.2,
        reorder_window: Duration::from_millis(5),
        delay: Duration::from_millis(2),
        ..FaultConfig::default()
    };
    let mut ab = FaultShim::new(FaultConfig {
        seed: 7,
        ..faults.clone()
    });
    let mut ba = FaultShim::new(FaultConfig { seed: 8, ..faults });
    connect(&mut a, &mut b);
    let (ea, _) = run(&mut a, &mut b, Some((&mut ab, &mut ba)), 0, 5000);
    assert!(
        ea.iter().any(|e| matches!(e, UdpEvent::Connected { .. })),
        "handshake survives loss (HELLO resent)"
    );
    for i in 0..1000u32 {
        a.engine
            .send_cell(b.addr, &i.to_be_bytes(), Timestamp::from_millis(5000))
            .unwrap();
    }
    let (_, eb) = run(&mut a, &mut b, Some((&mut ab, &mut ba)), 5000, 50);
    let got: Vec<u32> = eb
        .iter()
        .filter_map(|e| match e {
            UdpEvent::Cell { data, .. } => Some(u32::from_be_bytes(data[..4].try_into().unwrap())),
            _ => None,
        })
        .collect();
    assert!(
        got.len() > 850 && got.len() < 950,
        "about 90% arrive: {}",
        got.len()
    );
    assert!(got.windows(2).any(|w| w[1] < w[0]), "reordered");
    assert_eq!(
        b.engine.stats().dropped_auth,
        0,
        "reordering within the window is not a replay"
    );
}

#[test]
fn a_replayed_hello_cannot_tear_down_a_live_link_but_a_restarted_peer_reconnects() {
    let (mut a, mut b) = (
        node(1, A, UdpConfig::default()),
        node(2, B, UdpConfig::default()),
    );
    connect(&mut a, &mut b);
    // Capture A's HELLO on its way.
    let (_, hello) = a.engine.poll_transmit().unwrap();
    b.engine.handle_datagram(a.addr, &hello, Timestamp::ZERO);
    run(&mut a, &mut b, None, 0, 3);
    // Mallory replays it from A's address (spoofed), even after B's replay cache forgot it
    // (a fresh HELLO from another initiator identity stands in for an evicted one).
    let mut stale = dialling(&b, Timestamp::ZERO);
    let (_, replacement) = stale.engine.poll_transmit().unwrap();
    b.engine
        .handle_datagram(a.addr, &replacement, Timestamp::from_millis(5));
    while b.engine.poll_transmit().is_some() {}
    // The live link is untouched.
    a.engine
        .send_cell(b.addr, b"still here", Timestamp::from_millis(6))
        .unwrap();
    let (_, eb) = run(&mut a, &mut b, None, 6, 2);
    assert_eq!(
        eb,
        vec![UdpEvent::Cell {
            peer: a.id.node_id(),
            data: Bytes::from_static(b"still here")
        }]
    );

    // A genuinely restarted A (new session from the same address) takes over once its first
    // DATA authenticates.
    let mut restarted = dialling(&b, Timestamp::from_millis(10));
    let (ea, _) = run(&mut restarted, &mut b, None, 10, 5);
    assert!(matches!(ea[..], [UdpEvent::Connected { .. }]), "{ea:?}");
    restarted
        .engine
        .send_cell(b.addr, b"new me", Timestamp::from_millis(20))
        .unwrap();
    let (_, eb) = run(&mut restarted, &mut b, None, 20, 2);
    assert_eq!(
        eb,
        vec![UdpEvent::Cell {
            peer: a.id.node_id(),
            data: Bytes::from_static(b"new me")
        }]
    );
}

/// A restarted peer's first DATA is tried under the live session first. When its epoch byte
/// happens to name an epoch that session holds (about a quarter of new sessions), that try
/// fails authentication, which zeroes the payload; the pending session must still open the
/// datagram as it arrived. Forty restarts make missing that case unlikely (about 1 in 10^5).
#[test]
fn a_restarted_peers_first_data_opens_whatever_the_live_session_made_of_it() {
    let mut b = node(2, B, UdpConfig::default());
    let mut a = node(1, A, UdpConfig::default());
    connect(&mut a, &mut b);
    for round in 0..40u64 {
        let t = 100 * round + 10;
        let mut restarted = dialling(&b, Timestamp::from_millis(t));
        let (ea, _) = run(&mut restarted, &mut b, None, t, 5);
        assert!(matches!(ea[..], [UdpEvent::Connected { .. }]), "{ea:?}");
        let msg = round.to_be_bytes();
        restarted
            .engine
            .send_cell(b.addr, &msg, Timestamp::from_millis(t + 10))
            .unwrap();
        let (_, eb) = run(&mut restarted, &mut b, None, t + 10, 2);
        assert!(
            eb.contains(&UdpEvent::Cell {
                peer: a.id.node_id(),
                data: Bytes::copy_from_slice(&msg)
            }),
            "restart {round}: {eb:?}"
        );
    }
}

#[test]
fn forged_cookies_cannot_turn_a_dialler_into_an_amplifier() {
    let mut a = node(1, A, UdpConfig::default());
    let b = node(2, B, UdpConfig::default());
    a.engine
        .connect(
            b.id.node_id(),
            b.key.public().clone(),
            b.addr,
            Timestamp::ZERO,
        )
        .unwrap();
    while a.engine.poll_transmit().is_some() {}
    // A thousand COOKIEs "from B" (spoofed): at most two HELLOs answer them.
    let mut cookie = vec![0x02u8];
    cookie.extend_from_slice(&[7u8; 16]);
    for i in 0..1000 {
        a.engine
            .handle_datagram(b.addr, &cookie, Timestamp::from_millis(i % 10));
    }
    let mut hellos = 0;
    while a.engine.poll_transmit().is_some() {
        hellos += 1;
    }
    assert_eq!(hellos, 2);
}

#[test]
fn control_messages_arrive_once_and_in_order_despite_loss() {
    let (mut a, mut b) = (
        node(1, A, UdpConfig::default()),
        node(2, B, UdpConfig::default()),
    );
    let faults = FaultConfig {
        loss: 0.20,
        reorder: 0.2,
        reorder_window: Duration::from_millis(5),
        delay: Duration::from_millis(2),
        duplicate: 0.05,
        ..FaultConfig::default()
    };
    let mut ab = FaultShim::new(FaultConfig {
        seed: 11,
        ..faults.clone()
    });
    let mut ba = FaultShim::new(FaultConfig { seed: 12, ..faults });
    connect(&mut a, &mut b);
    run(&mut a, &mut b, Some((&mut ab, &mut ba)), 0, 5000);
    let mut delivered = Vec::new();
    let mut sent = 0u32;
    for ms in 5000..20_000u64 {
        // A steady trickle, within the in-flight cap.
        if sent < 200
            && ms.is_multiple_of(5)
            && a.engine
                .send_control(b.addr, &sent.to_be_bytes(), Timestamp::from_millis(ms))
                .is_ok()
        {
            sent += 1;
        }
        let (_, eb) = run(&mut a, &mut b, Some((&mut ab, &mut ba)), ms, 1);
        for e in eb {
            if let UdpEvent::Control { data, .. } = e {
                delivered.push(u32::from_be_bytes(data[..4].try_into().unwrap()));
            }
        }
        if delivered.len() == 200 {
            break;
        }
    }
    assert_eq!(sent, 200);
    assert_eq!(
        delivered,
        (0..200).collect::<Vec<_>>(),
        "every message once, in order"
    );
}

/// Take A's next HELLO to B and B's WELCOME for it, at `ms`.
fn hello_and_welcome(a: &mut Node, b: &mut Node, ms: u64) -> (Vec<u8>, Vec<u8>) {
    let now = Timestamp::from_millis(ms);
    a.engine.handle_timeout(now);
    let (_, hello) = a.engine.poll_transmit().unwrap();
    assert!(a.engine.poll_transmit().is_none());
    b.engine.handle_datagram(a.addr, &hello, now);
    let (_, welcome) = b.engine.poll_transmit().unwrap();
    (hello.to_vec(), welcome.to_vec())
}

#[test]
fn a_late_welcome_for_an_earlier_hello_still_completes_the_dial() {
    // A's first WELCOME is delayed past the resend timeout: A follows with a fresh HELLO (not
    // a copy B would refuse as a replay) and B answers both. Whichever WELCOME reaches A
    // first completes the dial, and B's link comes up under the session A finished.
    for first in [0, 1] {
        let (mut a, mut b) = (
            node(1, A, UdpConfig::default()),
            node(2, B, UdpConfig::default()),
        );
        connect(&mut a, &mut b);
        let (hello1, welcome1) = hello_and_welcome(&mut a, &mut b, 0);
        let (hello2, welcome2) = hello_and_welcome(&mut a, &mut b, 1000);
        assert_ne!(hello1, hello2, "a fresh handshake");
        let welcomes = [welcome1, welcome2];
        let now = Timestamp::from_millis(1001);
        a.engine.handle_datagram(b.addr, &welcomes[first], now);
        a.engine.handle_datagram(b.addr, &welcomes[1 - first], now);
        let mut ea = Vec::new();
        while let Some(e) = a.engine.poll_event() {
            ea.push(e);
        }
        assert_eq!(
            ea,
            vec![UdpEvent::Connected {
                peer: b.id.node_id(),
                addr: b.addr
            }],
            "WELCOME {first} first"
        );
        assert_eq!(a.engine.stats().dropped_malformed, 1, "the other: no dial");
        let (_, eb) = run(&mut a, &mut b, None, 1001, 2);
        assert_eq!(
            eb,
            vec![UdpEvent::Connected {
                peer: a.id.node_id(),
                addr: a.addr
            }]
        );
        a.engine
            .send_cell(b.addr, b"ping", Timestamp::from_millis(1003))
            .unwrap();
        b.engine
            .send_cell(a.addr, b"pong", Timestamp::from_millis(1003))
            .unwrap();
        let (ea, eb) = run(&mut a, &mut b, None, 1003, 2);
        assert_eq!(
            (ea, eb),
            (
                vec![UdpEvent::Cell {
                    peer: b.id.node_id(),
                    data: Bytes::from_static(b"pong")
                }],
                vec![UdpEvent::Cell {
                    peer: a.id.node_id(),
                    data: Bytes::from_static(b"ping")
                }]
            )
        );
        let s = b.engine.stats();
        assert_eq!(
            (s.handshakes_ok, s.handshakes_failed, s.dropped_auth),
            (1, 0, 0)
        );
    }
}

#[test]
fn a_forged_welcome_ends_the_attempt_not_the_dial() {
    let (mut a, mut b) = (
        node(1, A, UdpConfig::default()),
        node(2, B, UdpConfig::default()),
    );
    connect(&mut a, &mut b);
    while a.engine.poll_transmit().is_some() {} // the first HELLO is lost
    // A WELCOME "from B" that completes no HELLO (well-formed: version 1, canonical Y).
    let mut forged = vec![0x03u8, 1];
    forged.extend_from_slice(&[7u8; 64]);
    a.engine
        .handle_datagram(b.addr, &forged, Timestamp::from_millis(10));
    assert_eq!(a.engine.poll_event(), None, "the dial goes on");
    assert_eq!(a.engine.stats().handshakes_failed, 1);
    // The next HELLO (fresh, a second later) completes it.
    let (ea, eb) = run(&mut a, &mut b, None, 11, 1000);
    assert_eq!(
        ea,
        vec![UdpEvent::Connected {
            peer: b.id.node_id(),
            addr: b.addr
        }]
    );
    assert_eq!(
        eb,
        vec![UdpEvent::Connected {
            peer: a.id.node_id(),
            addr: a.addr
        }]
    );
}

#[test]
fn spoofed_hellos_cannot_take_over_a_half_open_link() {
    // B answered A's HELLO; before A's confirmation arrives, Mallory sends HELLOs of her own
    // from A's address. Their sessions wait beside A's and never authenticate a DATA: the
    // link comes up with A's identity, under A's session.
    let (mut a, mut b) = (
        node(1, A, UdpConfig::default()),
        node(2, B, UdpConfig::default()),
    );
    connect(&mut a, &mut b);
    let (_, welcome) = hello_and_welcome(&mut a, &mut b, 0);
    for seed in 20..23 {
        let mut mallory = node(seed, "127.0.0.9:4000", UdpConfig::default());
        connect(&mut mallory, &mut b);
        let (_, hello) = mallory.engine.poll_transmit().unwrap();
        b.engine
            .handle_datagram(a.addr, &hello, Timestamp::from_millis(1));
        assert!(b.engine.poll_transmit().is_some(), "answered");
    }
    a.engine
        .handle_datagram(b.addr, &welcome, Timestamp::from_millis(2));
    let (_, eb) = run(&mut a, &mut b, None, 2, 2);
    assert_eq!(
        eb,
        vec![UdpEvent::Connected {
            peer: a.id.node_id(),
            addr: a.addr
        }]
    );
    b.engine
        .send_cell(a.addr, b"to A", Timestamp::from_millis(4))
        .unwrap();
    let (ea, _) = run(&mut a, &mut b, None, 4, 2);
    assert!(
        ea.contains(&UdpEvent::Cell {
            peer: b.id.node_id(),
            data: Bytes::from_static(b"to A")
        }),
        "{ea:?}"
    );
    assert_eq!(b.engine.links()[0].1, a.id.node_id());
}

#[test]
fn a_restarted_peer_gets_a_fresh_control_channel() {
    // Control messages are numbered per link; a restarted peer numbers from zero again, so
    // the session that takes over must come with a fresh control channel on both sides.
    let (mut a, mut b) = (
        node(1, A, UdpConfig::default()),
        node(2, B, UdpConfig::default()),
    );
    connect(&mut a, &mut b);
    run(&mut a, &mut b, None, 0, 5);
    a.engine
        .send_control(b.addr, b"before", Timestamp::from_millis(5))
        .unwrap();
    b.engine
        .send_control(a.addr, b"before", Timestamp::from_millis(5))
        .unwrap();
    let (ea, eb) = run(&mut a, &mut b, None, 5, 5);
    assert_eq!((ea.len(), eb.len()), (1, 1));

    let mut restarted = dialling(&b, Timestamp::from_millis(10));
    run(&mut restarted, &mut b, None, 10, 5);
    restarted
        .engine
        .send_control(b.addr, b"after", Timestamp::from_millis(20))
        .unwrap();
    b.engine
        .send_control(a.addr, b"back", Timestamp::from_millis(20))
        .unwrap();
    let (ea, eb) = run(&mut restarted, &mut b, None, 20, 5);
    assert_eq!(
        eb,
        vec![UdpEvent::Control {
            peer: a.id.node_id(),
            data: b"after".to_vec()
        }]
    );
    assert_eq!(
        ea,
        vec![UdpEvent::Control {
            peer: b.id.node_id(),
            data: b"back".to_vec()
        }]
    );
}

/// A client-only engine dials as a fresh identity per link (each relay learns an id that is
/// neither the client's nor the one another link showed) and answers no HELLO at all.
#[test]
fn client_engine_dials_anonymously_and_accepts_nothing() {
    let mut relays = [
        node(2, B, UdpConfig::default()),
        node(3, "127.0.0.4:4000", UdpConfig::default()),
    ];
    let client_id = Arc::new(IdentityKey::from_seed(&[1; 32]));
    let mut client = Node {
        id: client_id.clone(),
        key: HybridSecretKey::from_seed(&[1; 96]),
        engine: UdpEngine::client(UdpConfig::default(), Timestamp::ZERO).unwrap(),
        addr: A.parse().unwrap(),
    };
    let mut seen = Vec::new();
    for relay in &mut relays {
        connect(&mut client, relay);
        let (ec, er) = run(&mut client, relay, None, 0, 5);
        assert_eq!(
            ec,
            vec![UdpEvent::Connected {
                peer: relay.id.node_id(),
                addr: relay.addr
            }],
            "the client authenticates the relay"
        );
        let [UdpEvent::Connected { peer, addr }] = er.as_slice() else {
            panic!("relay events {er:?}");
        };
        assert_eq!(*addr, client.addr);
        assert_ne!(*peer, client_id.node_id(), "the client's own id was shown");
        seen.push(*peer);
    }
    assert_ne!(seen[0], seen[1], "two links showed one identity");

    // A relay dials the client: its HELLOs are dropped unread, no link comes up.
    let relay = &mut relays[0];
    let (peer, key) = (client_id.node_id(), client.key.public().clone());
    relay
        .engine
        .connect(peer, key, client.addr, Timestamp::from_millis(10))
        .unwrap();
    let (ec, er) = run(&mut client, relay, None, 10, 50);
    assert!(
        !ec.iter()
            .chain(&er)
            .any(|e| matches!(e, UdpEvent::Connected { .. })),
        "{ec:?} {er:?}"
    );
    assert!(client.engine.stats().hellos_refused >= 1);
}

/// A client that redials its relay from the same address shows a new identity: the relay
/// reports the link replaced (old id gone, new id up) and its cells reach the client again.
#[test]
fn a_client_redialling_from_the_same_address_replaces_its_link() {
    let mut relay = node(2, B, UdpConfig::default());
    let mut client = Node {
        id: Arc::new(IdentityKey::from_seed(&[1; 32])),
        key: HybridSecretKey::from_seed(&[1; 96]),
        engine: UdpEngine::client(UdpConfig::default(), Timestamp::ZERO).unwrap(),
        addr: A.parse().unwrap(),
    };
    connect(&mut client, &mut relay);
    let (_, er) = run(&mut client, &mut relay, None, 0, 5);
    let [UdpEvent::Connected { peer: first, .. }] = er[..] else {
        panic!("{er:?}")
    };
    // The client's overlay gave the link up and dials again.
    let (peer, key) = (relay.id.node_id(), relay.key.public().clone());
    client
        .engine
        .connect(peer, key, relay.addr, Timestamp::from_millis(100))
        .unwrap();
    let (ec, er) = run(&mut client, &mut relay, None, 100, 5);
    assert!(
        ec.iter().any(|e| matches!(e, UdpEvent::Connected { .. })),
        "{ec:?}"
    );
    let second = er
        .iter()
        .find_map(|e| match e {
            UdpEvent::Replaced { old, peer, addr } => {
                assert_eq!((*old, *addr), (first, client.addr));
                Some(*peer)
            }
            _ => None,
        })
        .unwrap_or_else(|| panic!("no Replaced in {er:?}"));
    assert_ne!(second, first);
    relay
        .engine
        .send_cell(client.addr, &[7; 1152], Timestamp::from_millis(200))
        .unwrap();
    let (ec, _) = run(&mut client, &mut relay, None, 200, 2);
    assert!(
        ec.iter().any(|e| matches!(e, UdpEvent::Cell { .. })),
        "the relay's cell did not reach the client: {ec:?}"
    );
}

/// After the handshake every datagram of a link has one size, whatever it carries: cells,
/// a control message longer than a cell (as a CREATE), short ones (as a PING), their
/// acknowledgements, the session's confirmation and the close.
#[test]
fn every_datagram_after_the_handshake_has_one_size() {
    let (mut a, mut b) = (
        node(1, A, UdpConfig::default()),
        node(2, B, UdpConfig::default()),
    );
    connect(&mut a, &mut b);
    let mut sizes: Vec<(u8, usize)> = Vec::new();
    let mut received: Vec<UdpEvent> = Vec::new();
    let mut pump = |a: &mut Node, b: &mut Node, ms: u64| {
        let now = Timestamp::from_millis(ms);
        for _ in 0..8 {
            while let Some((_, d)) = a.engine.poll_transmit() {
                sizes.push((d[0], d.len()));
                b.engine.handle_datagram(a.addr, &d, now);
            }
            while let Some((_, d)) = b.engine.poll_transmit() {
                sizes.push((d[0], d.len()));
                a.engine.handle_datagram(b.addr, &d, now);
            }
        }
        received.extend(std::iter::from_fn(|| b.engine.poll_event()));
    };
    pump(&mut a, &mut b, 0);
    let create = vec![0xc5; 1229];
    a.engine
        .send_control(b.addr, &create, Timestamp::from_millis(1))
        .unwrap();
    a.engine
        .send_control(b.addr, b"ping", Timestamp::from_millis(1))
        .unwrap();
    a.engine
        .send_cell(b.addr, &[7; 1156], Timestamp::from_millis(1))
        .unwrap();
    a.engine
        .send_cell(b.addr, b"short cell", Timestamp::from_millis(1))
        .unwrap();
    pump(&mut a, &mut b, 1);
    assert!(
        a.engine
            .close(b.id.node_id(), b.addr, Timestamp::from_millis(2))
    );
    pump(&mut a, &mut b, 2);

    let data: std::collections::HashSet<usize> = sizes
        .iter()
        .filter(|(t, _)| *t == 0x04)
        .map(|(_, len)| *len)
        .collect();
    assert_eq!(data.len(), 1, "DATA sizes {data:?}");
    assert!(data.contains(&1185), "{data:?}");
    let controls: Vec<&[u8]> = received
        .iter()
        .filter_map(|e| match e {
            UdpEvent::Control { data, .. } => Some(&data[..]),
            _ => None,
        })
        .collect();
    assert_eq!(controls, vec![&create[..], &b"ping"[..]]);
    let cells: Vec<usize> = received
        .iter()
        .filter_map(|e| match e {
            UdpEvent::Cell { data, .. } => Some(data.len()),
            _ => None,
        })
        .collect();
    assert_eq!(cells, vec![1156, 10], "padding is stripped");
    assert!(
        received
            .iter()
            .any(|e| matches!(e, UdpEvent::Closed { .. }))
    );
}

/// How many links `events` report up.
fn connected(events: &[UdpEvent]) -> usize {
    events
        .iter()
        .filter(|e| matches!(e, UdpEvent::Connected { .. }))
        .count()
}

/// Cells from each end to the other arrive: the two ends share one session.
fn cells_cross(a: &mut Node, b: &mut Node, at: u64) {
    a.engine
        .send_cell(b.addr, &[1; 1152], Timestamp::from_millis(at))
        .unwrap();
    b.engine
        .send_cell(a.addr, &[2; 1152], Timestamp::from_millis(at))
        .unwrap();
    let (ea, eb) = run(a, b, None, at, 2);
    let cells = |events: &[UdpEvent]| {
        events
            .iter()
            .filter(|e| matches!(e, UdpEvent::Cell { .. }))
            .count()
    };
    assert_eq!((cells(&ea), cells(&eb)), (1, 1), "{ea:?} {eb:?}");
    assert_eq!(
        a.engine.stats().dropped_auth + b.engine.stats().dropped_auth,
        0
    );
}

/// Two relays that dial each other at the same moment (as every pair of authorities does
/// when they start together under a simulator) end up with one link on one session, each
/// reported once, whichever id is the smaller. Before, each end kept its own handshake and
/// every DATA failed authentication at the other.
#[test]
fn crossed_dials_settle_on_one_session() {
    for (sa, sb) in [(1, 2), (2, 1)] {
        let (mut a, mut b) = (
            node(sa, A, UdpConfig::default()),
            node(sb, B, UdpConfig::default()),
        );
        connect(&mut a, &mut b);
        connect(&mut b, &mut a);
        let (ea, eb) = run(&mut a, &mut b, None, 0, 50);
        assert_eq!((connected(&ea), connected(&eb)), (1, 1), "{ea:?} {eb:?}");
        assert_eq!(
            a.engine.stats().crossed_dials + b.engine.stats().crossed_dials,
            2
        );
        cells_cross(&mut a, &mut b, 100);
        // Nothing left over: no dial resends its HELLO later and replaces the session.
        let (ea, eb) = run(&mut a, &mut b, None, 200, 10_000);
        assert!(ea.is_empty() && eb.is_empty(), "{ea:?} {eb:?}");
        cells_cross(&mut a, &mut b, 10_300);
    }
}

/// A dial begun after the peer's HELLO arrived (the responder link not yet confirmed) is
/// served by that link once confirmed; the dial's own handshake never replaces it.
#[test]
fn a_dial_behind_an_answered_hello_is_served_by_its_link() {
    let (mut a, mut b) = (
        node(1, A, UdpConfig::default()),
        node(2, B, UdpConfig::default()),
    );
    connect(&mut a, &mut b);
    // A's HELLO reaches B, which answers; only then does B dial A.
    while let Some((_, d)) = a.engine.poll_transmit() {
        b.engine.handle_datagram(a.addr, &d, Timestamp::ZERO);
    }
    connect(&mut b, &mut a);
    let (ea, eb) = run(&mut a, &mut b, None, 0, 50);
    assert_eq!((connected(&ea), connected(&eb)), (1, 1), "{ea:?} {eb:?}");
    cells_cross(&mut a, &mut b, 100);
    let (ea, eb) = run(&mut a, &mut b, None, 200, 10_000);
    assert!(
        ea.iter()
            .chain(&eb)
            .all(|e| !matches!(e, UdpEvent::Replaced { .. })),
        "{ea:?} {eb:?}"
    );
    cells_cross(&mut a, &mut b, 10_300);
}
