//! The UDP engine's link table never locks newcomers out: links that go idle, never get
//! confirmed or are closed leave it, and a full table makes room. Datagrams are moved by the
//! test, with whatever source address it says, so thousands of peers need no sockets.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use nyx_core::{NodeId, Timestamp};
use nyx_crypto::identity::IdentityKey;
use nyx_crypto::kem::{HybridPublicKey, HybridSecretKey};
use nyx_crypto::link::LinkKey;
use nyx_transport::udp::{UdpConfig, UdpEngine, UdpEvent};

const RELAY: &str = "192.0.2.1:9000";

struct Relay {
    id: NodeId,
    key: HybridPublicKey,
    engine: UdpEngine,
    addr: SocketAddr,
}

fn relay(seed: u8, addr: &str, config: UdpConfig) -> Relay {
    let identity = Arc::new(IdentityKey::from_seed(&[seed; 32]));
    let secret = HybridSecretKey::from_seed(&[seed; 96]);
    let key = secret.public().clone();
    let engine = UdpEngine::new(
        config,
        identity.clone(),
        vec![LinkKey::new(secret)],
        Timestamp::ZERO,
    )
    .unwrap();
    Relay {
        id: identity.node_id(),
        key,
        engine,
        addr: addr.parse().unwrap(),
    }
}

/// One peer per IPv4 /24, so the per-prefix HELLO limit never applies.
fn peer_addr(i: u32) -> SocketAddr {
    let [_, _, a, b] = i.to_be_bytes();
    SocketAddr::from((Ipv4Addr::new(10, a, b, 1), 4000))
}

/// Move datagrams between `dialer` (seen by the relay at `from`) and `relay` until neither
/// has anything to send; the dialer's events.
fn pump(
    dialer: &mut UdpEngine,
    from: SocketAddr,
    relay: &mut Relay,
    now: Timestamp,
) -> Vec<UdpEvent> {
    loop {
        let mut moved = false;
        while let Some((_, d)) = dialer.poll_transmit() {
            relay.engine.handle_datagram(from, &d, now);
            moved = true;
        }
        while let Some((to, d)) = relay.engine.poll_transmit() {
            if to == from {
                dialer.handle_datagram(relay.addr, &d, now);
                moved = true;
            }
        }
        if !moved {
            break;
        }
    }
    std::iter::from_fn(|| dialer.poll_event()).collect()
}

fn drain(engine: &mut UdpEngine) -> Vec<UdpEvent> {
    std::iter::from_fn(|| engine.poll_event()).collect()
}

/// 5 000 clients, each from its own address, handshake with a relay whose table holds 4 096
/// and then stay silent: every one of them gets a link (the quietest make room), and a
/// relay that dials in afterwards gets one too and carries cells both ways. Before the table
/// made room, the 4 097th HELLO and every later one was refused until a restart.
#[test]
fn five_thousand_idle_peers_do_not_lock_out_a_newcomer() {
    let mut r = relay(1, RELAY, UdpConfig::default());
    let mut client = UdpEngine::client(UdpConfig::default(), Timestamp::ZERO).unwrap();
    let mut now = Timestamp::ZERO;
    for i in 0..5000 {
        // 50 HELLOs a second: under the cookie threshold (the table's own crowding asks for
        // cookies from three quarters full on, which these peers answer).
        now = now.saturating_add(Duration::from_millis(20));
        client.connect(r.id, r.key.clone(), r.addr, now).unwrap();
        let events = pump(&mut client, peer_addr(i), &mut r, now);
        assert!(
            events
                .iter()
                .any(|e| matches!(e, UdpEvent::Connected { .. })),
            "peer {i} got no link: {events:?} {:?}",
            r.engine.stats()
        );
        r.engine.handle_timeout(now);
    }
    let stats = r.engine.stats();
    assert!(stats.links_evicted >= 5000 - 4096, "{stats:?}");
    assert!(stats.cookies_sent > 0, "a crowded table asks for cookies");
    assert!(r.engine.links().len() <= UdpConfig::default().max_peers);
    let evictions: Vec<UdpEvent> = drain(&mut r.engine);
    assert!(
        evictions
            .iter()
            .all(|e| matches!(e, UdpEvent::Connected { .. } | UdpEvent::Closed { .. })),
        "{evictions:?}"
    );

    // A relay dials in and moves cells both ways.
    let mut newcomer = relay(2, "198.51.100.7:9000", UdpConfig::default());
    now = now.saturating_add(Duration::from_millis(20));
    newcomer
        .engine
        .connect(r.id, r.key.clone(), r.addr, now)
        .unwrap();
    let from = newcomer.addr;
    let events = pump(&mut newcomer.engine, from, &mut r, now);
    assert!(
        matches!(events[..], [UdpEvent::Connected { peer, .. }] if peer == r.id),
        "{events:?}"
    );
    assert!(
        drain(&mut r.engine)
            .iter()
            .any(|e| matches!(e, UdpEvent::Connected { peer, .. } if *peer == newcomer.id))
    );
    newcomer.engine.send_cell(r.addr, b"in", now).unwrap();
    pump(&mut newcomer.engine, from, &mut r, now);
    let got = drain(&mut r.engine);
    assert_eq!(
        got,
        vec![UdpEvent::Cell {
            peer: newcomer.id,
            data: Bytes::from_static(b"in")
        }]
    );
    r.engine.send_cell(from, b"out", now).unwrap();
    let back = pump(&mut newcomer.engine, from, &mut r, now);
    assert_eq!(
        back,
        vec![UdpEvent::Cell {
            peer: r.id,
            data: Bytes::from_static(b"out")
        }]
    );
}

