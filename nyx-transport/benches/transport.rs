//! nyx-transport benches with their baselines in the same group:
//!
//! * `udp_loopback/send_recv/{size}`: one datagram across loopback through the UDP
//!   transport's engine (seal, send, receive, open) vs `std_socket/{size}`: plain
//!   `std::net::UdpSocket` send/recv of the same payload.
//! * `cells/throughput/{quic,udp}`: 1152-byte cells one way over loopback with full crypto,
//!   received through each transport's driver task, vs `raw_quinn`: quinn datagrams with no
//!   NyxNet code, and `plain_send_to`: tokio `send_to`.
//!   Reported as time per cell.
//! * `quic/connect`: a new QUIC link, hybrid post-quantum handshake and identity check
//!   included.

use std::hint::black_box;
use std::net::{SocketAddr, UdpSocket};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use nyx_core::Timestamp;
use nyx_crypto::identity::IdentityKey;
use nyx_crypto::kem::HybridSecretKey;
use nyx_crypto::link::LinkKey;
use nyx_transport::link::{Inbound, Message, drive_quic_link};
use nyx_transport::quic::{QuicConfig, QuicEndpoint};
use nyx_transport::udp::{UdpCommand, UdpTransport};
use nyx_transport::udp::{UdpConfig, UdpEngine, UdpEvent};
use tokio::sync::mpsc;

const SIZES: [usize; 5] = [64, 512, 1024, 4096, 8192];
const CELL: usize = 1152;

fn identity(seed: u8) -> Arc<IdentityKey> {
    Arc::new(IdentityKey::from_seed(&[seed; 32]))
}

fn engine(seed: u8) -> UdpEngine {
    UdpEngine::new(
        UdpConfig {
            max_cell_len: 8192,
            ..UdpConfig::default()
        },
        identity(seed),
        vec![LinkKey::new(HybridSecretKey::from_seed(&[seed; 96]))],
        Timestamp::ZERO,
    )
    .expect("engine")
}

fn udp_loopback(c: &mut Criterion) {
    let sa = UdpSocket::bind("127.0.0.1:0").expect("bind");
    let sb = UdpSocket::bind("127.0.0.1:0").expect("bind");
    let (aa, ab) = (
        sa.local_addr().expect("addr"),
        sb.local_addr().expect("addr"),
    );
    // Two engines with a live link, datagrams moved through the real sockets.
    let (mut a, mut b) = (engine(1), engine(2));
    let kb = HybridSecretKey::from_seed(&[2; 96]);
    a.connect(
        identity(2).node_id(),
        kb.public().clone(),
        ab,
        Timestamp::ZERO,
    )
    .expect("connect");
    let mut buf = vec![0u8; 65536];
    for _ in 0..3 {
        while let Some((_, d)) = a.poll_transmit() {
            sa.send_to(&d, ab).expect("send");
            let (n, from) = sb.recv_from(&mut buf).expect("recv");
            b.handle_datagram(from, &buf[..n], Timestamp::ZERO);
        }
        while let Some((_, d)) = b.poll_transmit() {
            sb.send_to(&d, aa).expect("send");
            let (n, from) = sa.recv_from(&mut buf).expect("recv");
            a.handle_datagram(from, &buf[..n], Timestamp::ZERO);
        }
    }
    while a.poll_event().is_some() {}
    while b.poll_event().is_some() {}

    let mut g = c.benchmark_group("udp_loopback");
    for size in SIZES {
        g.throughput(Throughput::Bytes(size as u64));
        let payload = vec![0x5au8; size];
        g.bench_with_input(BenchmarkId::new("send_recv", size), &size, |bench, _| {
            bench.iter(|| {
                a.send_cell(ab, &payload, Timestamp::ZERO).expect("seal");
                let (_, d) = a.poll_transmit().expect("queued");
                sa.send_to(&d, ab).expect("send");
                let (n, from) = sb.recv_from(&mut buf).expect("recv");
                b.handle_datagram(from, &buf[..n], Timestamp::ZERO);
                match b.poll_event() {
                    Some(UdpEvent::Cell { data, .. }) => black_box(data.len()),
                    other => panic!("{other:?}"),
                }
            })
        });
        g.bench_with_input(BenchmarkId::new("std_socket", size), &size, |bench, _| {
            bench.iter(|| {
                sa.send_to(&payload, ab).expect("send");
                let (n, _) = sb.recv_from(&mut buf).expect("recv");
                black_box(n)
            })
        });
    }
    g.finish();
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
}

