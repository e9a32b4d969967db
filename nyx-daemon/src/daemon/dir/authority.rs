//! A directory authority inside the daemon: the sans-IO
//! [`Authority`] (nyx-overlay) behind a lock, the directory streams
//! ([`super::serve`]) feeding it requests, and one task carrying out what it asks:
//! reachability tests (a one-hop circuit to the relay at its advertised address with its
//! advertised keys), votes and signatures to the other authorities, and, when it publishes
//! a consensus, taking that consensus up as the daemon's own.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;

use crate::Error;
use crate::daemon::DaemonState;
use crate::daemon::config::DaemonConfig;
use crate::daemon::trust::PinnedAuthority;
use nyx_core::NodeId;
use nyx_core::redact::Redacted;
use nyx_crypto::identity::IdentityKey;
use nyx_node::{DirectoryPeer, PinnedPeer, unix_now};
use nyx_overlay::directory::authority::{Authority, AuthorityAction, AuthorityConfig};
use nyx_overlay::directory::request::{DirRequest, DirResponse};

/// Tries of one request to another authority.
const SEND_ATTEMPTS: usize = 3;
/// Reachability tests run at once, at most (the authority bounds how many it asks for).
const MAX_PROBES: usize = 16;

/// An authority shared by the directory streams and its driver.
#[derive(Debug)]
pub struct AuthorityHandle {
    inner: Mutex<Authority>,
    /// Wakes the driver when a request queued work (a descriptor to test).
    wake: Notify,
}

impl AuthorityHandle {
    /// The authority of `config` (`[authority]` and `directory.authorities`), signing with
    /// `identity`.
    pub fn new(
        identity: Arc<IdentityKey>,
        config: &DaemonConfig,
        pinned: &[PinnedAuthority],
    ) -> Result<Self, Error> {
        let mut settings = AuthorityConfig::new(pinned.iter().map(|a| a.identity).collect());
        settings.period = config.authority.period.as_secs();
        settings.stable_after = config.authority.stable_after.as_secs();
        settings.guard_after = config.authority.guard_after.as_secs();
        let authority =
            Authority::new(identity, settings, unix_now()).map_err(|e| Error::ConfigInvalid {
                path: Default::default(),
                problems: nyx_core::config::ConfigProblems::from_vec(vec![
                    nyx_core::config::ConfigProblem {
                        field: "authority".to_owned(),
                        reason: e.to_string(),
                    },
                ]),
            })?;
        Ok(AuthorityHandle {
            inner: Mutex::new(authority),
            wake: Notify::new(),
        })
    }

