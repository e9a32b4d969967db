//! Per-thread caches of idle buffers: the allocation-free, atomic-free fast path.
//!
//! Each thread keeps, per pool it touches, a small stack of idle buffers. Acquire pops from it
//! and release pushes onto it; neither takes a lock nor does an atomic read-modify-write. When
//! the stack is empty it refills half of it from the pool's global list in one locked batch;
//! when full it spills half back the same way. The cache publishes its length with a plain
//! store so that `stats()` can count it. A thread that exits gives its buffers back.
//!
//! How much caches may hold is bounded per pool: each gets at most `cache_cap` buffers, and
//! only as many caches get room as can together hold a quarter of the pool; later threads get
//! an entry with no room, which passes buffers straight through to the global list.

use std::cell::RefCell;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use super::shared::Shared;

/// Aligned so that two threads' caches never share a cache line (each is written on every
/// acquire and release by its own thread).
#[repr(align(128))]
struct ThreadCache {
    /// Copies of the pool id and of the room granted, so the fast path reads only this line.
    id: u64,
    cap: usize,
    shared: Arc<Shared>,
    bufs: Vec<Box<[u8]>>,
    /// `bufs.len()` as last published, read by `stats()` on other threads.
    published: Arc<PublishedLen>,
}

/// A length one thread stores and others read, alone on its cache line(s).
#[repr(align(128))]
#[derive(Default)]
pub(super) struct PublishedLen(pub(super) AtomicUsize);

thread_local! {
    static CACHES: RefCell<Vec<ThreadCache>> = const { RefCell::new(Vec::new()) };
}

impl ThreadCache {
    fn new(shared: Arc<Shared>) -> Self {
        let published = Arc::new(PublishedLen::default());
        let cap = shared.register_cache(&published);
        ThreadCache {
            id: shared.id,
            cap,
            bufs: Vec::with_capacity(cap),
            shared,
            published,
        }
    }

    #[inline]
    fn publish(&self) {
        self.published.0.store(self.bufs.len(), Ordering::Relaxed);
    }

    #[inline]
    fn pop(&mut self) -> Option<Box<[u8]>> {
        if let Some(b) = self.bufs.pop() {
            self.publish();
            return Some(b);
        }
        if self.cap > 1 && self.shared.take_batch(&mut self.bufs, self.cap / 2) > 0 {
            let b = self.bufs.pop();
            self.publish();
            return b;
        }
        self.shared.take_one()
    }

    /// Keep a released buffer, spilling half the cache to the pool when full. An entry
    /// without room passes the buffer straight to the pool.
    #[inline]
    fn release(&mut self, buf: Box<[u8]>) {
        let cap = self.cap;
        if cap == 0 {
            self.shared.return_one(buf);
            return;
        }
        if self.bufs.len() >= cap {
            // The pool checks under its lock whether it closed: a closed pool's buffers are
            // freed here, so a cache never keeps more than `cap` of them.
            self.shared.give_back(self.bufs.drain(cap / 2..));
        }
        self.bufs.push(buf);
        self.publish();
    }
}

impl Drop for ThreadCache {
    fn drop(&mut self) {
        self.shared.give_back(self.bufs.drain(..));
        self.published.0.store(0, Ordering::Relaxed);
        self.shared.unregister_cache(&self.published);
    }
}

/// Run `f` on this thread's cache for pool `id`, creating it (from `shared()`) on first use.
/// `None` when thread-local storage is unavailable (thread teardown), already borrowed, or
/// `shared()` finds no pool.
#[inline]
fn with_cache<R>(
    id: u64,
    shared: impl FnOnce() -> Option<Arc<Shared>>,
    f: impl FnOnce(&mut ThreadCache) -> R,
) -> Option<R> {
    CACHES
        .try_with(|caches| {
            let mut caches = caches.try_borrow_mut().ok()?;
            let index = match caches.iter().position(|c| c.id == id) {
                Some(i) => i,
                None => {
                    // Slow path: forget caches of closed pools, then make one for this pool.
                    caches.retain(|c| !c.shared.is_closed());
                    caches.push(ThreadCache::new(shared()?));
                    caches.len() - 1
                }
            };
            Some(f(&mut caches[index]))
        })
        .ok()
        .flatten()
}

/// An idle buffer of `shared`'s pool, or `None` if the pool is at its cap.
#[inline]
pub(super) fn acquire(id: u64, cache_cap: usize, shared: &Arc<Shared>) -> Option<Box<[u8]>> {
    if cache_cap == 0 {
        return shared.take_one();
    }
    with_cache(id, || Some(Arc::clone(shared)), ThreadCache::pop)
        .unwrap_or_else(|| shared.take_one())
}

/// Give a buffer back to pool `id` (which may have closed meanwhile).
#[inline]
pub(super) fn release(id: u64, buf: Box<[u8]>) {
    let mut slot = Some(buf);
    with_cache(
        id,
        || Shared::find(id),
        |cache| {
            if let Some(buf) = slot.take() {
                cache.release(buf);
            }
        },
    );
    if let Some(buf) = slot
        && let Some(shared) = Shared::find(id)
    {
        // No thread-local storage here (thread teardown): straight back to the pool.
        shared.return_one(buf);
    }
}

/// Give back every idle buffer this thread caches for pool `id`.
pub(super) fn flush(id: u64) {
    let _ = CACHES.try_with(|caches| {
        if let Ok(mut caches) = caches.try_borrow_mut()
            && let Some(cache) = caches.iter_mut().find(|c| c.id == id)
        {
            cache.shared.give_back(cache.bufs.drain(..));
            cache.publish();
        }
    });
}
