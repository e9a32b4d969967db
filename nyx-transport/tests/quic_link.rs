//! Two and three QUIC endpoints on 127.0.0.x: cells and control messages both ways between
//! verified identities, control reliable and in order under loss, and an impostor refused
//! with the typed error.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use bytes::Bytes;
use nyx_core::NodeId;
use nyx_crypto::identity::IdentityKey;
use nyx_transport::Error;
use nyx_transport::link::{Inbound, Message, drive_quic_link};
use nyx_transport::quic::{QuicConfig, QuicEndpoint, QuicLink};
use tokio::sync::mpsc;

fn node(seed: u8, ip: &str) -> (Arc<IdentityKey>, QuicEndpoint) {
    let id = Arc::new(IdentityKey::from_seed(&[seed; 32]));
    let addr: SocketAddr = format!("{ip}:0").parse().unwrap();
    let ep = QuicEndpoint::bind(addr, id.clone(), QuicConfig::default()).unwrap();
    (id, ep)
}

/// The link `a` dials to `b` (whose identity is `b_id`), as each end sees it.
async fn linked(
    a: &QuicEndpoint,
    b: &QuicEndpoint,
    b_id: NodeId,
) -> (Arc<QuicLink>, Arc<QuicLink>) {
    let b_addr = b.local_addr().unwrap();
    let (ab, ba) = tokio::join!(a.connect(b_id, b_addr), async { b.accept().await.unwrap() });
    (ab.unwrap(), ba.unwrap())
}

/// A link driven as the node drives it: what arrives on it comes out of the receiver.
fn driven(link: Arc<QuicLink>) -> (Arc<QuicLink>, mpsc::Receiver<Inbound>) {
    let (to, from) = mpsc::channel(4096);
    tokio::spawn(drive_quic_link(link.clone(), to));
    (link, from)
}

async fn next(rx: &mut mpsc::Receiver<Inbound>, wait: Duration) -> Option<Message> {
    tokio::time::timeout(wait, rx.recv())
        .await
        .ok()
        .flatten()
        .map(|i| i.message)
}

async fn cell(rx: &mut mpsc::Receiver<Inbound>) -> Bytes {
    match next(rx, Duration::from_secs(10)).await {
        Some(Message::Cell(cell)) => cell,
        other => panic!("expected a cell: {other:?}"),
    }
}

async fn control(rx: &mut mpsc::Receiver<Inbound>) -> Vec<u8> {
    match next(rx, Duration::from_secs(30)).await {
        Some(Message::Control(msg)) => msg,
        other => panic!("expected a control message: {other:?}"),
    }
}

