//! The one error type of nyx-transport.

use nyx_core::NodeId;
use nyx_core::redact::Redacted;

/// What can go wrong on a link.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The peer proved another identity than the one dialled. Its message names both only
    /// while sensitive logging is on ([`nyx_core::redact`]): errors end up in logs.
    #[error("peer is {}, expected {}", Redacted(got), Redacted(expected))]
    WrongPeer {
        /// The identity that was dialled.
        expected: NodeId,
        /// The identity the peer proved.
        got: NodeId,
    },

    /// The peer's certificate is not a NyxNet identity certificate.
    #[error("peer certificate is not a NyxNet identity certificate: {reason}")]
    BadCertificate {
        /// Why.
        reason: String,
    },

    /// Making this node's certificate failed.
    #[error("cannot make the identity certificate: {reason}")]
    Certificate {
        /// Why.
        reason: String,
    },

    /// The link failed or was closed (handshake failure, peer gone, queue closed).
    #[error("link: {reason}")]
    Link {
        /// What happened.
        reason: String,
    },

    /// A socket operation failed (bind, configure, read readiness).
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: &'static str,
        /// The operating system's error (shared, so the error stays `Clone`).
        #[source]
        source: std::sync::Arc<std::io::Error>,
    },

    /// A QUIC connection could not be made or was lost.
    #[error("QUIC connection: {0}")]
    Connection(#[source] quinn::ConnectionError),

    /// A cell larger than the path carries now.
    #[error("cell of {len} bytes exceeds the path's datagram size {max}")]
    CellTooLarge {
        /// The cell's length.
        len: usize,
        /// What the path carries now.
        max: usize,
    },

    /// A control message beyond the limit ([`crate::quic::MAX_CONTROL_LEN`]).
    #[error("control message of {len} bytes exceeds the 16 KiB limit")]
    ControlTooLarge {
        /// Its length.
        len: usize,
    },

    /// A cell that begins with four zero bytes (circuit id 0): on a QUIC link that is the
    /// mark of the link's own control datagrams, so no cell may carry it.
    #[error("a cell may not begin with four zero bytes (circuit id 0)")]
    ZeroCircuit,

    /// A control datagram from the peer that does not decode, or completes a control
    /// message framed beyond the limit.
    #[error("malformed control datagram: {reason}")]
    MalformedControl {
        /// What is wrong with it.
        reason: &'static str,
    },

    /// An accepted link was refused: the endpoint holds as many links as it may, and none
    /// has been quiet long enough to make room.
    #[error("link refused: every link is in use")]
    LinksFull,

    /// TLS configuration failed.
    #[error("TLS configuration: {reason}")]
    TlsConfig {
        /// Why.
        reason: String,
    },
}
