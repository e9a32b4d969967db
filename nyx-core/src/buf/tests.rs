//! Unit tests of the buffer pool.

use super::*;
use proptest::prelude::*;

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
fn buffers_move_between_threads_and_shards() {
    let p = pool(32, 8);
    let held: Vec<_> = std::thread::scope(|s| {
        s.spawn(|| (0..8).map(|_| p.acquire().unwrap()).collect())
            .join()
            .unwrap()
    });
    assert!(p.acquire().is_err());
    drop(held);
    // Released here into the other thread's shard; this thread must still find them all.
    let again: Vec<_> = (0..8).map(|_| p.acquire().unwrap()).collect();
    assert_eq!(again.len(), 8);
    assert_eq!(p.stats().allocated, 8);
}

#[test]
fn prealloc_is_spread_and_counted() {
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
    assert!(p.shared.idle() >= 40 - p.shared.cache_cap);
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
        s.spawn(|| (0..128).filter_map(|_| p.acquire().ok()).count())
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
    let id = p.shared.id;
    let held: Vec<_> = (0..10).map(|_| p.acquire().unwrap()).collect();
    let frozen = p.acquire().unwrap().freeze();
    drop(p);
    assert!(
        Shared::find(id).is_none(),
        "a closed pool leaves the registry"
    );
    drop(held);
    assert_eq!(frozen.len(), 16);
    drop(frozen);
    // A later pool on this thread does not get the old pool's buffers.
    let q = cached_pool(256);
    assert_eq!(q.stats().allocated, 0);
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
    assert_eq!((0..64).filter_map(|_| p.acquire().ok()).count(), 64);
}
