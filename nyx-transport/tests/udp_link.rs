//! Two UDP transports on real sockets (127.0.0.2 and 127.0.0.3): the driver tasks handshake
//! and carry cells both ways.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use nyx_crypto::identity::IdentityKey;
use nyx_crypto::kem::HybridSecretKey;
use nyx_crypto::link::LinkKey;
use nyx_transport::udp::{UdpConfig, UdpEvent};
use nyx_transport::udp_driver::{UdpCommand, UdpTransport};
use tokio::sync::mpsc;

struct Running {
    node: nyx_core::NodeId,
    key: HybridSecretKey,
    addr: std::net::SocketAddr,
    commands: mpsc::Sender<UdpCommand>,
    events: mpsc::Receiver<UdpEvent>,
}

fn start(seed: u8, ip: &str) -> Running {
    let id = Arc::new(IdentityKey::from_seed(&[seed; 32]));
    let key = HybridSecretKey::from_seed(&[seed; 96]);
    let link_keys = vec![LinkKey::new(HybridSecretKey::from_seed(&[seed; 96]))];
    let t = UdpTransport::bind(
        format!("{ip}:0").parse().unwrap(),
        id.clone(),
        link_keys,
        UdpConfig::default(),
    )
    .unwrap();
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

async fn next(events: &mut mpsc::Receiver<UdpEvent>) -> UdpEvent {
    tokio::time::timeout(Duration::from_secs(5), events.recv())
        .await
        .unwrap()
        .unwrap()
}

#[tokio::test]
async fn handshake_and_cells_between_real_sockets() {
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

    // Per-link counters, as the daemon's metrics read them.
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
    next(&mut a.events).await;
    next(&mut b.events).await;
    for i in 0..500u32 {
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
    let mut got = Vec::new();
    for _ in 0..500 {
        if let UdpEvent::Cell { data, .. } = next(&mut b.events).await {
            got.push(u32::from_be_bytes(data[..4].try_into().unwrap()));
        }
    }
    got.sort_unstable();
    assert_eq!(got, (0..500).collect::<Vec<_>>());
}
