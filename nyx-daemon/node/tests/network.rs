//! In-process networks of real nodes on 127.0.0.x, over QUIC and over UDP: circuits are
//! built through three relays, payloads round-trip to an echoing exit, the wire shows
//! nothing but equal-size ciphertext, strangers' garbage changes nothing, and a relay that
//! vanishes takes its circuits down and is avoided afterwards.

#![allow(clippy::unwrap_used)]

use std::collections::HashSet;
use std::net::SocketAddr;
use std::time::Duration;

use nyx_core::NodeId;
use nyx_core::config::TransportKind;
use nyx_node::testing::{LocalTestnet, LocalTestnetSpec, node_settings};
use nyx_node::{Circuit, CircuitMessage, Node, NodeEvent, NodeSettings};
use nyx_overlay::circuit::OverlayConfig;
use nyx_overlay::path::ExitRequirement;
use nyx_transport::fault::WireTap;
use tokio::time::timeout;

const WAIT: Duration = Duration::from_secs(15);

struct Testnet {
    inner: LocalTestnet,
    ids: Vec<NodeId>,
    addrs: Vec<SocketAddr>,
}

fn settings(tap: Option<WireTap>) -> NodeSettings {
    // Short probes so a vanished relay is noticed quickly; with a tap (the wire check) long
    // ones, so that no PING on an idle link joins the cells under inspection.
    let (keepalive, link_timeout) = match tap {
        None => (Duration::from_millis(500), Duration::from_secs(2)),
        Some(_) => (Duration::from_secs(30), Duration::from_secs(60)),
    };
    NodeSettings {
        overlay: OverlayConfig {
            build_timeout: Duration::from_secs(5),
            keepalive,
            link_timeout,
            timer_granularity: Duration::from_millis(50),
            ..OverlayConfig::default()
        },
        tap,
        ..node_settings()
    }
}

/// `n` nodes on 127.0.<net>.1..=n, every one a relay and an echoing exit.
async fn testnet(transport: TransportKind, net: u8, n: u8, tap: Option<WireTap>) -> Testnet {
    let spec = LocalTestnetSpec {
        nodes: n,
        net,
        transport,
        settings: settings(tap),
        echo: true,
        ..LocalTestnetSpec::default()
    };
    let inner = LocalTestnet::start(spec).await.unwrap();
    Testnet {
        ids: inner.ids.clone(),
        addrs: inner.addrs.clone(),
        inner,
    }
}

impl Testnet {
    fn node(&self, i: usize) -> &Node {
        self.inner.node(i).unwrap()
    }

    async fn circuit(&self, client: usize) -> Circuit {
        let handle = self.node(client).handle();
        timeout(WAIT, handle.build_circuit(ExitRequirement::Any))
            .await
            .unwrap()
            .unwrap()
    }

    fn index(&self, id: &NodeId) -> usize {
        self.inner.index(id).unwrap()
    }
}

/// Send `payload` and wait for its echo (cells are datagrams: resend on a quiet second).
async fn echo(circuit: &mut Circuit, payload: &[u8]) {
    for _ in 0..5 {
        circuit.send(payload).await.unwrap();
        match timeout(Duration::from_secs(1), circuit.recv()).await {
            Ok(Some(CircuitMessage::Data(got))) => {
                assert_eq!(&got[..], payload);
                return;
            }
            Ok(other) => panic!("unexpected {other:?}"),
            Err(_) => continue,
        }
    }
    panic!("no echo");
}

