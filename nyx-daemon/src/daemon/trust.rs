//! Which relays a daemon trusts. With no authorities configured: the relays of the
//! directory file as it is (a hand-made network). With authorities pinned
//! (`directory.authorities`): only the relays of a consensus that more than half of them
//! signed, valid now and not older than the one in force, each with the descriptor the
//! consensus names, taken from the directory file; the file alone is never trusted then.

use std::net::SocketAddr;
use std::path::Path;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use nyx_crypto::identity::{IdentityPublic, PUBLIC_KEY_LEN};
use nyx_crypto::kem::HybridPublicKey;
use nyx_node::PinnedPeer;
use nyx_overlay::directory::consensus::{Consensus, UnverifiedConsensus};
use nyx_overlay::directory::{Descriptor, Directory};

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
    /// Its bytes, as signed (a directory cache serves them with `directory`'s descriptors).
    pub consensus: Option<Vec<u8>>,
    /// Relays it lists whose descriptor was not at hand (they are not used).
    pub missing: usize,
}

/// A pinned directory authority: its identity key, and where to reach it when the line
/// says (the address and link key a client dials it at, with the fast handshake, to fetch
/// the consensus before it knows any relay; where relays upload their descriptors).
#[derive(Debug, Clone)]
pub struct PinnedAuthority {
    /// Its identity key (it signs votes and the consensus).
    pub identity: IdentityPublic,
    /// Where and how to reach it, if given.
    pub contact: Option<PinnedPeer>,
}

/// Parse `directory.authorities` lines: `IDENTITY` (64 hex digits: an Ed25519 identity key
/// to check signatures with) or `IDENTITY ADDRESS LINK_KEY` (also where to reach it: an
/// `ip:port` and the standard base64 of its link key, as `nyx testnet` writes them).
pub fn parse_authority_lines(lines: &[String]) -> Result<Vec<PinnedAuthority>, String> {
    let mut out: Vec<PinnedAuthority> = Vec::with_capacity(lines.len());
    for line in lines {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let (key, contact) = match fields[..] {
            [key] => (key, None),
            [key, addr, link_key] => (key, Some((addr, link_key))),
            _ => {
                return Err(format!(
                    "{line:?}: expected IDENTITY or IDENTITY ADDRESS LINK_KEY"
                ));
            }
        };
        let bytes = hex32(key)
            .ok_or_else(|| format!("{key:?} is not {} hex digits", 2 * PUBLIC_KEY_LEN))?;
        let identity = IdentityPublic::from_bytes(&bytes)
            .map_err(|e| format!("{key:?} is not an identity key: {e}"))?;
        if out
            .iter()
            .any(|a| a.identity.node_id() == identity.node_id())
        {
            return Err(format!("{key:?} is listed twice"));
        }
        let contact = match contact {
            None => None,
            Some((addr, link_key)) => {
                let addr: SocketAddr = addr
                    .parse()
                    .map_err(|_| format!("{addr:?} is not an ip:port address"))?;
                let bytes = STANDARD
                    .decode(link_key)
                    .map_err(|e| format!("the link key of {key:?} is not base64: {e}"))?;
                let link_key = HybridPublicKey::from_bytes(&bytes)
                    .map_err(|e| format!("the link key of {key:?} is not one: {e}"))?;
                Some(PinnedPeer {
                    node_id: identity.node_id(),
                    addr,
                    link_key,
                })
            }
        };
        out.push(PinnedAuthority { identity, contact });
    }
    Ok(out)
}

/// The identity keys of `directory.authorities` lines ([`parse_authority_lines`]).
pub fn parse_authorities(lines: &[String]) -> Result<Vec<IdentityPublic>, String> {
    Ok(parse_authority_lines(lines)?
        .into_iter()
        .map(|a| a.identity)
        .collect())
}

/// A pinned authority key as `directory.authorities` writes it: 64 hex digits.
pub fn authority_hex(key: &IdentityPublic) -> String {
    key.to_bytes().iter().map(|b| format!("{b:02x}")).collect()
}

/// A whole `directory.authorities` line: identity, address and link key.
pub fn authority_line(
    key: &IdentityPublic,
    addr: SocketAddr,
    link_key: &HybridPublicKey,
) -> String {
    format!(
        "{} {addr} {}",
        authority_hex(key),
        STANDARD.encode(link_key.to_bytes())
    )
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
            consensus: None,
            missing: 0,
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
                consensus: None,
                missing: 0,
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
    adopt(consensus, bytes, descriptors.iter().cloned())
}

/// The relays of a verified `consensus` (whose encoding is `bytes`), with the descriptors it
/// names taken from `descriptors`.
pub fn adopt(
    consensus: Consensus,
    bytes: Vec<u8>,
    descriptors: impl IntoIterator<Item = Descriptor>,
) -> Result<Trusted, Error> {
    let (directory, missing) = Directory::from_consensus(&consensus, descriptors);
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
        consensus: Some(bytes),
        missing: missing.len(),
    })
}

#[cfg(test)]
mod tests;
