//! Unit tests of the buffer pool.

use super::*;
use proptest::prelude::*;
use std::cell::RefCell;
use std::sync::Mutex;

fn pool(size: usize, max_buffers: usize) -> BufferPool {
    BufferPool::new(PoolConfig {
        max_bytes: size * max_buffers,
        ..PoolConfig::new(size)
    })
    .unwrap()
}

#[test]
fn config_is_validated() {
    assert!(BufferPool::new(PoolConfig::new(0)).is_err());
    let err = BufferPool::new(PoolConfig {
        max_bytes: 100,
        ..PoolConfig::new(1280)
    })
    .unwrap_err();
    assert!(err.to_string().contains("smaller than one buffer"), "{err}");
    let err = BufferPool::new(PoolConfig {
        max_bytes: 1280,
        prealloc: 2,
        ..PoolConfig::new(1280)
    })
    .unwrap_err();
    assert!(err.to_string().contains("prealloc 2"), "{err}");
}

#[test]
fn exhaustion_is_an_error_and_release_recovers() {
    let p = pool(64, 3);
    let held: Vec<_> = (0..3).map(|_| p.acquire().unwrap()).collect();
    let err = p.acquire().unwrap_err();
    assert_eq!(
        err,
        Error::PoolExhausted {
            buffer_size: 64,
            max_buffers: 3
        }
    );
    drop(held);
    assert_eq!(
        p.stats(),
        PoolStats {
            buffer_size: 64,
            max_buffers: 3,
            allocated: 3,
            idle: 3
        }
    );
    assert!(p.acquire().is_ok());
}

#[test]
fn length_handling() {
    let p = pool(16, 1);
    let mut b = p.acquire().unwrap();
    assert_eq!((b.len(), b.capacity()), (16, 16));
    b.truncate(4);
    b.truncate(10);
    assert_eq!(b.len(), 4);
    assert_eq!(
        b.set_len(17),
        Err(Error::LengthExceedsCapacity {
            requested: 17,
            capacity: 16
        })
    );
    b.full_mut()[15] = 9;
    b.set_len(16).unwrap();
    assert_eq!(b[15], 9);
    assert_eq!(format!("{b:?}"), "PooledBuf { len: 16, capacity: 16 }");
}

#[test]
fn zero_on_release_clears_and_default_does_not() {
    for zero in [false, true] {
        let p = BufferPool::new(PoolConfig {
            max_bytes: 8,
            zero_on_release: zero,
            ..PoolConfig::new(8)
        })
        .unwrap();
        p.acquire().unwrap().copy_from_slice(b"secret!!");
        let again = p.acquire().unwrap();
        assert_eq!(&again[..] == b"secret!!", !zero);
    }
}

#[test]
fn frozen_slices_keep_the_buffer_until_the_last_one_drops() {
    let p = pool(8, 1);
    let mut b = p.acquire().unwrap();
    b.copy_from_slice(b"abcdefgh");
    let frozen = b.freeze();
    let tail = frozen.slice(4..);
    drop(frozen);
    assert!(p.acquire().is_err(), "a slice still holds the buffer");
    assert_eq!(&tail[..], b"efgh");
    drop(tail);
    assert!(p.acquire().is_ok());
}

#[test]
fn buffers_move_between_threads_without_caches() {
    // 8 buffers: below 64, so no thread caches; every buffer goes through the global list.
    let p = pool(32, 8);
    assert_eq!(p.shared.cache_cap, 0);
    let held: Vec<_> = std::thread::scope(|s| {
        s.spawn(|| (0..8).map(|_| p.acquire().unwrap()).collect())
            .join()
            .unwrap()
    });
    assert!(p.acquire().is_err());
    drop(held);
    // Released on this thread after the other one exited; all must be found again.
    let again: Vec<_> = (0..8).map(|_| p.acquire().unwrap()).collect();
    assert_eq!(again.len(), 8);
    assert_eq!(p.stats().allocated, 8);
}

