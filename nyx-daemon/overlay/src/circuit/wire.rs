//! The overlay's wire formats: link cells (a circuit id and an onion cell, on a link's
//! unreliable cell channel), link control messages (CREATE, CREATED, CREATE_FAST, CREATED_FAST,
//! DESTROY, PING, PONG, on its reliable control channel) and relay messages (inside an onion cell's payload).
//!
//! Every decoder takes untrusted bytes and returns a typed [`WireError`]; none panics.

use nyx_crypto::fast_hop::{FAST_CREATE_LEN, FAST_CREATED_LEN};
use nyx_crypto::hop::{CREATE_LEN, CREATED_LEN};
use nyx_crypto::onion::{BACKWARD_PAYLOAD_LEN, CELL_LEN, FORWARD_PAYLOAD_LEN};

use nyx_core::NodeId;

/// Bytes of the circuit id in front of every link cell.
pub const CIRC_ID_LEN: usize = 4;
/// A link cell: circuit id then one onion cell. 1156 bytes, so it fits a QUIC datagram at
/// the minimum 1200-byte path MTU.
pub const LINK_CELL_LEN: usize = CIRC_ID_LEN + CELL_LEN;
/// Relay message header: command (1) and body length (2).
pub const RELAY_HEADER_LEN: usize = 3;
/// Largest relay message body in a forward cell (client to a hop).
pub const MAX_FORWARD_BODY: usize = FORWARD_PAYLOAD_LEN - RELAY_HEADER_LEN;
/// Largest relay message body in a backward cell (a hop to the client).
pub const MAX_BACKWARD_BODY: usize = BACKWARD_PAYLOAD_LEN - RELAY_HEADER_LEN;
/// EXTEND fragment header: handshake id (2), index (1), count (1).
pub const FRAGMENT_HEADER_LEN: usize = 4;
/// EXTEND: the next relay's id and the CREATE for it.
pub const EXTEND_LEN: usize = 32 + CREATE_LEN;
/// Bytes of an EXTEND carried per fragment at most.
pub const FRAGMENT_CAPACITY: usize = MAX_FORWARD_BODY - FRAGMENT_HEADER_LEN;
/// EXTEND always travels in this many fragments.
pub const EXTEND_FRAGMENTS: u8 = 2;

const _: () = assert!(EXTEND_LEN <= FRAGMENT_CAPACITY * EXTEND_FRAGMENTS as usize);
const _: () = assert!(EXTEND_LEN > FRAGMENT_CAPACITY);

/// A malformed message from a peer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum WireError {
    /// Wrong length for its kind.
    #[error("{what}: {len} bytes, expected {expected}")]
    Length {
        /// Which message.
        what: &'static str,
        /// Its length.
        len: usize,
        /// The expected length (or the maximum).
        expected: usize,
    },
    /// A type or command byte we do not know.
    #[error("{what}: unknown type {value}")]
    UnknownType {
        /// Which field.
        what: &'static str,
        /// The byte.
        value: u8,
    },
    /// A circuit id of zero (reserved).
    #[error("circuit id 0 is reserved")]
    ZeroCircuitId,
    /// An EXTEND fragment that does not fit the two-fragment layout.
    #[error("bad EXTEND fragment: {reason}")]
    Fragment {
        /// What was wrong.
        reason: &'static str,
    },
}

/// Why a circuit ends, carried in DESTROY and TRUNCATED.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum DestroyReason {
    /// Its owner closed it.
    Requested,
    /// A peer broke the protocol.
    Protocol,
    /// A local failure.
    Internal,
    /// A limit was reached (circuits, rate, memory).
    ResourceLimit,
    /// The next relay could not be reached.
    ConnectFailed,
    /// A link of the circuit went down.
    LinkLost,
    /// The circuit did not finish building in time.
    Timeout,
    /// The circuit reached its maximum lifetime.
    Expired,
    /// A node of the circuit is shutting down.
    Shutdown,
    /// A cell failed its onion-layer authentication: someone on the path modified it (the
    /// link layer already refuses corruption between neighbours).
    Tampered,
    /// A reason code this version does not know.
    Other(u8),
}

