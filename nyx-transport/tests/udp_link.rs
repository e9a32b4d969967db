//! Two UDP transports on real sockets (127.0.0.2 and 127.0.0.3): the driver tasks handshake
//! and carry cells both ways.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use nyx_core::Timestamp;
use nyx_crypto::identity::IdentityKey;
use nyx_crypto::kem::HybridSecretKey;
use nyx_crypto::link::LinkKey;
use nyx_transport::fault::{FaultConfig, FaultShim, FaultStats};
use nyx_transport::udp::{UdpCommand, UdpTransport};
use nyx_transport::udp::{UdpConfig, UdpEvent};
use tokio::sync::mpsc;

struct Running {
    node: nyx_core::NodeId,
    key: HybridSecretKey,
    addr: std::net::SocketAddr,
    commands: mpsc::Sender<UdpCommand>,
    events: mpsc::Receiver<UdpEvent>,
}

fn start(seed: u8, ip: &str) -> Running {
    start_with(seed, ip, |_| ())
}

/// Start a transport after `setup` (e.g. fault injection) ran on it.
fn start_with(seed: u8, ip: &str, setup: impl FnOnce(&mut UdpTransport)) -> Running {
    let id = Arc::new(IdentityKey::from_seed(&[seed; 32]));
    let key = HybridSecretKey::from_seed(&[seed; 96]);
    let link_keys = vec![LinkKey::new(HybridSecretKey::from_seed(&[seed; 96]))];
    let mut t = UdpTransport::bind(
        format!("{ip}:0").parse().unwrap(),
        id.clone(),
        link_keys,
        UdpConfig::default(),
    )
    .unwrap();
    setup(&mut t);
    let addr = t.local_addr().unwrap();
    let (ctx, crx) = mpsc::channel(1024);
    let (etx, erx) = mpsc::channel(1024);
    tokio::spawn(t.run(crx, etx));
    Running {
        node: id.node_id(),
        key,
        addr,
        commands: ctx,
        events: erx,
    }
}

/// Two transports on 127.0.0.2 and .3, the first dialled the second; each side's first
/// event must be `Connected` with the other's identity and address.
async fn connected_pair() -> (Running, Running) {
    let mut a = start(1, "127.0.0.2");
    let mut b = start(2, "127.0.0.3");
    a.commands
        .send(UdpCommand::Connect {
            peer: b.node,
            key: Box::new(b.key.public().clone()),
            addr: b.addr,
        })
        .await
        .unwrap();
    assert_eq!(
        next(&mut a.events).await,
        UdpEvent::Connected {
            peer: b.node,
            addr: b.addr
        }
    );
    assert_eq!(
        next(&mut b.events).await,
        UdpEvent::Connected {
            peer: a.node,
            addr: a.addr
        }
    );
    (a, b)
}

/// A 1152-byte cell to `addr` that starts with `i`.
fn numbered(i: u32, addr: std::net::SocketAddr) -> UdpCommand {
    let mut cell = vec![0u8; 1152];
    cell[..4].copy_from_slice(&i.to_be_bytes());
    UdpCommand::Cell {
        addr,
        cell: Bytes::from(cell),
    }
}

/// The number a [`numbered`] cell starts with.
fn number(data: &[u8]) -> u32 {
    u32::from_be_bytes(data[..4].try_into().unwrap())
}

async fn next(events: &mut mpsc::Receiver<UdpEvent>) -> UdpEvent {
    tokio::time::timeout(Duration::from_secs(5), events.recv())
        .await
        .unwrap()
        .unwrap()
}

