//! Streams end to end, on in-process testnets of five nodes (127.0.x.y), to TCP servers on
//! loopback, with a direct loopback TCP baseline in the same run:
//!
//! * `e2e/goodput/{quic,udp}`: one stream, 3 hops, 64 MiB to a sink that acknowledges the
//!   end; `e2e/goodput/tcp_direct` copies the same bytes to the same sink over plain TCP.
//! * `e2e/goodput_loss/{5,20}`: the QUIC case with the fault shim on every node, set so
//!   that a cell's path (four transport hops) loses 5% or 20%, plus 1% duplication and 2%
//!   reordering.
//! * `e2e/ttfb/{nyx,tcp_direct}`: open a stream over a built circuit, send one byte, get the
//!   first byte of the reply.
//!
//! `cargo bench -p nyx-benches --bench streams`

use std::net::SocketAddr;
use std::num::NonZeroU32;
use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use nyx_core::config::TransportKind;
use nyx_core::rate::Quota;
use nyx_node::testing::{LocalTestnet, LocalTestnetSpec, node_settings};
use nyx_node::{NodeHandle, NodeSettings};
use nyx_overlay::circuit::OverlayConfig;
use nyx_transport::fault::FaultConfig;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::runtime::Runtime;

const TOTAL: u64 = 64 * 1024 * 1024;

fn runtime() -> Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
}

fn settings(faults: FaultConfig) -> NodeSettings {
    // Unthrottled CREATEs: the benches build circuits back to back.
    let fast = Quota::new(NonZeroU32::MAX, NonZeroU32::MAX);
    NodeSettings {
        overlay: OverlayConfig {
            circuit_creates: fast,
            ..OverlayConfig::default()
        },
        faults,
        ..node_settings()
    }
}

fn testnet(rt: &Runtime, net: u8, transport: TransportKind, faults: FaultConfig) -> LocalTestnet {
    rt.block_on(LocalTestnet::start(LocalTestnetSpec {
        nodes: 5,
        net,
        transport,
        settings: settings(faults),
        ..LocalTestnetSpec::default()
    }))
    .expect("testnet")
}

/// Per-link faults for a given loss over a cell's four transport hops.
fn path_faults(path_loss: f64) -> FaultConfig {
    FaultConfig {
        loss: 1.0 - (1.0 - path_loss).powf(0.25),
        duplicate: 0.01,
        reorder: 0.02,
        reorder_window: Duration::from_millis(5),
        seed: 5,
        ..FaultConfig::default()
    }
}

/// A sink: reads a connection to its end, then answers one byte and closes.
async fn sink_server() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        while let Ok((mut conn, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buf = vec![0u8; 256 * 1024];
                while let Ok(n) = conn.read(&mut buf).await {
                    if n == 0 {
                        break;
                    }
                }
                let _ = conn.write_all(b"!").await;
                let _ = conn.shutdown().await;
            });
        }
    });
    addr
}

/// An echo server (for time to first byte).
async fn echo_server() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        while let Ok((mut conn, _)) = listener.accept().await {
            tokio::spawn(async move {
                let (mut r, mut w) = conn.split();
                let _ = tokio::io::copy(&mut r, &mut w).await;
            });
        }
    });
    addr
}

/// Send TOTAL bytes, close our side, wait for the sink's acknowledgement.
async fn push<S: AsyncRead + AsyncWrite + Unpin>(mut s: S) {
    let buf = vec![0x5au8; 256 * 1024];
    let mut sent = 0;
    while sent < TOTAL {
        s.write_all(&buf).await.expect("write");
        sent += buf.len() as u64;
    }
    s.shutdown().await.expect("shutdown");
    let mut ack = [0u8; 1];
    s.read_exact(&mut ack).await.expect("sink acknowledgement");
}