impl DestroyReason {
    /// The wire code.
    pub fn code(self) -> u8 {
        match self {
            DestroyReason::Requested => 0,
            DestroyReason::Protocol => 1,
            DestroyReason::Internal => 2,
            DestroyReason::ResourceLimit => 3,
            DestroyReason::ConnectFailed => 4,
            DestroyReason::LinkLost => 5,
            DestroyReason::Timeout => 6,
            DestroyReason::Expired => 7,
            DestroyReason::Shutdown => 8,
            DestroyReason::Tampered => 9,
            DestroyReason::Other(code) => code,
        }
    }

    /// From a wire code (unknown codes are kept as [`DestroyReason::Other`]).
    pub fn from_code(code: u8) -> Self {
        match code {
            0 => DestroyReason::Requested,
            1 => DestroyReason::Protocol,
            2 => DestroyReason::Internal,
            3 => DestroyReason::ResourceLimit,
            4 => DestroyReason::ConnectFailed,
            5 => DestroyReason::LinkLost,
            6 => DestroyReason::Timeout,
            7 => DestroyReason::Expired,
            8 => DestroyReason::Shutdown,
            9 => DestroyReason::Tampered,
            other => DestroyReason::Other(other),
        }
    }
}

impl std::fmt::Display for DestroyReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DestroyReason::Requested => f.write_str("closed by its owner"),
            DestroyReason::Protocol => f.write_str("protocol violation"),
            DestroyReason::Internal => f.write_str("internal error"),
            DestroyReason::ResourceLimit => f.write_str("resource limit reached"),
            DestroyReason::ConnectFailed => f.write_str("next relay unreachable"),
            DestroyReason::LinkLost => f.write_str("a link of the circuit was lost"),
            DestroyReason::Timeout => f.write_str("build timed out"),
            DestroyReason::Expired => f.write_str("maximum lifetime reached"),
            DestroyReason::Shutdown => f.write_str("a node is shutting down"),
            DestroyReason::Tampered => f.write_str("a cell was tampered with"),
            DestroyReason::Other(code) => write!(f, "reason code {code}"),
        }
    }
}

/// Read the circuit id of a link cell.
pub fn link_cell_id(frame: &[u8]) -> Result<u32, WireError> {
    if frame.len() != LINK_CELL_LEN {
        return Err(WireError::Length {
            what: "link cell",
            len: frame.len(),
            expected: LINK_CELL_LEN,
        });
    }
    let id = u32::from_be_bytes([frame[0], frame[1], frame[2], frame[3]]);
    if id == 0 {
        return Err(WireError::ZeroCircuitId);
    }
    Ok(id)
}

const CTRL_CREATE: u8 = 1;
const CTRL_CREATED: u8 = 2;
const CTRL_DESTROY: u8 = 3;
const CTRL_PING: u8 = 4;
const CTRL_PONG: u8 = 5;
const CTRL_CREATE_FAST: u8 = 6;
const CTRL_CREATED_FAST: u8 = 7;

/// A link control message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Control {
    /// Open a circuit hop: the hop handshake's CREATE.
    Create {
        /// The circuit id on this link, chosen by the sender.
        circ: u32,
        /// The CREATE message.
        create: Box<[u8; CREATE_LEN]>,
    },
    /// The answer to CREATE.
    Created {
        /// The circuit id the CREATE named.
        circ: u32,
        /// The CREATED message.
        created: [u8; CREATED_LEN],
    },
    /// Tear the circuit down.
    Destroy {
        /// The circuit id on this link.
        circ: u32,
        /// Why.
        reason: DestroyReason,
    },
    /// Open a one-hop directory circuit to the link's peer: the fast handshake's CREATE_FAST
    /// (nyx_crypto::fast_hop), keyed through the link.
    CreateFast {
        /// The circuit id on this link, chosen by the sender.
        circ: u32,
        /// The CREATE_FAST message.
        create: [u8; FAST_CREATE_LEN],
    },
    /// The answer to CREATE_FAST.
    CreatedFast {
        /// The circuit id the CREATE_FAST named.
        circ: u32,
        /// The CREATED_FAST message.
        created: [u8; FAST_CREATED_LEN],
    },
    /// Liveness probe.
    Ping,
    /// Answer to a probe.
    Pong,
}