#[test]
fn prealloc_is_counted() {
    let p = BufferPool::new(PoolConfig {
        max_bytes: 10 * 4,
        prealloc: 7,
        ..PoolConfig::new(4)
    })
    .unwrap();
    assert_eq!(
        p.stats(),
        PoolStats {
            buffer_size: 4,
            max_buffers: 10,
            allocated: 7,
            idle: 7
        }
    );
    let all: Vec<_> = (0..10).map(|_| p.acquire().unwrap()).collect();
    assert_eq!(p.stats().allocated, 10);
    drop(all);
}

#[derive(Debug, Clone)]
enum Op {
    Acquire,
    Release(usize),
    Freeze(usize),
}

proptest! {
    /// No buffer is ever handed out twice, the cap is never exceeded, and every buffer comes
    /// back.
    #[test]
    fn never_hands_out_a_buffer_twice(
        max in prop_oneof![1usize..12, 64usize..300],
        ops in proptest::collection::vec(prop_oneof![
            3 => Just(Op::Acquire),
            2 => any::<usize>().prop_map(Op::Release),
            1 => any::<usize>().prop_map(Op::Freeze),
        ], 1..200),
    ) {
        let p = pool(16, max);
        let mut held: Vec<PooledBuf> = Vec::new();
        let mut frozen: Vec<Bytes> = Vec::new();
        let mut tag = 0u8;
        for op in ops {
            match op {
                Op::Acquire => match p.acquire() {
                    Ok(mut b) => {
                        tag = tag.wrapping_add(1);
                        b.fill(tag);
                        held.push(b);
                    }
                    Err(Error::PoolExhausted { .. }) => prop_assert_eq!(held.len() + frozen.len(), max),
                    Err(e) => prop_assert!(false, "{e}"),
                },
                Op::Release(i) if !held.is_empty() => { held.swap_remove(i % held.len()); }
                Op::Freeze(i) if !held.is_empty() => {
                    let b = held.swap_remove(i % held.len());
                    frozen.push(b.freeze());
                }
                _ => {}
            }
            // Distinct memory: every live buffer still holds the tag it was filled with,
            // which an aliased buffer would have overwritten, and no two share an address.
            let mut ptrs: Vec<*const u8> = held.iter().map(|b| b.as_ptr()).chain(frozen.iter().map(|b| b.as_ptr())).collect();
            ptrs.sort();
            ptrs.dedup();
            prop_assert_eq!(ptrs.len(), held.len() + frozen.len());
            for b in &held { prop_assert!(b.iter().all(|&x| x == b[0])); }
            let stats = p.stats();
            prop_assert!(stats.allocated <= max);
            prop_assert_eq!(stats.in_use(), held.len() + frozen.len());
        }
        drop(held);
        drop(frozen);
        prop_assert_eq!(p.stats().in_use(), 0);
    }
}

/// A pool large enough to have thread caches (`max_buffers / 64` of them, at most 32).
fn cached_pool(max_buffers: usize) -> BufferPool {
    let p = pool(16, max_buffers);
    assert!(p.shared.cache_cap > 0);
    p
}

#[test]
fn thread_cache_serves_and_counts_buffers() {
    let p = cached_pool(4096);
    let held: Vec<_> = (0..40).map(|_| p.acquire().unwrap()).collect();
    assert_eq!(p.stats().in_use(), 40);
    drop(held);
    let s = p.stats();
    assert_eq!((s.allocated, s.idle, s.in_use()), (40, 40, 0));
    // The cache keeps at most its cap; the rest went back to the global list.
    assert!(p.shared.global_idle() >= 40 - p.shared.cache_cap);
    assert!(p.shared.global_idle() < 40, "the thread cache kept some");
}

#[test]
fn exiting_thread_returns_its_cache() {
    let p = cached_pool(128); // cache cap 2
    // An explicit join waits for thread-local destructors; the end of a scope does not.
    std::thread::scope(|s| {
        s.spawn(|| {
            let all: Vec<_> = (0..128).map(|_| p.acquire().unwrap()).collect();
            drop(all); // 2 stay in this thread's cache...
        })
        .join()
        .unwrap();
    });
    // ...until it exits: now this thread can have every buffer.
    let again: Vec<_> = (0..128).map(|_| p.acquire().unwrap()).collect();
    assert_eq!(again.len(), 128);
    assert_eq!(p.stats().allocated, 128);
}

