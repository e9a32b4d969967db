//! The directory document: a text file listing relay descriptors, each verified on its own.
//!
//! ```text
//! # comments and blank lines are ignored anywhere
//! nyx-directory 1
//! descriptor <standard base64 of the descriptor bytes, padded>
//! descriptor ...
//! ```
//!
//! A missing or wrong header refuses the whole document ([`DirectoryError`]). Every other
//! line stands alone: a line that fails (bad base64, any [`DescriptorError`], a second
//! descriptor for a node already listed, an unknown keyword) is reported as [`Rejected`] and
//! the remaining descriptors are used.

use std::collections::BTreeMap;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use nyx_core::NodeId;

use super::DescriptorError;
use super::consensus::{Consensus, Flags};
use super::descriptor::Descriptor;

/// The header line keyword.
const HEADER: &str = "nyx-directory";
/// The document format version.
const FORMAT_VERSION: &str = "1";
/// The descriptor line keyword.
const DESCRIPTOR_KEYWORD: &str = "descriptor";

/// Why a whole document was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DirectoryError {
    /// No header line (the document holds only comments and blank lines).
    #[error("no \"nyx-directory 1\" header")]
    MissingHeader,
    /// The first line is not a directory header.
    #[error("line {line}: expected \"nyx-directory 1\", found {found:?}")]
    BadHeader {
        /// The line (1-based).
        line: usize,
        /// The start of what was there (at most 64 characters).
        found: String,
    },
    /// The header names a format version this code does not read.
    #[error("line {line}: unsupported directory format version {version:?}")]
    UnsupportedVersion {
        /// The line (1-based).
        line: usize,
        /// The version text (at most 64 characters).
        version: String,
    },
}

/// A descriptor line that was not used, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejected {
    /// The line (1-based).
    pub line: usize,
    /// The node, when the descriptor decoded far enough to name it (duplicates).
    pub node_id: Option<NodeId>,
    /// Why.
    pub reason: DescriptorError,
}

/// A set of verified descriptors, at most one per node, ordered by [`NodeId`], and, when it
/// was made from a consensus, the weights the authorities agreed on.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Directory {
    relays: BTreeMap<NodeId, Descriptor>,
    /// Consensus weights (empty for a directory of descriptors alone).
    weights: BTreeMap<NodeId, u32>,
    /// Relays the consensus gave the Guard flag (empty for descriptors alone).
    guards: std::collections::BTreeSet<NodeId>,
}

fn clip(text: &str) -> String {
    text.chars().take(64).collect()
}

impl Directory {
    /// Parse a document, verifying every descriptor at `now_unix`. Returns the directory and
    /// the lines that were refused; fails only when the header is missing or wrong.
    pub fn parse(text: &str, now_unix: u64) -> Result<(Directory, Vec<Rejected>), DirectoryError> {
        let mut lines = text
            .lines()
            .enumerate()
            .map(|(i, l)| (i + 1, l.trim()))
            .filter(|(_, l)| !l.is_empty() && !l.starts_with('#'));
        let (header_line, header) = lines.next().ok_or(DirectoryError::MissingHeader)?;
        match header.split_whitespace().collect::<Vec<_>>()[..] {
            [HEADER, FORMAT_VERSION] => {}
            [HEADER, version] => {
                return Err(DirectoryError::UnsupportedVersion {
                    line: header_line,
                    version: clip(version),
                });
            }
            _ => {
                return Err(DirectoryError::BadHeader {
                    line: header_line,
                    found: clip(header),
                });
            }
        }
        let mut dir = Directory::default();
        let mut rejected = Vec::new();
        for (line, text) in lines {
            let reject = |node_id, reason| Rejected {
                line,
                node_id,
                reason,
            };
            let (keyword, rest) = text.split_once(char::is_whitespace).unwrap_or((text, ""));
            if keyword != DESCRIPTOR_KEYWORD {
                let keyword = keyword.chars().take(32).collect();
                rejected.push(reject(None, DescriptorError::UnknownKeyword { keyword }));
                continue;
            }
            let bytes = match STANDARD.decode(rest.trim()) {
                Ok(bytes) => bytes,
                Err(e) => {
                    let reason = DescriptorError::BadBase64 {
                        reason: e.to_string(),
                    };
                    rejected.push(reject(None, reason));
                    continue;
                }
            };
            match Descriptor::decode(&bytes, now_unix) {
                Ok(d) => {
                    if let Err(reason) = dir.insert(d) {
                        let node_id = match reason {
                            DescriptorError::DuplicateNodeId { node_id } => Some(node_id),
                            _ => None,
                        };
                        rejected.push(reject(node_id, reason));
                    }
                }
                Err(reason) => rejected.push(reject(None, reason)),
            }
        }
        Ok((dir, rejected))
    }

    /// A directory of these descriptors; a second descriptor for one node is an error.
    pub fn from_descriptors(descriptors: Vec<Descriptor>) -> Result<Directory, DescriptorError> {
        let mut dir = Directory::default();
        for d in descriptors {
            dir.insert(d)?;
        }
        Ok(dir)
    }

