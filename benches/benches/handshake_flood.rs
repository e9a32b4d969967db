//! A flood of QUIC first packets (Initials carrying a ClientHello) against a relay while a
//! legitimate client keeps building circuits through it: the relay's CPU and the client's
//! circuits, for a relay with the default admission (`nyx_transport::admission`: a
//! stateless Retry under load, per-prefix limits, a cap on handshakes in progress) and for
//! one with admission switched off, next to the same client without a flood, in one run.
//!
//! The flood is what a spoofing attacker sends: 20 000 real Initials (captured from quinn
//! diallers, each with its own connection id) sent in turn, each from a fresh source socket
//! on 127.1.x.1, at whatever rate one thread reaches: every packet is a connection attempt
//! (quinn routes a repeated connection id to the connection it already opened, so only
//! distinct Initials cost an open relay a handshake). Nothing the relay answers is
//! read. Each accepted attempt costs the relay a hybrid encapsulation and a signature; a
//! Retry costs it one packet.
//!
//! CPU is read per thread from /proc: each relay runs on its own one-thread runtime, named
//! `guarded` or `open`.
//!
//! `cargo bench -p nyx-benches --bench handshake_flood`

use std::net::{Ipv4Addr, SocketAddr, UdpSocket};
use std::num::NonZeroU32;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use nyx_core::config::TransportKind;
use nyx_core::rate::Quota;
use nyx_node::testing::node_settings;
use nyx_node::{BoundNode, Directory, DirectoryPeer, Node, NodeKeys, NodeRole, NodeSettings};
use nyx_transport::admission::AdmissionConfig;
use nyx_transport::quic::{QuicConfig, QuicEndpoint};

const NET: u8 = 90;
const PHASE: Duration = Duration::from_secs(10);

fn runtime(name: &str, threads: usize) -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads)
        .thread_name(name)
        .enable_all()
        .build()
        .expect("a runtime")
}

/// CPU seconds spent so far by this process's threads named `name`.
fn thread_cpu(name: &str) -> f64 {
    let ticks = 100.0; // USER_HZ on Linux
    let mut total = 0u64;
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return 0.0;
    };
    for task in tasks.flatten() {
        let path = task.path();
        let comm = std::fs::read_to_string(path.join("comm")).unwrap_or_default();
        if comm.trim() != name {
            continue;
        }
        let stat = std::fs::read_to_string(path.join("stat")).unwrap_or_default();
        // Fields after the parenthesised command: utime and stime are the 12th and 13th.
        let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r) else {
            continue;
        };
        let fields: Vec<&str> = rest.split_whitespace().collect();
        let utime: u64 = fields.get(11).and_then(|f| f.parse().ok()).unwrap_or(0);
        let stime: u64 = fields.get(12).and_then(|f| f.parse().ok()).unwrap_or(0);
        total += utime + stime;
    }
    total as f64 / ticks
}