async fn round_trips(transport: TransportKind, net: u8) {
    let t = testnet(transport, net, 6, None).await;
    let mut events = t.node(0).handle().subscribe();
    let asked = std::time::Instant::now();
    let mut c = t.circuit(0).await;
    let waited = asked.elapsed();
    assert_eq!(c.path().len(), 3);
    // The event reports the build with how long it took, within what the caller waited.
    let build_time = loop {
        match events.recv().await.unwrap() {
            NodeEvent::CircuitBuilt {
                circuit,
                path,
                build_time,
            } => {
                assert_eq!((circuit, path.as_slice()), (c.handle(), c.path()));
                break build_time;
            }
            _ => continue,
        }
    };
    assert!(
        build_time > Duration::ZERO && build_time <= waited,
        "{build_time:?} of {waited:?}"
    );
    assert!(
        !c.path().contains(&t.ids[0]),
        "the client is never on its own path"
    );
    let distinct: HashSet<_> = c.path().iter().collect();
    assert_eq!(distinct.len(), 3);
    for len in [1usize, 17, 512, nyx_overlay::circuit::MAX_FORWARD_BODY] {
        let payload: Vec<u8> = (0..len).map(|i| (i * 7 + len) as u8).collect();
        echo(&mut c, &payload).await;
    }
    // Many circuits at once, from two clients, through shared relays.
    let mut tasks = Vec::new();
    for k in 0..12 {
        let client = if k % 2 == 0 { 0 } else { 5 };
        let handle = t.node(client).handle();
        tasks.push(tokio::spawn(async move {
            let mut c = timeout(WAIT, handle.build_circuit(ExitRequirement::Any))
                .await
                .unwrap()
                .unwrap();
            for m in 0..10u8 {
                echo(&mut c, &[k, m, 0xAB]).await;
            }
            c.path().to_vec()
        }));
    }
    let mut relays_used = HashSet::new();
    for task in tasks {
        relays_used.extend(task.await.unwrap());
    }
    assert!(relays_used.len() >= 4, "circuits spread over the relays");
    let mut relayed = 0;
    for i in 0..6 {
        relayed += t
            .node(i)
            .handle()
            .stats()
            .await
            .unwrap()
            .overlay
            .relayed_forward;
    }
    assert!(
        relayed >= 12 * 10 * 2,
        "middles and exits' predecessors relayed the cells"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quic_circuits_round_trip() {
    round_trips(TransportKind::Quic, 11).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn udp_circuits_round_trip() {
    round_trips(TransportKind::Udp, 12).await;
}

#[test]
fn nodes_on_runtimes_of_their_own_outlive_the_runtime_that_started_them() {
    // Each node on a one-worker runtime of its own (as the relay benchmark runs them, and
    // as each is a process of its own in a deployment). The runtime that started the
    // testnet then goes away, and circuits still carry payloads: nothing of a node, its
    // socket included, was left on it.
    let runtimes: Vec<tokio::runtime::Runtime> = (0..4)
        .map(|_| {
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .enable_all()
                .build()
                .unwrap()
        })
        .collect();
    let spec = LocalTestnetSpec {
        nodes: 4,
        net: 73,
        transport: TransportKind::Udp,
        settings: settings(None),
        echo: true,
        runtimes: runtimes.iter().map(|r| r.handle().clone()).collect(),
        ..LocalTestnetSpec::default()
    };
    let starter = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let net = starter.block_on(LocalTestnet::start(spec)).unwrap();
    drop(starter);
    let user = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    user.block_on(async {
        let handle = net.node(0).unwrap().handle();
        let mut circuit = timeout(WAIT, handle.build_circuit(ExitRequirement::Any))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(circuit.path().len(), 3);
        echo(&mut circuit, b"still here").await;
    });
    let _in = user.enter();
    drop(net);
}

/// Every 8-byte window of `bytes`.
fn windows(bytes: &[u8]) -> impl Iterator<Item = [u8; 8]> + '_ {
    bytes.windows(8).map(|w| w.try_into().unwrap())
}

async fn wire_check(transport: TransportKind, net: u8) {
    let tap = WireTap::new();
    let t = testnet(transport, net, 5, Some(tap.clone())).await;
    let mut c = t.circuit(0).await;
    // Settle the handshakes and build traffic, then look only at the data phase.
    echo(&mut c, b"warm-up").await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    // Link handshakes, circuit build and the first echo.
    let setup = tap.take();
    let marker = *b"NYX-PAYLOAD-MARK";
    for i in 0..40u8 {
        let mut payload = marker.repeat(4);
        payload.push(i);
        echo(&mut c, &payload).await;
    }
    let mut ids: Vec<(NodeId, u32)> = Vec::new();
    for i in 0..5 {
        ids.extend(t.node(i).handle().link_circuit_ids().await.unwrap());
    }
    let seen = tap.take();
    assert!(seen.len() >= 40 * 6, "captured {} datagrams", seen.len());

    // Nothing in clear: no payload marker, no NodeId (or its first 8 bytes), no circuit id
    // in the position the link cell carries it.
    for d in &seen {
        assert!(
            !d.bytes.windows(8).any(|w| w == &marker[..8]),
            "payload in clear"
        );
        for id in &t.ids {
            assert!(
                !d.bytes.windows(8).any(|w| w == &id.as_bytes()[..8]),
                "NodeId in clear"
            );
        }
        for (_, circ) in &ids {
            assert_ne!(
                d.bytes.get(..4),
                Some(&circ.to_be_bytes()[..]),
                "circuit id in clear"
            );
        }
    }

    // Sizes: cell-carrying datagrams all have one length.
    let cell_sized: Vec<usize> = seen
        .iter()
        .map(|d| d.bytes.len())
        .filter(|&l| l > 1000)
        .collect();
    let lengths: HashSet<usize> = cell_sized.iter().copied().collect();
    let small = seen.len() - cell_sized.len();
    match transport {
        // The UDP transport: every datagram of the data phase is one cell, one length.
        TransportKind::Udp => {
            assert_eq!(small, 0, "only cells on the wire");
            assert_eq!(lengths.len(), 1, "lengths {lengths:?}");
        }
        // QUIC: cells travel as DATAGRAM frames of one size; QUIC may add an ACK frame to
        // a packet (a few bytes more) and sends ACK-only packets (small, no cell).
        _ => {
            let min = *lengths.iter().min().unwrap();
            let max = *lengths.iter().max().unwrap();
            assert!(max - min <= 16, "cell packet lengths {lengths:?}");
            eprintln!(
                "QUIC: {} cell packets of lengths {lengths:?}, {small} ACK-only",
                cell_sized.len()
            );
        }
    }

    // The same cell seen on two links shares no 8-byte run: forward cells go client ->
    // entry -> middle, backward cells middle -> entry -> client; compare each pair.
    let client = t.addrs[0];
    let entry = t.addrs[t.index(&c.path()[0])];
    let middle = t.addrs[t.index(&c.path()[1])];
    let on = |from: SocketAddr, to: SocketAddr| -> HashSet<[u8; 8]> {
        seen.iter()
            .filter(|d| d.from == from && d.to == to && d.bytes.len() > 1000)
            .flat_map(|d| windows(&d.bytes))
            .collect()
    };
    for ((a, b), (c2, d2)) in [
        ((client, entry), (entry, middle)),
        ((middle, entry), (entry, client)),
    ] {
        let first = on(a, b);
        let second = on(c2, d2);
        assert!(!first.is_empty() && !second.is_empty());
        let shared = first.intersection(&second).count();
        assert_eq!(shared, 0, "bytes shared across hops");
    }

    // The whole life of the links: a teardown and another build and teardown too.
    c.close().await;
    let mut again = t.circuit(0).await;
    echo(&mut again, b"again").await;
    again.close().await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let teardown = tap.take();
    if transport == TransportKind::Quic {
        quic_sizes_over_the_links_life([&setup, &seen, &teardown]);
    }
    if transport == TransportKind::Udp {
        // Every datagram after the link handshakes (type 0x04, DATA) has one size: cells,
        // CREATE/CREATED, acknowledgements, PINGs and DESTROYs alike.
        let sizes: HashSet<usize> = [&setup, &seen, &teardown]
            .into_iter()
            .flatten()
            .filter(|d| d.bytes.first() == Some(&0x04))
            .map(|d| d.bytes.len())
            .collect();
        assert_eq!(sizes.len(), 1, "DATA sizes over the links' life {sizes:?}");
        let handshakes = setup
            .iter()
            .filter(|d| d.bytes.first() != Some(&0x04))
            .count();
        assert!(handshakes > 0, "the capture covers the link handshakes");
    }
}

/// Over QUIC, every packet of the links' life that sizes can attribute is cell-sized or a
/// small ACK/PING-only packet: CREATE, CREATED, DESTROY and PING travel as cell-sized
/// DATAGRAM frames like cells, never in packets of their own sizes.
///
/// Sizes, measured on these loopback links: a cell packet is 1 185 bytes (1-byte flags,
/// 8-byte connection id, 1-byte packet number, DATAGRAM frame type and 2-byte length, the
/// 1 156-byte link cell, 16-byte tag), up to 8 bytes more when QUIC adds an ACK frame or a
/// longer packet number (1 190–1 193 seen); allowed: up to 12 more, 1 197, which stays under
/// the 1 200 bytes of a full packet at QUIC's minimum MTU (a CREATE on a stream filled one).
/// Small packets (ACK-only; PING-only too, if any) are 31–34 bytes; allowed: up to 40, under
/// a DESTROY on a stream (41 and 46 bytes with the old code). Long-header packets are the
/// handshake. Each connection's opening, up to its last path-MTU probe (PING + PADDING
/// packets of 1 326, 1 389, 1 420 and 1 452 bytes, quinn's binary search from 1 200 to
/// 1 452), also carries QUIC's own bookkeeping (NEW_CONNECTION_ID, HANDSHAKE_DONE and
/// NEW_TOKEN frames: packets of 54 to 408 bytes, or a cell packet 28 bytes longer): it
/// depends on the link, not on circuits, and sizes cannot tell it apart, so a flow's opening
/// is left out. Flows whose connection was up before a phase are checked whole.
fn quic_sizes_over_the_links_life(phases: [&[nyx_transport::fault::TappedDatagram]; 3]) {
    use nyx_overlay::circuit::LINK_CELL_LEN;
    const CELL_PACKET: usize = 1 + 8 + 1 + 3 + LINK_CELL_LEN + 16;
    let cell_sized = CELL_PACKET..=CELL_PACKET + 12;
    let ack_only = 1..=40;
    let long_header = |d: &&nyx_transport::fault::TappedDatagram| d.bytes[0] & 0x80 != 0;
    let (mut handshakes, mut checked, mut teardown_on_old_links) = (0, 0, 0);
    for (phase, datagrams) in ["setup", "data", "teardown and rebuild"].iter().zip(phases) {
        let mut flows: std::collections::HashMap<_, Vec<_>> = Default::default();
        for d in datagrams {
            flows.entry((d.from, d.to)).or_default().push(d);
        }
        for (flow, packets) in flows {
            // Where the opening of a connection made in this phase ends: its last
            // long-header packet or path-MTU probe.
            let opening = match packets.iter().any(long_header) {
                true => packets
                    .iter()
                    .rposition(|d| long_header(d) || d.bytes.len() > *cell_sized.end()),
                false => None,
            };
            handshakes += usize::from(opening.is_some());
            let after = opening.map_or(0, |i| i + 1);
            for d in &packets[after..] {
                let len = d.bytes.len();
                assert!(
                    cell_sized.contains(&len) || ack_only.contains(&len),
                    "{phase}, {flow:?}: a {len}-byte packet is neither cell-sized nor ACK-only"
                );
                checked += 1;
                if *phase == "teardown and rebuild" && opening.is_none() {
                    teardown_on_old_links += usize::from(cell_sized.contains(&len));
                }
            }
        }
    }
    assert!(handshakes > 0, "the capture covers link handshakes");
    // At least the first circuit's DESTROYs (client -> entry -> middle -> exit, one chunk
    // each) and their acknowledgements went over links that were up before, checked whole.
    assert!(
        teardown_on_old_links >= 6,
        "{teardown_on_old_links} cell-sized packets in the teardown on old links ({checked} checked)"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quic_wire_shows_only_ciphertext() {
    wire_check(TransportKind::Quic, 13).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn udp_wire_shows_only_ciphertext() {
    wire_check(TransportKind::Udp, 14).await;
}

async fn vanished_middle(transport: TransportKind, net: u8) {
    let mut t = testnet(transport, net, 6, None).await;
    let mut c = t.circuit(0).await;
    echo(&mut c, b"before").await;
    let middle = c.path()[1];
    let m = t.index(&middle);
    t.inner.nodes[m].take().unwrap().kill();
    // Reported within a bounded time: the link timeout (2 s) plus slack.
    let msg = timeout(Duration::from_secs(10), async {
        loop {
            match c.recv().await {
                Some(CircuitMessage::Data(_)) => continue,
                other => return other,
            }
        }
    })
    .await
    .expect("destruction reported in time");
    assert!(
        matches!(msg, Some(CircuitMessage::Destroyed { .. })),
        "{msg:?}"
    );
    // New circuits avoid the vanished relay.
    for _ in 0..6 {
        let mut fresh = t.circuit(0).await;
        assert!(
            !fresh.path().contains(&middle),
            "path through the stopped relay"
        );
        echo(&mut fresh, b"after").await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quic_vanished_middle_relay() {
    vanished_middle(TransportKind::Quic, 15).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn udp_vanished_middle_relay() {
    vanished_middle(TransportKind::Udp, 16).await;
}

/// A stranger with a valid link sends garbage cells and control messages, and raw garbage
/// datagrams hit every socket: all are dropped and counted; live circuits carry on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_from_strangers_is_counted_and_harmless() {
    use nyx_overlay::circuit::LINK_CELL_LEN;
    use nyx_transport::quic::{QuicConfig, QuicEndpoint};
    let t = testnet(TransportKind::Quic, 17, 5, None).await;
    let mut c = t.circuit(0).await;
    echo(&mut c, b"before").await;
    let victim = t.index(&c.path()[1]);

    // Raw garbage at every node's socket.
    let raw = std::net::UdpSocket::bind("127.0.17.99:0").unwrap();
    for addr in &t.addrs {
        for len in [0usize, 1, 40, 1200, 1500] {
            raw.send_to(&vec![0xA5; len], addr).unwrap();
        }
    }

    // A stranger with a real link to the middle relay.
    let stranger = std::sync::Arc::new(nyx_crypto::identity::IdentityKey::generate().unwrap());
    let endpoint = QuicEndpoint::bind(
        "127.0.17.98:0".parse().unwrap(),
        stranger,
        QuicConfig::default(),
    )
    .unwrap();
    let link = endpoint
        .connect(t.ids[victim], t.addrs[victim])
        .await
        .unwrap();
    // Driven, so that its control messages are resent until acknowledged.
    let (to, _from) = tokio::sync::mpsc::channel(64);
    tokio::spawn(nyx_transport::link::drive_quic_link(link.clone(), to));
    let before = t.node(victim).handle().stats().await.unwrap().overlay;
    for i in 0..50u32 {
        let mut cell = vec![(i % 251) as u8; LINK_CELL_LEN];
        cell[..4].copy_from_slice(&(i + 1).to_be_bytes());
        link.send_cell(cell.into()).unwrap();
    }
    // Malformed: the wrong length (several: cells are datagrams). A cell of circuit id 0
    // cannot be sent over QUIC (it would be a control datagram); raw datagrams that begin
    // like one but do not decode are dropped by the relay's link.
    for _ in 0..10 {
        link.send_cell(vec![1u8; 100].into()).unwrap();
        assert!(link.send_cell(vec![0u8; LINK_CELL_LEN].into()).is_err());
        let junk = vec![0u8; LINK_CELL_LEN].into();
        link.raw_connection().send_datagram(junk).unwrap();
    }
    for msg in [vec![], vec![99u8], vec![3, 0, 0, 0, 7, 1], vec![1u8; 20]] {
        link.send_control(&msg).unwrap();
    }
    // Wait until the relay has counted them (cells may be lost; control is reliable).
    let mut after = before;
    for _ in 0..100 {
        after = t.node(victim).handle().stats().await.unwrap().overlay;
        if after.bad_control >= before.bad_control + 4
            && after.dropped_unknown_circuit > before.dropped_unknown_circuit
            && after.dropped_malformed > before.dropped_malformed
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        after.dropped_unknown_circuit > before.dropped_unknown_circuit,
        "{after:?}"
    );
    assert!(after.bad_control >= before.bad_control + 4, "{after:?}");
    assert!(
        after.dropped_malformed > before.dropped_malformed,
        "{after:?}"
    );
    echo(&mut c, b"after").await;
}

/// A relay in the directory that is down: builds that pick it fail (build timeout), the
/// node blames it and retries on a new path, and every circuit request still succeeds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_attempts_are_retried_on_paths_avoiding_the_dead_relay() {
    let mut t = testnet(TransportKind::Quic, 18, 6, None).await;
    let dead = t.ids[3];
    t.inner.nodes[3].take().unwrap().kill();
    let client = t.node(0).handle();
    let mut failed_attempts = 0;
    for _ in 0..30 {
        let mut c = t.circuit(0).await;
        assert!(
            !c.path().contains(&dead),
            "a built circuit through the dead relay"
        );
        echo(&mut c, b"ok").await;
        failed_attempts = client.stats().await.unwrap().overlay.circuits_failed;
        if failed_attempts > 0 {
            break;
        }
    }
    assert!(failed_attempts > 0, "no attempt ever picked the dead relay");
    // Once blamed, it is avoided: the next builds do not fail again.
    for _ in 0..5 {
        let c = t.circuit(0).await;
        assert!(!c.path().contains(&dead));
    }
    assert_eq!(
        client.stats().await.unwrap().overlay.circuits_failed,
        failed_attempts
    );
}

/// A burst of the client's own cells leaves it in pieces of at most 16 (while more cells
/// wait, the driver lets the link send what it has after every 16), so the guard starts on
/// the first while the client still seals the rest. On one thread the burst is queued whole
/// before the driver runs: without the pieces it would leave in one or two GSO sends of up
/// to 56 cells.
#[tokio::test]
async fn a_burst_of_cells_leaves_the_client_in_pieces() {
    const BURST: usize = 64;
    let tap = WireTap::new();
    let t = testnet(TransportKind::Udp, 74, 4, Some(tap.clone())).await;
    let mut circuit = t.circuit(0).await;
    echo(&mut circuit, b"warm").await;
    let (client, guard) = (t.addrs[0], t.addrs[t.index(&circuit.path()[0])]);
    let _ = tap.take();
    let payload = vec![0x42u8; nyx_overlay::circuit::MAX_FORWARD_BODY];
    for _ in 0..BURST {
        circuit.send(&payload).await.unwrap();
    }
    let mut echoed = 0;
    while echoed < BURST {
        match timeout(Duration::from_secs(2), circuit.recv()).await {
            Ok(Some(CircuitMessage::Data(got))) => {
                assert_eq!(got[..], payload[..]);
                echoed += 1;
            }
            Ok(other) => panic!("unexpected {other:?}"),
            // Cells are datagrams; a lost one is not what this test is about.
            Err(_) => break,
        }
    }
    assert!(echoed >= BURST - 4, "only {echoed} of {BURST} echoed");
    let mut per_send = std::collections::BTreeMap::<u64, usize>::new();
    for d in tap.take() {
        if d.from == client && d.to == guard {
            *per_send.entry(d.send).or_default() += 1;
        }
    }
    let cells: usize = per_send.values().sum();
    let largest = per_send.values().copied().max().unwrap_or(0);
    assert!(cells >= BURST, "{cells} datagrams to the guard");
    assert!(
        largest <= 16,
        "a send carried {largest} cells: {per_send:?}"
    );
    assert!(per_send.len() >= BURST / 16, "{per_send:?}");
}
