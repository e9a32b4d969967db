//! What a running node reports about itself: events for subscribers (the control API's
//! event stream, applications that embed the node) and point-in-time views of its circuits
//! and peers.

use std::time::Duration;

use nyx_core::NodeId;
use nyx_crypto::onion_cert::OnionKeyCert;

use nyx_overlay::circuit::{CircuitHandle, DestroyReason};

/// Events are kept for slow subscribers up to this many; a subscriber further behind
/// misses the oldest (it learns how many through `RecvError::Lagged`).
pub(super) const EVENT_BUFFER: usize = 1024;

/// Something that happened on a node. Subscribe with
/// [`NodeHandle::subscribe`](crate::NodeHandle::subscribe).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum NodeEvent {
    /// One of this node's circuits is built.
    CircuitBuilt {
        /// Its handle.
        circuit: CircuitHandle,
        /// Its relays, entry first.
        path: Vec<NodeId>,
        /// From the request to the circuit being built, every attempt included (for
        /// build-time metrics).
        build_time: Duration,
    },
    /// An attempt to build a circuit failed (another path may be tried).
    CircuitFailed {
        /// Which attempt of the request this was (1-based).
        attempt: usize,
        /// Why.
        reason: DestroyReason,
    },
    /// One of this node's built circuits ended.
    CircuitClosed {
        /// Its handle.
        circuit: CircuitHandle,
        /// Why (`Requested` when this node closed it).
        reason: DestroyReason,
    },
    /// A link to a peer is up.
    PeerUp {
        /// The peer.
        peer: NodeId,
    },
    /// A link to a peer is gone.
    PeerDown {
        /// The peer.
        peer: NodeId,
    },
    /// The node uses a new directory.
    DirectoryChanged {
        /// Relays it lists.
        relays: usize,
    },
    /// The node's onion keys rotated: a new key was created or an expired one erased. The
    /// descriptor published for this node must carry these certificates from now on
    /// (a daemon republishes it).
    OnionKeysRotated {
        /// The certificates of the keys the node answers CREATEs with now.
        certs: Vec<OnionKeyCert>,
    },
    /// Something went wrong that is not tied to one circuit (a transport stopped, a
    /// configuration change failed).
    Error {
        /// What happened, for the operator.
        message: String,
    },
}

/// One of this node's built circuits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CircuitInfo {
    /// Its handle.
    pub circuit: CircuitHandle,
    /// Its relays, entry first.
    pub path: Vec<NodeId>,
    /// How long ago it was built.
    pub age: Duration,
}

/// A peer this node has a link with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerInfo {
    /// The peer.
    pub peer: NodeId,
    /// How long the link has been up.
    pub age: Duration,
    /// Whether the directory lists the peer (a relay), as opposed to a client that
    /// connected to this node.
    pub in_directory: bool,
}
