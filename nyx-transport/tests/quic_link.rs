//! Two and three QUIC endpoints on 127.0.0.x: cells and control messages both ways between
//! verified identities, and an impostor refused with the typed error.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use nyx_crypto::identity::IdentityKey;
use nyx_transport::Error;
use nyx_transport::quic::{QuicConfig, QuicEndpoint};

fn node(seed: u8, ip: &str) -> (Arc<IdentityKey>, QuicEndpoint) {
    let id = Arc::new(IdentityKey::from_seed(&[seed; 32]));
    let addr: SocketAddr = format!("{ip}:0").parse().unwrap();
    let ep = QuicEndpoint::bind(addr, id.clone(), QuicConfig::default()).unwrap();
    (id, ep)
}

#[tokio::test]
async fn cells_and_control_both_ways_between_verified_nodes() {
    let (a_id, a) = node(1, "127.0.0.2");
    let (b_id, b) = node(2, "127.0.0.3");
    let b_addr = b.local_addr().unwrap();
    let (dialled, accepted) = tokio::join!(a.connect(b_id.node_id(), b_addr), async {
        b.accept().await.unwrap()
    });
    let (ab, ba) = (dialled.unwrap(), accepted.unwrap());
    assert_eq!(ab.peer(), b_id.node_id());
    assert_eq!(
        ba.peer(),
        a_id.node_id(),
        "the acceptor learns the dialler's identity"
    );

    // Cells of the onion cell size, both ways.
    let max = ab.max_cell().unwrap();
    assert!(max >= 1152 + 8, "a 1152-byte cell plus framing fits: {max}");
    for i in 0..50u8 {
        ab.send_cell(Bytes::from(vec![i; 1152])).unwrap();
        ba.send_cell(Bytes::from(vec![i ^ 0xff; 1152])).unwrap();
    }
    let mut got_b = Vec::new();
    let mut got_a = Vec::new();
    for _ in 0..50 {
        got_b.push(ba.recv_cell().await.unwrap()[0]);
        got_a.push(ab.recv_cell().await.unwrap()[0]);
    }
    got_b.sort_unstable();
    got_a.sort_unstable();
    assert_eq!(got_b, (0..50).collect::<Vec<u8>>());
    let mut want_a: Vec<u8> = (0..50u8).map(|i| i ^ 0xff).collect();
    want_a.sort_unstable();
    assert_eq!(got_a, want_a);
    assert_eq!(
        ab.counters()
            .cells_out
            .load(std::sync::atomic::Ordering::Relaxed),
        50
    );

    // A cell larger than the path carries is refused, not truncated. (The limit itself grows
    // with path-MTU discovery, so test far above any MTU.)
    let too_big = Bytes::from(vec![0u8; 70_000]);
    assert!(matches!(
        ab.send_cell(too_big),
        Err(Error::CellTooLarge { len: 70_000, .. })
    ));
    assert_eq!(
        ab.counters()
            .dropped_too_large
            .load(std::sync::atomic::Ordering::Relaxed),
        1
    );

    // Control messages are reliable and ordered.
    ab.send_control(b"create").await.unwrap();
    ab.send_control(b"second").await.unwrap();
    assert_eq!(ba.recv_control().await.unwrap(), b"create");
    assert_eq!(ba.recv_control().await.unwrap(), b"second");
    ba.send_control(b"created").await.unwrap();
    assert_eq!(ab.recv_control().await.unwrap(), b"created");
    a.close();
    b.close();
}

#[tokio::test]
async fn an_impostor_is_refused_with_both_identities() {
    let (_, a) = node(1, "127.0.0.2");
    let (b_id, _b) = node(2, "127.0.0.3");
    let (mallory_id, mallory) = node(3, "127.0.0.4");
    let m_addr = mallory.local_addr().unwrap();
    // A dials B at Mallory's address.
    let accept = async { mallory.accept().await.map(|r| r.is_ok()) };
    let (dialled, _) = tokio::join!(a.connect(b_id.node_id(), m_addr), accept);
    let err = dialled.unwrap_err();
    assert!(
        matches!(
            err,
            Error::WrongPeer { expected, got }
                if expected == b_id.node_id() && got == mallory_id.node_id()
        ),
        "{err:?}"
    );
    a.close();
    mallory.close();
}

#[tokio::test]
async fn garbage_datagrams_do_not_disturb_a_live_link() {
    let (_, a) = node(1, "127.0.0.2");
    let (b_id, b) = node(2, "127.0.0.3");
    let b_addr = b.local_addr().unwrap();
    let (ab, ba) = tokio::join!(a.connect(b_id.node_id(), b_addr), async {
        b.accept().await.unwrap()
    });
    let (ab, ba) = (ab.unwrap(), ba.unwrap());
    // Random bytes of many lengths, and truncated/altered copies of a handshake-like packet,
    // from a stranger's socket at B's port.
    let stranger = tokio::net::UdpSocket::bind("127.0.0.9:0").await.unwrap();
    let mut x = 0x9e37_79b9u32;
    for len in (1..1500).step_by(7) {
        let junk: Vec<u8> = (0..len)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                x as u8
            })
            .collect();
        stranger.send_to(&junk, b_addr).await.unwrap();
        let mut long_header = junk.clone();
        long_header[0] = 0xc0 | (long_header[0] & 0x0f); // looks like a QUIC Initial
        stranger.send_to(&long_header, b_addr).await.unwrap();
    }
    tokio::time::sleep(Duration::from_millis(50)).await;
    ab.send_cell(Bytes::from_static(b"still up")).unwrap();
    assert_eq!(&ba.recv_cell().await.unwrap()[..], b"still up");
    ba.send_control(b"and back").await.unwrap();
    assert_eq!(ab.recv_control().await.unwrap(), b"and back");
    assert!(!ab.is_closed() && !ba.is_closed());
}