/// Build one-hop circuits to the relay for `PHASE`, under the client's own CREATE rate:
/// (built, failed, median build time).
async fn client_phase(client: &Node, relay: &DirectoryPeer) -> (usize, usize, Duration) {
    let start = Instant::now();
    let (mut built, mut failed) = (0, 0);
    let mut times = Vec::new();
    let handle = client.handle();
    while start.elapsed() < PHASE {
        let t = Instant::now();
        let attempt = handle.directory_circuit(relay.clone());
        match tokio::time::timeout(Duration::from_secs(5), attempt).await {
            Ok(Ok(circuit)) => {
                times.push(t.elapsed());
                built += 1;
                circuit.close().await;
            }
            _ => failed += 1,
        }
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
    times.sort();
    let median = times.get(times.len() / 2).copied().unwrap_or_default();
    (built, failed, median)
}

/// A relay on its own runtime, with `admission`: the node, its descriptor as a peer.
fn relay(
    rt: &tokio::runtime::Runtime,
    host: u8,
    admission: AdmissionConfig,
) -> (Node, DirectoryPeer) {
    let now = nyx_node::unix_now();
    let keys = NodeKeys::generate(now).expect("keys");
    let identity = keys.identity.clone();
    rt.block_on(async {
        let mut settings = NodeSettings {
            role: NodeRole::Relay,
            transport: TransportKind::Quic,
            listen: SocketAddr::from((Ipv4Addr::new(127, 0, NET, host), 0)),
            ..node_settings()
        };
        settings.quic.admission = admission;
        let bound = BoundNode::bind(keys, settings).expect("bind");
        let descriptor = bound
            .descriptor_builder("flooded", 100, now, Duration::from_secs(3600))
            .expect("a relay")
            .sign(&identity)
            .expect("signed");
        let node = bound.start(Directory::default()).expect("start");
        (node, DirectoryPeer::Relay(Box::new(descriptor)))
    })
}

/// `n` real QUIC Initials, each opening a different connection (its own destination
/// connection id), as quinn diallers send them first: captured at a socket that never
/// answers.
fn capture_initials(rt: &tokio::runtime::Runtime, to: &DirectoryPeer, n: usize) -> Vec<Vec<u8>> {
    let sink = UdpSocket::bind((Ipv4Addr::new(127, 0, NET, 9), 0)).expect("sink");
    let _ = sink.set_read_timeout(Some(Duration::from_secs(5)));
    let sink_addr = sink.local_addr().expect("sink address");
    let node = to.node_id();
    rt.spawn(async move {
        let from = SocketAddr::from((Ipv4Addr::new(127, 0, NET, 8), 0));
        let Ok(ep) = QuicEndpoint::bind_client(from, QuicConfig::default()) else {
            return;
        };
        let ep = Arc::new(ep);
        for _ in 0..n {
            let ep = ep.clone();
            tokio::spawn(async move {
                let _ = tokio::time::timeout(Duration::from_secs(10), ep.connect(node, sink_addr))
                    .await;
            });
            tokio::task::yield_now().await;
        }
        tokio::time::sleep(Duration::from_secs(12)).await;
    });
    let mut seen = std::collections::HashSet::new();
    let mut initials = Vec::new();
    let mut buf = vec![0u8; 2048];
    while initials.len() < n {
        let Ok((len, _)) = sink.recv_from(&mut buf) else {
            break;
        };
        // A long-header Initial: its destination connection id names the connection.
        let dcid = buf.get(5).map(|l| usize::from(*l)).unwrap_or(0);
        let is_initial = buf[0] & 0xf0 == 0xc0;
        if is_initial && len >= 1200 && seen.insert(buf[6..6 + dcid].to_vec()) {
            initials.push(buf[..len].to_vec());
        }
    }
    initials
}

/// Send the `initials` to `to` in turn until `running` ends, each from a new source (a
/// fresh socket on one of 256 addresses 127.1.x.1, so a fresh port). The count sent.
fn flood(
    initials: Arc<Vec<Vec<u8>>>,
    to: SocketAddr,
    running: Arc<AtomicBool>,
    sent: Arc<AtomicU64>,
) {
    let mut i = 0usize;
    while running.load(Ordering::Relaxed) {
        i = i.wrapping_add(1);
        let [_, _, _, _, _, _, _, a] = i.to_be_bytes();
        let Ok(s) = UdpSocket::bind((Ipv4Addr::new(127, 1, a, 1), 0)) else {
            continue;
        };
        if s.send_to(&initials[i % initials.len()], to).is_ok() {
            sent.fetch_add(1, Ordering::Relaxed);
        }
    }
}

fn main() {
    let guarded_rt = runtime("guarded", 1);
    let open_rt = runtime("open", 1);
    let client_rt = runtime("client", 1);
    let (guarded, guarded_peer) = relay(&guarded_rt, 1, AdmissionConfig::default());
    let off = AdmissionConfig {
        retry_threshold: u32::MAX,
        per_source: Quota::new(NonZeroU32::MAX, NonZeroU32::MAX),
        max_handshakes: usize::MAX,
        ..AdmissionConfig::default()
    };
    let (open, open_peer) = relay(&open_rt, 2, off);
    let initials = Arc::new(capture_initials(&client_rt, &guarded_peer, 20_000));
    let client = client_rt.block_on(async {
        Node::builder()
            .settings(NodeSettings {
                listen: SocketAddr::from((Ipv4Addr::new(127, 0, NET, 3), 0)),
                ..node_settings()
            })
            .transport(TransportKind::Quic)
            .directory(Directory::default())
            .build()
            .expect("client")
    });
    let secs = PHASE.as_secs_f64();
    println!(
        "handshake_flood: {} distinct QUIC Initials, each sent from a fresh source; each relay on one thread",
        initials.len()
    );

    let cpu0 = thread_cpu("guarded");
    let quiet = client_rt.block_on(client_phase(&client, &guarded_peer));
    let quiet_cpu = thread_cpu("guarded") - cpu0;
    println!(
        "no flood:          client built {:>3} / failed {:>3}, median build {:>9.2?}, relay CPU {:>3.0}%",
        quiet.0,
        quiet.1,
        quiet.2,
        100.0 * quiet_cpu / secs
    );
    for (name, node, peer) in [
        ("guarded", &guarded, &guarded_peer),
        ("open", &open, &open_peer),
    ] {
        let rt = if name == "open" {
            &open_rt
        } else {
            &guarded_rt
        };
        let before = rt
            .block_on(node.handle().stats())
            .map(|s| s.quic_admission)
            .unwrap_or_default();
        let running = Arc::new(AtomicBool::new(true));
        let sent = Arc::new(AtomicU64::new(0));
        let cpu = thread_cpu(name);
        let flooder = {
            let (initial, to, running, sent) = (
                initials.clone(),
                node.local_addr(),
                running.clone(),
                sent.clone(),
            );
            std::thread::spawn(move || flood(initial, to, running, sent))
        };
        let result = client_rt.block_on(client_phase(&client, peer));
        running.store(false, Ordering::Relaxed);
        let _ = flooder.join();
        let cpu = thread_cpu(name) - cpu;
        let sent = sent.load(Ordering::Relaxed);
        let after = rt
            .block_on(node.handle().stats())
            .map(|s| s.quic_admission)
            .unwrap_or_default();
        let accepted = after.accepted - before.accepted;
        let retries = after.retries - before.retries;
        println!(
            "flood, {name:>7}:   client built {:>3} / failed {:>3}, median build {:>9.2?}, relay CPU {:>3.0}%",
            result.0,
            result.1,
            result.2,
            100.0 * cpu / secs
        );
        println!(
            "                   {:.0} Initials/s sent; relay: {accepted} handshakes, {retries} Retries, {:.1} µs CPU per Initial sent",
            sent as f64 / secs,
            1e6 * cpu / sent.max(1) as f64
        );
    }
}
