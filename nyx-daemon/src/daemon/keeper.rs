//! The keeper: keeps what the node must not lose current while the daemon runs. Its
//! published descriptor is renewed when the onion keys rotate (with the new certificates),
//! halfway through its validity (so it never expires on a running relay), and after the
//! node's event subscription lagged (a rotation may have been missed). Its entry guards are
//! saved when a built circuit shows they changed. An expired consensus is dropped.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use nyx_crypto::onion_cert::OnionKeyCert;
use nyx_node::NodeEvent;
use tokio::sync::broadcast::error::RecvError;

use super::files;
use super::state::DaemonState;

/// What the keeper does about one item of the node's event subscription.
#[derive(Debug, PartialEq)]
enum Step {
    /// The onion keys rotated: publish the descriptor with these certificates.
    Publish(Vec<OnionKeyCert>),
    /// A circuit was built: save the guards if they changed.
    SaveGuards,
    /// Events were missed: a rotation or a new guard may be among them, so save the guards
    /// and publish with the node's current certificates.
    CatchUp,
    /// Nothing to keep.
    Ignore,
    /// The node is gone.
    Stop,
}

fn step(event: Result<NodeEvent, RecvError>) -> Step {
    match event {
        Ok(NodeEvent::OnionKeysRotated { certs }) => Step::Publish(certs),
        Ok(NodeEvent::CircuitBuilt { .. }) => Step::SaveGuards,
        Ok(_) => Step::Ignore,
        Err(RecvError::Lagged(_)) => Step::CatchUp,
        Err(RecvError::Closed) => Step::Stop,
    }
}

/// Spawn the keeper of `state`'s node, reading its `events`; the guards live at
/// `guards_path`, as `saved_guards` last written.
pub(super) fn spawn_keeper(
    state: Arc<DaemonState>,
    mut events: tokio::sync::broadcast::Receiver<NodeEvent>,
    guards_path: PathBuf,
    mut saved_guards: Vec<nyx_node::SampledGuard>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let half_validity = || state.config().relay.descriptor_validity / 2;
        let mut renew_at = tokio::time::Instant::now() + half_validity();
        loop {
            // The consensus in force may change with every reload: look each time.
            let expires_at = state.consensus_valid_until().map(|until| {
                let left = until.saturating_sub(nyx_node::unix_now());
                tokio::time::Instant::now() + Duration::from_secs(left)
            });
            let certs = tokio::select! {
                () = state.shutdown_requested() => return,
                () = sleep_until_some(expires_at) => {
                    if let Err(e) = state.consensus_expired().await {
                        tracing::warn!(error = %e, "dropping the expired consensus failed");
                    }
                    continue;
                }
                () = tokio::time::sleep_until(renew_at) => None,
                event = events.recv() => match step(event) {
                    Step::Publish(certs) => Some(certs),
                    Step::SaveGuards => {
                        save_guards(&state, &guards_path, &mut saved_guards).await;
                        continue;
                    }
                    Step::CatchUp => {
                        tracing::debug!("node events missed: catching up");
                        save_guards(&state, &guards_path, &mut saved_guards).await;
                        match state.node.onion_certs().await {
                            Ok(certs) if !certs.is_empty() => Some(certs),
                            _ => continue,
                        }
                    }
                    Step::Ignore => continue,
                    Step::Stop => return,
                },
            };
            let rotated = certs.is_some();
            match state.renew_descriptor(certs) {
                Ok(true) => tracing::info!(rotated, "descriptor published again"),
                Ok(false) => {}
                Err(e) => tracing::warn!(error = %e, "descriptor could not be published again"),
            }
            renew_at = tokio::time::Instant::now() + half_validity();
        }
    })
}

/// Write the node's guards to `path` if they differ from `saved`.
async fn save_guards(
    state: &DaemonState,
    path: &std::path::Path,
    saved: &mut Vec<nyx_node::SampledGuard>,
) {
    let Ok(guards) = state.node.guards().await else {
        return;
    };
    if guards == *saved {
        return;
    }
    match files::write_guards(path, &guards) {
        Ok(()) => *saved = guards,
        Err(e) => tracing::warn!(error = %e, "guards could not be saved"),
    }
}

/// Sleep until `at`, or forever without one.
async fn sleep_until_some(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::sync::broadcast;

    #[tokio::test]
    async fn a_lagged_subscription_catches_up_instead_of_missing_a_rotation() {
        // A subscriber that fell behind the node's event buffer, with a rotation among the
        // events it lost, learns only that it lagged: it must catch up, not carry on.
        let (tx, mut rx) = broadcast::channel(2);
        tx.send(NodeEvent::OnionKeysRotated { certs: Vec::new() })
            .unwrap();
        for relays in 0..2 {
            tx.send(NodeEvent::DirectoryChanged { relays }).unwrap();
        }
        assert_eq!(step(rx.recv().await), Step::CatchUp);
        // The events still buffered are read as usual after the catch-up.
        assert_eq!(step(rx.recv().await), Step::Ignore);
        assert_eq!(step(rx.recv().await), Step::Ignore);
        drop(tx);
        assert_eq!(step(rx.recv().await), Step::Stop);
    }

    #[tokio::test]
    async fn rotations_publish_and_built_circuits_save_guards() {
        let (tx, mut rx) = broadcast::channel(8);
        tx.send(NodeEvent::OnionKeysRotated { certs: Vec::new() })
            .unwrap();
        tx.send(NodeEvent::CircuitFailed {
            attempt: 1,
            reason: nyx_overlay::circuit::DestroyReason::Timeout,
        })
        .unwrap();
        assert_eq!(step(rx.recv().await), Step::Publish(Vec::new()));
        assert_eq!(step(rx.recv().await), Step::Ignore);
    }
}