#[tokio::test]
async fn ten_percent_loss_with_reordering_and_duplication_does_not_break_the_link() {
    use nyx_transport::fault::FaultConfig;
    let faults = |seed| FaultConfig {
        loss: 0.10,
        reorder: 0.10,
        duplicate: 0.02,
        seed,
        ..FaultConfig::default()
    };
    let a_id = Arc::new(IdentityKey::from_seed(&[1; 32]));
    let b_id = Arc::new(IdentityKey::from_seed(&[2; 32]));
    let (a, a_shim) = QuicEndpoint::bind_with_faults(
        "127.0.0.2:0".parse().unwrap(),
        Some(a_id),
        QuicConfig::default(),
        faults(3),
    )
    .unwrap();
    let (b, b_shim) = QuicEndpoint::bind_with_faults(
        "127.0.0.3:0".parse().unwrap(),
        Some(b_id.clone()),
        QuicConfig::default(),
        faults(4),
    )
    .unwrap();
    let b_addr = b.local_addr().unwrap();
    let (ab, ba) = tokio::join!(a.connect(b_id.node_id(), b_addr), async {
        b.accept().await.unwrap()
    });
    let (ab, ba) = (ab.unwrap(), ba.unwrap());
    // Control messages are reliable and ordered despite the faults.
    for i in 0..100u32 {
        ab.send_control(&i.to_be_bytes()).await.unwrap();
    }
    for i in 0..100u32 {
        assert_eq!(ba.recv_control().await.unwrap(), i.to_be_bytes());
    }
    // Cells are datagrams: about 10% are lost, none corrupted, the link stays up. They go in
    // windows of 100 (120 KB), each drained before the next: sent all at once, 1000 cells
    // overflow quinn's 1 MiB datagram send buffer whenever the loaded CI machine drains it
    // slower than they are queued, and the oldest are dropped before the shim sees them.
    let mut got = Vec::new();
    for window in 0..10u32 {
        for i in window * 100..(window + 1) * 100 {
            let mut cell = vec![0u8; 1152];
            cell[..4].copy_from_slice(&i.to_be_bytes());
            ab.send_cell(Bytes::from(cell)).unwrap();
        }
        while let Ok(Ok(cell)) =
            tokio::time::timeout(Duration::from_millis(300), ba.recv_cell()).await
        {
            assert_eq!(cell.len(), 1152);
            got.push(u32::from_be_bytes(cell[..4].try_into().unwrap()));
        }
    }
    assert!(
        got.len() > 800 && got.len() < 1000,
        "{} of 1000 arrived",
        got.len()
    );
    assert!(!ab.is_closed() && !ba.is_closed());
    let (sa, sb) = (a_shim.stats(), b_shim.stats());
    assert!(
        sa.dropped > 50 && sa.reordered > 50 && sb.dropped > 0,
        "{sa:?} {sb:?}"
    );
}

/// A client-only endpoint dials with a certificate made for each link (the relay learns
/// a different id each time, never a lasting one) and accepts no connection.
#[tokio::test]
async fn a_client_endpoint_shows_a_fresh_identity_per_link_and_accepts_nothing() {
    let (relay_id, relay) = node(2, "127.0.0.3");
    let relay_addr = relay.local_addr().unwrap();
    let client =
        QuicEndpoint::bind_client("127.0.0.2:0".parse().unwrap(), QuicConfig::default()).unwrap();
    assert_eq!(client.node_id(), None);
    let mut seen = Vec::new();
    for _ in 0..2 {
        let (dialled, accepted) =
            tokio::join!(client.connect(relay_id.node_id(), relay_addr), async {
                relay.accept().await.unwrap()
            });
        let (link, at_relay) = (dialled.unwrap(), accepted.unwrap());
        assert_eq!(
            link.peer(),
            relay_id.node_id(),
            "the client verifies the relay"
        );
        seen.push(at_relay.peer());
    }
    assert_ne!(seen[0], seen[1], "two links showed one identity");

    // The relay dials the client: no TLS handshake happens at all (a server would answer
    // and fail the made-up id with WrongPeer; the client endpoint has no server side).
    assert!(!client.accepts_links());
    let client_addr = client.local_addr().unwrap();
    let any = IdentityKey::from_seed(&[9; 32]).node_id();
    let dial = tokio::time::timeout(Duration::from_secs(3), relay.connect(any, client_addr));
    match dial.await {
        Err(_elapsed) => {}
        Ok(Err(Error::WrongPeer { .. })) => panic!("the client endpoint answered a handshake"),
        Ok(Err(_refused)) => {}
        Ok(Ok(_)) => panic!("a client endpoint accepted a connection"),
    }
}