#[tokio::test]
async fn cells_and_control_both_ways_between_verified_nodes() {
    let (a_id, a) = node(1, "127.0.0.2");
    let (b_id, b) = node(2, "127.0.0.3");
    let (dialled, accepted) = linked(&a, &b, b_id.node_id()).await;
    let ((ab, mut at_a), (ba, mut at_b)) = (driven(dialled), driven(accepted));
    assert_eq!(ab.peer(), b_id.node_id());
    assert_eq!(
        ba.peer(),
        a_id.node_id(),
        "the acceptor learns the dialler's identity"
    );

    // Cells of the onion cell size, both ways.
    let max = ab.max_cell().unwrap();
    assert!(max >= 1152 + 8, "a 1152-byte cell plus framing fits: {max}");
    // (Numbered from 1: a cell of zero bytes would carry circuit id 0, refused below.)
    for i in 1..=50u8 {
        ab.send_cell(Bytes::from(vec![i; 1152])).unwrap();
        ba.send_cell(Bytes::from(vec![i ^ 0xff; 1152])).unwrap();
    }
    let mut got_b = Vec::new();
    let mut got_a = Vec::new();
    for _ in 0..50 {
        got_b.push(cell(&mut at_b).await[0]);
        got_a.push(cell(&mut at_a).await[0]);
    }
    got_b.sort_unstable();
    got_a.sort_unstable();
    assert_eq!(got_b, (1..=50).collect::<Vec<u8>>());
    let mut want_a: Vec<u8> = (1..=50u8).map(|i| i ^ 0xff).collect();
    want_a.sort_unstable();
    assert_eq!(got_a, want_a);
    assert_eq!(ab.counters().cells_out.load(Relaxed), 50);

    // A cell larger than the path carries is refused, not truncated. (The limit itself grows
    // with path-MTU discovery, so test far above any MTU.)
    let too_big = Bytes::from(vec![1u8; 70_000]);
    assert!(matches!(
        ab.send_cell(too_big),
        Err(Error::CellTooLarge { len: 70_000, .. })
    ));
    assert_eq!(ab.counters().dropped_too_large.load(Relaxed), 1);
    // A cell with circuit id 0 would look like a control datagram: refused and counted.
    let mut zero = vec![0u8; 1156];
    zero[4] = 1;
    assert!(matches!(ab.send_cell(zero.into()), Err(Error::ZeroCircuit)));
    assert_eq!(ab.counters().refused_control_mark.load(Relaxed), 1);

    // Control messages are reliable and ordered, and ride datagrams, never a stream.
    ab.send_control(b"create").unwrap();
    ab.send_control(&[0; 1200]).unwrap();
    ab.send_control(b"second").unwrap();
    assert_eq!(control(&mut at_b).await, b"create");
    assert_eq!(control(&mut at_b).await, [0; 1200]);
    assert_eq!(control(&mut at_b).await, b"second");
    ba.send_control(b"created").unwrap();
    assert_eq!(control(&mut at_a).await, b"created");
    for link in [&ab, &ba] {
        let frames = link.raw_connection().stats().frame_tx;
        assert_eq!(frames.stream, 0, "{frames:?}");
        // 50 cells, and this side's chunks and acknowledgements.
        assert!(frames.datagram >= 52, "{frames:?}");
    }
    assert_eq!(
        ab.counters().cells_out.load(Relaxed),
        50,
        "control is not counted as cells"
    );
    assert_eq!(ba.counters().cells_in.load(Relaxed), 50);
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
    let (ab, ba) = linked(&a, &b, b_id.node_id()).await;
    let ((ab, mut at_a), (ba, mut at_b)) = (driven(ab), driven(ba));
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
    assert_eq!(&cell(&mut at_b).await[..], b"still up");
    ba.send_control(b"and back").unwrap();
    assert_eq!(control(&mut at_a).await, b"and back");
    assert!(!ab.is_closed() && !ba.is_closed());
}

/// A linked pair of relays whose endpoints send through the fault shim, both links driven.
async fn lossy_pair(
    faults: impl Fn(u64) -> nyx_transport::fault::FaultConfig,
) -> (
    Lossy,
    Lossy,
    [Arc<nyx_transport::fault::FaultyQuicSocket>; 2],
) {
    let a_id = Arc::new(IdentityKey::from_seed(&[1; 32]));
    let b_id = Arc::new(IdentityKey::from_seed(&[2; 32]));
    let bind = |ip: &str, id: &Arc<IdentityKey>, seed| {
        QuicEndpoint::bind_with_faults(
            format!("{ip}:0").parse().unwrap(),
            Some(id.clone()),
            QuicConfig::default(),
            faults(seed),
        )
        .unwrap()
    };
    let ((a, a_shim), (b, b_shim)) = (bind("127.0.0.2", &a_id, 3), bind("127.0.0.3", &b_id, 4));
    let (ab, ba) = linked(&a, &b, b_id.node_id()).await;
    let ((ab, at_a), (ba, at_b)) = (driven(ab), driven(ba));
    (
        Lossy {
            link: ab,
            rx: at_a,
            _endpoint: a,
        },
        Lossy {
            link: ba,
            rx: at_b,
            _endpoint: b,
        },
        [a_shim, b_shim],
    )
}

struct Lossy {
    link: Arc<QuicLink>,
    rx: mpsc::Receiver<Inbound>,
    _endpoint: QuicEndpoint,
}

