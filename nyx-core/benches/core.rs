//! nyx-core hot paths. Names follow the original NyxNet report so figures compare one to one;
//! every group carries its own baseline measured in the same run (see docs/benchmarks.md).

use std::hint::black_box;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use nyx_core::NodeId;
use nyx_core::buf::{BufferPool, PoolConfig};
use nyx_core::rate::{KeyedLimiter, Limiter, Quota};
use nyx_core::time::CoarseClock;

/// A quota that admits everything a bench can throw at it, so both paths measure admission.
fn generous() -> Quota {
    Quota::per_second(u32::MAX)
        .and_then(|q| q.with_burst(u32::MAX))
        .expect("quota")
}

/// A coarse clock ticked every millisecond by a background thread, as the daemon does.
struct Ticker {
    clock: CoarseClock,
    stop: Arc<AtomicBool>,
}

impl Ticker {
    fn start() -> Self {
        let clock = CoarseClock::new();
        let stop = Arc::new(AtomicBool::new(false));
        let (c, s) = (clock.clone(), Arc::clone(&stop));
        thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                c.tick();
                thread::sleep(Duration::from_millis(1));
            }
        });
        Ticker { clock, stop }
    }
}

impl Drop for Ticker {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

fn node_ids(n: usize) -> Vec<NodeId> {
    (0..n)
        .map(|i| {
            let mut b = [0u8; 32];
            b[..8].copy_from_slice(&(i as u64).to_le_bytes());
            b[8..16].copy_from_slice(&(i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15).to_le_bytes());
            NodeId::from_bytes(b)
        })
        .collect()
}

fn rate_limiter(c: &mut Criterion) {
    let ticker = Ticker::start();
    let clock = &ticker.clock;
    let mut g = c.benchmark_group("rate_limiter");

    // Single key: the lock-free limiter with the coarse clock, next to the same check with an
    // `Instant::now()` per call (what the coarse clock saves).
    let single = Limiter::new(generous());
    g.bench_function("single/coarse_clock", |b| {
        b.iter(|| black_box(single.check(clock.now())))
    });
    g.bench_function("single/instant_now", |b| {
        b.iter(|| black_box(single.check(clock.timestamp_of(Instant::now()))))
    });

    // Keyed limiter with N distinct 32-byte node ids, visited round-robin.
    for n in [10usize, 100, 1000] {
        let keyed = KeyedLimiter::new(generous(), 65_536).expect("keyed");
        let ids = node_ids(n);
        let mut i = 0;
        g.bench_with_input(BenchmarkId::new("allow", n), &n, |b, _| {
            b.iter(|| {
                i = if i + 1 == ids.len() { 0 } else { i + 1 };
                black_box(keyed.check(&ids[i], clock.now()))
            })
        });
    }

    // An idle limiter with burst N takes N requests, then refuses one: N+1 checks per iteration.
    for n in [10u32, 100, 1000] {
        let quota = Quota::per_second(1)
            .and_then(|q| q.with_burst(n))
            .expect("quota");
        g.throughput(Throughput::Elements(u64::from(n) + 1));
        g.bench_with_input(BenchmarkId::new("burst", n), &n, |b, &n| {
            b.iter(|| {
                let limiter = Limiter::new(quota);
                let now = clock.now();
                let admitted = (0..=n).filter(|_| limiter.check(now).is_ok()).count();
                assert_eq!(admitted, n as usize);
                black_box(admitted)
            })
        });
    }
    g.throughput(Throughput::Elements(1));

    // Two threads hammering one single-key limiter (one atomic word), and a keyed limiter with
    // each thread on its own keys. Time is wall time per check per thread.
    let shared = Limiter::new(generous());
    g.bench_function("contended", |b| {
        b.iter_custom(|iters| {
            owned_threads(2, |_| {
                let (shared, clock) = (&shared, clock.clone());
                move || {
                    for _ in 0..iters {
                        black_box(shared.check(clock.now()).is_ok());
                    }
                }
            })
        })
    });
    let keyed = KeyedLimiter::new(generous(), 65_536).expect("keyed");
    let ids = node_ids(2000);
    g.bench_function("contended_keyed/1000", |b| {
        b.iter_custom(|iters| {
            owned_threads(2, |half| {
                let (keyed, clock) = (&keyed, clock.clone());
                let mine = &ids[half * 1000..][..1000];
                move || {
                    for i in 0..iters as usize {
                        black_box(keyed.check(&mine[i % 1000], clock.now()).is_ok());
                    }
                }
            })
        })
    });
    g.finish();
}

fn memory(c: &mut Criterion) {
    let mut g = c.benchmark_group("memory/allocation");
    for size in [1024usize, 1280, 4096, 16384, 65536] {
        let pool = BufferPool::new(PoolConfig {
            prealloc: 4,
            ..PoolConfig::new(size)
        })
        .expect("pool");
        g.bench_with_input(BenchmarkId::new("pool", size), &size, |b, _| {
            b.iter(|| black_box(pool.acquire().expect("buffer")))
        });
        g.bench_with_input(BenchmarkId::new("vec_baseline", size), &size, |b, &size| {
            b.iter(|| black_box(Vec::<u8>::with_capacity(size)))
        });
    }
    g.finish();

    // Threads acquiring and releasing from one pool at once. Every worker is a fresh thread
    // that owns its pool handle, so the 1- and 2-thread cases differ only in the thread count
    // (a worker reading through references into another thread's stack measures false sharing
    // of that stack, not the pool).
    let mut g = c.benchmark_group("memory/contended");
    let pool = BufferPool::new(PoolConfig {
        prealloc: 16,
        ..PoolConfig::new(1280)
    })
    .expect("pool");
    for threads in [1usize, 2] {
        g.bench_function(format!("pool/1280/{threads}_thread"), |b| {
            b.iter_custom(|iters| {
                owned_threads(threads, |_| {
                    let pool = pool.clone();
                    move || {
                        for _ in 0..iters {
                            black_box(pool.acquire().expect("buffer"));
                        }
                    }
                })
            })
        });
        g.bench_function(format!("vec_baseline/1280/{threads}_thread"), |b| {
            b.iter_custom(|iters| {
                owned_threads(threads, |_| {
                    move || {
                        for _ in 0..iters {
                            black_box(Vec::<u8>::with_capacity(1280));
                        }
                    }
                })
            })
        });
    }
    g.finish();
}

/// Run `n` fresh threads, each on its own closure from `make(index)`, started together; returns
/// the wall time of the slowest.
fn owned_threads<W: FnOnce() + Send>(n: usize, make: impl Fn(usize) -> W) -> Duration {
    let start = Barrier::new(n);
    thread::scope(|s| {
        let handles: Vec<_> = (0..n)
            .map(|i| {
                let work = make(i);
                let start = &start;
                s.spawn(move || {
                    start.wait();
                    let t = Instant::now();
                    work();
                    t.elapsed()
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("bench thread"))
            .max()
            .unwrap_or_default()
    })
}

/// N cell operations split over two threads: check the circuit's keyed limiter, acquire a cell
/// buffer, write a header, release. The two threads are started once per Criterion sample and
/// run all of its iterations, so thread start-up is amortised away.
fn concurrent_operations(c: &mut Criterion) {
    let ticker = Ticker::start();
    let pool = BufferPool::new(PoolConfig {
        prealloc: 64,
        ..PoolConfig::new(1280)
    })
    .expect("pool");
    let limiter = KeyedLimiter::new(generous(), 65_536).expect("keyed");
    // Raw per-link circuit ids, as the overlay keys its circuit limiter.
    let circuits: Vec<u32> = (1..=1024).collect();
    let mut g = c.benchmark_group("concurrent_operations");
    for n in [100usize, 1000, 10000] {
        g.throughput(Throughput::Elements(n as u64));
        g.bench_with_input(BenchmarkId::from_parameter(n), &n, |b, &n| {
            b.iter_custom(|iters| {
                owned_threads(2, |half| {
                    let (pool, limiter, circuits) = (pool.clone(), &limiter, &circuits);
                    let clock = ticker.clock.clone();
                    move || {
                        let mine = &circuits[half * 512..][..512];
                        for _ in 0..iters {
                            for i in 0..n / 2 {
                                let id = mine[i % 512];
                                if limiter.check(&id, clock.now()).is_ok() {
                                    let mut cell = pool.acquire().expect("buffer");
                                    cell[..4].copy_from_slice(&id.to_be_bytes());
                                    black_box(&cell[..4]);
                                }
                            }
                        }
                    }
                })
            })
        });
    }
    g.finish();
}

criterion_group!(benches, rate_limiter, memory, concurrent_operations);
criterion_main!(benches);
