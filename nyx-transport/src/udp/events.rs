//! What the UDP engine reports: [`UdpEvent`]s, and the counters of the engine and of each
//! link.

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use nyx_core::NodeId;

/// What the engine reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UdpEvent {
    /// A link is up (as initiator: WELCOME checked; as responder: the first DATA opened).
    Connected {
        /// The peer's verified identity.
        peer: NodeId,
        /// Its address.
        addr: SocketAddr,
    },
    /// A new handshake from a live link's address authenticated as another peer (a
    /// client-only node redialling with a fresh identity, or a restarted peer with new
    /// keys): the link to `old` is gone, and one to `peer` is up at `addr`.
    Replaced {
        /// The peer the link had.
        old: NodeId,
        /// The peer it has now.
        peer: NodeId,
        /// Its address.
        addr: SocketAddr,
    },
    /// A cell arrived.
    Cell {
        /// From whom.
        peer: NodeId,
        /// The cell: a slice of the pooled buffer it was decrypted in (no further copy).
        data: Bytes,
    },
    /// A control message arrived (reliable, in order).
    Control {
        /// From whom.
        peer: NodeId,
        /// The message.
        data: Vec<u8>,
    },
    /// A link is gone: idle for `idle_timeout`, closed by either end
    /// ([`UdpEngine::close`](super::UdpEngine::close)), or evicted to make room.
    Closed {
        /// Its peer.
        peer: NodeId,
        /// Its address.
        addr: SocketAddr,
    },
    /// A dial failed.
    Failed {
        /// The address dialled.
        addr: SocketAddr,
        /// Why.
        reason: String,
    },
}

/// Counters of the UDP transport (plain data for metrics).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct UdpStats {
    /// Handshakes completed.
    pub handshakes_ok: u64,
    /// HELLOs or WELCOMEs refused (bad, replayed, wrong peer, failed confirmation).
    pub handshakes_failed: u64,
    /// COOKIE replies sent instead of doing the handshake.
    pub cookies_sent: u64,
    /// HELLOs dropped by the per-source rate limit.
    pub rate_limited: u64,
    /// Cells sent.
    pub cells_out: u64,
    /// Cells received.
    pub cells_in: u64,
    /// Datagrams dropped: unknown type, truncated, or from an address with no session.
    pub dropped_malformed: u64,
    /// DATA that failed authentication or was replayed.
    pub dropped_auth: u64,
    /// Cells the node asked to send to an address without a link.
    pub dropped_no_link: u64,
    /// Datagrams dropped because the buffer pool was exhausted (backpressure).
    pub dropped_no_buffer: u64,
    /// HELLOs dropped unread because this engine is a client's, which accepts no links.
    pub hellos_refused: u64,
    /// Responder links dropped because no DATA confirmed them in time.
    pub links_unconfirmed_expired: u64,
    /// Links closed after `idle_timeout` without an authenticated datagram.
    pub links_idle_closed: u64,
    /// Links evicted to make room for a newcomer in a full table.
    pub links_evicted: u64,
    /// Links closed by this node or by the peer.
    pub links_closed: u64,
    /// Crossed dials: a HELLO from a peer this node was dialling at that moment. The dial
    /// of the smaller node id goes on; the other node answers it and drops its own.
    pub crossed_dials: u64,
}

/// Counters of one UDP link (plain data for metrics).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LinkStats {
    /// Cells sent.
    pub cells_out: u64,
    /// Cells received.
    pub cells_in: u64,
    /// Cell bytes sent.
    pub bytes_out: u64,
    /// Cell bytes received.
    pub bytes_in: u64,
    /// DATA from this peer's address that failed authentication or was replayed.
    pub dropped_auth: u64,
    /// Round trip measured by the handshake (HELLO to WELCOME for the initiator, WELCOME to
    /// the first DATA for the responder).
    pub rtt: Option<Duration>,
}