#[test]
fn idle_buffers_in_another_threads_cache_need_a_flush() {
    let p = cached_pool(128); // cache cap 2
    let all: Vec<_> = (0..128).map(|_| p.acquire().unwrap()).collect();
    drop(all);
    let cached = p.shared.cache_cap;
    let got = std::thread::scope(|s| {
        s.spawn(|| {
            let mut got = Vec::new();
            while let Ok(b) = p.acquire() {
                got.push(b);
            }
            got.len()
        })
        .join()
        .unwrap()
    });
    assert_eq!(
        got,
        128 - cached,
        "documented: this thread's cache is invisible to others"
    );
    p.flush_thread_cache();
    let got = std::thread::scope(|s| {
        s.spawn(|| {
            (0..128)
                .filter_map(|_| p.acquire().ok())
                .collect::<Vec<_>>()
                .len()
        })
        .join()
        .unwrap()
    });
    assert_eq!(
        got, 128,
        "after a flush every buffer is available elsewhere"
    );
}

#[test]
fn buffers_outliving_their_pool_are_freed() {
    let p = cached_pool(256);
    let shared = Arc::clone(&p.shared);
    let held: Vec<_> = (0..10).map(|_| p.acquire().unwrap()).collect();
    let frozen = p.acquire().unwrap().freeze();
    drop(p);
    assert!(
        Shared::find(shared.id).is_none(),
        "a closed pool leaves the registry"
    );
    assert_eq!(shared.global_idle(), 0, "closing freed the idle memory");
    drop(held);
    assert_eq!(frozen.len(), 16);
    drop(frozen);
    // At most one cache's worth waits in this thread's cache for the closed pool...
    assert_eq!(
        shared.global_idle(),
        0,
        "nothing slipped back into the closed pool"
    );
    assert!(shared.idle() <= shared.cache_cap);
    // ...until this thread sets up a cache for another pool, which prunes it.
    let q = cached_pool(256);
    drop(q.acquire().unwrap());
    assert_eq!(shared.idle(), 0);
    assert_eq!(
        Arc::strong_count(&shared),
        1,
        "no cache keeps the closed pool alive"
    );
}

#[test]
fn zero_on_release_through_the_thread_cache() {
    let p = BufferPool::new(PoolConfig {
        max_bytes: 4096 * 8,
        zero_on_release: true,
        ..PoolConfig::new(8)
    })
    .unwrap();
    assert!(p.shared.cache_cap > 0);
    for _ in 0..100 {
        let mut b = p.acquire().unwrap();
        assert_eq!(&b[..], &[0u8; 8], "a buffer came back unscrubbed");
        b.copy_from_slice(b"secret!!");
    }
}

#[test]
fn frozen_buffer_dropped_on_another_thread_comes_back() {
    let p = cached_pool(64); // cache cap 1
    let all: Vec<Bytes> = (0..64).map(|_| p.acquire().unwrap().freeze()).collect();
    assert!(p.acquire().is_err());
    std::thread::scope(|s| s.spawn(move || drop(all)).join().unwrap());
    assert_eq!(p.stats().in_use(), 0);
    assert_eq!(
        (0..64)
            .filter_map(|_| p.acquire().ok())
            .collect::<Vec<_>>()
            .len(),
        64
    );
}

#[test]
fn caches_together_hold_at_most_a_quarter_of_the_pool() {
    let p = cached_pool(64); // cache cap 1: at most 16 caches get room
    let parked = std::sync::Barrier::new(33);
    // Measure while the 32 threads are parked, assert after they are released: a failed
    // assertion inside the scope would leave them waiting forever.
    let (cached, reachable) = std::thread::scope(|s| {
        for _ in 0..32 {
            s.spawn(|| {
                drop(p.acquire().unwrap()); // leaves its buffer in this thread's cache, if any
                parked.wait(); // stay alive while the main thread counts
                parked.wait();
            });
        }
        parked.wait();
        let cached = p.stats().idle - p.shared.global_idle();
        let held: Vec<_> = (0..64).filter_map(|_| p.acquire().ok()).collect();
        parked.wait();
        (cached, held.len())
    });
    assert!(cached <= 16, "{cached} buffers idle in thread caches");
    assert!(reachable >= 48, "only {reachable} of 64 buffers reachable");
}