#[tokio::test]
async fn handshake_and_cells_between_real_sockets() {
    let (mut a, mut b) = connected_pair().await;
    // In rounds of 20 each way (UDP is unreliable: a burst far beyond the socket buffers
    // would be dropped by the kernel, which is not what this test is about).
    let (mut at_b, mut at_a) = (Vec::new(), Vec::new());
    for round in 0..10u32 {
        for i in round * 20..round * 20 + 20 {
            let mut cell = vec![0u8; 1152];
            cell[..4].copy_from_slice(&i.to_be_bytes());
            a.commands
                .send(UdpCommand::Cell {
                    addr: b.addr,
                    cell: Bytes::from(cell.clone()),
                })
                .await
                .unwrap();
            b.commands
                .send(UdpCommand::Cell {
                    addr: a.addr,
                    cell: Bytes::from(cell),
                })
                .await
                .unwrap();
        }
        for _ in 0..20 {
            if let UdpEvent::Cell { peer, data } = next(&mut b.events).await {
                assert_eq!(peer, a.node);
                at_b.push(u32::from_be_bytes(data[..4].try_into().unwrap()));
            }
            if let UdpEvent::Cell { peer, data } = next(&mut a.events).await {
                assert_eq!(peer, b.node);
                at_a.push(u32::from_be_bytes(data[..4].try_into().unwrap()));
            }
        }
    }
    at_b.sort_unstable();
    at_a.sort_unstable();
    assert_eq!(at_b, (0..200).collect::<Vec<_>>());
    assert_eq!(at_a, (0..200).collect::<Vec<_>>());

    // Per-link counters, as an embedder reads them.
    let (tx, rx) = tokio::sync::oneshot::channel();
    a.commands.send(UdpCommand::Stats(tx)).await.unwrap();
    let snapshot = rx.await.unwrap();
    assert_eq!(snapshot.transport.cells_out, 200);
    let [(addr, peer, link)] = snapshot.links[..] else {
        panic!("{snapshot:?}")
    };
    assert_eq!((addr, peer), (b.addr, b.node));
    assert_eq!(
        (link.cells_out, link.cells_in, link.bytes_out),
        (200, 200, 200 * 1152)
    );
    assert!(
        link.rtt.is_some_and(|rtt| rtt < Duration::from_secs(1)),
        "{link:?}"
    );
}

#[tokio::test]
async fn a_burst_leaves_in_gso_batches_and_arrives_whole() {
    // 500 cells queued at once: the driver sends them in GSO batches (which must stay under
    // 64 KiB each: an oversized batch is refused by the kernel and would lose every cell in
    // it), and the receiver's GRO/recvmmsg path splits them again.
    let (a, mut b) = connected_pair().await;
    for i in 0..500u32 {
        a.commands.send(numbered(i, b.addr)).await.unwrap();
    }
    let mut got = Vec::new();
    for _ in 0..500 {
        if let UdpEvent::Cell { data, .. } = next(&mut b.events).await {
            got.push(number(&data));
        }
    }
    got.sort_unstable();
    assert_eq!(got, (0..500).collect::<Vec<_>>());
}

#[tokio::test]
async fn receive_faults_drop_duplicate_and_reorder_what_a_transport_gets() {
    // B's receive path loses 30%, duplicates 5% and holds back 20% (up to 20 ms) of every
    // datagram, handshake included. A dials B: lost HELLOs are resent, and the first DATA
    // that gets through confirms the link at B.
    let faults = FaultConfig {
        loss: 0.30,
        duplicate: 0.05,
        reorder: 0.20,
        reorder_window: Duration::from_millis(20),
        seed: 3,
        ..FaultConfig::default()
    };
    // Seed 3 drops the first datagram, the HELLO: the link comes up only through a resend.
    let mut first = FaultShim::new(faults.clone());
    first.push(Timestamp::ZERO, ());
    assert_eq!(first.stats().dropped, 1);
    let mut counters = None;
    let mut a = start(1, "127.0.0.2");
    let mut b = start_with(2, "127.0.0.3", |t| counters = Some(t.set_faults(faults)));
    let counters = counters.unwrap();
    a.commands
        .send(UdpCommand::Connect {
            peer: b.node,
            key: Box::new(b.key.public().clone()),
            addr: b.addr,
        })
        .await
        .unwrap();
    // Five HELLOs a second apart before the dial fails: generous.
    let connected = tokio::time::timeout(Duration::from_secs(10), a.events.recv())
        .await
        .expect("the handshake completes under 30% loss")
        .unwrap();
    assert_eq!(
        connected,
        UdpEvent::Connected {
            peer: b.node,
            addr: b.addr
        }
    );

    // 2000 cells in rounds of 100 (within the kernel's socket buffers), B's events drained
    // after each round until quiet.
    let mut got = Vec::new();
    let mut b_connected = false;
    for round in 0..20u32 {
        for i in round * 100..(round + 1) * 100 {
            let mut cell = vec![0u8; 1152];
            cell[..4].copy_from_slice(&i.to_be_bytes());
            a.commands
                .send(UdpCommand::Cell {
                    addr: b.addr,
                    cell: Bytes::from(cell),
                })
                .await
                .unwrap();
        }
        let quiet = Duration::from_millis(if round == 19 { 1000 } else { 200 });
        while let Ok(Some(event)) = tokio::time::timeout(quiet, b.events.recv()).await {
            match event {
                UdpEvent::Cell { peer, data } => {
                    assert_eq!((peer, data.len()), (a.node, 1152));
                    got.push(u32::from_be_bytes(data[..4].try_into().unwrap()));
                }
                UdpEvent::Connected { peer, .. } => {
                    assert_eq!(peer, a.node);
                    b_connected = true;
                }
                other => panic!("unexpected {other:?}"),
            }
        }
    }
    assert!(b_connected, "B saw the link come up");

    let stats = counters.get();
    let share = stats.dropped as f64 / stats.seen as f64;
    assert!(
        stats.seen >= 1000 && (0.2..0.4).contains(&share),
        "about 30% dropped: {stats:?}"
    );
    assert!(stats.duplicated > 0 && stats.reordered > 0, "{stats:?}");
    assert!(
        got.len() > 1000 && got.len() < 1800,
        "{} of 2000 cells arrived, {stats:?}",
        got.len()
    );
    assert!(got.windows(2).any(|w| w[1] < w[0]), "reordered");
    // Every datagram the shim let through reached the engine: the survivors are the cells
    // that arrived plus a few handshake datagrams (HELLOs, the confirmation).
    let delivered = stats.seen - stats.dropped;
    let handshake = delivered - got.len() as u64;
    assert!(handshake <= 10, "{handshake} non-cell datagrams, {stats:?}");
    // Duplicates were delivered too, and the session's replay window refused them.
    let mut unique = got.clone();
    unique.sort_unstable();
    unique.dedup();
    assert_eq!(unique.len(), got.len(), "no cell delivered twice");
    let (tx, rx) = tokio::sync::oneshot::channel();
    b.commands.send(UdpCommand::Stats(tx)).await.unwrap();
    let snapshot = rx.await.unwrap();
    assert_eq!(snapshot.transport.cells_in, got.len() as u64);
    assert!(
        snapshot.transport.dropped_auth > 0 && snapshot.transport.dropped_auth <= stats.duplicated,
        "{snapshot:?} {stats:?}"
    );
}

