//! One QUIC link per peer, reused: concurrent dials to the same peer share one handshake,
//! idle links close, a size cap evicts the least recently used, dead links are redialled with
//! exponential backoff and jitter. The pool's lock is never held across a handshake.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use nyx_core::NodeId;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::Error;
use crate::quic::{QuicEndpoint, QuicLink};

/// Pool settings.
#[derive(Debug, Clone)]
pub struct PoolConfig {
    /// Most links held; the least recently used is closed beyond it. Default 1024.
    pub max_links: usize,
    /// A link unused this long is closed by [`LinkPool::sweep`]. Default 120 s.
    pub idle_timeout: Duration,
    /// Wait after a first failed dial; doubles per failure. Default 100 ms.
    pub backoff_initial: Duration,
    /// Longest wait between dials. Default 30 s.
    pub backoff_max: Duration,
}

impl Default for PoolConfig {
    fn default() -> Self {
        PoolConfig {
            max_links: 1024,
            idle_timeout: Duration::from_secs(120),
            backoff_initial: Duration::from_millis(100),
            backoff_max: Duration::from_secs(30),
        }
    }
}

/// What a dial in progress will publish: `None` until done.
type DialResult = Option<Result<Arc<QuicLink>, Error>>;

enum Entry {
    Ready {
        link: Arc<QuicLink>,
        last_used: Instant,
    },
    Dialing(watch::Receiver<DialResult>),
    Backoff {
        until: Instant,
        failures: u32,
    },
}

/// Counters of the pool (plain data for metrics).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PoolStats {
    /// Handshakes this pool started.
    pub dials: u64,
    /// Requests answered with an existing link.
    pub reused: u64,
    /// Requests that joined a dial already in progress.
    pub merged: u64,
    /// Links closed for the size cap.
    pub evicted: u64,
    /// Links closed for idleness.
    pub idle_closed: u64,
    /// Dials that failed.
    pub failed: u64,
}

/// A pool of QUIC links to peers, keyed by `NodeId`.
pub struct LinkPool {
    endpoint: Arc<QuicEndpoint>,
    config: PoolConfig,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    entries: HashMap<NodeId, Entry>,
    stats: PoolStats,
    jitter: u64,
}

impl LinkPool {
    /// A pool dialling from `endpoint`.
    pub fn new(endpoint: Arc<QuicEndpoint>, config: PoolConfig) -> Self {
        LinkPool {
            endpoint,
            config,
            state: Mutex::new(State::default()),
        }
    }

    /// The link to `peer` (at `addr`): an existing live one, the one being dialled, or a new
    /// dial. A peer that failed recently is [`Error::Backoff`] until its backoff ends.
    pub async fn get(&self, peer: NodeId, addr: SocketAddr) -> Result<Arc<QuicLink>, Error> {
        // Decide under the lock, act after it is released (the guard must not live across an
        // await: no lock is ever held across a handshake).
        let (tx, failures) = match self.plan(peer) {
            Plan::Done(result) => return result,
            Plan::Join(mut rx) => return wait(&mut rx).await,
            Plan::Dial(tx, failures) => (tx, failures),
        };
        // No lock is held while the handshake runs.
        let result = self.endpoint.connect(peer, addr).await.map(Arc::new);
        {
            let mut state = self.lock();
            let now = Instant::now();
            match &result {
                Ok(link) => {
                    // The peer may have dialled us meanwhile: both sides keep the same one.
                    let kept = match state.entries.get(&peer) {
                        Some(Entry::Ready { link: accepted, .. }) if !accepted.is_closed() => {
                            self.settle_duplicate(accepted.clone(), link.clone())
                        }
                        _ => link.clone(),
                    };
                    state.entries.insert(
                        peer,
                        Entry::Ready {
                            link: kept.clone(),
                            last_used: now,
                        },
                    );
                    self.evict_over_cap(&mut state, peer);
                    let _ = tx.send(Some(Ok(kept.clone())));
                    return Ok(kept);
                }
                Err(_) => {
                    state.stats.failed += 1;
                    let failures = failures + 1;
                    let wait = self.backoff(&mut state, failures);
                    state.entries.insert(
                        peer,
                        Entry::Backoff {
                            until: now + wait,
                            failures,
                        },
                    );
                }
            }
        }
        // Receivers may all be gone; nobody else waiting is fine.
        let _ = tx.send(Some(result.clone()));
        result
    }

    /// Add a link a peer dialled to us, so sends to that peer reuse it. If both nodes dialled
    /// each other at once, both keep the link dialled by the node with the smaller `NodeId`
    /// and close the other (one link per peer, the same one on both sides).
    pub fn insert_accepted(&self, link: QuicLink) -> Arc<QuicLink> {
        let mut state = self.lock();
        let peer = link.peer();
        let mut link = Arc::new(link);
        if let Some(Entry::Ready { link: existing, .. }) = state.entries.get(&peer)
            && !existing.is_closed()
        {
            link = self.settle_duplicate(existing.clone(), link);
        }
        state.entries.insert(
            peer,
            Entry::Ready {
                link: link.clone(),
                last_used: Instant::now(),
            },
        );
        self.evict_over_cap(&mut state, peer);
        link
    }

