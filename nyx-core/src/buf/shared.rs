//! The pool state every handle and thread cache points at, the global free list, and the
//! registry that finds a pool by id when a buffer is released on a thread that has no cache
//! for it.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};

use super::cache::PublishedLen;

/// State shared by all handles of one pool and by the thread caches that serve it.
pub(super) struct Shared {
    pub(super) id: u64,
    pub(super) buffer_size: usize,
    pub(super) max_buffers: usize,
    pub(super) zero_on_release: bool,
    /// Most idle buffers one thread keeps for itself (0: no thread cache).
    pub(super) cache_cap: usize,
    /// Buffers allocated and not freed (in use + idle); never exceeds `max_buffers`.
    pub(super) allocated: AtomicUsize,
    /// Set when the last `BufferPool` handle is dropped: idle memory is freed, and buffers that
    /// come back later are freed too.
    pub(super) closed: AtomicBool,
    /// Idle buffers not in any thread cache.
    global: Mutex<Vec<Box<[u8]>>>,
    /// The lengths thread caches publish (plain stores), for `stats`.
    cache_lengths: Mutex<Vec<Arc<PublishedLen>>>,
}

static NEXT_POOL_ID: AtomicU64 = AtomicU64::new(1);
/// Every open pool by id, for releases on threads without a cache entry for it (cold path).
static REGISTRY: Mutex<Vec<(u64, Weak<Shared>)>> = Mutex::new(Vec::new());

/// A poisoned list is still a valid list of buffers: push and pop cannot be torn.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Shared {
    pub(super) fn new(
        buffer_size: usize,
        max_buffers: usize,
        prealloc: usize,
        zero_on_release: bool,
    ) -> Arc<Shared> {
        let cache_cap = (max_buffers / 64).min(32);
        let mut global = Vec::with_capacity(prealloc.max(64).min(max_buffers));
        global.extend((0..prealloc).map(|_| new_buffer(buffer_size)));
        let shared = Arc::new(Shared {
            id: NEXT_POOL_ID.fetch_add(1, Ordering::Relaxed),
            buffer_size,
            max_buffers,
            zero_on_release,
            cache_cap,
            allocated: AtomicUsize::new(prealloc),
            closed: AtomicBool::new(false),
            global: Mutex::new(global),
            cache_lengths: Mutex::new(Vec::new()),
        });
        lock(&REGISTRY).push((shared.id, Arc::downgrade(&shared)));
        shared
    }

    /// The open pool with this id, if any.
    pub(super) fn find(id: u64) -> Option<Arc<Shared>> {
        let registry = lock(&REGISTRY);
        registry
            .iter()
            .find(|(i, _)| *i == id)
            .and_then(|(_, weak)| weak.upgrade())
    }

    /// Take one idle buffer from the global list, or allocate one if the cap allows.
    pub(super) fn take_one(&self) -> Option<Box<[u8]>> {
        let popped = lock(&self.global).pop();
        popped.or_else(|| self.allocate())
    }

    /// Move up to `n` idle buffers from the global list into `into`; returns how many moved.
    pub(super) fn take_batch(&self, into: &mut Vec<Box<[u8]>>, n: usize) -> usize {
        let mut global = lock(&self.global);
        let n = n.min(global.len());
        let from = global.len() - n;
        into.extend(global.drain(from..));
        n
    }

    /// Return idle buffers (already zeroed if the pool asks for it).
    pub(super) fn give_back(&self, bufs: impl Iterator<Item = Box<[u8]>>) {
        if self.closed.load(Ordering::Acquire) {
            return; // the pool is gone: free the memory
        }
        lock(&self.global).extend(bufs);
    }

    /// Return one buffer straight to the global list (scrubbed if the pool asks for it), or
    /// free it if the pool is closed.
    pub(super) fn return_one(&self, mut buf: Box<[u8]>) {
        if self.zero_on_release && !self.closed.load(Ordering::Relaxed) {
            buf.fill(0);
        }
        self.give_back(std::iter::once(buf));
    }

    /// Allocate a new buffer if the cap allows (warm-up only).
    fn allocate(&self) -> Option<Box<[u8]>> {
        self.allocated
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                (n < self.max_buffers).then_some(n + 1)
            })
            .ok()
            .map(|_| new_buffer(self.buffer_size))
    }

    pub(super) fn register_cache(&self, length: Arc<PublishedLen>) {
        lock(&self.cache_lengths).push(length);
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
        lock(&self.global).len() + cached
    }

    /// The last handle is gone: free idle memory now and any buffer that comes back later.
    pub(super) fn close(&self) {
        self.closed.store(true, Ordering::Release);
        lock(&REGISTRY).retain(|(i, weak)| *i != self.id && weak.strong_count() > 0);
        *lock(&self.global) = Vec::new();
    }
}

fn new_buffer(size: usize) -> Box<[u8]> {
    vec![0u8; size].into_boxed_slice()
}
