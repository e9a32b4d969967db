//! What every daemon that pins directory authorities does on its own behalf: upload its
//! descriptor to each authority ([`spawn_uploads`]) and keep a current consensus
//! ([`spawn_fetcher`]).
//!
//! Uploads go at start, whenever the descriptor changes (new onion keys, renewal, a new exit
//! policy) and again every half period, so an authority that restarted (it keeps no
//! descriptors on disk) lists the relay again; a failed upload is retried with backoff.
//!
//! The consensus is fetched at start unless the one on disk is still fresh, then after each
//! one's fresh-until at a random moment in the next eighth of a period (so that not every
//! node asks at once), from the authorities first and then from up to
//! [`CACHES_TRIED`] relays of the consensus held (directory caches); a round that brings
//! nothing newer is retried with backoff until the consensus expires, and after.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::sync::Arc;
use std::time::Duration;

use tracing::Instrument as _;

use super::authority::AuthorityHandle;
use crate::daemon::DaemonState;
use nyx_core::redact::Redacted;
use nyx_node::{DirectoryPeer, PinnedPeer, unix_now};
use nyx_overlay::directory::request::{DirRequest, DirResponse};

/// Relays (directory caches) asked in one round after the authorities, at most.
pub const CACHES_TRIED: usize = 3;
/// First retry after a failed round or upload; doubled up to [`MAX_RETRY`] (up to
/// [`MAX_BOOTSTRAP_RETRY`] while no consensus is held, so a new node starts soon after the
/// first one is out).
const MIN_RETRY: Duration = Duration::from_secs(1);
const MAX_RETRY: Duration = Duration::from_secs(60);
const MAX_BOOTSTRAP_RETRY: Duration = Duration::from_secs(8);
/// Period assumed before any consensus says it.
const DEFAULT_PERIOD: u64 = 3600;
/// Longest single sleep: waits are checked against the wall clock at least this often.
const MAX_SLEEP: Duration = Duration::from_secs(60);

/// A random number (for jitter and the order of directory servers; not a secret).
fn random() -> u64 {
    RandomState::new().build_hasher().finish()
}

fn shuffle<T>(items: &mut [T]) {
    for i in (1..items.len()).rev() {
        let j = (random() % (i as u64 + 1)) as usize;
        items.swap(i, j);
    }
}

/// The period of the consensus held, seconds.
fn period(state: &DaemonState) -> u64 {
    state
        .bundle()
        .map(|b| b.period)
        .map_or(DEFAULT_PERIOD, |p| {
            p.fresh_until.saturating_sub(p.valid_after).max(1)
        })
}

/// Upload the node's descriptor to every authority in `authorities` (to `local` directly
/// when this daemon is one of them).
pub fn spawn_uploads(
    state: Arc<DaemonState>,
    authorities: Vec<PinnedPeer>,
    local: Option<Arc<AuthorityHandle>>,
) -> Vec<tokio::task::JoinHandle<()>> {
    let me = state.node.node_id();
    authorities
        .into_iter()
        .map(|peer| {
            let local = local.clone().filter(|_| peer.node_id == me);
            tokio::spawn(upload_loop(state.clone(), peer, local))
        })
        .collect()
}

async fn upload_loop(
    state: Arc<DaemonState>,
    peer: PinnedPeer,
    local: Option<Arc<AuthorityHandle>>,
) {
    let mut signed = state.subscribe_descriptor();
    let mut retry = MIN_RETRY;
    let authority = Redacted(peer.node_id);
    loop {
        let descriptor = signed.borrow_and_update().clone();
        let wait = match descriptor {
            None => Duration::from_secs(period(&state)),
            Some(descriptor) => {
                let request = DirRequest::PostDescriptor {
                    descriptor: descriptor.as_bytes().to_vec(),
                };
                let answer = match &local {
                    Some(authority) => Ok(authority.respond(request)),
                    None => {
                        super::request(&state.node, DirectoryPeer::Pinned(peer.clone()), &request)
                            .await
                    }
                };
                match answer {
                    Ok(DirResponse::Ok) => {
                        tracing::debug!(%authority, "descriptor uploaded");
                        retry = MIN_RETRY;
                        Duration::from_secs(period(&state) / 2)
                    }
                    Ok(other) => {
                        tracing::warn!(%authority, answer = ?other, "descriptor not taken");
                        Duration::from_secs(period(&state) / 2)
                    }
                    Err(e) => {
                        tracing::info!(%authority, error = %e, "descriptor upload failed");
                        let wait = retry;
                        retry = (retry * 2).min(MAX_RETRY);
                        wait
                    }
                }
            }
        };
        // Wall-clock deadline, slept in short steps so a suspend or a clock step is noticed.
        let at = unix_now().saturating_add(wait.as_secs().max(1));
        loop {
            let left = Duration::from_secs(at.saturating_sub(unix_now()));
            if left.is_zero() {
                break;
            }
            tokio::select! {
                () = state.shutdown_requested() => return,
                changed = signed.changed() => match changed {
                    Ok(()) => break,
                    Err(_) => return,
                },
                () = tokio::time::sleep(left.min(MAX_SLEEP)) => {}
            }
        }
    }
}