    /// The relays of a verified `consensus` whose descriptors are among `descriptors` (the
    /// descriptor whose digest the consensus names; others are ignored), with the
    /// consensus weights. Relays listed without the Running flag or with weight 0 are left
    /// out. Also returns the relays the consensus lists whose descriptor is missing.
    pub fn from_consensus(
        consensus: &Consensus,
        descriptors: impl IntoIterator<Item = Descriptor>,
    ) -> (Directory, Vec<NodeId>) {
        let mut dir = Directory::default();
        for d in descriptors {
            let Some(status) = consensus.relay(&d.node_id()) else {
                continue;
            };
            if status.digest == d.digest()
                && status.flags.contains(Flags::RUNNING)
                && status.weight > 0
            {
                dir.weights.insert(status.node_id, status.weight);
                if status.flags.contains(Flags::GUARD) {
                    dir.guards.insert(status.node_id);
                }
                dir.relays.insert(status.node_id, d);
            }
        }
        let missing = consensus
            .relays()
            .iter()
            .filter(|r| r.flags.contains(Flags::RUNNING) && r.weight > 0)
            .map(|r| r.node_id)
            .filter(|id| !dir.relays.contains_key(id))
            .collect();
        (dir, missing)
    }

    /// Whether `node` may be sampled as an entry guard: when the consensus gave the Guard
    /// flag (measured uptime) to any relay here, only those; otherwise (a young network, or
    /// a directory of descriptors alone) any relay.
    pub fn may_guard(&self, node: &NodeId) -> bool {
        self.guards.is_empty() || self.guards.contains(node)
    }

    /// The path-selection weight of `d`: its consensus weight when this directory was made
    /// from a consensus, else the bandwidth its descriptor claims.
    pub fn weight(&self, d: &Descriptor) -> u32 {
        self.weights
            .get(&d.node_id())
            .copied()
            .unwrap_or_else(|| d.bandwidth())
    }

    fn insert(&mut self, d: Descriptor) -> Result<(), DescriptorError> {
        let node_id = d.node_id();
        if self.relays.contains_key(&node_id) {
            return Err(DescriptorError::DuplicateNodeId { node_id });
        }
        self.relays.insert(node_id, d);
        Ok(())
    }

    /// The document text: the header, then one descriptor line per relay in node-id order
    /// (descriptors only: consensus weights are not part of it).
    pub fn to_text(&self) -> String {
        let mut out = format!("{HEADER} {FORMAT_VERSION}\n");
        for d in self.relays.values() {
            out.push_str(DESCRIPTOR_KEYWORD);
            out.push(' ');
            out.push_str(&STANDARD.encode(d.as_bytes()));
            out.push('\n');
        }
        out
    }

    /// The descriptor of `node`.
    pub fn get(&self, node: &NodeId) -> Option<&Descriptor> {
        self.relays.get(node)
    }

    /// Whether `node` is listed.
    pub fn contains(&self, node: &NodeId) -> bool {
        self.relays.contains_key(node)
    }

    /// Every descriptor, in node-id order.
    pub fn iter(&self) -> impl Iterator<Item = &Descriptor> {
        self.relays.values()
    }

    /// How many relays are listed.
    pub fn len(&self) -> usize {
        self.relays.len()
    }

    /// Whether no relay is listed.
    pub fn is_empty(&self) -> bool {
        self.relays.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_are_checked() {
        assert_eq!(Directory::parse("", 0), Err(DirectoryError::MissingHeader));
        assert_eq!(
            Directory::parse("# only\n\n  # comments\n", 0),
            Err(DirectoryError::MissingHeader)
        );
        assert_eq!(
            Directory::parse("\n# c\ndescriptor AAAA\n", 0),
            Err(DirectoryError::BadHeader {
                line: 3,
                found: "descriptor AAAA".into()
            })
        );
        assert_eq!(
            Directory::parse("nyx-directory 2\n", 0),
            Err(DirectoryError::UnsupportedVersion {
                line: 1,
                version: "2".into()
            })
        );
        let (dir, rejected) = Directory::parse("# x\nnyx-directory 1\n", 0).unwrap();
        assert!(dir.is_empty() && rejected.is_empty());
        assert_eq!(dir.to_text(), "nyx-directory 1\n");
    }

    #[test]
    fn bad_lines_are_rejected_one_by_one() {
        let text = "nyx-directory 1\nrelay xyz\ndescriptor !!!\ndescriptor AAAA\n";
        let (dir, rejected) = Directory::parse(text, 0).unwrap();
        assert!(dir.is_empty());
        assert_eq!(rejected.len(), 3);
        assert_eq!(
            rejected[0].reason,
            DescriptorError::UnknownKeyword {
                keyword: "relay".into()
            }
        );
        assert!(matches!(
            rejected[1].reason,
            DescriptorError::BadBase64 { .. }
        ));
        assert_eq!(
            (rejected[2].line, &rejected[2].reason),
            (4, &DescriptorError::UnsupportedVersion { version: 0 })
        );
    }
}