    /// Close links idle for longer than `idle_timeout` and forget dead ones and expired
    /// backoffs. Call it periodically (the daemon does, once a second).
    pub fn sweep(&self) {
        let mut state = self.lock();
        let now = Instant::now();
        let idle = self.config.idle_timeout;
        let mut closed = 0;
        state.entries.retain(|_, entry| match entry {
            Entry::Ready { link, last_used } => {
                if link.is_closed() {
                    false
                } else if now.duration_since(*last_used) >= idle {
                    link.close("idle");
                    closed += 1;
                    false
                } else {
                    true
                }
            }
            Entry::Dialing(_) => true,
            Entry::Backoff { until, .. } => now < *until,
        });
        state.stats.idle_closed += closed;
    }

    /// Live links held.
    pub fn len(&self) -> usize {
        self.lock()
            .entries
            .values()
            .filter(|e| matches!(e, Entry::Ready { link, .. } if !link.is_closed()))
            .count()
    }

    /// Whether no live link is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The pool's counters.
    pub fn stats(&self) -> PoolStats {
        self.lock().stats
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock cannot leave the map inconsistent (every update is a
        // single insert or remove), so a poisoned lock is still usable.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Of two live links to one peer, the one dialled by the smaller `NodeId` (both nodes
    /// decide the same way); the other is closed. Equal dialler: the existing one stays.
    fn settle_duplicate(&self, existing: Arc<QuicLink>, new: Arc<QuicLink>) -> Arc<QuicLink> {
        let local = self.endpoint.node_id();
        let dialler = |l: &QuicLink| if l.dialled_by_us() { local } else { l.peer() };
        let (keep, close) = if dialler(&new) < dialler(&existing) {
            (new, existing)
        } else {
            (existing, new)
        };
        close.close("duplicate link");
        keep
    }

    /// Close the least recently used ready links beyond the cap (never `keep`).
    fn evict_over_cap(&self, state: &mut State, keep: NodeId) {
        loop {
            let ready: Vec<(NodeId, Instant)> = state
                .entries
                .iter()
                .filter_map(|(id, e)| match e {
                    Entry::Ready { last_used, .. } => Some((*id, *last_used)),
                    _ => None,
                })
                .collect();
            if ready.len() <= self.config.max_links {
                return;
            }
            let Some((victim, _)) = ready
                .into_iter()
                .filter(|(id, _)| *id != keep)
                .min_by_key(|(_, used)| *used)
            else {
                return;
            };
            if let Some(Entry::Ready { link, .. }) = state.entries.remove(&victim) {
                link.close("evicted");
                state.stats.evicted += 1;
            }
        }
    }

    /// Exponential backoff with ±25% jitter (so restarted peers are not redialled in lockstep).
    fn backoff(&self, state: &mut State, failures: u32) -> Duration {
        let base = self
            .config
            .backoff_initial
            .saturating_mul(1u32 << failures.saturating_sub(1).min(16))
            .min(self.config.backoff_max);
        state.jitter = state
            .jitter
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let unit = (state.jitter >> 11) as f64 / (1u64 << 53) as f64; // [0, 1)
        base.mul_f64(0.75 + 0.5 * unit)
    }
}

/// What `get` does once the lock is released.
enum Plan {
    Done(Result<Arc<QuicLink>, Error>),
    Join(watch::Receiver<DialResult>),
    Dial(watch::Sender<DialResult>, u32),
}

impl LinkPool {
    fn plan(&self, peer: NodeId) -> Plan {
        let mut state = self.lock();
        let now = Instant::now();
        match state.entries.get_mut(&peer) {
            Some(Entry::Ready { link, last_used }) if !link.is_closed() => {
                *last_used = now;
                let link = link.clone();
                state.stats.reused += 1;
                return Plan::Done(Ok(link));
            }
            // A dial whose caller gave up (its future was dropped) is replaced below.
            Some(Entry::Dialing(rx)) if rx.has_changed().is_ok() => {
                let rx = rx.clone();
                state.stats.merged += 1;
                return Plan::Join(rx);
            }
            Some(Entry::Backoff { until, .. }) if now < *until => {
                return Plan::Done(Err(Error::Backoff {
                    retry_in: *until - now,
                }));
            }
            _ => {}
        }
        let (tx, rx) = watch::channel(None);
        // A dead link or an expired backoff is replaced; remember failures for backoff.
        let failures = match state.entries.insert(peer, Entry::Dialing(rx)) {
            Some(Entry::Backoff { failures, .. }) => failures,
            _ => 0,
        };
        state.stats.dials += 1;
        Plan::Dial(tx, failures)
    }
}

/// Wait for a dial another caller started.
async fn wait(rx: &mut watch::Receiver<DialResult>) -> Result<Arc<QuicLink>, Error> {
    loop {
        if let Some(result) = rx.borrow_and_update().clone() {
            return result;
        }
        if rx.changed().await.is_err() {
            return Err(Error::Link {
                reason: "the dial this request joined was abandoned".to_string(),
            });
        }
    }
}

impl std::fmt::Debug for LinkPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LinkPool")
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}