fn bench_goodput(
    c: &mut Criterion,
    group: &str,
    name: &str,
    rt: &Runtime,
    client: &NodeHandle,
    sink: SocketAddr,
) {
    let mut g = c.benchmark_group(group);
    g.sample_size(10);
    g.measurement_time(Duration::from_secs(20));
    g.throughput(Throughput::Bytes(TOTAL));
    g.bench_function(name, |b| {
        b.iter_custom(|iters| {
            rt.block_on(async {
                let start = Instant::now();
                for _ in 0..iters {
                    let stream = client.connect(&sink.to_string()).await.expect("connect");
                    push(stream).await;
                }
                start.elapsed()
            })
        });
    });
    g.finish();
    let stats = rt.block_on(client.stream_stats());
    if std::env::var_os("NYX_BENCH_DEBUG").is_some() {
        eprintln!("{stats:?}");
    }
    eprintln!(
        "{group}/{name}: FEC overhead {:.3}, packets lost {} of {}, window {}, srtt {:?}, min rtt {:?}",
        stats.fec_overhead(),
        stats.lost,
        stats.packets_sent,
        stats.window,
        stats.srtt,
        stats.min_rtt
    );
}

fn goodput(c: &mut Criterion) {
    let rt = runtime();
    let sink = rt.block_on(sink_server());
    {
        let mut g = c.benchmark_group("e2e/goodput");
        g.sample_size(10);
        g.measurement_time(Duration::from_secs(10));
        g.throughput(Throughput::Bytes(TOTAL));
        g.bench_function("tcp_direct", |b| {
            b.iter_custom(|iters| {
                rt.block_on(async {
                    let start = Instant::now();
                    for _ in 0..iters {
                        push(TcpStream::connect(sink).await.expect("connect")).await;
                    }
                    start.elapsed()
                })
            });
        });
        g.finish();
    }
    for (net, transport, name) in [
        (40, TransportKind::Quic, "quic"),
        (41, TransportKind::Udp, "udp"),
    ] {
        let testnet = testnet(&rt, net, transport, FaultConfig::default());
        let client = testnet.node(0).expect("node").handle();
        bench_goodput(c, "e2e/goodput", name, &rt, &client, sink);
        shutdown(&rt, testnet);
    }
    for (net, loss, name) in [(42, 0.05, "5"), (43, 0.20, "20")] {
        let testnet = testnet(&rt, net, TransportKind::Quic, path_faults(loss));
        let client = testnet.node(0).expect("node").handle();
        bench_goodput(c, "e2e/goodput_loss", name, &rt, &client, sink);
        shutdown(&rt, testnet);
    }
}

fn ttfb(c: &mut Criterion) {
    let rt = runtime();
    let echo = rt.block_on(echo_server());
    let testnet = testnet(&rt, 44, TransportKind::Quic, FaultConfig::default());
    let client = testnet.node(0).expect("node").handle();
    let target = echo.to_string();
    // The first stream builds the circuit; the measured ones reuse it.
    rt.block_on(async {
        let mut s = client.connect(&target).await.expect("connect");
        s.write_all(b"x").await.expect("write");
        let mut one = [0u8; 1];
        s.read_exact(&mut one).await.expect("read");
    });
    let mut g = c.benchmark_group("e2e/ttfb");
    g.sample_size(50);
    g.bench_function("nyx", |b| {
        b.to_async(&rt).iter(|| async {
            let mut s = client.connect(&target).await.expect("connect");
            s.write_all(b"x").await.expect("write");
            let mut one = [0u8; 1];
            s.read_exact(&mut one).await.expect("read");
        });
    });
    g.bench_function("tcp_direct", |b| {
        b.to_async(&rt).iter(|| async {
            let mut s = TcpStream::connect(echo).await.expect("connect");
            s.write_all(b"x").await.expect("write");
            let mut one = [0u8; 1];
            s.read_exact(&mut one).await.expect("read");
        });
    });
    g.finish();
    shutdown(&rt, testnet);
}

fn shutdown(rt: &Runtime, testnet: LocalTestnet) {
    rt.block_on(async {
        for node in testnet.nodes.into_iter().flatten() {
            node.shutdown_within(Duration::from_millis(500)).await;
        }
    });
}

criterion_group!(benches, goodput, ttfb);
criterion_main!(benches);