    /// Answer one directory request.
    pub fn respond(&self, request: DirRequest) -> DirResponse {
        let response = self.lock().respond(request, unix_now());
        self.wake.notify_one();
        response
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Authority> {
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// Carry out what the authority asks, at the times it asks, until the daemon stops.
/// `pinned` says where the other authorities are.
pub fn spawn(
    authority: Arc<AuthorityHandle>,
    state: Arc<DaemonState>,
    pinned: &[PinnedAuthority],
) -> tokio::task::JoinHandle<()> {
    let contacts: Arc<HashMap<NodeId, PinnedPeer>> = Arc::new(
        pinned
            .iter()
            .filter_map(|a| a.contact.clone().map(|c| (c.node_id, c)))
            .collect(),
    );
    let probes = Arc::new(tokio::sync::Semaphore::new(MAX_PROBES));
    tokio::spawn(async move {
        loop {
            let (actions, deadline) = {
                let mut a = authority.lock();
                let now = unix_now();
                let actions: Vec<_> = std::iter::from_fn(|| a.poll_action(now)).collect();
                (actions, a.next_deadline())
            };
            for action in actions {
                execute(action, &authority, &state, &contacts, &probes).await;
            }
            // Deadlines are whole Unix seconds: look again at the next one, at least once a
            // second so a clock step is noticed.
            let wait = deadline.map_or(1, |d| d.saturating_sub(unix_now()).min(1));
            tokio::select! {
                () = state.shutdown_requested() => return,
                () = authority.wake.notified() => {}
                () = tokio::time::sleep(Duration::from_secs(wait)) => {}
            }
        }
    })
}

async fn execute(
    action: AuthorityAction,
    authority: &Arc<AuthorityHandle>,
    state: &Arc<DaemonState>,
    contacts: &Arc<HashMap<NodeId, PinnedPeer>>,
    probes: &Arc<tokio::sync::Semaphore>,
) {
    if let Some((to, request)) = action.request() {
        let Some(peer) = contacts.get(&to).cloned() else {
            tracing::warn!(authority = %Redacted(to), "no address for this authority: set it in directory.authorities");
            return;
        };
        let (authority, node) = (authority.clone(), state.node.clone());
        tokio::spawn(async move {
            // A few tries a second apart: a vote or signature lost now is lost for the
            // period (the schedule's next step comes at least a second later).
            let mut attempt = 1;
            let answer = loop {
                let pinned = DirectoryPeer::Pinned(peer.clone());
                let answer = super::request(&node, pinned, &request).await;
                if answer.is_ok() || attempt == SEND_ATTEMPTS {
                    break answer;
                }
                attempt += 1;
                tokio::time::sleep(Duration::from_secs(1)).await;
            };
            let to = Redacted(to);
            match (answer, &request) {
                (Ok(DirResponse::Vote { vote }), DirRequest::GetVote { .. }) => {
                    let handled = authority.lock().handle_vote(&vote, unix_now());
                    if let Err(e) = handled {
                        tracing::warn!(authority = %to, error = %e, "vote refused");
                    }
                    authority.wake.notify_one();
                }
                (Ok(DirResponse::Ok), _) => {}
                (Ok(other), _) => {
                    tracing::info!(authority = %to, answer = ?short(&other), "authority did not take it");
                }
                (Err(e), _) => tracing::info!(authority = %to, error = %e, "authority unreachable"),
            }
        });
        return;
    }
    match action {
        AuthorityAction::Probe { descriptor } => {
            let (authority, node) = (authority.clone(), state.node.clone());
            let probes = probes.clone();
            tokio::spawn(async move {
                let Ok(_slot) = probes.acquire_owned().await else {
                    return;
                };
                let (relay, digest) = (descriptor.node_id(), descriptor.digest());
                if relay == node.node_id() {
                    // This daemon is its own relay: reachable while it runs (it cannot
                    // build a circuit to itself).
                    authority.lock().probed(relay, digest, true, unix_now());
                    return authority.wake.notify_one();
                }
                let probe =
                    node.directory_circuit(DirectoryPeer::Relay(Box::new((*descriptor).clone())));
                let reachable = match tokio::time::timeout(super::REQUEST_TIMEOUT, probe).await {
                    Ok(Ok(circuit)) => {
                        circuit.close().await;
                        true
                    }
                    Ok(Err(e)) => {
                        tracing::debug!(relay = %Redacted(relay), error = %e, "relay unreachable");
                        false
                    }
                    Err(_) => false,
                };
                authority
                    .lock()
                    .probed(relay, digest, reachable, unix_now());
                authority.wake.notify_one();
            });
        }
        AuthorityAction::Published { valid_after } => {
            // Served, and taken up by this daemon, from its start.
            let (authority, state) = (authority.clone(), state.clone());
            tokio::spawn(async move {
                let wait = valid_after.saturating_sub(unix_now());
                tokio::time::sleep(Duration::from_secs(wait)).await;
                let published = authority
                    .lock()
                    .consensus(unix_now())
                    .map(|(c, d)| (c.to_vec(), d.to_vec()));
                let Some((consensus, descriptors)) = published else {
                    return;
                };
                let me = state.node.node_id();
                match state
                    .adopt_consensus(me, consensus, &descriptors, false)
                    .await
                {
                    Ok(_) => tracing::info!(valid_after, "consensus published"),
                    Err(e) => tracing::warn!(valid_after, error = %e, "own consensus not taken up"),
                }
            });
        }
        _ => {}
    }
}

/// A response without its bulk, for a log line.
fn short(response: &DirResponse) -> String {
    match response {
        DirResponse::Refused { reason } => format!("refused: {reason}"),
        DirResponse::Consensus { .. } => "a consensus".to_owned(),
        DirResponse::Vote { .. } => "a vote".to_owned(),
        other => format!("{other:?}"),
    }
}
