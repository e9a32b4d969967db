//! # nyx-daemon: the NyxNet node
//!
//! What it is for: everything that turns the lower crates into a running node, as a library
//! an application can embed: the relay directory (signed descriptors, exit policies, the
//! directory document and testnet generation: [`directory`]), path selection with guards
//! ([`path`]), the sans-IO circuit core (building, relaying, teardown: [`overlay`]), the async
//! node that drives it over QUIC or UDP, with streams and exits to TCP ([`node`],
//! [`stream`]), and the daemon around a node ([`daemon`]: configuration file, keys on disk,
//! signals, reload) with its local gRPC control API ([`control`]), SOCKS5 entry ([`socks`])
//! and telemetry ([`telemetry`]). The `nyx-daemon` and `nyx` binaries are thin wrappers.
//!
//! What it is not for: protocol primitives (buffers and limits live in nyx-core, cryptography
//! in nyx-crypto, error correction in nyx-fec, links in nyx-transport).

pub mod control;
pub mod daemon;
pub mod directory;
mod error;
pub mod node;
pub mod overlay;
pub mod path;
pub mod socks;
pub mod stream;
pub mod telemetry;

pub use error::Error;
