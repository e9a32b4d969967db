//! What the overlay core hands its driver and its owner: handles of circuits, the hops of a
//! path to build, [`Output`]s to carry out, [`Event`]s and counters.

use bytes::Bytes;
use nyx_core::NodeId;
use nyx_crypto::kem::HybridPublicKey;

use super::wire::DestroyReason;

/// The owner's name for a circuit it built (local, never on the wire).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CircuitHandle(pub(super) u64);

impl CircuitHandle {
    /// The handle as a number (the control API shows it; local, never on the wire).
    pub fn id(self) -> u64 {
        self.0
    }

    /// The handle numbered `id` (as [`id`](Self::id) returned it).
    pub fn from_id(id: u64) -> Self {
        CircuitHandle(id)
    }
}

/// A relayed circuit that delivered a payload to this node (this node is its exit).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ExitHandle(pub(super) u64);

/// One hop of a path to build: the relay and the onion key its descriptor certifies.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HopSpec {
    /// The relay.
    pub node: NodeId,
    /// Its current onion key.
    pub onion_key: HybridPublicKey,
}

/// Something for the driver to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Output {
    /// Send a link cell ([`LINK_CELL_LEN`](super::LINK_CELL_LEN) bytes) to a peer; drop it if that fails.
    Cell {
        /// The peer.
        to: NodeId,
        /// The cell.
        cell: Bytes,
    },
    /// Send a control message to a peer (reliable).
    Control {
        /// The peer.
        to: NodeId,
        /// The message.
        msg: Vec<u8>,
    },
    /// Open a link to a peer, then call [`Overlay::link_up`](super::Overlay::link_up) (or
    /// [`Overlay::connect_failed`](super::Overlay::connect_failed)).
    Connect {
        /// The peer.
        peer: NodeId,
    },
    /// The link to this peer is dead (probes unanswered): close it.
    Disconnect {
        /// The peer.
        peer: NodeId,
    },
}

/// Something that happened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// A circuit this node is building is ready.
    Built {
        /// Which.
        circuit: CircuitHandle,
    },
    /// A circuit this node was building failed.
    Failed {
        /// Which.
        circuit: CircuitHandle,
        /// Why.
        reason: DestroyReason,
        /// The position in the path of the relay believed at fault, when known.
        hop: Option<usize>,
        /// That relay.
        relay: Option<NodeId>,
    },
    /// A built circuit of this node ended (not on its owner's request).
    Destroyed {
        /// Which.
        circuit: CircuitHandle,
        /// Why.
        reason: DestroyReason,
        /// The position in the path of the relay believed lost, when known.
        hop: Option<usize>,
        /// That relay.
        relay: Option<NodeId>,
    },
    /// A built circuit nears the end of its lifetime: build its replacement.
    Expiring {
        /// Which.
        circuit: CircuitHandle,
    },
    /// A payload from the exit of one of this node's circuits.
    Data {
        /// Which circuit.
        circuit: CircuitHandle,
        /// The payload.
        payload: Bytes,
    },
    /// A payload for this node as the last hop of a relayed circuit.
    ExitData {
        /// Which circuit (answer with [`Overlay::send_backward`](super::Overlay::send_backward)).
        exit: ExitHandle,
        /// The payload.
        payload: Bytes,
    },
    /// A relayed circuit that delivered payloads here ended.
    ExitClosed {
        /// Which.
        exit: ExitHandle,
        /// Why.
        reason: DestroyReason,
    },
}

/// Counters of the overlay (plain data for metrics).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct OverlayStats {
    /// Link cells received.
    pub cells_in: u64,
    /// Cells this node relayed towards the exit.
    pub relayed_forward: u64,
    /// Cells this node relayed towards the client.
    pub relayed_backward: u64,
    /// Payloads delivered to this node (as exit, or as owner).
    pub delivered: u64,
    /// Cells of the wrong length or with circuit id 0.
    pub dropped_malformed: u64,
    /// Cells for no circuit this node knows.
    pub dropped_unknown_circuit: u64,
    /// Cells that failed authentication (modified, or not for this hop).
    pub dropped_unauthenticated: u64,
    /// Circuits destroyed because a cell failed its onion-layer authentication (relays:
    /// forward cells; owners: backward cells). Each such cell is also counted in
    /// `dropped_unauthenticated`.
    pub circuits_tampered: u64,
    /// Cells refused as replays (repeated or too old).
    pub dropped_replayed: u64,
    /// Cells over a peer's rate limit.
    pub dropped_link_rate: u64,
    /// Cells over a circuit's rate limit.
    pub dropped_circuit_rate: u64,
    /// Cells dropped because a link or circuit queue was full.
    pub dropped_queue_full: u64,
    /// Cells dropped because the link to their next hop is not up.
    pub dropped_no_link: u64,
    /// Authenticated cells with a relay message that breaks the protocol.
    pub protocol_errors: u64,
    /// Control messages that could not be decoded or did not fit the state.
    pub bad_control: u64,
    /// CREATEs answered.
    pub creates_answered: u64,
    /// CREATEs refused (bad, replayed, unknown key, limits).
    pub creates_refused: u64,
    /// CREATEs over a peer's rate limit.
    pub creates_rate_limited: u64,
    /// Circuits this node built.
    pub circuits_built: u64,
    /// Circuit builds that failed.
    pub circuits_failed: u64,
    /// Links declared dead by probes.
    pub links_dead: u64,
    /// EXTENDs this node resent as a circuit's owner (no EXTENDED within the wait).
    pub extends_resent: u64,
    /// Repeated EXTENDs this node received as the extending hop: answered again with the
    /// cached EXTENDED, or ignored while CREATE is out.
    pub extends_repeated: u64,
}
