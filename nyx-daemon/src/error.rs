//! The one error type of nyx-daemon.

use std::path::PathBuf;

/// Everything that can go wrong in nyx-daemon.
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
    /// No path could be chosen.
    #[error(transparent)]
    Path(#[from] crate::path::PathError),
    /// Every attempt to build a circuit failed.
    #[error("circuit build failed after {attempts} attempts (last: {reason})")]
    BuildFailed {
        /// Paths tried.
        attempts: usize,
        /// Why the last one failed.
        reason: crate::overlay::DestroyReason,
    },
    /// The node is not running any more.
    #[error("the node has stopped")]
    NodeStopped,
    /// A transport failed (bind, dial).
    #[error(transparent)]
    Transport(#[from] nyx_transport::Error),
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
    /// The configuration file could not be read.
    #[error("cannot read config file {path}: {source}")]
    ConfigRead {
        /// The file.
        path: PathBuf,
        /// Why reading failed.
        source: std::io::Error,
    },
    /// The configuration file is not valid TOML or does not match the schema (unknown key,
    /// wrong type). The message names the key and the line.
    #[error("config file {path}: {message}")]
    ConfigSyntax {
        /// The file (or `<string>` for text not from a file).
        path: PathBuf,
        /// The parser's description, with the key and position.
        message: String,
    },
    /// The configuration parsed but holds values that cannot work.
    #[error("config file {path}: {problems}")]
    ConfigInvalid {
        /// The file (or `<string>`).
        path: PathBuf,
        /// Every problem, each with its field.
        problems: nyx_core::config::ConfigProblems,
    },
    /// The directory file could not be read.
    #[error("cannot read directory {path}: {source}")]
    DirectoryRead {
        /// The file.
        path: PathBuf,
        /// Why reading failed.
        source: std::io::Error,
    },
    /// The directory file's header is missing or wrong, so none of it was used.
    #[error("directory {path}: {source}")]
    DirectoryInvalid {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        source: crate::directory::DirectoryError,
    },
    /// A SOCKS5 client sent something the proxy cannot accept.
    #[error("socks5: {0}")]
    Socks(#[from] crate::socks::SocksError),
    /// The SOCKS5 listener failed.
    #[error("socks5 listener: {what}: {source}")]
    SocksListener {
        /// What was being done (bind, local address).
        what: &'static str,
        /// Why it failed.
        source: std::io::Error,
    },
    /// SOCKS5 server settings that cannot work.
    #[error("socks5 configuration: {field}: {reason}")]
    SocksConfig {
        /// The field.
        field: &'static str,
        /// Why.
        reason: String,
    },
    /// A test network could not be generated (bad spec, key generation or signing failed).
    #[error("testnet generation: {reason}")]
    Testnet {
        /// What went wrong.
        reason: String,
    },
    /// Logging, tracing or metrics could not be set up, changed or shut down.
    #[error("telemetry: {what}: {reason}")]
    Telemetry {
        /// What was being done (`log level`, `otlp`, `prometheus bind`, ...).
        what: &'static str,
        /// Why it failed.
        reason: String,
    },
    /// The data directory (keys, descriptor, control socket) cannot be used.
    #[error("data directory {path}: {reason}")]
    DataDir {
        /// The directory or file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// The control socket cannot be set up or reached.
    #[error("control socket {path}: {reason}")]
    Control {
        /// The socket.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// A local listener (SOCKS, metrics) could not be bound.
    #[error("cannot listen on {addr} for {what}: {source}")]
    Listen {
        /// What the listener is for.
        what: &'static str,
        /// The address.
        addr: std::net::SocketAddr,
        /// Why.
        source: std::io::Error,
    },
}
