//! `udp_loopback/*`: one datagram out and back on 127.0.0.1.
//!
//! `send_recv/N` is the raw baseline (std sockets, stack buffers); `pooled/N` does the same
//! round trip receiving into nyx-core pooled buffers, so the difference is the pool's cost on a
//! real I/O path.

use std::hint::black_box;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use nyx_benches::loopback_pair;
use nyx_core::buf::{BufferPool, PoolConfig};

fn bench(c: &mut Criterion) {
    let (a, b) = loopback_pair().expect("loopback sockets");
    let pool = BufferPool::new(PoolConfig::new(2048)).expect("pool");
    let mut g = c.benchmark_group("udp_loopback");
    for size in [64usize, 1200] {
        let payload = vec![0x5au8; size];
        g.throughput(Throughput::Bytes(size as u64 * 2));
        g.bench_with_input(BenchmarkId::new("send_recv", size), &size, |bench, _| {
            let mut buf = [0u8; 2048];
            bench.iter(|| {
                a.send(&payload).expect("send");
                let n = b.recv(&mut buf).expect("recv");
                b.send(&buf[..n]).expect("send back");
                black_box(a.recv(&mut buf).expect("recv back"))
            })
        });
        g.bench_with_input(BenchmarkId::new("pooled", size), &size, |bench, _| {
            bench.iter(|| {
                a.send(&payload).expect("send");
                let mut cell = pool.acquire().expect("buffer");
                let n = b.recv(cell.full_mut()).expect("recv");
                cell.truncate(n);
                b.send(&cell).expect("send back");
                drop(cell);
                let mut reply = pool.acquire().expect("buffer");
                black_box(a.recv(reply.full_mut()).expect("recv back"))
            })
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
