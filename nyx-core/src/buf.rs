//! Fixed-size buffer pools for cells and datagrams, bounded in memory and free of heap
//! allocation in steady state.
//!
//! A [`BufferPool`] hands out [`PooledBuf`]s of one size chosen at creation. A handle derefs to
//! `&mut [u8]`, can be [frozen](PooledBuf::freeze) into a cheaply cloneable [`Bytes`], and
//! returns its memory to the pool when dropped (for a frozen buffer: when the last clone is
//! dropped).
//!
//! * **Bounded.** The pool owns at most `max_bytes / buffer_size` buffers. When all are in use,
//!   [`acquire`](BufferPool::acquire) fails with [`Error::PoolExhausted`] at once: callers drop
//!   or delay work (backpressure) instead of growing memory.
//! * **Allocation-free in steady state.** Buffers are allocated lazily, once, up to the cap (or
//!   up front with [`PoolConfig::prealloc`]). After that, acquire and release only move a
//!   pointer between a free list and the handle. Freezing into [`Bytes`] costs one small
//!   allocation for the shared owner (that is how `Bytes::from_owner` works).
//! * **Sharded.** Free lists are split into cache-line-aligned shards; each thread uses its own
//!   shard, so threads do not fight over one lock. A buffer returns to the shard it was last
//!   acquired from; a thread whose shard is empty takes buffers from the others before the
//!   pool allocates more.
//! * **Contents are not cleared** between uses unless [`PoolConfig::zero_on_release`] is set:
//!   a fresh handle holds whatever the previous user wrote. Pools for plaintext should set it.
//!
//! ```
//! use nyx_core::buf::{BufferPool, PoolConfig};
//!
//! let pool = BufferPool::new(PoolConfig { max_bytes: 4 * 1280, ..PoolConfig::new(1280) })?;
//! let mut cell = pool.acquire()?;
//! cell[..5].copy_from_slice(b"hello");
//! cell.truncate(5);
//! let frozen = cell.freeze(); // a `bytes::Bytes`; clones share the pooled memory
//! let copy = frozen.clone();
//! assert_eq!(&copy[..], b"hello");
//! assert_eq!(pool.stats().in_use(), 1);
//! drop((frozen, copy));
//! assert_eq!(pool.stats().in_use(), 0, "the last clone returned the buffer");
//!
//! let all: Vec<_> = (0..4).map(|_| pool.acquire()).collect::<Result<_, _>>()?;
//! assert!(pool.acquire().is_err(), "the memory cap is reached");
//! # drop(all);
//! # Ok::<(), nyx_core::Error>(())
//! ```

use std::cell::Cell;
use std::fmt;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use bytes::Bytes;

use crate::{Error, Result};

/// How a [`BufferPool`] is sized.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolConfig {
    /// Size of every buffer in bytes. No default: cells are about 1.2 KiB, datagrams up to
    /// 64 KiB.
    pub buffer_size: usize,
    /// Memory cap: the pool never owns more than `max_bytes / buffer_size` buffers.
    /// Default: 64 MiB.
    pub max_bytes: usize,
    /// Buffers allocated at creation so that even warm-up allocates nothing. Default: 0.
    pub prealloc: usize,
    /// Overwrite each buffer with zeros when it comes back, so no data outlives its handle.
    /// Costs a `memset` of `buffer_size` per release. Default: `false`.
    pub zero_on_release: bool,
}

impl PoolConfig {
    /// Defaults for buffers of `buffer_size` bytes.
    pub const fn new(buffer_size: usize) -> Self {
        PoolConfig {
            buffer_size,
            max_bytes: 64 << 20,
            prealloc: 0,
            zero_on_release: false,
        }
    }
}

/// A pool of fixed-size buffers. Cloning yields another handle to the same pool.
#[derive(Clone)]
pub struct BufferPool {
    shared: Arc<Shared>,
}

struct Shared {
    buffer_size: usize,
    max_buffers: usize,
    /// Buffers ever allocated and not freed (in use + idle); never exceeds `max_buffers`.
    allocated: AtomicUsize,
    shards: Box<[Arc<Shard>]>,
}

/// One free list, aligned so that two shards never share a cache line.
#[repr(align(128))]
struct Shard {
    free: Mutex<Vec<Box<[u8]>>>,
    zero_on_release: bool,
}