#[tokio::test]
async fn ten_percent_loss_with_reordering_and_duplication_does_not_break_the_link() {
    use nyx_transport::fault::FaultConfig;
    let (a, mut b, [a_shim, b_shim]) = lossy_pair(|seed| FaultConfig {
        loss: 0.10,
        reorder: 0.10,
        duplicate: 0.02,
        seed,
        ..FaultConfig::default()
    })
    .await;
    // Control messages are reliable and ordered despite the faults.
    for i in 0..60u32 {
        a.link.send_control(&i.to_be_bytes()).unwrap();
    }
    for i in 0..60u32 {
        assert_eq!(control(&mut b.rx).await, i.to_be_bytes());
    }
    // Cells are datagrams: about 10% are lost, none corrupted, the link stays up. They go in
    // windows of 100 (120 KB), each drained before the next: sent all at once, 1000 cells
    // overflow quinn's 1 MiB datagram send buffer whenever the loaded CI machine drains it
    // slower than they are queued, and the oldest are dropped before the shim sees them.
    let mut got = Vec::new();
    for window in 0..10u32 {
        for i in window * 100..(window + 1) * 100 {
            let mut cell = vec![0u8; 1152];
            // Circuit id 0 is the control mark: number the cells from 1.
            cell[..4].copy_from_slice(&(i + 1).to_be_bytes());
            a.link.send_cell(Bytes::from(cell)).unwrap();
        }
        while let Some(message) = next(&mut b.rx, Duration::from_millis(300)).await {
            let Message::Cell(cell) = message else {
                panic!("{message:?}")
            };
            assert_eq!(cell.len(), 1152);
            got.push(u32::from_be_bytes(cell[..4].try_into().unwrap()));
        }
    }
    assert!(
        got.len() > 800 && got.len() < 1000,
        "{} of 1000 arrived",
        got.len()
    );
    assert!(!a.link.is_closed() && !b.link.is_closed());
    let (sa, sb) = (a_shim.stats(), b_shim.stats());
    assert!(
        sa.dropped > 50 && sa.reordered > 50 && sb.dropped > 0,
        "{sa:?} {sb:?}"
    );
}