/// Two connected QUIC endpoints (ours) on loopback.
async fn quic_pair() -> (
    Arc<nyx_transport::quic::QuicLink>,
    Arc<nyx_transport::quic::QuicLink>,
    Vec<QuicEndpoint>,
) {
    let a = QuicEndpoint::bind(
        "127.0.0.1:0".parse().expect("addr"),
        identity(1),
        QuicConfig::default(),
    )
    .expect("a");
    let b = QuicEndpoint::bind(
        "127.0.0.1:0".parse().expect("addr"),
        identity(2),
        QuicConfig::default(),
    )
    .expect("b");
    let b_addr = b.local_addr().expect("addr");
    let (ab, ba) = tokio::join!(a.connect(identity(2).node_id(), b_addr), async {
        b.accept().await.expect("incoming")
    });
    (ab.expect("dial"), ba.expect("accept"), vec![a, b])
}

/// Cells per measured batch.
const BATCH: usize = 2000;

/// Send `n` cells as fast as the link takes them; the time from the first send to the last
/// arrival, and how many arrived (datagrams may be dropped when the sender outruns the
/// receiver; the receiver stops after 50 ms without one).
async fn one_way<S, R, Fut>(n: usize, mut send: S, mut recv: R) -> (Duration, usize)
where
    S: FnMut(usize),
    R: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let start = Instant::now();
    for i in 0..n {
        send(i);
        if i % 64 == 63 {
            tokio::task::yield_now().await;
        }
    }
    let mut got = 0;
    let mut last = start;
    while got < n {
        match tokio::time::timeout(Duration::from_millis(50), recv()).await {
            Ok(true) => {
                got += 1;
                last = Instant::now();
            }
            _ => break,
        }
    }
    (last - start, got)
}

/// Time per delivered cell over `iters` batches.
fn per_cell(iters: u64, mut batch: impl FnMut() -> (Duration, usize)) -> Duration {
    let mut total = Duration::ZERO;
    for _ in 0..iters {
        let (t, got) = batch();
        total += t.mul_f64(BATCH as f64 / got.max(1) as f64);
    }
    total
}