/// A snapshot of a pool's occupancy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolStats {
    /// Size of each buffer.
    pub buffer_size: usize,
    /// The most buffers the pool may own.
    pub max_buffers: usize,
    /// Buffers currently owned by the pool (in use or idle).
    pub allocated: usize,
    /// Buffers waiting in free lists.
    pub idle: usize,
}

impl PoolStats {
    /// Buffers currently held by handles.
    pub fn in_use(&self) -> usize {
        self.allocated.saturating_sub(self.idle)
    }
}

thread_local! {
    static THREAD_SHARD: Cell<usize> = const { Cell::new(usize::MAX) };
}
static NEXT_THREAD_SHARD: AtomicUsize = AtomicUsize::new(0);

/// A small per-thread number; threads that start one after another get different shards.
#[inline]
fn thread_shard() -> usize {
    THREAD_SHARD.with(|c| {
        let v = c.get();
        if v != usize::MAX {
            return v;
        }
        let v = NEXT_THREAD_SHARD.fetch_add(1, Ordering::Relaxed) & (usize::MAX >> 1);
        c.set(v);
        v
    })
}

impl BufferPool {
    /// A pool with the given sizing; fails if no buffer fits in the cap.
    pub fn new(config: PoolConfig) -> Result<Self> {
        let invalid = |reason: String| Error::InvalidParameter {
            what: "buffer pool",
            reason,
        };
        if config.buffer_size == 0 {
            return Err(invalid("buffer_size must be at least 1".to_owned()));
        }
        let max_buffers = config.max_bytes / config.buffer_size;
        if max_buffers == 0 {
            return Err(invalid(format!(
                "max_bytes {} is smaller than one buffer of {} bytes",
                config.max_bytes, config.buffer_size
            )));
        }
        if config.prealloc > max_buffers {
            return Err(invalid(format!(
                "prealloc {} exceeds the {max_buffers} buffers max_bytes allows",
                config.prealloc
            )));
        }
        let parallelism = std::thread::available_parallelism().map_or(1, usize::from);
        let n_shards = (parallelism * 2).next_power_of_two().min(64);
        let shards: Box<[Arc<Shard>]> = (0..n_shards)
            .map(|i| {
                let share =
                    config.prealloc / n_shards + usize::from(i < config.prealloc % n_shards);
                let free = (0..share).map(|_| new_buffer(config.buffer_size)).collect();
                Arc::new(Shard {
                    free: Mutex::new(free),
                    zero_on_release: config.zero_on_release,
                })
            })
            .collect();
        Ok(BufferPool {
            shared: Arc::new(Shared {
                buffer_size: config.buffer_size,
                max_buffers,
                allocated: AtomicUsize::new(config.prealloc),
                shards,
            }),
        })
    }

    /// Take a buffer. Its length is the full buffer size and its contents are unspecified
    /// (see [`PoolConfig::zero_on_release`]). Fails at once with [`Error::PoolExhausted`] when
    /// every buffer the cap allows is in use.
    pub fn acquire(&self) -> Result<PooledBuf> {
        let shared = &*self.shared;
        let mask = shared.shards.len() - 1;
        let own = thread_shard() & mask;
        // Own shard first, then idle buffers elsewhere, and only then new memory. A buffer
        // taken from another shard is re-homed here: it comes back to where it is used.
        for step in 0..shared.shards.len() {
            let popped = lock(&shared.shards[(own + step) & mask]).pop();
            if let Some(data) = popped {
                return Ok(self.handle(data, own));
            }
        }
        if shared.reserve_new() {
            return Ok(self.handle(new_buffer(shared.buffer_size), own));
        }
        // Other threads may have released meanwhile, but the cap is the cap: the caller
        // decides whether to retry.
        Err(Error::PoolExhausted {
            buffer_size: shared.buffer_size,
            max_buffers: shared.max_buffers,
        })
    }

    fn handle(&self, data: Box<[u8]>, shard: usize) -> PooledBuf {
        let len = data.len();
        PooledBuf {
            data,
            len,
            home: Arc::clone(&self.shared.shards[shard]),
        }
    }

