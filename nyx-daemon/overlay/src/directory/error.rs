//! Why a descriptor, or a line of a directory document, was refused.

use nyx_core::NodeId;

/// Why a descriptor (or a directory line) was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DescriptorError {
    /// The version byte is not one this code reads.
    #[error("unsupported descriptor version {version}")]
    UnsupportedVersion {
        /// The version byte.
        version: u8,
    },
    /// The bytes end inside a field.
    #[error("truncated in {field}: needs {needed} more bytes, {remaining} left")]
    Truncated {
        /// The field being read.
        field: &'static str,
        /// Bytes the field needs.
        needed: usize,
        /// Bytes that were left.
        remaining: usize,
    },
    /// A field holds a value that cannot be right.
    #[error("malformed {field}: {reason}")]
    Malformed {
        /// The field.
        field: &'static str,
        /// What is wrong.
        reason: String,
    },
    /// Bytes follow the signature.
    #[error("{count} bytes after the signature")]
    TrailingBytes {
        /// How many.
        count: usize,
    },
    /// A public key does not parse.
    #[error("invalid {field}: {reason}")]
    BadKey {
        /// Which key.
        field: &'static str,
        /// Why.
        reason: nyx_crypto::Error,
    },
    /// The signature does not verify under the descriptor's identity key.
    #[error("bad signature")]
    BadSignature,
    /// Neither a QUIC nor a UDP address.
    #[error("no address")]
    NoAddress,
    /// Bandwidth weight 0.
    #[error("bandwidth weight is 0")]
    ZeroBandwidth,
    /// The validity period ends before it starts.
    #[error("valid until {valid_until} is not after published {published}")]
    BadValidity {
        /// Publication time (Unix seconds).
        published: u64,
        /// End of validity (Unix seconds).
        valid_until: u64,
    },
    /// Valid for longer than [`MAX_DESCRIPTOR_VALIDITY`](super::MAX_DESCRIPTOR_VALIDITY): a
    /// client caps what it accepts, so a key once published cannot stay in use for long.
    #[error("valid from {published} until {valid_until}: longer than {max} s")]
    ValidityTooLong {
        /// Publication time.
        published: u64,
        /// End of validity.
        valid_until: u64,
        /// The cap, seconds.
        max: u64,
    },
    /// An onion-key certificate valid for longer than
    /// [`MAX_ONION_KEY_LIFETIME`](super::MAX_ONION_KEY_LIFETIME).
    #[error("onion-key certificate {index} valid for {lifetime} s, longer than {max} s")]
    OnionKeyTooLong {
        /// Its position in the descriptor.
        index: usize,
        /// How long it is valid, seconds.
        lifetime: u64,
        /// The cap, seconds.
        max: u64,
    },
    /// Published more than [`MAX_CLOCK_SKEW`](super::MAX_CLOCK_SKEW) in the future.
    #[error("published at {published}, in the future (now {now})")]
    NotYetValid {
        /// Publication time.
        published: u64,
        /// The time it was checked at.
        now: u64,
    },
    /// Validity ended.
    #[error("expired at {valid_until} (now {now})")]
    Expired {
        /// End of validity.
        valid_until: u64,
        /// The time it was checked at.
        now: u64,
    },
    /// An onion-key certificate does not verify under the descriptor's identity (another
    /// relay's certificate, a bad signature, a bad key).
    #[error("onion-key certificate {index}: {reason}")]
    BadOnionCert {
        /// Its position (0-based).
        index: usize,
        /// Why.
        reason: nyx_crypto::Error,
    },
    /// No onion key is valid at the time of checking.
    #[error("no onion key valid at {now}")]
    NoValidOnionKey {
        /// The time it was checked at.
        now: u64,
    },
    /// A directory line's base64 does not decode.
    #[error("bad base64: {reason}")]
    BadBase64 {
        /// The decoder's description.
        reason: String,
    },
    /// A second descriptor for a node already in the directory.
    #[error("duplicate descriptor for node {node_id}")]
    DuplicateNodeId {
        /// The node.
        node_id: NodeId,
    },
    /// A directory line that is not a descriptor.
    #[error("unknown directory line keyword {keyword:?}")]
    UnknownKeyword {
        /// The first word of the line (at most 32 characters).
        keyword: String,
    },
}