#[tokio::test]
async fn control_messages_survive_receive_loss() {
    // Control messages are reliable: the driver must wake to resend unacknowledged ones
    // (the engine's poll_timeout includes them), or a lost one stalls the channel.
    let faults = FaultConfig {
        loss: 0.30,
        duplicate: 0.05,
        reorder: 0.20,
        seed: 3,
        ..FaultConfig::default()
    };
    // Seed 3 drops the first datagram, the HELLO: the link comes up only through a resend.
    let mut first = FaultShim::new(faults.clone());
    first.push(Timestamp::ZERO, ());
    assert_eq!(first.stats().dropped, 1);
    let mut counters = None;
    let mut a = start(1, "127.0.0.2");
    let mut b = start_with(2, "127.0.0.3", |t| counters = Some(t.set_faults(faults)));
    let counters = counters.unwrap();
    a.commands
        .send(UdpCommand::Connect {
            peer: b.node,
            key: Box::new(b.key.public().clone()),
            addr: b.addr,
        })
        .await
        .unwrap();
    let connected = tokio::time::timeout(Duration::from_secs(10), a.events.recv())
        .await
        .expect("the handshake completes under 30% loss")
        .unwrap();
    assert!(
        matches!(connected, UdpEvent::Connected { .. }),
        "{connected:?}"
    );
    // Within the in-flight cap of unacknowledged messages.
    for i in 0..50u32 {
        a.commands
            .send(UdpCommand::Control {
                addr: b.addr,
                msg: i.to_be_bytes().to_vec(),
            })
            .await
            .unwrap();
    }
    let mut got = Vec::new();
    while got.len() < 50 {
        let event = tokio::time::timeout(Duration::from_secs(10), b.events.recv())
            .await
            .unwrap_or_else(|_| panic!("stalled after {got:?}, {:?}", counters.get()))
            .unwrap();
        if let UdpEvent::Control { data, .. } = event {
            got.push(u32::from_be_bytes(data[..4].try_into().unwrap()));
        }
    }
    assert_eq!(
        got,
        (0..50).collect::<Vec<_>>(),
        "every message once, in order"
    );
    assert!(counters.get().dropped > 0, "{:?}", counters.get());
}

