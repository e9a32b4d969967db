//! The one error type of nyx-overlay.

/// Everything that can go wrong in the overlay's state machines.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Overlay settings that cannot work.
    #[error("overlay configuration: {reason}")]
    OverlayConfig {
        /// What is wrong.
        reason: String,
    },
    /// A path that cannot be built (empty, too long, repeated relay, this node).
    #[error("bad path: {reason}")]
    BadPath {
        /// What is wrong.
        reason: String,
    },
    /// A payload larger than a cell carries.
    #[error("payload of {len} bytes exceeds the {max} a cell carries")]
    PayloadTooLarge {
        /// Its length.
        len: usize,
        /// The maximum.
        max: usize,
    },
    /// No such circuit (closed, failed, or never built here).
    #[error("no such circuit")]
    NoSuchCircuit,
    /// The circuit is still being built.
    #[error("circuit is not built yet")]
    CircuitNotOpen,
    /// The link's queue is full: the cell was dropped.
    #[error("link queue full; cell dropped")]
    QueueFull,
    /// A descriptor could not be made or was refused.
    #[error(transparent)]
    Descriptor(#[from] crate::directory::DescriptorError),
    /// A vote or consensus was refused, or no consensus could be made.
    #[error(transparent)]
    Consensus(#[from] crate::directory::consensus::ConsensusError),
    /// No path could be chosen.
    #[error(transparent)]
    Path(#[from] crate::path::PathError),
    /// Every attempt to build a circuit failed.
    #[error("circuit build failed after {attempts} attempts (last: {reason})")]
    BuildFailed {
        /// Paths tried.
        attempts: usize,
        /// Why the last one failed.
        reason: crate::circuit::DestroyReason,
    },
    /// A cryptographic operation failed.
    #[error(transparent)]
    Crypto(#[from] nyx_crypto::Error),
    /// Stream settings that cannot work.
    #[error("stream configuration: {field}: {reason}")]
    StreamConfig {
        /// The field.
        field: &'static str,
        /// Why.
        reason: String,
    },
    /// An operation the stream's state or role does not allow.
    #[error("stream: {reason}")]
    StreamState {
        /// What was wrong.
        reason: &'static str,
    },
    /// A stream target that is not `host:port`.
    #[error("bad target {target:?}: {reason}")]
    BadTarget {
        /// The target as given.
        target: String,
        /// What is wrong.
        reason: &'static str,
    },
    /// The circuit carries as many streams as allowed.
    #[error("too many streams on the circuit (at most {max})")]
    TooManyStreams {
        /// The limit.
        max: usize,
    },
    /// A write after the stream was finished (half-closed).
    #[error("the stream was finished; no more writes")]
    StreamFinished,
    /// No such stream (closed, or never opened).
    #[error("no such stream")]
    NoSuchStream,
    /// The stream was reset.
    #[error("stream reset: {reason}")]
    StreamReset {
        /// Why.
        reason: crate::stream::ResetReason,
    },
    /// A stream packet that does not parse.
    #[error("malformed stream packet: {0}")]
    StreamWire(#[from] crate::stream::wire::WireError),
    /// Stream error correction failed (exhausted counters, bad configuration).
    #[error(transparent)]
    Fec(#[from] nyx_fec::Error),
    /// A test network could not be generated (bad spec, key generation or signing failed).
    #[error("testnet generation: {reason}")]
    Testnet {
        /// What went wrong.
        reason: String,
    },
}
