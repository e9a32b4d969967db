//! Identifiers shared by every layer: [`NodeId`], [`CircuitId`] and [`StreamId`].

use std::fmt;
use std::num::{NonZeroU16, NonZeroU32};
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
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct NodeId([u8; 32]);

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

/// Identifies a circuit on one link (each hop of a circuit has its own id, as in Tor).
///
/// Never zero: id 0 is reserved on the wire for link-level messages that belong to no circuit.
/// Encoded as 4 big-endian bytes.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct CircuitId(NonZeroU32);

/// Identifies a stream within its circuit.
///
/// Never zero: id 0 is reserved on the wire for messages about the circuit as a whole.
/// Encoded as 2 big-endian bytes.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct StreamId(NonZeroU16);

macro_rules! small_id {
    ($name:ident, $int:ty, $nz:ty, $kind:literal, $width:literal) => {
        impl $name {
            /// Encoded length in bytes.
            pub const LEN: usize = std::mem::size_of::<$int>();

            /// The id with this value, or `None` for the reserved value 0.
            pub const fn new(value: $int) -> Option<Self> {
                match <$nz>::new(value) {
                    Some(v) => Some($name(v)),
                    None => None,
                }
            }

            /// The numeric value (never 0).
            pub const fn get(self) -> $int {
                self.0.get()
            }

            /// Big-endian wire encoding.
            pub const fn to_be_bytes(self) -> [u8; std::mem::size_of::<$int>()] {
                self.0.get().to_be_bytes()
            }

            /// Decode the big-endian wire encoding; 0 is an error because it is reserved.
            pub fn from_be_bytes(bytes: [u8; std::mem::size_of::<$int>()]) -> Result<Self, Error> {
                Self::new(<$int>::from_be_bytes(bytes)).ok_or(Error::InvalidId {
                    kind: $kind,
                    reason: "0 is reserved".to_owned(),
                })
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, concat!("{:#0", $width, "x}"), self.0.get())
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, concat!(stringify!($name), "({})"), self)
            }
        }

        impl FromStr for $name {
            type Err = Error;

            /// Parses decimal or `0x`-prefixed hex.
            fn from_str(s: &str) -> Result<Self, Error> {
                let s = s.trim();
                let parsed = match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
                    Some(hex) => <$int>::from_str_radix(hex, 16),
                    None => s.parse::<$int>(),
                };
                let value = parsed.map_err(|e| Error::InvalidId {
                    kind: $kind,
                    reason: format!("{s:?}: {e}"),
                })?;
                Self::new(value).ok_or(Error::InvalidId {
                    kind: $kind,
                    reason: "0 is reserved".to_owned(),
                })
            }
        }
    };
}

small_id!(CircuitId, u32, NonZeroU32, "circuit id", "10");
small_id!(StreamId, u16, NonZeroU16, "stream id", "6");

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

    #[test]
    fn small_ids_reject_zero_and_format_as_hex() {
        assert!(CircuitId::new(0).is_none());
        assert!(CircuitId::from_be_bytes([0; 4]).is_err());
        assert!(StreamId::from_be_bytes([0; 2]).is_err());
        assert!("0".parse::<StreamId>().is_err());
        let c = CircuitId::new(0x1234).unwrap();
        assert_eq!(c.to_string(), "0x00001234");
        assert_eq!(format!("{c:?}"), "CircuitId(0x00001234)");
        assert_eq!("0x00001234".parse::<CircuitId>().unwrap(), c);
        assert_eq!("4660".parse::<CircuitId>().unwrap(), c);
        assert!(
            "70000"
                .parse::<StreamId>()
                .unwrap_err()
                .to_string()
                .contains("stream id")
        );
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

        #[test]
        fn circuit_id_wire_and_text_round_trip(v in 1u32..) {
            let id = CircuitId::new(v).unwrap();
            prop_assert_eq!(CircuitId::from_be_bytes(id.to_be_bytes()).unwrap(), id);
            prop_assert_eq!(id.to_string().parse::<CircuitId>().unwrap(), id);
        }

        #[test]
        fn stream_id_wire_and_text_round_trip(v in 1u16..) {
            let id = StreamId::new(v).unwrap();
            prop_assert_eq!(StreamId::from_be_bytes(id.to_be_bytes()).unwrap(), id);
            prop_assert_eq!(id.to_string().parse::<StreamId>().unwrap(), id);
        }
    }
}
