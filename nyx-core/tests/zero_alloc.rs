//! Proof that nyx-core's hot paths allocate nothing in steady state: a counting global
//! allocator records every allocation made by the current thread, and the steady-state phase
//! of each scenario must record none.
//!
//! The `unsafe` here is the `GlobalAlloc` impl of this test binary only; the nyx-core library
//! itself is `#![forbid(unsafe_code)]`.
#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::{Barrier, Mutex};

use nyx_core::buf::{BufferPool, PoolConfig, PooledBuf};
use nyx_core::rate::{KeyedLimiter, Limiter, Quota};
use nyx_core::{NodeId, Timestamp};

struct Counting;

thread_local! {
    // Const-initialised and without a destructor: reading it never allocates.
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
}

fn count_one() {
    let _ = ALLOCATIONS.try_with(|c| c.set(c.get() + 1));
}

// SAFETY: every method forwards to `System` with the caller's arguments unchanged, so the
// allocator contract is exactly `System`'s; counting touches only a thread-local `Cell`.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count_one();
        // SAFETY: same layout contract as our caller's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        count_one();
        // SAFETY: as above.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count_one();
        // SAFETY: `ptr` was allocated by `System` through this allocator with `layout`.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` was allocated by `System` through this allocator with `layout`.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Allocations the current thread makes while running `f`.
fn allocations_in<R>(f: impl FnOnce() -> R) -> (u64, R) {
    let before = ALLOCATIONS.with(Cell::get);
    let r = f();
    (ALLOCATIONS.with(Cell::get) - before, r)
}

#[test]
fn the_counter_sees_allocations() {
    let (n, v) = allocations_in(|| std::hint::black_box(Vec::<u8>::with_capacity(1280)));
    assert_eq!(n, 1, "the harness itself must be able to fail");
    drop(v);
}

#[test]
fn pool_acquire_release_allocates_nothing_once_warm() {
    // 64 buffers (a thread cache of 1) and the default 64 MiB (a thread cache of 32).
    for config in [
        PoolConfig {
            max_bytes: 64 * 1280,
            ..PoolConfig::new(1280)
        },
        PoolConfig::new(1280),
    ] {
        pool_cycle_allocates_nothing(BufferPool::new(config).unwrap());
    }
}

fn pool_cycle_allocates_nothing(pool: BufferPool) {
    let mut held: Vec<PooledBuf> = Vec::with_capacity(64);
    let cycle = |held: &mut Vec<PooledBuf>| {
        for round in 0..1000usize {
            let mut b = pool.acquire().expect("a buffer");
            b[0] = round as u8;
            b.truncate(100 + round % 1000);
            drop(b);
            // Hold up to 32 buffers at a time, releasing in a different order.
            held.push(pool.acquire().expect("a buffer"));
            if held.len() == 32 {
                while let Some(b) = held.pop() {
                    drop(b);
                }
            }
        }
    };
    cycle(&mut held); // warm-up: buffers are allocated once, here
    let (n, ()) = allocations_in(|| cycle(&mut held));
    assert_eq!(n, 0, "steady-state acquire+release allocated {n} times");
}

#[test]
fn buffers_passed_between_two_threads_allocate_nothing_once_warm() {
    let pool = BufferPool::new(PoolConfig {
        max_bytes: 256 * 2048,
        ..PoolConfig::new(2048)
    })
    .unwrap();
    let handoff: Mutex<Vec<PooledBuf>> = Mutex::new(Vec::with_capacity(64));
    let phase = Barrier::new(2);
    const ROUNDS: usize = 200;
    const WARM: usize = 50;
    let (producer, consumer) = std::thread::scope(|s| {
        // Thread A acquires batches and hands them over; thread B releases them.
        let a = s.spawn(|| {
            let exhausted = Cell::new(0u32);
            let mut steady = 0;
            for round in 0..ROUNDS {
                let (n, ()) = allocations_in(|| {
                    let mut q = handoff.lock().unwrap();
                    for i in 0..64 {
                        // No unwrap: a panic here would leave B waiting at the barrier forever.
                        match pool.acquire() {
                            Ok(mut b) => {
                                b[..8].copy_from_slice(&(i as u64).to_le_bytes());
                                q.push(b);
                            }
                            Err(_) => exhausted.set(exhausted.get() + 1),
                        }
                    }
                });
                if round >= WARM {
                    steady += n;
                }
                phase.wait(); // B drains
                phase.wait(); // B done
            }
            assert_eq!(
                exhausted.get(),
                0,
                "released buffers did not come back to the pool"
            );
            steady
        });
        let b = s.spawn(|| {
            let mut steady = 0;
            for round in 0..ROUNDS {
                phase.wait();
                let (n, ()) = allocations_in(|| {
                    let mut q = handoff.lock().unwrap();
                    while let Some(b) = q.pop() {
                        drop(b);
                    }
                });
                if round >= WARM {
                    steady += n;
                }
                phase.wait();
            }
            steady
        });
        (a.join().unwrap(), b.join().unwrap())
    });
    assert_eq!(
        (producer, consumer),
        (0, 0),
        "allocations in steady state (producer, consumer)"
    );
    assert!(
        pool.stats().allocated <= 128,
        "buffers are reused, not re-allocated: {:?}",
        pool.stats()
    );
}

#[test]
fn limiter_checks_allocate_nothing() {
    let quota = Quota::per_second(1000).unwrap();
    let single = Limiter::new(quota);
    let keyed = KeyedLimiter::new(quota, 4096).unwrap();
    let ids: Vec<NodeId> = (0..1000u32)
        .map(|i| {
            let mut b = [0u8; 32];
            b[..4].copy_from_slice(&i.to_le_bytes());
            NodeId::from_bytes(b)
        })
        .collect();
    for id in &ids {
        keyed.check(id, Timestamp::ZERO).unwrap(); // table grows here, once
    }
    let (n, admitted) = allocations_in(|| {
        let mut admitted = 0;
        for step in 1..=10_000u64 {
            let now = Timestamp::from_millis(step);
            admitted += usize::from(single.check(now).is_ok());
            admitted += usize::from(keyed.check(&ids[step as usize % ids.len()], now).is_ok());
        }
        admitted
    });
    assert_eq!(n, 0, "limiter checks allocated {n} times");
    assert!(
        admitted > 10_000,
        "the checks did real work: {admitted} admitted"
    );
}
