//! The one error type of nyx-crypto.

/// Everything that can go wrong in nyx-crypto. Errors about received data say what was wrong
/// without echoing secret material.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A datagram is shorter than the fixed overhead.
    #[error("datagram of {len} bytes is shorter than the {min}-byte minimum")]
    Truncated {
        /// Received length.
        len: usize,
        /// Header plus tag.
        min: usize,
    },
    /// The caller's buffer cannot hold the header, payload and tag.
    #[error("buffer of {capacity} bytes cannot hold {needed}")]
    BufferTooSmall {
        /// Bytes needed.
        needed: usize,
        /// Bytes available.
        capacity: usize,
    },
    /// The payload exceeds what the AEAD can seal in one message (256 GiB for ChaCha20).
    #[error("payload of {len} bytes is too long to seal")]
    PayloadTooLong {
        /// The payload length.
        len: usize,
    },
    /// The cipher refused an operation no valid input reaches (e.g. keystream past
    /// ChaCha20's 2^32 blocks).
    #[error("cipher: {0}")]
    Cipher(nyx_chacha::Error),
    /// The packet failed authentication (wrong key, modified in transit, or forged).
    #[error("packet failed authentication")]
    AuthenticationFailed,
    /// The packet number was already accepted.
    #[error("packet {pn} was already received (replay)")]
    Replayed {
        /// The repeated packet number.
        pn: u64,
    },
    /// The packet number is too far behind the newest one to be checked for replay.
    #[error("packet {pn} is too old (newest is {highest})")]
    TooOld {
        /// The packet number received.
        pn: u64,
        /// The highest accepted so far.
        highest: u64,
    },
    /// The packet names a key epoch the receiver does not hold.
    #[error("packet uses key epoch {epoch}, which is neither current, previous nor next")]
    UnknownEpoch {
        /// The low 8 bits of the epoch the packet names (its epoch byte minus the session's
        /// key-derived offset).
        epoch: u8,
    },
    /// The operating system's random number generator failed.
    #[error("random number generator failed: {reason}")]
    Random {
        /// The system's description.
        reason: String,
    },
    /// An input has the wrong length.
    #[error("{what} must be {expected} bytes, got {got}")]
    BadLength {
        /// What was being parsed.
        what: &'static str,
        /// The required length.
        expected: usize,
        /// The length received.
        got: usize,
    },
    /// A handshake message has a version this code does not speak.
    #[error("unsupported handshake version {version}")]
    UnsupportedVersion {
        /// The version byte received.
        version: u8,
    },
    /// A certificate names a validity period that ends before it starts.
    #[error("validity period [{valid_after}, {valid_until}) is empty")]
    BadValidity {
        /// Start (Unix seconds).
        valid_after: u64,
        /// End (Unix seconds).
        valid_until: u64,
    },
    /// A certificate is not for the identity it was checked against.
    #[error("certificate belongs to another identity")]
    WrongIdentity,
    /// A CREATE names another relay.
    #[error("handshake is addressed to another relay")]
    WrongRelay,
    /// A CREATE names an onion key this relay does not hold (expired or never its own).
    #[error("handshake names an unknown onion key")]
    UnknownOnionKey,
    /// A CREATE the relay has already answered.
    #[error("handshake message replayed")]
    ReplayedHandshake,
    /// The peer did not prove it derived the same keys (wrong key, or a modified message). A
    /// link HELLO made for another node or for a link key this node does not hold fails so too
    /// (HELLO names neither).
    #[error("handshake failed: key confirmation did not match")]
    HandshakeFailed,
    /// Bytes that should hold a public key are not a valid one.
    #[error("invalid public key")]
    InvalidPublicKey,
    /// A signature does not verify for this key, context and message.
    #[error("signature does not verify")]
    BadSignature,
    /// A key file could not be read or written.
    #[error("key file {path}: {reason}")]
    KeyFileIo {
        /// The file.
        path: String,
        /// The system's description.
        reason: String,
    },
    /// A key file is readable by group or others.
    #[error(
        "key file {path} has mode {mode:04o}; it must not be accessible to group or others (chmod 600)"
    )]
    KeyFilePermissions {
        /// The file.
        path: String,
        /// Its permission bits.
        mode: u32,
    },
    /// A key file is damaged or not a key file.
    #[error("key file {path} is corrupted: {reason}")]
    KeyFileCorrupt {
        /// The file.
        path: String,
        /// What is wrong.
        reason: &'static str,
    },
    /// A key file holds another kind of key.
    #[error(
        "key file {path} holds the wrong kind of key (expected kind {expected}, found {found})"
    )]
    KeyFileKind {
        /// The file.
        path: String,
        /// The kind code wanted.
        expected: u8,
        /// The kind code in the file.
        found: u8,
    },
    /// The sending direction used up its packet numbers (2⁶⁴): a new session is needed.
    #[error("session exhausted its packet numbers")]
    SessionExhausted,

    /// An onion cell authenticated but carries a command this version does not know.
    #[error("onion cell carries unknown command {command}")]
    UnknownCellCommand {
        /// The command byte.
        command: u8,
    },

    /// A cell was addressed to a hop the circuit does not have.
    #[error("circuit has {hops} hops; hop {hop} does not exist")]
    NoSuchHop {
        /// The hop asked for (0 = the first relay).
        hop: usize,
        /// How many hops the circuit has.
        hops: usize,
    },

    /// An onion-key rotation policy whose overlap is not shorter than its period.
    #[error(
        "onion-key rotation: overlap of {overlap_secs} s must be shorter than the period of {period_secs} s"
    )]
    BadRotationPolicy {
        /// The period.
        period_secs: u64,
        /// The overlap.
        overlap_secs: u64,
    },

    /// A circuit already has the most hops a cell can carry layers for.
    #[error("circuit already has the maximum of {max} hops")]
    TooManyHops {
        /// The maximum.
        max: usize,
    },
}
