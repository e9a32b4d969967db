//! The consensus a daemon holds: when it expires, what it serves as a directory cache
//! ([`Bundle`]), and adopting a newer one fetched from a directory server.

use std::sync::Arc;

use super::state::{DaemonState, lock};
use super::{files, trust};
use crate::Error;
use nyx_core::NodeId;
use nyx_core::redact::Redacted;
use nyx_node::unix_now;
use nyx_overlay::directory::consensus::{Period, UnverifiedConsensus};
use nyx_overlay::directory::request::DirResponse;
use nyx_overlay::directory::{Descriptor, Directory};

/// What a directory cache serves: the GetConsensus answer for the consensus in force (the
/// consensus as signed and the descriptors of the relays it lists, in its order), encoded
/// once, and when that consensus applies.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bundle {
    /// The encoded [`DirResponse::Consensus`] frame.
    pub response: Vec<u8>,
    /// When the consensus applies.
    pub period: Period,
}

impl Bundle {
    /// The bundle of `consensus` with the descriptors of `directory` (its relays); none if
    /// the bytes do not decode (a consensus that was verified always does).
    pub fn new(consensus: Vec<u8>, directory: &Directory) -> Option<Self> {
        let period = UnverifiedConsensus::decode(&consensus).ok()?.body().period;
        let response = DirResponse::Consensus {
            consensus,
            descriptors: directory.iter().map(|d| d.as_bytes().to_vec()).collect(),
        }
        .encode();
        Some(Bundle { response, period })
    }
}

impl DaemonState {
    /// When the consensus in force expires (Unix seconds), if relays come from one.
    pub fn consensus_valid_until(&self) -> Option<u64> {
        *lock(&self.consensus_valid_until)
    }

    /// If the consensus in force has expired: stop using its relays, and say so. A newer
    /// one is taken up by the next reload.
    pub async fn consensus_expired(&self) -> Result<(), Error> {
        let _one = self.adopting.lock().await;
        let until = {
            let mut slot = lock(&self.consensus_valid_until);
            match *slot {
                // A reload may have brought a newer one since the caller looked.
                Some(until) if until <= unix_now() => slot.take(),
                _ => None,
            }
        };
        let Some(until) = until else {
            return Ok(());
        };
        tracing::error!(
            valid_until = until,
            "the consensus expired: no relays are used until a newer one is loaded \
             (place it and reload)"
        );
        *lock(&self.bundle) = None;
        *lock(&self.directory) = Directory::default();
        self.node.set_directory(Directory::default()).await?;
        Ok(())
    }

    /// The consensus this daemon serves as a directory cache, if it holds one.
    pub fn bundle(&self) -> Option<Arc<Bundle>> {
        lock(&self.bundle).clone()
    }

    /// The descriptor this node publishes, as last signed (changes when it is signed again).
    pub fn subscribe_descriptor(&self) -> tokio::sync::watch::Receiver<Option<Descriptor>> {
        self.signed.subscribe()
    }

    /// `valid_after` of the consensus in force, if any.
    pub fn consensus_valid_after(&self) -> Option<u64> {
        *lock(&self.consensus_valid_after)
    }

    /// Take up a consensus fetched from `from`: checked against the pinned authorities (a
    /// majority of valid signatures, valid now, not older than the one in force), saved to
    /// the consensus and directory files (so the next start begins from it), and its
    /// relays, with the descriptors among `descriptors` it names, used from now on. With
    /// `complete`, a consensus whose descriptors are not all there is refused: a directory
    /// server that withholds some would otherwise choose which relays this node uses.
    /// Returns false when it is the one already in force.
    pub async fn adopt_consensus(
        &self,
        from: NodeId,
        consensus: Vec<u8>,
        descriptors: &[Vec<u8>],
        complete: bool,
    ) -> Result<bool, Error> {
        // One adoption (or reload) at a time, so that `held` cannot go back.
        let _one = self.adopting.lock().await;
        let config = self.config();
        let refused = |source| Error::ConsensusRefused {
            from: Redacted(from).to_string(),
            source,
        };
        // The configuration was validated when it was loaded.
        let authorities =
            trust::parse_authorities(&config.directory.authorities).unwrap_or_default();
        let held = self.consensus_valid_after();
        let now = unix_now();
        let unverified = UnverifiedConsensus::decode(&consensus).map_err(refused)?;
        if Some(unverified.body().period.valid_after) == held {
            return Ok(false);
        }
        let verified = unverified
            .verify(&authorities, now, held)
            .map_err(refused)?;
        let offered = descriptors
            .iter()
            .filter_map(|bytes| Descriptor::decode(bytes, now).ok());
        let trusted = trust::adopt(verified, consensus, offered)?;
        if complete && trusted.missing > 0 {
            return Err(Error::DirectoryRequest {
                to: Redacted(from).to_string(),
                reason: format!(
                    "its consensus came without {} of the descriptors it lists",
                    trusted.missing
                ),
            });
        }
        let Some(bytes) = trusted.consensus else {
            return Ok(false);
        };
        let data_dir = &self.endpoints.data_dir;
        files::write_atomic(
            &data_dir.join(&config.directory.file),
            trusted.directory.to_text(),
        )?;
        files::write_atomic(&data_dir.join(&config.directory.consensus), &bytes)?;
        let bundle = Bundle::new(bytes, &trusted.directory).map(Arc::new);
        let relays = trusted.directory.len();
        *lock(&self.consensus_valid_after) = trusted.consensus_valid_after;
        *lock(&self.consensus_valid_until) = trusted.consensus_valid_until;
        *lock(&self.bundle) = bundle;
        *lock(&self.directory) = trusted.directory.clone();
        self.node.set_directory(trusted.directory).await?;
        tracing::info!(
            relays,
            valid_after = trusted.consensus_valid_after,
            "new consensus in force"
        );
        Ok(true)
    }
}