    /// Size of each buffer.
    pub fn buffer_size(&self) -> usize {
        self.shared.buffer_size
    }

    /// The most buffers this pool will own.
    pub fn max_buffers(&self) -> usize {
        self.shared.max_buffers
    }

    /// Current occupancy (locks each shard briefly; not for the data path).
    pub fn stats(&self) -> PoolStats {
        let idle = self.shared.shards.iter().map(|s| lock(s).len()).sum();
        PoolStats {
            buffer_size: self.shared.buffer_size,
            max_buffers: self.shared.max_buffers,
            allocated: self.shared.allocated.load(Ordering::Relaxed),
            idle,
        }
    }
}

impl Shared {
    /// Count one more buffer against the cap, if it allows.
    fn reserve_new(&self) -> bool {
        self.allocated
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                (n < self.max_buffers).then_some(n + 1)
            })
            .is_ok()
    }
}

fn new_buffer(size: usize) -> Box<[u8]> {
    vec![0u8; size].into_boxed_slice()
}

/// A poisoned free list is still a valid list of buffers (push and pop cannot be torn).
fn lock(shard: &Shard) -> MutexGuard<'_, Vec<Box<[u8]>>> {
    shard.free.lock().unwrap_or_else(PoisonError::into_inner)
}

impl fmt::Debug for BufferPool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BufferPool")
            .field("stats", &self.stats())
            .field("shards", &self.shared.shards.len())
            .finish()
    }
}

/// A buffer on loan from a [`BufferPool`]; the memory goes back to the pool on drop.
///
/// It has a fixed [`capacity`](Self::capacity) and a length (initially the capacity) that
/// [`truncate`](Self::truncate) and [`set_len`](Self::set_len) adjust; it derefs to the first
/// `len` bytes. `Debug` never shows the contents.
pub struct PooledBuf {
    data: Box<[u8]>,
    len: usize,
    home: Arc<Shard>,
}

impl PooledBuf {
    /// The fixed size of the underlying buffer.
    pub fn capacity(&self) -> usize {
        self.data.len()
    }

    /// The number of bytes the handle exposes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the length is zero.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Shorten to `len` bytes; no effect if `len` is not shorter.
    pub fn truncate(&mut self, len: usize) {
        self.len = self.len.min(len);
    }

    /// Set the length to any value up to the capacity. Bytes that become visible hold whatever
    /// was there before.
    pub fn set_len(&mut self, len: usize) -> Result<()> {
        if len > self.data.len() {
            return Err(Error::LengthExceedsCapacity {
                requested: len,
                capacity: self.data.len(),
            });
        }
        self.len = len;
        Ok(())
    }

    /// The whole buffer whatever the length, e.g. to receive a datagram into before
    /// [`truncate`](Self::truncate)-ing to its size.
    pub fn full_mut(&mut self) -> &mut [u8] {
        &mut self.data
    }

    /// Turn into a read-only, cheaply cloneable [`Bytes`] of the current length. The buffer
    /// returns to its pool when the last clone or slice of it is dropped. Costs one small
    /// allocation (the shared owner that `Bytes` counts references in).
    pub fn freeze(self) -> Bytes {
        Bytes::from_owner(self)
    }
}

impl Deref for PooledBuf {
    type Target = [u8];
    #[inline]
    fn deref(&self) -> &[u8] {
        &self.data[..self.len]
    }
}

impl DerefMut for PooledBuf {
    #[inline]
    fn deref_mut(&mut self) -> &mut [u8] {
        &mut self.data[..self.len]
    }
}

impl AsRef<[u8]> for PooledBuf {
    fn as_ref(&self) -> &[u8] {
        self
    }
}

impl AsMut<[u8]> for PooledBuf {
    fn as_mut(&mut self) -> &mut [u8] {
        self
    }
}

impl Drop for PooledBuf {
    fn drop(&mut self) {
        let mut data = std::mem::take(&mut self.data);
        if self.home.zero_on_release {
            data.fill(0);
        }
        lock(&self.home).push(data);
    }
}

impl fmt::Debug for PooledBuf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PooledBuf")
            .field("len", &self.len)
            .field("capacity", &self.capacity())
            .finish()
    }
}

#[cfg(test)]
mod tests {
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
            max in 1usize..12,
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
}
