//! Which relays a daemon trusts. With no authorities configured: the relays of the
//! directory file as it is (a hand-made network). With authorities pinned
//! (`directory.authorities`): only the relays of a consensus that more than half of them
//! signed, valid now and not older than the one in force, each with the descriptor the
//! consensus names, taken from the directory file; the file alone is never trusted then.

use std::path::Path;

use nyx_crypto::identity::{IdentityPublic, PUBLIC_KEY_LEN};
use nyx_overlay::directory::Directory;
use nyx_overlay::directory::consensus::UnverifiedConsensus;

use super::files;
use crate::Error;

/// The relays to use, and the start of the consensus they came from (if any).
#[derive(Debug)]
pub struct Trusted {
    /// The relays.
    pub directory: Directory,
    /// `valid_after` of the consensus accepted; a later reload refuses older ones.
    pub consensus_valid_after: Option<u64>,
    /// When that consensus expires (its relays are dropped then).
    pub consensus_valid_until: Option<u64>,
}

/// Parse pinned authority keys: 64 hex digits each (an Ed25519 identity public key).
pub fn parse_authorities(keys: &[String]) -> Result<Vec<IdentityPublic>, String> {
    let mut out: Vec<IdentityPublic> = Vec::with_capacity(keys.len());
    for key in keys {
        let bytes = hex32(key.trim())
            .ok_or_else(|| format!("{key:?} is not {} hex digits", 2 * PUBLIC_KEY_LEN))?;
        let public = IdentityPublic::from_bytes(&bytes)
            .map_err(|e| format!("{key:?} is not an identity key: {e}"))?;
        if out.iter().any(|k| k.node_id() == public.node_id()) {
            return Err(format!("{key:?} is listed twice"));
        }
        out.push(public);
    }
    Ok(out)
}

/// A pinned authority key as `directory.authorities` writes it: 64 hex digits.
pub fn authority_hex(key: &IdentityPublic) -> String {
    key.to_bytes().iter().map(|b| format!("{b:02x}")).collect()
}

fn hex32(s: &str) -> Option<[u8; PUBLIC_KEY_LEN]> {
    if s.len() != 2 * PUBLIC_KEY_LEN || !s.is_ascii() {
        return None;
    }
    let mut out = [0u8; PUBLIC_KEY_LEN];
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(out)
}

/// Load the relays to trust (see the module documentation). A missing directory or
/// consensus file means no relays yet; a consensus that fails its checks is an error that
/// names the reason.
pub fn load(
    directory_file: &Path,
    consensus_file: &Path,
    authorities: &[IdentityPublic],
    now_unix: u64,
    held: Option<u64>,
) -> Result<Trusted, Error> {
    let descriptors = files::read_directory(directory_file, now_unix)?;
    if authorities.is_empty() {
        return Ok(Trusted {
            directory: descriptors,
            consensus_valid_after: None,
            consensus_valid_until: None,
        });
    }
    let bytes = match std::fs::read(consensus_file) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            tracing::warn!("no consensus yet: no relays are used until one is loaded");
            return Ok(Trusted {
                directory: Directory::default(),
                consensus_valid_after: held,
                consensus_valid_until: None,
            });
        }
        Err(source) => {
            return Err(Error::File {
                what: "read",
                path: consensus_file.to_owned(),
                source,
            });
        }
    };
    let refused = |source| Error::Consensus {
        path: consensus_file.to_owned(),
        source,
    };
    let consensus = UnverifiedConsensus::decode(&bytes)
        .and_then(|c| c.verify(authorities, now_unix, held))
        .map_err(refused)?;
    let (directory, missing) = Directory::from_consensus(&consensus, descriptors.iter().cloned());
    if !missing.is_empty() {
        tracing::warn!(
            missing = missing.len(),
            "relays of the consensus without their descriptor are not used"
        );
    }
    Ok(Trusted {
        directory,
        consensus_valid_after: Some(consensus.period().valid_after),
        consensus_valid_until: Some(consensus.period().valid_until),
    })
}

#[cfg(test)]
mod tests;
