//! Fixed-size buffer pools, bounded in memory and free of heap allocation in steady state.
//! NyxNet's UDP transport takes every datagram it receives or sends from one (the overlay
//! keeps cells in its own arena, `nyx_overlay::circuit::CellArena`).
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
//! * **Per-thread free lists.** Each thread keeps a small cache of idle buffers per pool, so
//!   acquire and release take no lock and do no atomic read-modify-write; caches exchange
//!   buffers with the pool's global list in locked batches of half a cache. A cache holds at
//!   most `max_buffers / 64` buffers (at most 32; pools under 64 buffers have none), and only
//!   as many threads get a cache as can together hold **a quarter of the pool**; later threads
//!   go straight to the global list. Buffers idle in one thread's cache are invisible to the
//!   others, so [`acquire`](BufferPool::acquire) can fail while up to a quarter of the pool
//!   sits idle in caches (the memory cap itself is exact). [`BufferPool::flush_thread_cache`]
//!   hands a thread's buffers back early; a thread that exits hands them back on its own.
//! * **Contents are not cleared** between uses unless [`PoolConfig::zero_on_release`] is set:
//!   a fresh handle holds whatever the previous user wrote. Pools for plaintext should set it;
//!   then every handle is zeroed when dropped, whatever happens to the memory next.
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

use std::fmt;
use std::ops::{Deref, DerefMut};
use std::sync::Arc;
use std::sync::atomic::Ordering;

use bytes::Bytes;

use crate::{Error, Result};

mod cache;
mod shared;
#[cfg(test)]
mod tests;

use shared::Shared;

/// The largest buffer a pool hands out (1 GiB); larger sizes are refused at creation.
pub const MAX_BUFFER_SIZE: usize = 1 << 30;

/// How a [`BufferPool`] is sized.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolConfig {
    /// Size of every buffer in bytes, at most [`MAX_BUFFER_SIZE`]. No default: cells are about
    /// 1.2 KiB, datagrams up to 64 KiB.
    pub buffer_size: usize,
    /// Memory cap: the pool never owns more than `max_bytes / buffer_size` buffers.
    /// Default: 64 MiB.
    pub max_bytes: usize,
    /// Buffers allocated at creation so that even warm-up allocates nothing. Default: 0.
    pub prealloc: usize,
    /// Overwrite each buffer with zeros when its handle is dropped, so no data outlives it.
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

/// A pool of fixed-size buffers. Cloning yields another handle to the same pool; when the last
/// handle is dropped the pool's idle memory is freed, and buffers still on loan are freed when
/// they are dropped. (A thread's cache may keep up to one cache's worth of a closed pool's
/// buffers until that thread exits or next sets up a cache for another pool.)
#[derive(Clone)]
pub struct BufferPool {
    /// Copies of immutable pool settings for the fast path.
    id: u64,
    cache_cap: usize,
    zero_on_release: bool,
    shared: Arc<Shared>,
    /// Shared by all clones; closes the pool when the last one goes.
    _owner: Arc<Owner>,
}

/// Closes the pool when the last `BufferPool` handle goes.
struct Owner {
    shared: Arc<Shared>,
}

impl Drop for Owner {
    fn drop(&mut self) {
        self.shared.close();
    }
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
    /// Idle buffers, in the pool's global list or in a thread's cache.
    pub idle: usize,
}

impl PoolStats {
    /// Buffers currently held by handles.
    pub fn in_use(&self) -> usize {
        self.allocated.saturating_sub(self.idle)
    }
}

impl BufferPool {
    /// A pool with the given sizing; fails if no buffer fits in the cap.
    pub fn new(config: PoolConfig) -> Result<Self> {
        let invalid = |reason: String| Error::InvalidParameter {
            what: "buffer pool",
            reason,
        };
        if config.buffer_size == 0 || config.buffer_size > MAX_BUFFER_SIZE {
            return Err(invalid(format!(
                "buffer_size {} is outside 1..={MAX_BUFFER_SIZE}",
                config.buffer_size
            )));
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
        let shared = Shared::new(config.buffer_size, max_buffers, config.prealloc).ok_or(
            Error::AllocationFailed {
                bytes: config.prealloc.saturating_mul(config.buffer_size),
            },
        )?;
        Ok(BufferPool {
            id: shared.id,
            cache_cap: shared.cache_cap,
            zero_on_release: config.zero_on_release,
            _owner: Arc::new(Owner {
                shared: Arc::clone(&shared),
            }),
            shared,
        })
    }

    /// Take a buffer. Its length is the full buffer size and its contents are unspecified
    /// (see [`PoolConfig::zero_on_release`]). Fails at once with [`Error::PoolExhausted`] when
    /// the cap is reached and no idle buffer is reachable from this thread (every buffer is in
    /// use, or idle in another thread's cache), or when the system refuses memory.
    #[inline]
    pub fn acquire(&self) -> Result<PooledBuf> {
        match cache::acquire(self.id, self.cache_cap, &self.shared) {
            Some(data) => Ok(PooledBuf {
                len: data.len(),
                data,
                pool: self.id,
                zero: self.zero_on_release,
            }),
            None => Err(Error::PoolExhausted {
                buffer_size: self.shared.buffer_size,
                max_buffers: self.shared.max_buffers,
            }),
        }
    }

    /// Hand the idle buffers this thread keeps for this pool back to the pool, so other
    /// threads can use them (e.g. before this thread goes idle for a long time).
    pub fn flush_thread_cache(&self) {
        cache::flush(self.shared.id);
    }

    /// Size of each buffer.
    pub fn buffer_size(&self) -> usize {
        self.shared.buffer_size
    }

    /// The most buffers this pool will own.
    pub fn max_buffers(&self) -> usize {
        self.shared.max_buffers
    }

    /// Current occupancy (takes two locks briefly; not for the data path). Buffers moving
    /// between threads at that moment may be missed; a quiet pool is counted exactly.
    pub fn stats(&self) -> PoolStats {
        let shared = &self.shared;
        PoolStats {
            buffer_size: shared.buffer_size,
            max_buffers: shared.max_buffers,
            allocated: shared.allocated.load(Ordering::Relaxed),
            idle: shared.idle(),
        }
    }
}

impl fmt::Debug for BufferPool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BufferPool")
            .field("stats", &self.stats())
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
    /// The id of the pool the buffer returns to (no reference count is touched per buffer).
    pool: u64,
    /// Zero the contents on drop (`PoolConfig::zero_on_release`).
    zero: bool,
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
    #[inline]
    fn drop(&mut self) {
        // An empty boxed slice does not allocate.
        let mut data = std::mem::take(&mut self.data);
        if self.zero {
            // Here rather than in the pool, so it also happens when the memory is freed
            // (closed pool, thread teardown).
            data.fill(0);
        }
        cache::release(self.pool, data);
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
