//! The one error type of nyx-daemon: the process's own failures (files, configuration,
//! listeners, telemetry) and the node's, kept whole as their source.

use std::path::PathBuf;

/// Everything that can go wrong in nyx-daemon.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The node failed or refused an operation (see [`nyx_node::Error::kind`]).
    #[error(transparent)]
    Node(#[from] nyx_node::Error),
    /// The overlay refused something the daemon handed it (a directory, limits, a
    /// descriptor).
    #[error(transparent)]
    Overlay(#[from] nyx_overlay::Error),
    /// A cryptographic operation failed (keys on disk).
    #[error(transparent)]
    Crypto(#[from] nyx_crypto::Error),
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
        source: nyx_overlay::directory::DirectoryError,
    },
    /// The consensus file was refused (forged, minority-signed, expired, rolled back,
    /// malformed).
    #[error("consensus {path}: {source}")]
    Consensus {
        /// The file.
        path: PathBuf,
        /// Why it was refused.
        source: nyx_overlay::directory::consensus::ConsensusError,
    },
    /// A consensus fetched from a directory server was refused (forged, minority-signed,
    /// expired, not yet valid, rolled back, malformed).
    #[error("consensus from {from}: {source}")]
    ConsensusRefused {
        /// The directory server (its node id).
        from: String,
        /// Why it was refused.
        source: nyx_overlay::directory::consensus::ConsensusError,
    },
    /// A directory request could not be made or was answered with something else than
    /// asked (refused, malformed, cut short).
    #[error("directory request to {to}: {reason}")]
    DirectoryRequest {
        /// The directory server or authority (its node id).
        to: String,
        /// What went wrong.
        reason: String,
    },
    /// A SOCKS5 client sent something the proxy cannot accept.
    #[error("socks5: {0}")]
    Socks(#[from] crate::socks::SocksError),
    /// An entry's listener (SOCKS, HTTP CONNECT) failed.
    #[error("entry listener: {what}: {source}")]
    EntryListener {
        /// What was being done (bind, local address).
        what: &'static str,
        /// Why it failed.
        source: std::io::Error,
    },
    /// Entry server settings (SOCKS, HTTP CONNECT) that cannot work.
    #[error("entry configuration: {field}: {reason}")]
    EntryConfig {
        /// The field.
        field: &'static str,
        /// Why.
        reason: String,
    },
    /// Logging, tracing or metrics could not be set up, changed or shut down.
    #[error("telemetry: {what}: {reason}")]
    Telemetry {
        /// What was being done (`log level`, `otlp`, `prometheus local address`, ...).
        what: &'static str,
        /// Why it failed.
        reason: String,
    },
    /// A file or directory of the daemon's could not be created, read or written.
    #[error("{what} {path}: {source}")]
    File {
        /// What was being done (`create directory`, `write`, ...).
        what: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// The operating system's error.
        source: std::io::Error,
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
    /// A local listener (SOCKS, HTTP CONNECT, metrics) could not be bound.
    #[error("cannot listen on {addr} for {what}: {source}")]
    Listen {
        /// What the listener is for.
        what: &'static str,
        /// The address.
        addr: std::net::SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// The process runs as root (effective uid 0) and `--allow-root` was not given.
    #[error(
        "refusing to run as root: keys and state would belong to root and a bug would reach \
         the whole machine; run as a dedicated user (the systemd unit uses DynamicUser=yes), \
         or pass --allow-root"
    )]
    RunAsRoot,
    /// `$NOTIFY_SOCKET` names a socket that cannot be used.
    #[error("NOTIFY_SOCKET {socket}: {source}")]
    Notify {
        /// The socket as given.
        socket: String,
        /// Why it cannot be used.
        source: std::io::Error,
    },
}