#[tokio::test]
async fn a_lost_welcome_is_recovered_by_a_fresh_hello() {
    // A's receive side loses 30%: the WELCOME path. Seed 3 drops the first datagram A gets,
    // B's WELCOME, and lets the second through. B processed the HELLO (and its replay cache
    // holds it), so resending that HELLO would be refused as a replay and the dial would run
    // out of attempts; a fresh HELLO is a new handshake B answers, and B's link comes up
    // under the session A actually finished.
    let faults = FaultConfig {
        loss: 0.30,
        seed: 3,
        ..FaultConfig::default()
    };
    let mut probe = FaultShim::new(faults.clone());
    probe.push(Timestamp::ZERO, ());
    assert_eq!(probe.stats().dropped, 1, "the first decision drops");
    probe.push(Timestamp::ZERO, ());
    assert_eq!(probe.stats().dropped, 1, "the second lets it through");
    let mut counters = None;
    let mut a = start_with(1, "127.0.0.2", |t| counters = Some(t.set_faults(faults)));
    let mut b = start(2, "127.0.0.3");
    let counters = counters.unwrap();
    a.commands
        .send(UdpCommand::Connect {
            peer: b.node,
            key: Box::new(b.key.public().clone()),
            addr: b.addr,
        })
        .await
        .unwrap();
    let connected = tokio::time::timeout(Duration::from_secs(10), a.events.recv())
        .await
        .expect("the dial completes after its WELCOME was lost")
        .unwrap();
    assert_eq!(
        connected,
        UdpEvent::Connected {
            peer: b.node,
            addr: b.addr
        }
    );
    // A received exactly two datagrams, both WELCOMEs (B sends nothing else before the link
    // is up): the first was dropped, the answer to the second HELLO arrived.
    assert_eq!(
        counters.get(),
        FaultStats {
            seen: 2,
            dropped: 1,
            ..FaultStats::default()
        }
    );
    // B counts the link as up when A's confirmation opens under the second handshake's
    // session, and refused nothing (no HELLO was repeated).
    assert_eq!(
        next(&mut b.events).await,
        UdpEvent::Connected {
            peer: a.node,
            addr: a.addr
        }
    );
    let (tx, rx) = tokio::sync::oneshot::channel();
    b.commands.send(UdpCommand::Stats(tx)).await.unwrap();
    let stats = rx.await.unwrap().transport;
    assert_eq!(
        (stats.handshakes_ok, stats.handshakes_failed),
        (1, 0),
        "{stats:?}"
    );

    // Cells flow both ways: A to B all of them, B to A through A's 30% loss.
    let (mut at_b, mut at_a) = (Vec::new(), Vec::new());
    for i in 0..50u32 {
        let mut cell = vec![0u8; 1152];
        cell[..4].copy_from_slice(&i.to_be_bytes());
        a.commands
            .send(UdpCommand::Cell {
                addr: b.addr,
                cell: Bytes::from(cell.clone()),
            })
            .await
            .unwrap();
        b.commands
            .send(UdpCommand::Cell {
                addr: a.addr,
                cell: Bytes::from(cell),
            })
            .await
            .unwrap();
    }
    for _ in 0..50 {
        match next(&mut b.events).await {
            UdpEvent::Cell { peer, data } => {
                assert_eq!(peer, a.node);
                at_b.push(u32::from_be_bytes(data[..4].try_into().unwrap()));
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    let quiet = Duration::from_millis(500);
    while let Ok(Some(event)) = tokio::time::timeout(quiet, a.events.recv()).await {
        match event {
            UdpEvent::Cell { peer, data } => {
                assert_eq!(peer, b.node);
                at_a.push(u32::from_be_bytes(data[..4].try_into().unwrap()));
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    at_b.sort_unstable();
    assert_eq!(at_b, (0..50).collect::<Vec<_>>());
    let lost = counters.get().dropped - 1;
    assert!(lost > 0, "{:?}", counters.get());
    assert_eq!(
        at_a.len() as u64,
        50 - lost,
        "every cell A's shim let through"
    );
    assert!(at_a.windows(2).all(|w| w[0] < w[1]), "{at_a:?}");
}

#[tokio::test]
async fn a_large_receive_reaches_the_node_a_chunk_at_a_time() {
    // 60 cells queued at once leave in one or two GSO sends and are in the receiver's
    // socket before it reads: one receive takes them all. The receiving transport hands
    // them to its node a chunk (16 datagrams) at a time and yields between chunks, so on
    // this one-thread runtime the node (this task) runs after the first chunk, not after
    // all 60 have been opened; what it sends in return could then leave before the rest.
    let (a, mut b) = connected_pair().await;
    for i in 0..60u32 {
        a.commands.try_send(numbered(i, b.addr)).unwrap();
    }
    let mut got = Vec::new();
    if let UdpEvent::Cell { data, .. } = next(&mut b.events).await {
        got.push(number(&data));
    }
    let waiting = b.events.len();
    assert!(
        waiting < 16,
        "{waiting} cells were waiting when the node first ran: the receive was not chunked"
    );
    while got.len() < 60 {
        if let UdpEvent::Cell { data, .. } = next(&mut b.events).await {
            got.push(number(&data));
        }
    }
    got.sort_unstable();
    assert_eq!(got, (0..60).collect::<Vec<_>>());
}