/// Control chunks and their acknowledgements are datagrams too, and 20% of the packets
/// either way are lost: every control message still arrives, once, in order, both ways.
/// The sender meets the in-flight limit (64 chunks) and waits for acknowledgements.
#[tokio::test]
async fn twenty_percent_loss_still_delivers_every_control_message_in_order() {
    use nyx_transport::fault::FaultConfig;
    let (mut a, mut b, [a_shim, b_shim]) = lossy_pair(|seed| FaultConfig {
        loss: 0.20,
        reorder: 0.05,
        seed,
        ..FaultConfig::default()
    })
    .await;
    // CREATE-sized messages (two chunks each) one way, PONG-sized ones (one chunk) back.
    let create = |i: u32| {
        let mut m = vec![(i % 251) as u8; 1197];
        m[..4].copy_from_slice(&i.to_be_bytes());
        m
    };
    let mut refused = 0;
    for i in 0..120u32 {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        for (link, msg) in [(&a.link, create(i)), (&b.link, i.to_be_bytes().to_vec())] {
            while let Err(e) = link.send_control(&msg) {
                assert!(matches!(e, Error::Link { .. }), "{e}");
                assert!(tokio::time::Instant::now() < deadline, "never acknowledged");
                refused += 1;
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    }
    for i in 0..120u32 {
        assert_eq!(control(&mut b.rx).await, create(i), "message {i} to b");
        assert_eq!(
            control(&mut a.rx).await,
            i.to_be_bytes(),
            "message {i} to a"
        );
    }
    assert!(refused > 0, "the in-flight limit was never met");
    let (sa, sb) = (a_shim.stats(), b_shim.stats());
    assert!(sa.dropped > 20 && sb.dropped > 20, "{sa:?} {sb:?}");
    for link in [&a.link, &b.link] {
        assert_eq!(link.raw_connection().stats().frame_tx.stream, 0);
        assert_eq!(link.counters().control_malformed.load(Relaxed), 0);
    }
}

/// A peer that does not acknowledge (its link is not driven) fills the in-flight window:
/// the next message is refused; once the peer reads and acknowledges, everything sent
/// arrives in order and the window opens again. Malformed control datagrams from the peer
/// are counted and dropped, never delivered.
#[tokio::test]
async fn an_unacknowledging_peer_fills_the_window_and_malformed_control_is_dropped() {
    let (_, a) = node(1, "127.0.0.2");
    let (b_id, b) = node(2, "127.0.0.3");
    let (ab, raw) = linked(&a, &b, b_id.node_id()).await;
    let (to_a, mut at_a) = mpsc::channel(64);
    tokio::spawn(drive_quic_link(ab.clone(), to_a));
    let max = nyx_transport::quic::MAX_CONTROL_IN_FLIGHT as u32;
    for i in 0..max {
        ab.send_control(&i.to_be_bytes()).unwrap();
    }
    let full = ab.send_control(b"one more").unwrap_err();
    assert!(matches!(full, Error::Link { .. }), "{full}");
    // B sends A malformed control datagrams: an unknown kind, a truncated chunk.
    for bad in [vec![0, 0, 0, 0, 9], vec![0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 200]] {
        raw.raw_connection().send_datagram(bad.into()).unwrap();
    }
    let (ba, mut at_b) = driven(raw);
    for i in 0..max {
        assert_eq!(control(&mut at_b).await, i.to_be_bytes());
    }
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while ab.send_control(b"one more").is_err() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the window never opened"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(control(&mut at_b).await, b"one more");
    ba.send_cell(Bytes::from_static(b"after the junk")).unwrap();
    assert_eq!(&cell(&mut at_a).await[..], b"after the junk");
    assert_eq!(ab.counters().control_malformed.load(Relaxed), 2);
    assert_eq!(ab.counters().cells_in.load(Relaxed), 1);
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

/// ACK frames the receiving end of a link sends for `CELLS` cells, with the endpoints'
/// `ack_every` set to `ack_every`, and how long the cells took.
async fn acks_for_cells(ack_every: u32, ips: (&str, &str)) -> (u64, Duration) {
    let config = QuicConfig {
        ack_every,
        ..QuicConfig::default()
    };
    let endpoint = |seed: u8, ip: &str| {
        let id = Arc::new(IdentityKey::from_seed(&[seed; 32]));
        let addr: SocketAddr = format!("{ip}:0").parse().unwrap();
        (
            id.clone(),
            QuicEndpoint::bind(addr, id, config.clone()).unwrap(),
        )
    };
    let (_, a) = endpoint(1, ips.0);
    let (b_id, b) = endpoint(2, ips.1);
    let (dialled, accepted) = linked(&a, &b, b_id.node_id()).await;
    let ((ab, _at_a), (ba, mut at_b)) = (driven(dialled), driven(accepted));
    // A first round, so that the dialler's ACK_FREQUENCY frame has arrived.
    for i in 1..=8u8 {
        ab.send_cell(Bytes::from(vec![i; 1152])).unwrap();
        cell(&mut at_b).await;
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    let before = ba.raw_connection().stats();
    // One cell at a time, as cells arrive on a link slower than the machine (a burst that
    // arrives at once is acknowledged once, whatever the rule).
    let start = std::time::Instant::now();
    for i in 0..CELLS {
        ab.send_cell(Bytes::from(vec![i as u8 | 1; 1152])).unwrap();
        cell(&mut at_b).await;
    }
    let took = start.elapsed();
    // The last acknowledgement waits for the ACK delay.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let after = ba.raw_connection().stats();
    let received = after.frame_rx.datagram - before.frame_rx.datagram;
    assert_eq!(received, CELLS as u64, "one DATAGRAM frame per cell");
    a.close();
    b.close();
    (after.frame_tx.acks - before.frame_tx.acks, took)
}

const CELLS: usize = 320;

#[tokio::test]
async fn a_busy_link_is_acknowledged_once_per_ack_every_packets() {
    // QUIC's usual rule (every second packet) against the default of 32.
    let (every_second, _) = acks_for_cells(2, ("127.0.0.2", "127.0.0.3")).await;
    let ack_every = QuicConfig::default().ack_every;
    let (default, took) = acks_for_cells(ack_every, ("127.0.0.4", "127.0.0.5")).await;
    assert!(
        every_second >= CELLS as u64 * 2 / 5,
        "every second packet: {every_second} ACKs for {CELLS} cells"
    );
    // One per 32 packets, and one per ACK delay (at most 25 ms) that passed meanwhile, the
    // last of them included.
    let delays = (took.as_millis() / 25) as u64 + 2;
    assert!(
        default <= CELLS as u64 / u64::from(ack_every) + delays,
        "one per {ack_every} packets: {default} ACKs for {CELLS} cells in {took:?}"
    );
}
