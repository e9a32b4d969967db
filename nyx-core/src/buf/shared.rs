//! The pool state every handle and thread cache points at, the global free list, and the
//! registry that finds a pool by id when a buffer is released on a thread that has no cache
//! for it.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};

use super::cache::PublishedLen;

/// State shared by all handles of one pool and by the thread caches that serve it.
pub(super) struct Shared {
    pub(super) id: u64,
    pub(super) buffer_size: usize,
    pub(super) max_buffers: usize,
    /// Most idle buffers one thread keeps for itself (0: no thread caches at all).
    pub(super) cache_cap: usize,
    /// Buffers allocated and not freed (in use + idle); never exceeds `max_buffers`.
    pub(super) allocated: AtomicUsize,
    /// Idle buffers not in any thread cache, and whether the pool is closed. `closed` is only
    /// read and written under this lock, so no buffer can slip into a closed pool.
    global: Mutex<Global>,
    /// The lengths published by thread caches that were granted room (plain stores), for
    /// `stats` and for limiting how much all caches together may hold.
    cache_lengths: Mutex<Vec<Arc<PublishedLen>>>,
}

struct Global {
    idle: Vec<Box<[u8]>>,
    /// Set when the last `BufferPool` handle is dropped: idle memory is freed, and buffers that
    /// come back later are freed too.
    closed: bool,
}

static NEXT_POOL_ID: AtomicU64 = AtomicU64::new(1);
/// Every open pool by id, for releases on threads without a cache entry for it (cold path).
static REGISTRY: Mutex<Vec<(u64, Weak<Shared>)>> = Mutex::new(Vec::new());

/// A poisoned list is still a valid list of buffers: push and pop cannot be torn.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Shared {
    /// A new open pool, or `None` if the `prealloc` buffers cannot be allocated.
    pub(super) fn new(
        buffer_size: usize,
        max_buffers: usize,
        prealloc: usize,
    ) -> Option<Arc<Self>> {
        let mut idle = Vec::new();
        idle.try_reserve_exact(prealloc.max(64).min(max_buffers))
            .ok()?;
        for _ in 0..prealloc {
            idle.push(try_new_buffer(buffer_size)?);
        }
        let shared = Arc::new(Shared {
            id: NEXT_POOL_ID.fetch_add(1, Ordering::Relaxed),
            buffer_size,
            max_buffers,
            cache_cap: (max_buffers / 64).min(32),
            allocated: AtomicUsize::new(prealloc),
            global: Mutex::new(Global {
                idle,
                closed: false,
            }),
            cache_lengths: Mutex::new(Vec::new()),
        });
        lock(&REGISTRY).push((shared.id, Arc::downgrade(&shared)));
        Some(shared)
    }

    /// The open pool with this id, if any.
    pub(super) fn find(id: u64) -> Option<Arc<Shared>> {
        let registry = lock(&REGISTRY);
        registry
            .iter()
            .find(|(i, _)| *i == id)
            .and_then(|(_, weak)| weak.upgrade())
    }

    /// Whether the last `BufferPool` handle is gone.
    pub(super) fn is_closed(&self) -> bool {
        lock(&self.global).closed
    }

    /// Take one idle buffer from the global list, or allocate one if the cap (and the system)
    /// allows.
    pub(super) fn take_one(&self) -> Option<Box<[u8]>> {
        let popped = lock(&self.global).idle.pop();
        popped.or_else(|| self.allocate())
    }

    /// Move up to `n` idle buffers from the global list into `into`; returns how many moved.
    pub(super) fn take_batch(&self, into: &mut Vec<Box<[u8]>>, n: usize) -> usize {
        let mut global = lock(&self.global);
        let n = n.min(global.idle.len());
        let from = global.idle.len() - n;
        into.extend(global.idle.drain(from..));
        n
    }

    /// Return idle buffers; a closed pool frees them instead.
    pub(super) fn give_back(&self, bufs: impl Iterator<Item = Box<[u8]>>) {
        let mut global = lock(&self.global);
        if !global.closed {
            global.idle.extend(bufs);
        }
    }

    /// Return one buffer straight to the global list (or free it if the pool is closed).
    pub(super) fn return_one(&self, buf: Box<[u8]>) {
        self.give_back(std::iter::once(buf));
    }

    /// Allocate a new buffer if the cap allows (warm-up only). An allocation the system
    /// refuses is undone and reported as `None`, like a full pool.
    fn allocate(&self) -> Option<Box<[u8]>> {
        self.allocated
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                (n < self.max_buffers).then_some(n + 1)
            })
            .ok()?;
        let buf = try_new_buffer(self.buffer_size);
        if buf.is_none() {
            self.allocated.fetch_sub(1, Ordering::Relaxed);
        }
        buf
    }

    /// Register a new thread cache and return the room it is granted: `cache_cap`, or 0 once
    /// the caches already granted room could together hold a quarter of the pool (so idle
    /// buffers stranded in caches never starve other threads of more than that).
    pub(super) fn register_cache(&self, length: &Arc<PublishedLen>) -> usize {
        let mut lengths = lock(&self.cache_lengths);
        let budget = self.max_buffers / 4;
        if self.cache_cap == 0 || (lengths.len() + 1) * self.cache_cap > budget {
            return 0;
        }
        lengths.push(Arc::clone(length));
        self.cache_cap
    }

    pub(super) fn unregister_cache(&self, length: &Arc<PublishedLen>) {
        lock(&self.cache_lengths).retain(|l| !Arc::ptr_eq(l, length));
    }

    /// Idle buffers: in the global list plus in every thread cache (as last published).
    pub(super) fn idle(&self) -> usize {
        let cached: usize = lock(&self.cache_lengths)
            .iter()
            .map(|l| l.0.load(Ordering::Relaxed))
            .sum();
        self.global_idle() + cached
    }

    /// Idle buffers in the global list only.
    pub(super) fn global_idle(&self) -> usize {
        lock(&self.global).idle.len()
    }

    /// The last handle is gone: free idle memory now and any buffer that comes back later.
    pub(super) fn close(&self) {
        {
            let mut global = lock(&self.global);
            global.closed = true;
            global.idle = Vec::new();
        }
        lock(&REGISTRY).retain(|(i, weak)| *i != self.id && weak.strong_count() > 0);
    }
}

/// A zeroed buffer, or `None` if the system cannot provide the memory.
fn try_new_buffer(size: usize) -> Option<Box<[u8]>> {
    let mut v = Vec::new();
    v.try_reserve_exact(size).ok()?;
    v.resize(size, 0);
    Some(v.into_boxed_slice())
}
