//! End-to-end figures on an in-process testnet of five nodes on 127.0.20.x (QUIC):
//!
//! * `e2e/circuit_build`: build a 3-hop circuit (links already up) and close it.
//! * `e2e/echo_rtt`: one payload to the exit and its echo back over a built circuit.
//! * `relay/forward/{nyx,plain_udp}`: windows of 64 cells through one relay to an exit, with
//!   full onion and link crypto over real UDP sockets (the UDP transport), each node on a
//!   runtime (thread) of its own as in a deployment, next to a plain UDP relay thread
//!   forwarding 1156-byte datagrams in the same run.
//!
//! `cargo bench -p nyx-benches --bench e2e`

use std::net::UdpSocket;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use nyx_core::config::TransportKind;
use nyx_core::rate::Quota;
use nyx_node::testing::{LocalTestnet, LocalTestnetSpec, node_settings};
use nyx_node::{CircuitMessage, NodeSettings};
use nyx_overlay::circuit::OverlayConfig;
use nyx_overlay::path::{ExitRequirement, PathConfig};
use tokio::sync::Notify;

const WINDOW: u64 = 64;
const LINK_CELL: usize = 1156;

/// Default settings but unthrottled rate limits: these benches measure capacity and latency,
/// not the limits (with the defaults a client gets 10 CREATEs/s from its guard and a circuit
/// 5000 cells/s at each relay).
fn settings(hops: usize) -> NodeSettings {
    let fast = Quota::new(NonZeroU32::MAX, NonZeroU32::MAX);
    NodeSettings {
        overlay: OverlayConfig {
            link_cells: fast,
            circuit_cells: fast,
            circuit_creates: fast,
            ..OverlayConfig::default()
        },
        path: PathConfig {
            hops,
            ..node_settings().path
        },
        ..node_settings()
    }
}

/// What the exits of a bench's testnet do with the payloads they get.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Exits {
    /// Send each back.
    Echo,
    /// Hand them to the bench (`take_exit_requests`), which counts them.
    Count,
}

fn testnet(
    rt: &tokio::runtime::Runtime,
    net: u8,
    hops: usize,
    transport: TransportKind,
    exits: Exits,
    runtimes: Vec<tokio::runtime::Handle>,
) -> LocalTestnet {
    rt.block_on(LocalTestnet::start(LocalTestnetSpec {
        nodes: 5,
        net,
        transport,
        settings: settings(hops),
        echo: exits == Exits::Echo,
        raw_exits: exits == Exits::Count,
        runtimes,
        ..LocalTestnetSpec::default()
    }))
    .expect("testnet")
}

fn e2e(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let net = testnet(&rt, 20, 3, TransportKind::Quic, Exits::Echo, Vec::new());
    let client = net.node(0).expect("node").handle();
    let mut g = c.benchmark_group("e2e");
    g.sample_size(30);
    // The first build also opens the links; measure builds over open links.
    rt.block_on(async {
        for _ in 0..5 {
            let circuit = client
                .build_circuit(ExitRequirement::Any)
                .await
                .expect("circuit");
            circuit.close().await;
        }
    });
    g.bench_function("circuit_build", |b| {
        b.to_async(&rt).iter(|| async {
            let circuit = client
                .build_circuit(ExitRequirement::Any)
                .await
                .expect("circuit");
            circuit.close().await;
        });
    });
    let mut circuit = rt
        .block_on(client.build_circuit(ExitRequirement::Any))
        .expect("circuit");
    g.bench_function("echo_rtt", |b| {
        b.iter(|| {
            rt.block_on(async {
                circuit.send(b"ping").await.expect("send");
                loop {
                    match tokio::time::timeout(Duration::from_secs(1), circuit.recv()).await {
                        Ok(Some(CircuitMessage::Data(_))) => break,
                        Ok(other) => panic!("{other:?}"),
                        Err(_) => circuit.send(b"ping").await.expect("resend"),
                    }
                }
            })
        });
    });
    g.finish();
}