/// Keep a current consensus: see the module documentation.
pub fn spawn_fetcher(
    state: Arc<DaemonState>,
    authorities: Vec<PinnedPeer>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut retry = MIN_RETRY;
        // When to fetch after the consensus held (by its start): drawn once per consensus.
        let mut due: Option<(u64, u64)> = None;
        loop {
            let held = state.bundle().map(|b| b.period);
            let fetch_at = match held {
                Some(p) if unix_now() < p.fresh_until => match due {
                    Some((after, at)) if after == p.valid_after => at,
                    _ => {
                        let spread = (period(&state) / 8).max(1);
                        let at = p.fresh_until.saturating_add(random() % spread);
                        due = Some((p.valid_after, at));
                        at
                    }
                },
                _ => 0,
            };
            let left = Duration::from_secs(fetch_at.saturating_sub(unix_now()));
            if !left.is_zero() {
                // Short steps on the wall clock, so a suspend or a clock step is noticed.
                tokio::select! {
                    () = state.shutdown_requested() => return,
                    () = tokio::time::sleep(left.min(MAX_SLEEP)) => {}
                }
                continue;
            }
            if fetch_round(&state, &authorities).await {
                retry = MIN_RETRY;
                continue;
            }
            tokio::select! {
                () = state.shutdown_requested() => return,
                () = tokio::time::sleep(retry) => {}
            }
            let cap = match state.bundle() {
                Some(_) => MAX_RETRY,
                None => MAX_BOOTSTRAP_RETRY,
            };
            retry = (retry * 2).min(cap);
        }
    })
}

/// Ask the authorities, then a few caches, until one gives a consensus newer than the one
/// held that this node accepts; true if one was taken up. Traced as a `directory_fetch`
/// span: `tried` (servers asked), `outcome` (`adopted` or `none`) and `source` (the kind of
/// server it came from, `authority` or `cache`); never which server.
async fn fetch_round(state: &DaemonState, authorities: &[PinnedPeer]) -> bool {
    let span = tracing::info_span!(
        "directory_fetch",
        tried = tracing::field::Empty,
        outcome = tracing::field::Empty,
        source = tracing::field::Empty,
        otel.status_code = tracing::field::Empty,
    );
    let (tried, from) = ask_servers(state, authorities)
        .instrument(span.clone())
        .await;
    span.record("tried", tried);
    if let Some(kind) = from {
        span.record("outcome", "adopted");
        span.record("source", kind);
        return true;
    }
    span.record("outcome", "none");
    span.record("otel.status_code", "ERROR");
    let expired = state
        .consensus_valid_until()
        .is_none_or(|until| until <= unix_now());
    if expired {
        tracing::warn!("no current consensus: no directory server had one");
    }
    false
}

/// [`fetch_round`]'s requests: how many servers were asked, and the kind of the one whose
/// consensus was taken up.
async fn ask_servers(
    state: &DaemonState,
    authorities: &[PinnedPeer],
) -> (u32, Option<&'static str>) {
    let me = state.node.node_id();
    let mut sources: Vec<DirectoryPeer> = authorities
        .iter()
        .filter(|a| a.node_id != me)
        .cloned()
        .map(DirectoryPeer::Pinned)
        .collect();
    shuffle(&mut sources);
    let mut caches: Vec<DirectoryPeer> = state
        .directory()
        .iter()
        .filter(|d| d.node_id() != me && !authorities.iter().any(|a| a.node_id == d.node_id()))
        .map(|d| DirectoryPeer::Relay(Box::new(d.clone())))
        .collect();
    shuffle(&mut caches);
    sources.extend(caches.into_iter().take(CACHES_TRIED));
    let mut tried = 0;
    for source in sources {
        tried += 1;
        let from = source.node_id();
        let kind = match source {
            DirectoryPeer::Pinned(_) => "authority",
            DirectoryPeer::Relay(_) => "cache",
        };
        let newer_than = state.consensus_valid_after().unwrap_or(0);
        let request = DirRequest::GetConsensus { newer_than };
        match super::request(&state.node, source, &request).await {
            Ok(DirResponse::Consensus {
                consensus,
                descriptors,
            }) => match state
                .adopt_consensus(from, consensus, &descriptors, true)
                .await
            {
                Ok(_) => return (tried, Some(kind)),
                Err(e) => tracing::warn!(error = %e, "consensus refused"),
            },
            Ok(DirResponse::NotModified | DirResponse::NotFound) => {}
            Ok(other) => {
                tracing::info!(from = %Redacted(from), answer = ?other, "no consensus from this server");
            }
            Err(e) => tracing::info!(error = %e, "directory server unreachable"),
        }
    }
    (tried, None)
}
