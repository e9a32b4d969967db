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

use nyx_crypto::kem::{HybridPublicKey, HybridSecretKey};
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
/// The node was bound with the current key alone; the first step also answers for the
/// previous one while its overlap lasts.
pub fn spawn(
    state: Arc<DaemonState>,
    node: NodeHandle,
    data_dir: PathBuf,
    schedule: LinkKeySchedule,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut answered: Option<Answered> = None;
        loop {
            let next = step(
                &state,
                &node,
                &data_dir,
                schedule,
                &mut answered,
                unix_now(),
            )
            .await;
            let wait = match next {
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

/// The public keys the node was last given (current, previous).
type Answered = (HybridPublicKey, Option<HybridPublicKey>);

/// Bring everything in line with the files at `now`, rotating first if due, and return when
/// to look again (Unix seconds). Every step starts from the files, so one that failed half
/// way is completed by the next: the node answers for the current key and (during the
/// overlap, or while the descriptor still names it) the previous one; the descriptor names
/// the current key; the previous key is erased only once the descriptor names the current
/// one and the overlap is over.
async fn step(
    state: &DaemonState,
    node: &NodeHandle,
    dir: &Path,
    schedule: LinkKeySchedule,
    answered: &mut Option<Answered>,
    now: u64,
) -> Result<u64, Error> {
    let (current, previous) = (dir.join(LINK_KEY_FILE), dir.join(PREVIOUS_LINK_KEY_FILE));
    if now >= made_at(&current)?.saturating_add(schedule.period.as_secs()) {
        rotate(&current, &previous)?;
        tracing::info!("new link key made");
    }
    let made = made_at(&current)?;
    let (rotate_at, retire_at) = (
        made.saturating_add(schedule.period.as_secs()),
        made.saturating_add(schedule.overlap.as_secs()),
    );
    let key = keyfile::read_hybrid(&current)?;
    let public = key.public().clone();
    let old = match previous.exists() {
        true => Some(keyfile::read_hybrid(&previous)?),
        false => None,
    };
    let published = state.published_link_key().is_some_and(|p| p == public);
    // The previous key stays answered during the overlap and while the descriptor does not
    // name the current key yet.
    let keep_old = old.filter(|_| now < retire_at || !published);
    let wanted: Answered = (
        public.clone(),
        keep_old.as_ref().map(|k| k.public().clone()),
    );
    if answered.as_ref() != Some(&wanted) {
        let mut keys = vec![LinkKey::new(key)];
        keys.extend(keep_old.map(LinkKey::new));
        node.set_link_keys(keys).await?;
        *answered = Some(wanted.clone());
    }
    if !published && state.publish_link_key(public)? {
        tracing::info!("descriptor published again with the new link key");
    }
    match (previous.exists(), wanted.1) {
        (true, None) => {
            std::fs::remove_file(&previous).map_err(|source| Error::File {
                what: "remove",
                path: previous.clone(),
                source,
            })?;
            tracing::info!("previous link key erased");
            Ok(rotate_at)
        }
        (true, Some(_)) => Ok(retire_at.min(rotate_at)),
        (false, _) => Ok(rotate_at),
    }
}

/// Make a new current key, the current one becoming the previous one. `link.key` is never
/// missing: the previous file is a second name of the current key's file before the new key
/// replaces it (atomically); a crash in between leaves two names of one key, and the next
/// step rotates again.
fn rotate(current: &Path, previous: &Path) -> Result<(), Error> {
    let fail = |what, path: &Path| {
        let path = path.to_owned();
        move |source| Error::File { what, path, source }
    };
    match std::fs::remove_file(previous) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            return Err(fail("remove", previous)(e));
        }
        _ => {}
    }
    std::fs::hard_link(current, previous).map_err(fail("link", previous))?;
    keyfile::write_hybrid(current, &HybridSecretKey::generate()?)?;
    Ok(())
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
