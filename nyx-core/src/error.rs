//! The one error type of nyx-core.

/// Everything that can go wrong in nyx-core.
///
/// Each variant carries enough context to be understood in a log line without the call site.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Every buffer a pool may own is in use: the caller should apply backpressure
    /// (drop or delay work) instead of waiting for memory that does not come back.
    #[error("buffer pool exhausted: all {max_buffers} buffers of {buffer_size} bytes are in use")]
    PoolExhausted {
        /// Size of each buffer in the pool.
        buffer_size: usize,
        /// How many buffers the pool's memory cap allows.
        max_buffers: usize,
    },

    /// The system refused memory that a bounded structure was entitled to.
    #[error("cannot allocate {bytes} bytes")]
    AllocationFailed {
        /// How much was asked for.
        bytes: usize,
    },

    /// A length larger than the buffer was requested.
    #[error("length {requested} exceeds the buffer capacity of {capacity} bytes")]
    LengthExceedsCapacity {
        /// The length that was asked for.
        requested: usize,
        /// The fixed capacity of the buffer.
        capacity: usize,
    },

    /// A pool, limiter or other component was constructed with parameters that cannot work.
    #[error("invalid {what}: {reason}")]
    InvalidParameter {
        /// What was being configured, e.g. `"pool buffer_size"`.
        what: &'static str,
        /// Why the value was refused.
        reason: String,
    },

    /// Text that should hold an identifier did not parse.
    #[error("invalid {kind}: {reason}")]
    InvalidId {
        /// Which identifier, e.g. `"node id"`.
        kind: &'static str,
        /// What was wrong with the input.
        reason: String,
    },

    /// A node configuration failed validation; every problem found is listed.
    #[error("invalid configuration: {0}")]
    InvalidConfig(crate::config::ConfigProblems),
}

/// Shorthand for results whose error is [`enum@Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