fn cells(c: &mut Criterion) {
    let rt = runtime();
    let mut g = c.benchmark_group("cells");
    g.sample_size(10);
    g.throughput(Throughput::Elements(BATCH as u64));
    // Ours over QUIC: the receiving link driven as the node drives it.
    let (ab, ba, _eps) = rt.block_on(quic_pair());
    let (to, from) = mpsc::channel(4096);
    rt.spawn(drive_quic_link(ba, to));
    let from = Arc::new(tokio::sync::Mutex::new(from));
    g.bench_function(BenchmarkId::new("throughput", "quic"), |bench| {
        bench.iter_custom(|iters| {
            per_cell(iters, || {
                rt.block_on(one_way(
                    BATCH,
                    |_| {
                        let _ = ab.send_cell(Bytes::from_static(&[7u8; CELL]));
                    },
                    || {
                        let rx = from.clone();
                        async move {
                            matches!(
                                rx.lock().await.recv().await,
                                Some(Inbound {
                                    message: Message::Cell(_),
                                    ..
                                })
                            )
                        }
                    },
                ))
            })
        })
    });
    // Raw quinn datagrams on a second connection, no NyxNet code on the path.
    let (ab, ba, _raw_eps) = rt.block_on(quic_pair());
    g.bench_function(BenchmarkId::new("throughput", "raw_quinn"), |bench| {
        bench.iter_custom(|iters| {
            per_cell(iters, || {
                let (ab, ba) = (ab.clone(), ba.clone());
                rt.block_on(one_way(
                    BATCH,
                    |_| {
                        let _ = ab
                            .raw_connection()
                            .send_datagram(Bytes::from_static(&[7u8; CELL]));
                    },
                    || {
                        let ba = ba.clone();
                        async move { ba.raw_connection().read_datagram().await.is_ok() }
                    },
                ))
            })
        })
    });
    // Ours over UDP (driver tasks, channels) vs plain tokio send_to.
    let (a_tx, b_rx, b_addr, _guards) = rt.block_on(async {
        let kb = HybridSecretKey::from_seed(&[2; 96]);
        let ta = UdpTransport::bind(
            "127.0.0.1:0".parse().expect("addr"),
            identity(1),
            vec![LinkKey::new(HybridSecretKey::from_seed(&[1; 96]))],
            UdpConfig::default(),
        )
        .expect("a");
        let tb = UdpTransport::bind(
            "127.0.0.1:0".parse().expect("addr"),
            identity(2),
            vec![LinkKey::new(HybridSecretKey::from_seed(&[2; 96]))],
            UdpConfig::default(),
        )
        .expect("b");
        let b_addr = tb.local_addr().expect("addr");
        let (actx, acrx) = mpsc::channel(4096);
        let (aetx, mut aerx) = mpsc::channel(4096);
        let (bctx, bcrx) = mpsc::channel(4096);
        let (betx, mut berx) = mpsc::channel(65536);
        tokio::spawn(ta.run(acrx, aetx));
        tokio::spawn(tb.run(bcrx, betx));
        actx.send(UdpCommand::Connect {
            peer: identity(2).node_id(),
            key: Box::new(kb.public().clone()),
            addr: b_addr,
        })
        .await
        .expect("cmd");
        let _ = aerx.recv().await;
        let _ = berx.recv().await;
        (actx, berx, b_addr, (bctx, aerx))
    });
    let b_rx = Arc::new(tokio::sync::Mutex::new(b_rx));
    g.bench_function(BenchmarkId::new("throughput", "udp"), |bench| {
        bench.iter_custom(|iters| {
            per_cell(iters, || {
                let (tx, rx) = (a_tx.clone(), b_rx.clone());
                rt.block_on(async move {
                    let sender = tokio::spawn(async move {
                        for _ in 0..BATCH {
                            let _ = tx
                                .send(UdpCommand::Cell {
                                    addr: b_addr,
                                    cell: Bytes::from_static(&[7u8; CELL]),
                                })
                                .await;
                        }
                    });
                    let result = one_way(
                        BATCH,
                        |_| {},
                        || {
                            let rx = rx.clone();
                            async move {
                                matches!(rx.lock().await.recv().await, Some(UdpEvent::Cell { .. }))
                            }
                        },
                    )
                    .await;
                    let _ = sender.await;
                    result
                })
            })
        })
    });
    let (plain_a, plain_b) = rt.block_on(async {
        (
            tokio::net::UdpSocket::bind("127.0.0.1:0").await.expect("a"),
            Arc::new(tokio::net::UdpSocket::bind("127.0.0.1:0").await.expect("b")),
        )
    });
    let plain_a = Arc::new(plain_a);
    let plain_to: SocketAddr = plain_b.local_addr().expect("addr");
    g.bench_function(BenchmarkId::new("throughput", "plain_send_to"), |bench| {
        bench.iter_custom(|iters| {
            per_cell(iters, || {
                let (tx, rx) = (plain_a.clone(), plain_b.clone());
                rt.block_on(async move {
                    let sender = tokio::spawn(async move {
                        for _ in 0..BATCH {
                            let _ = tx.send_to(&[7u8; CELL], plain_to).await;
                        }
                    });
                    let result = one_way(
                        BATCH,
                        |_| {},
                        || {
                            let rx = rx.clone();
                            async move {
                                let mut buf = [0u8; 2048];
                                rx.recv_from(&mut buf).await.is_ok()
                            }
                        },
                    )
                    .await;
                    let _ = sender.await;
                    result
                })
            })
        })
    });
    g.finish();
}

fn connect(c: &mut Criterion) {
    let rt = runtime();
    let (a, peer, addr, _b) = rt.block_on(async {
        let bind = |seed| {
            QuicEndpoint::bind(
                "127.0.0.1:0".parse().expect("addr"),
                identity(seed),
                QuicConfig::default(),
            )
            .expect("bind")
        };
        let (a, b) = (Arc::new(bind(1)), Arc::new(bind(2)));
        let addr = b.local_addr().expect("addr");
        let server = b.clone();
        tokio::spawn(async move {
            let mut held = Vec::new();
            while let Some(link) = server.accept().await {
                if let Ok(link) = link {
                    held.push(link);
                    if held.len() > 64 {
                        held.remove(0);
                    }
                }
            }
        });
        (a, identity(2).node_id(), addr, b)
    });
    let mut g = c.benchmark_group("quic");
    g.sample_size(20);
    g.bench_function("connect", |bench| {
        bench.iter(|| {
            let link = rt.block_on(a.connect(peer, addr)).expect("dial");
            link.close("bench");
            black_box(link.peer())
        })
    });
    g.finish();
}

criterion_group!(benches, udp_loopback, cells, connect);
criterion_main!(benches);