/// Handshake `dialer` (at `from`) with `r` at `now`.
fn link_up(dialer: &mut Relay, r: &mut Relay, now: Timestamp) {
    dialer
        .engine
        .connect(r.id, r.key.clone(), r.addr, now)
        .unwrap();
    let from = dialer.addr;
    assert_linked(&mut dialer.engine, from, r, now);
}

/// Finish a handshake under way between `dialer` (at `from`) and `r`: both report the link.
fn assert_linked(dialer: &mut UdpEngine, from: SocketAddr, r: &mut Relay, now: Timestamp) {
    let events = pump(dialer, from, r, now);
    assert!(
        matches!(events[..], [UdpEvent::Connected { .. }]),
        "{events:?}"
    );
    assert!(matches!(
        drain(&mut r.engine)[..],
        [UdpEvent::Connected { .. }]
    ));
}

/// A link quiet for `idle_timeout` is closed and reported at both ends; a HELLO that no
/// DATA confirms (a spoofed source) leaves the table within the handshake's time and is
/// never reported; a link used in between stays.
#[test]
fn idle_and_unconfirmed_links_leave_the_table() {
    let config = UdpConfig {
        idle_timeout: Duration::from_secs(60),
        ..UdpConfig::default()
    };
    let mut r = relay(1, RELAY, config.clone());
    let mut a = relay(2, "198.51.100.2:9000", config.clone());
    let mut b = relay(3, "198.51.100.3:9000", config);
    let t0 = Timestamp::from_millis(1000);
    link_up(&mut a, &mut r, t0);
    link_up(&mut b, &mut r, t0);

    // A HELLO whose WELCOME goes nowhere.
    let mut spoofer = UdpEngine::client(UdpConfig::default(), t0).unwrap();
    spoofer.connect(r.id, r.key.clone(), r.addr, t0).unwrap();
    let (_, hello) = spoofer.poll_transmit().unwrap();
    r.engine.handle_datagram(peer_addr(7), &hello, t0);
    while r.engine.poll_transmit().is_some() {}

    // b keeps talking; a says nothing.
    let mut closed = Vec::new();
    for s in 1..=70 {
        let now = t0.saturating_add(Duration::from_secs(s));
        if s % 10 == 0 {
            b.engine.send_cell(r.addr, b"alive", now).unwrap();
            let from = b.addr;
            pump(&mut b.engine, from, &mut r, now);
        }
        r.engine.handle_timeout(now);
        a.engine.handle_timeout(now);
        closed.extend(
            drain(&mut r.engine)
                .into_iter()
                .filter(|e| !matches!(e, UdpEvent::Cell { .. })),
        );
        if s == 6 {
            assert_eq!(r.engine.stats().links_unconfirmed_expired, 1);
            assert!(
                closed.is_empty(),
                "an unconfirmed link is never reported: {closed:?}"
            );
        }
    }
    assert_eq!(
        closed,
        vec![UdpEvent::Closed {
            peer: a.id,
            addr: a.addr
        }]
    );
    assert_eq!(r.engine.stats().links_idle_closed, 1);
    assert!(matches!(drain(&mut a.engine)[..], [UdpEvent::Closed { peer, .. }] if peer == r.id));
    assert_eq!(r.engine.links().len(), 1, "b's link stays");
    assert!(r.engine.send_cell(a.addr, b"late", t0).is_err());
}