/// Four threads acquire, fill, check, freeze, hand over to each other and release buffers of
/// a small cached pool at random; no buffer is ever shared, the cap holds, and all come back.
#[test]
fn stress_four_threads_passing_buffers_around() {
    let p = cached_pool(128); // cache cap 2; all four threads get a cache
    let bag: Mutex<Vec<(PooledBuf, u8)>> = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        let workers: Vec<_> = (0..4u64)
            .map(|t| {
                let (p, bag) = (&p, &bag);
                s.spawn(move || {
                    let mut rng = 0x9e37_79b9_7f4a_7c15u64 ^ (t + 1);
                    let mut held: Vec<(PooledBuf, u8)> = Vec::new();
                    for i in 0..20_000u32 {
                        rng ^= rng << 13;
                        rng ^= rng >> 7;
                        rng ^= rng << 17;
                        let tag = (i as u8) ^ ((t as u8) << 6);
                        match rng % 6 {
                            0 | 1 => {
                                if let Ok(mut b) = p.acquire() {
                                    b.fill(tag);
                                    held.push((b, tag));
                                }
                            }
                            2 => drop(held.pop()),
                            3 => {
                                if let Some((b, tag)) = held.pop() {
                                    let frozen = b.freeze();
                                    assert!(frozen.iter().all(|&x| x == tag), "buffer shared");
                                    drop(frozen.clone());
                                }
                            }
                            4 => {
                                if let Some(item) = held.pop() {
                                    bag.lock().unwrap().push(item);
                                }
                            }
                            _ => {
                                let taken = bag.lock().unwrap().pop();
                                if let Some((b, tag)) = taken {
                                    assert!(
                                        b.iter().all(|&x| x == tag),
                                        "handed-over buffer changed"
                                    );
                                }
                            }
                        }
                        for (b, tag) in &held {
                            assert!(b.iter().all(|x| x == tag), "buffer shared");
                        }
                        assert!(p.stats().allocated <= 128);
                    }
                })
            })
            .collect();
        // An explicit join also waits for thread-local destructors (the caches).
        for w in workers {
            w.join().unwrap();
        }
    });
    bag.lock().unwrap().clear();
    // Every worker has exited, so its cache came back.
    let stats = p.stats();
    assert!(stats.allocated <= 128);
    assert_eq!(
        (stats.in_use(), stats.idle),
        (0, stats.allocated),
        "{stats:?}"
    );
    // What the bag held was dropped on this thread and sits in its cache until flushed.
    p.flush_thread_cache();
    assert_eq!(p.shared.global_idle(), stats.allocated);
}

/// A buffer dropped by another thread-local's destructor, possibly after this thread's pool
/// caches are gone, still returns to the pool.
#[test]
fn release_during_thread_teardown_returns_the_buffer() {
    struct Holder(RefCell<Option<PooledBuf>>);
    thread_local! {
        static HOLDER: Holder = const { Holder(RefCell::new(None)) };
    }
    for p in [pool(16, 8), cached_pool(4096)] {
        std::thread::scope(|s| {
            s.spawn(|| {
                // Registered before the pool's thread cache, so destroyed after it.
                HOLDER.with(|h| *h.0.borrow_mut() = Some(p.acquire().unwrap()));
                drop(p.acquire().unwrap());
            })
            .join()
            .unwrap();
        });
        assert_eq!(p.stats().in_use(), 0, "{:?}", p.stats());
    }
}

#[test]
fn absurd_buffer_sizes_are_refused() {
    let err = BufferPool::new(PoolConfig {
        max_bytes: usize::MAX,
        ..PoolConfig::new(1 << 63)
    })
    .unwrap_err();
    assert!(err.to_string().contains("outside 1..="), "{err}");
    assert!(BufferPool::new(PoolConfig::new(MAX_BUFFER_SIZE + 1)).is_err());
}
