//! The identifier every layer shares: [`NodeId`]. (Circuit and stream ids are the
//! overlay's: they are per link and per circuit, and live with their wire formats.)

use std::fmt;
use std::str::FromStr;

use crate::Error;

/// The identity of a node: 32 bytes, the hash of its identity public key (nyx-crypto derives
/// it; this crate only carries it).
///
/// Displays as 64 lowercase hex digits and parses back from hex in either case. `Debug` shows
/// only the first 8 digits, which is enough to tell nodes apart in logs.
///
/// ```
/// use nyx_core::NodeId;
/// let id = NodeId::from_bytes([0xab; 32]);
/// let text = id.to_string();
/// assert_eq!(text.len(), 64);
/// assert_eq!(text.parse::<NodeId>().unwrap(), id);
/// assert!("not hex".parse::<NodeId>().is_err());
/// ```
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct NodeId([u8; 32]);

/// Hashes the first 8 bytes only: a node id is itself a hash, so they key a table as well as
/// all 32 do under a keyed hasher (std's SipHash, seeded per table), for a quarter of the
/// bytes hashed on every cell's lookups (link, limiter and circuit tables). Flooding one
/// bucket would take many identity keys whose ids share 8 bytes: some 2^32 keys for a pair.
impl std::hash::Hash for NodeId {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        let [a, b, c, d, e, f, g, h, ..] = self.0;
        state.write_u64(u64::from_le_bytes([a, b, c, d, e, f, g, h]));
    }
}

impl NodeId {
    /// Length of a node id in bytes.
    pub const LEN: usize = 32;

    /// Wrap 32 bytes as a node id.
    pub const fn from_bytes(bytes: [u8; 32]) -> Self {
        NodeId(bytes)
    }

    /// Read a node id from a slice that must be exactly 32 bytes long.
    pub fn from_slice(bytes: &[u8]) -> Result<Self, Error> {
        <[u8; 32]>::try_from(bytes)
            .map(NodeId)
            .map_err(|_| Error::InvalidId {
                kind: "node id",
                reason: format!("expected {} bytes, got {}", Self::LEN, bytes.len()),
            })
    }

    /// The raw bytes.
    pub const fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }

    /// The first 8 hex digits, for compact human output.
    pub fn short(&self) -> String {
        self.to_string()[..8].to_owned()
    }
}

const HEX: &[u8; 16] = b"0123456789abcdef";

impl fmt::Display for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut out = [0u8; 64];
        for (i, b) in self.0.iter().enumerate() {
            out[2 * i] = HEX[usize::from(b >> 4)];
            out[2 * i + 1] = HEX[usize::from(b & 0x0f)];
        }
        // Every byte written above is an ASCII hex digit.
        f.write_str(std::str::from_utf8(&out).map_err(|_| fmt::Error)?)
    }
}

impl fmt::Debug for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "NodeId({}…)", self.short())
    }
}

impl FromStr for NodeId {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self, Error> {
        let invalid = |reason: String| Error::InvalidId {
            kind: "node id",
            reason,
        };
        let s = s.trim();
        if s.len() != 64 {
            return Err(invalid(format!(
                "expected 64 hex digits, got {} characters",
                s.len()
            )));
        }
        let mut out = [0u8; 32];
        for (i, pair) in s.as_bytes().chunks_exact(2).enumerate() {
            let hi = hex_value(pair[0]);
            let lo = hex_value(pair[1]);
            match (hi, lo) {
                (Some(hi), Some(lo)) => out[i] = hi << 4 | lo,
                _ => {
                    let pos = if hi.is_none() { 2 * i } else { 2 * i + 1 };
                    let ch = s.get(pos..).and_then(|t| t.chars().next()).unwrap_or('?');
                    return Err(invalid(format!(
                        "{ch:?} at position {pos} is not a hex digit"
                    )));
                }
            }
        }
        Ok(NodeId(out))
    }
}

fn hex_value(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn node_id_parse_errors_say_what_is_wrong() {
        let err = "abc".parse::<NodeId>().unwrap_err().to_string();
        assert!(err.contains("expected 64 hex digits, got 3"), "{err}");
        let mut bad = "a".repeat(64);
        bad.replace_range(10..11, "g");
        let err = bad.parse::<NodeId>().unwrap_err().to_string();
        assert!(err.contains("'g' at position 10"), "{err}");
        let err = NodeId::from_slice(&[0; 31]).unwrap_err().to_string();
        assert!(err.contains("expected 32 bytes, got 31"), "{err}");
        // Multi-byte characters must not cause a slicing panic.
        let err = "é".repeat(32).parse::<NodeId>().unwrap_err().to_string();
        assert!(err.contains("not a hex digit"), "{err}");
    }

    #[test]
    fn node_id_debug_is_short_and_display_is_lowercase() {
        let id = NodeId::from_bytes([0xAB; 32]);
        assert_eq!(format!("{id:?}"), "NodeId(abababab…)");
        assert_eq!(id.to_string(), "ab".repeat(32));
        assert_eq!("AB".repeat(32).parse::<NodeId>().unwrap(), id);
    }

    proptest! {
        #[test]
        fn node_id_text_round_trips(bytes in any::<[u8; 32]>()) {
            let id = NodeId::from_bytes(bytes);
            prop_assert_eq!(id.to_string().parse::<NodeId>().unwrap(), id);
            prop_assert_eq!(NodeId::from_slice(id.as_bytes()).unwrap(), id);
        }

        #[test]
        fn node_id_parse_never_panics(s in ".{0,80}") {
            let _ = s.parse::<NodeId>();
        }
    }
}