impl Control {
    /// Encode.
    pub fn encode(&self) -> Vec<u8> {
        match self {
            Control::Create { circ, create } => {
                let mut v = Vec::with_capacity(5 + CREATE_LEN);
                v.push(CTRL_CREATE);
                v.extend_from_slice(&circ.to_be_bytes());
                v.extend_from_slice(&create[..]);
                v
            }
            Control::Created { circ, created } => {
                let mut v = Vec::with_capacity(5 + CREATED_LEN);
                v.push(CTRL_CREATED);
                v.extend_from_slice(&circ.to_be_bytes());
                v.extend_from_slice(created);
                v
            }
            Control::Destroy { circ, reason } => {
                let mut v = Vec::with_capacity(6);
                v.push(CTRL_DESTROY);
                v.extend_from_slice(&circ.to_be_bytes());
                v.push(reason.code());
                v
            }
            Control::CreateFast { circ, create } => {
                let mut v = Vec::with_capacity(5 + FAST_CREATE_LEN);
                v.push(CTRL_CREATE_FAST);
                v.extend_from_slice(&circ.to_be_bytes());
                v.extend_from_slice(create);
                v
            }
            Control::CreatedFast { circ, created } => {
                let mut v = Vec::with_capacity(5 + FAST_CREATED_LEN);
                v.push(CTRL_CREATED_FAST);
                v.extend_from_slice(&circ.to_be_bytes());
                v.extend_from_slice(created);
                v
            }
            Control::Ping => vec![CTRL_PING],
            Control::Pong => vec![CTRL_PONG],
        }
    }

    /// Decode untrusted bytes.
    pub fn decode(bytes: &[u8]) -> Result<Control, WireError> {
        let Some((&kind, rest)) = bytes.split_first() else {
            return Err(WireError::Length {
                what: "control message",
                len: 0,
                expected: 1,
            });
        };
        let exact = |what: &'static str, expected: usize| {
            if rest.len() == expected {
                Ok(())
            } else {
                Err(WireError::Length {
                    what,
                    len: bytes.len(),
                    expected: expected + 1,
                })
            }
        };
        let circ = || {
            let id = u32::from_be_bytes([rest[0], rest[1], rest[2], rest[3]]);
            if id == 0 {
                Err(WireError::ZeroCircuitId)
            } else {
                Ok(id)
            }
        };
        match kind {
            CTRL_CREATE => {
                exact("CREATE", 4 + CREATE_LEN)?;
                let mut create = Box::new([0u8; CREATE_LEN]);
                create.copy_from_slice(&rest[4..]);
                Ok(Control::Create {
                    circ: circ()?,
                    create,
                })
            }
            CTRL_CREATED => {
                exact("CREATED", 4 + CREATED_LEN)?;
                let mut created = [0u8; CREATED_LEN];
                created.copy_from_slice(&rest[4..]);
                Ok(Control::Created {
                    circ: circ()?,
                    created,
                })
            }
            CTRL_DESTROY => {
                exact("DESTROY", 5)?;
                Ok(Control::Destroy {
                    circ: circ()?,
                    reason: DestroyReason::from_code(rest[4]),
                })
            }
            CTRL_CREATE_FAST => {
                exact("CREATE_FAST", 4 + FAST_CREATE_LEN)?;
                let mut create = [0u8; FAST_CREATE_LEN];
                create.copy_from_slice(&rest[4..]);
                Ok(Control::CreateFast {
                    circ: circ()?,
                    create,
                })
            }
            CTRL_CREATED_FAST => {
                exact("CREATED_FAST", 4 + FAST_CREATED_LEN)?;
                let mut created = [0u8; FAST_CREATED_LEN];
                created.copy_from_slice(&rest[4..]);
                Ok(Control::CreatedFast {
                    circ: circ()?,
                    created,
                })
            }
            CTRL_PING => exact("PING", 0).map(|()| Control::Ping),
            CTRL_PONG => exact("PONG", 0).map(|()| Control::Pong),
            value => Err(WireError::UnknownType {
                what: "control message",
                value,
            }),
        }
    }
}

/// Relay message commands (first byte of an onion cell's payload).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum RelayCommand {
    /// Owner data for the exit, or exit data for the owner.
    Data,
    /// One fragment of an EXTEND (client to the last hop).
    Extend,
    /// The next hop's CREATED (last hop to client).
    Extended,
    /// The sending hop lost its next hop; body: reason (hop to client).
    Truncated,
    /// Padding: dropped by the receiver.
    Drop,
}

impl RelayCommand {
    fn code(self) -> u8 {
        match self {
            RelayCommand::Data => 1,
            RelayCommand::Extend => 2,
            RelayCommand::Extended => 3,
            RelayCommand::Truncated => 4,
            RelayCommand::Drop => 5,
        }
    }

