//! Link-key rotation of a relay daemon (Tor rotates its link certificates the same way):
//! every `relay.link_key_period` a new link key is made, the current one becomes the
//! previous one, the descriptor is published again with the new key, and the node answers
//! UDP link handshakes for both keys until `relay.link_key_overlap` has passed, long enough
//! for clients to get the new descriptor through a consensus. Then the previous key is
//! erased.
//!
//! Both keys live in the data directory (`keys/link.key`, `keys/link.prev.key`), so the
//! schedule survives restarts: the current key's file time is when it was made. Directory
//! authorities never rotate: their link key is pinned in every daemon's configuration.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

use nyx_crypto::kem::HybridSecretKey;
use nyx_crypto::keyfile;
use nyx_crypto::link::LinkKey;
use nyx_node::{NodeHandle, unix_now};

use super::DaemonState;
use super::files::LINK_KEY_FILE;
use crate::Error;

/// The previous link key, kept for the overlap after a rotation.
pub const PREVIOUS_LINK_KEY_FILE: &str = "keys/link.prev.key";
/// Longest sleep between looks at the wall clock (a suspended machine wakes up late).
const LOOK_EVERY: Duration = Duration::from_secs(60);

/// When to rotate and how long the previous key stays.
#[derive(Debug, Clone, Copy)]
pub struct LinkKeySchedule {
    /// How long a key is the current one.
    pub period: Duration,
    /// How long the previous one is still answered.
    pub overlap: Duration,
}

/// Start rotating the link keys of `node` in `data_dir` (a relay that is not an authority).
pub fn spawn(
    state: Arc<DaemonState>,
    node: NodeHandle,
    data_dir: PathBuf,
    schedule: LinkKeySchedule,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            let wait = match step(&state, &node, &data_dir, schedule, unix_now()).await {
                Ok(next) => next.saturating_sub(unix_now()),
                Err(e) => {
                    tracing::warn!(error = %e, "link key rotation failed; retrying in a minute");
                    60
                }
            };
            let wait = Duration::from_secs(wait.max(1)).min(LOOK_EVERY);
            tokio::select! {
                () = state.shutdown_requested() => return,
                () = tokio::time::sleep(wait) => {}
            }
        }
    })
}

/// Do what is due at `now` (rotate, or retire the previous key) and return when to look
/// again (Unix seconds).
async fn step(
    state: &DaemonState,
    node: &NodeHandle,
    dir: &Path,
    schedule: LinkKeySchedule,
    now: u64,
) -> Result<u64, Error> {
    let (current, previous) = (dir.join(LINK_KEY_FILE), dir.join(PREVIOUS_LINK_KEY_FILE));
    let made = made_at(&current)?;
    let rotate_at = made.saturating_add(schedule.period.as_secs());
    let retire_at = made.saturating_add(schedule.overlap.as_secs());
    if now >= rotate_at {
        let fresh = HybridSecretKey::generate()?;
        let public = fresh.public().clone();
        rename(&current, &previous)?;
        keyfile::write_hybrid(&current, &fresh)?;
        let old = keyfile::read_hybrid(&previous)?;
        node.set_link_keys(vec![LinkKey::new(fresh), LinkKey::new(old)])
            .await?;
        if state.publish_link_key(public)? {
            tracing::info!("link key rotated; descriptor published again");
        }
        return Ok(now.saturating_add(schedule.overlap.as_secs()));
    }
    if previous.exists() {
        if now >= retire_at {
            let key = keyfile::read_hybrid(&current)?;
            node.set_link_keys(vec![LinkKey::new(key)]).await?;
            std::fs::remove_file(&previous).map_err(|source| Error::File {
                what: "remove",
                path: previous.clone(),
                source,
            })?;
            tracing::info!("previous link key retired");
            return Ok(rotate_at);
        }
        return Ok(retire_at.min(rotate_at));
    }
    Ok(rotate_at)
}

/// At start: while the previous key's overlap lasts, answer for it too (the node was
/// bound with the current key alone).
pub async fn resume(
    node: &NodeHandle,
    dir: &Path,
    schedule: LinkKeySchedule,
    now: u64,
) -> Result<(), Error> {
    let previous = dir.join(PREVIOUS_LINK_KEY_FILE);
    let current = dir.join(LINK_KEY_FILE);
    if !previous.exists() || now >= made_at(&current)?.saturating_add(schedule.overlap.as_secs()) {
        return Ok(()); // nothing kept, or the rotation task erases it
    }
    let keys = vec![
        LinkKey::new(keyfile::read_hybrid(&current)?),
        LinkKey::new(keyfile::read_hybrid(&previous)?),
    ];
    Ok(node.set_link_keys(keys).await?)
}

/// When the key file at `path` was written (Unix seconds).
fn made_at(path: &Path) -> Result<u64, Error> {
    let modified = std::fs::metadata(path)
        .and_then(|m| m.modified())
        .map_err(|source| Error::File {
            what: "inspect",
            path: path.to_owned(),
            source,
        })?;
    Ok(modified
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs()))
}

fn rename(from: &Path, to: &Path) -> Result<(), Error> {
    std::fs::rename(from, to).map_err(|source| Error::File {
        what: "rename",
        path: from.to_owned(),
        source,
    })
}