/// Either end closes a link: the other is told inside the session, both report it, and a
/// new handshake makes a new link.
#[test]
fn a_closed_link_ends_at_both_ends_and_can_be_made_again() {
    let mut r = relay(1, RELAY, UdpConfig::default());
    let mut a = relay(2, "198.51.100.2:9000", UdpConfig::default());
    let now = Timestamp::from_millis(1000);
    link_up(&mut a, &mut r, now);
    assert!(
        !r.engine.close(NodeId::from_bytes([9; 32]), a.addr, now),
        "not that peer"
    );
    assert!(r.engine.close(a.id, a.addr, now));
    let from = a.addr;
    let events = pump(&mut a.engine, from, &mut r, now);
    assert_eq!(
        events,
        vec![UdpEvent::Closed {
            peer: r.id,
            addr: r.addr
        }]
    );
    assert_eq!(
        drain(&mut r.engine),
        vec![UdpEvent::Closed {
            peer: a.id,
            addr: a.addr
        }],
        "the closing end reports it too"
    );
    assert_eq!(r.engine.stats().links_closed, 1);
    assert_eq!(a.engine.stats().links_closed, 1);
    let later = now.saturating_add(Duration::from_secs(1));
    link_up(&mut a, &mut r, later);
    a.engine.send_cell(r.addr, b"again", later).unwrap();
    pump(&mut a.engine, from, &mut r, later);
    assert!(matches!(&drain(&mut r.engine)[..], [UdpEvent::Cell { .. }]));
}

/// A full table does not evict a handshake younger than `handshake_timeout` for another:
/// its WELCOME may still be on its way, and the dialler would be left with a link the
/// relay forgot. The newcomer is refused; the young handshake completes.
#[test]
fn a_young_handshake_is_not_evicted_for_a_newcomer() {
    let config = UdpConfig {
        max_peers: 1,
        ..UdpConfig::default()
    };
    let mut r = relay(1, RELAY, config);
    let mut a = relay(2, "198.51.100.2:9000", UdpConfig::default());
    let mut b = relay(3, "198.51.100.3:9000", UdpConfig::default());
    let now = Timestamp::from_millis(1000);
    a.engine.connect(r.id, r.key.clone(), r.addr, now).unwrap();
    let (_, hello_a) = a.engine.poll_transmit().unwrap();
    r.engine.handle_datagram(a.addr, &hello_a, now);
    let (_, welcome_a) = r.engine.poll_transmit().unwrap();
    // b's HELLO arrives while a's WELCOME travels.
    b.engine.connect(r.id, r.key.clone(), r.addr, now).unwrap();
    let (_, hello_b) = b.engine.poll_transmit().unwrap();
    r.engine.handle_datagram(b.addr, &hello_b, now);
    // The crowded table asks b for a cookie; b answers; still no WELCOME for b.
    let mut answers = Vec::new();
    for _ in 0..4 {
        while let Some((_, d)) = r.engine.poll_transmit() {
            answers.push(d[0]);
            b.engine.handle_datagram(r.addr, &d, now);
        }
        while let Some((_, d)) = b.engine.poll_transmit() {
            r.engine.handle_datagram(b.addr, &d, now);
        }
    }
    assert!(answers.contains(&0x02), "a COOKIE: {answers:?}");
    assert!(
        !answers.contains(&0x03),
        "no WELCOME for b: {answers:?} {:?}",
        r.engine.stats()
    );
    assert_eq!(r.engine.stats().links_evicted, 0);
    a.engine.handle_datagram(r.addr, &welcome_a, now);
    let from = a.addr;
    assert_linked(&mut a.engine, from, &mut r, now);
}