    fn from_code(code: u8) -> Result<Self, WireError> {
        Ok(match code {
            1 => RelayCommand::Data,
            2 => RelayCommand::Extend,
            3 => RelayCommand::Extended,
            4 => RelayCommand::Truncated,
            5 => RelayCommand::Drop,
            value => {
                return Err(WireError::UnknownType {
                    what: "relay command",
                    value,
                });
            }
        })
    }
}

/// Write a relay message into an onion payload region, zeroing the rest of it. A body longer
/// than the region allows (`payload.len() - 3`) is an error and writes nothing.
pub fn write_relay(
    payload: &mut [u8],
    command: RelayCommand,
    body: &[u8],
) -> Result<(), WireError> {
    if body.len() + RELAY_HEADER_LEN > payload.len() {
        return Err(WireError::Length {
            what: "relay message body",
            len: body.len(),
            expected: payload.len().saturating_sub(RELAY_HEADER_LEN),
        });
    }
    payload[0] = command.code();
    payload[1..3].copy_from_slice(&(body.len() as u16).to_be_bytes());
    let end = RELAY_HEADER_LEN + body.len();
    payload[RELAY_HEADER_LEN..end].copy_from_slice(body);
    payload[end..].fill(0);
    Ok(())
}

/// Read a relay message from a delivered payload: its command and body range (relative to
/// `payload`).
pub fn read_relay(payload: &[u8]) -> Result<(RelayCommand, std::ops::Range<usize>), WireError> {
    if payload.len() < RELAY_HEADER_LEN {
        return Err(WireError::Length {
            what: "relay message",
            len: payload.len(),
            expected: RELAY_HEADER_LEN,
        });
    }
    let command = RelayCommand::from_code(payload[0])?;
    let len = usize::from(u16::from_be_bytes([payload[1], payload[2]]));
    if len > payload.len() - RELAY_HEADER_LEN {
        return Err(WireError::Length {
            what: "relay message body",
            len,
            expected: payload.len() - RELAY_HEADER_LEN,
        });
    }
    Ok((command, RELAY_HEADER_LEN..RELAY_HEADER_LEN + len))
}

/// The two EXTEND fragment bodies for `next` and its CREATE, tagged with `handshake`.
pub fn extend_fragments(
    handshake: u16,
    next: &NodeId,
    create: &[u8; CREATE_LEN],
) -> [Vec<u8>; EXTEND_FRAGMENTS as usize] {
    let mut whole = Vec::with_capacity(EXTEND_LEN);
    whole.extend_from_slice(next.as_bytes());
    whole.extend_from_slice(create);
    let (a, b) = whole.split_at(FRAGMENT_CAPACITY);
    let frag = |index: u8, bytes: &[u8]| {
        let mut v = Vec::with_capacity(FRAGMENT_HEADER_LEN + bytes.len());
        v.extend_from_slice(&handshake.to_be_bytes());
        v.push(index);
        v.push(EXTEND_FRAGMENTS);
        v.extend_from_slice(bytes);
        v
    };
    [frag(0, a), frag(1, b)]
}

/// One EXTEND fragment, parsed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fragment<'a> {
    /// Which handshake it belongs to.
    pub handshake: u16,
    /// 0 or 1.
    pub index: u8,
    /// Its share of the EXTEND.
    pub bytes: &'a [u8],
}

/// Parse an EXTEND fragment body.
pub fn parse_fragment(body: &[u8]) -> Result<Fragment<'_>, WireError> {
    if body.len() <= FRAGMENT_HEADER_LEN {
        return Err(WireError::Fragment {
            reason: "shorter than its header",
        });
    }
    let handshake = u16::from_be_bytes([body[0], body[1]]);
    let (index, count) = (body[2], body[3]);
    if count != EXTEND_FRAGMENTS || index >= count {
        return Err(WireError::Fragment {
            reason: "index or count out of range",
        });
    }
    let bytes = &body[FRAGMENT_HEADER_LEN..];
    let expected = if index == 0 {
        FRAGMENT_CAPACITY
    } else {
        EXTEND_LEN - FRAGMENT_CAPACITY
    };
    if bytes.len() != expected {
        return Err(WireError::Fragment {
            reason: "wrong fragment length",
        });
    }
    Ok(Fragment {
        handshake,
        index,
        bytes,
    })
}

#[cfg(test)]
mod tests;