fn relay_forward(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    // Two hops (entry = the relay measured, then the exit), UDP transport; the exits count
    // what arrives instead of echoing.
    // Each node on a runtime of one worker, as each is a process of its own in a deployment
    // (and `nyx testnet` gives each daemon one worker): the relay measured gets a thread of
    // its own, as the plain relay below does.
    let node_rts: Vec<tokio::runtime::Runtime> = (0..5)
        .map(|i| {
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .thread_name(format!("node{i}"))
                .enable_all()
                .build()
                .expect("runtime")
        })
        .collect();
    let handles = node_rts.iter().map(|r| r.handle().clone()).collect();
    let mut net = testnet(&rt, 21, 2, TransportKind::Udp, Exits::Count, handles);
    let arrived = Arc::new(AtomicU64::new(0));
    // The count at which the window under way is complete.
    let complete = Arc::new(AtomicU64::new(u64::MAX));
    // Wakes the bench when its window is complete: it waits without spinning, as the plain
    // relay's sender blocks in `recv` (a spinning waiter took a third of the two cores from
    // the pipeline it measures), and once per window, not per cell.
    let arrival = Arc::new(Notify::new());
    for (slot, node_rt) in net.nodes.iter_mut().zip(&node_rts) {
        if let Some(node) = slot.as_mut()
            && let Some(mut rx) = node.take_exit_requests()
        {
            let (arrived, complete, arrival) = (arrived.clone(), complete.clone(), arrival.clone());
            // On the exit's own runtime: the exit consumes what it receives, as the plain
            // relay's sink does, without a wake-up of another thread per cell.
            node_rt.spawn(async move {
                while rx.recv().await.is_some() {
                    let n = arrived.fetch_add(1, Ordering::Relaxed) + 1;
                    if n >= complete.load(Ordering::Relaxed) {
                        arrival.notify_one();
                    }
                }
            });
        }
    }
    let client = net.node(0).expect("node").handle();
    let circuit = rt
        .block_on(client.build_circuit(ExitRequirement::Any))
        .expect("circuit");
    let payload = vec![0x42u8; nyx_overlay::circuit::MAX_FORWARD_BODY];

    let mut g = c.benchmark_group("relay/forward");
    g.throughput(Throughput::Elements(WINDOW));
    // Windows waited for, and those whose cells did not all arrive within the wait: a
    // figure made of timeouts measures the timeout, so more than 1% fails the bench.
    let (windows, timed_out) = (AtomicU64::new(0), AtomicU64::new(0));
    g.bench_function("nyx", |b| {
        b.iter_custom(|iters| {
            rt.block_on(async {
                let start = Instant::now();
                for _ in 0..iters {
                    let target = arrived.load(Ordering::Relaxed) + WINDOW;
                    complete.store(target, Ordering::Relaxed);
                    for _ in 0..WINDOW {
                        circuit.send(&payload).await.expect("send");
                    }
                    // Wait for the window (a lost cell costs at most the wait below).
                    let deadline = tokio::time::Instant::now() + Duration::from_millis(200);
                    while arrived.load(Ordering::Relaxed) < target {
                        let wake = tokio::time::timeout_at(deadline, arrival.notified());
                        if wake.await.is_err() {
                            break;
                        }
                    }
                    windows.fetch_add(1, Ordering::Relaxed);
                    if arrived.load(Ordering::Relaxed) < target {
                        timed_out.fetch_add(1, Ordering::Relaxed);
                    }
                    arrived.store(
                        target.max(arrived.load(Ordering::Relaxed)),
                        Ordering::Relaxed,
                    );
                }
                start.elapsed()
            })
        });
    });

    let (windows, timed_out) = (windows.into_inner(), timed_out.into_inner());
    assert!(
        timed_out * 100 <= windows,
        "{timed_out} of {windows} windows timed out: cells are not reaching the exit"
    );

    // Baseline: the same windows through a plain UDP relay thread.
    let a = UdpSocket::bind("127.0.0.1:0").expect("bind");
    let relay = UdpSocket::bind("127.0.0.1:0").expect("bind");
    let sink = UdpSocket::bind("127.0.0.1:0").expect("bind");
    sink.set_read_timeout(Some(Duration::from_millis(200)))
        .expect("timeout");
    let (relay_addr, sink_addr) = (
        relay.local_addr().expect("addr"),
        sink.local_addr().expect("addr"),
    );
    std::thread::spawn(move || {
        let mut buf = [0u8; 2048];
        while let Ok(n) = relay.recv(&mut buf) {
            let _ = relay.send_to(&buf[..n], sink_addr);
        }
    });
    let cell = [0x42u8; LINK_CELL];
    g.bench_function("plain_udp", |b| {
        b.iter_custom(|iters| {
            let mut buf = [0u8; 2048];
            let start = Instant::now();
            for _ in 0..iters {
                for _ in 0..WINDOW {
                    a.send_to(&cell, relay_addr).expect("send");
                }
                for _ in 0..WINDOW {
                    if sink.recv(&mut buf).is_err() {
                        break;
                    }
                }
            }
            start.elapsed()
        });
    });
    g.finish();
    let stats = rt
        .block_on(net.node(0).expect("node").handle().stats())
        .expect("stats");
    eprintln!("client send failures: {}", stats.send_failures);
}

criterion_group!(benches, e2e, relay_forward);
criterion_main!(benches);
