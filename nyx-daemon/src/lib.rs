//! # nyx-daemon: the NyxNet node
//!
//! What it is for: everything that turns the lower crates into a running node, as a library
//! an application can embed: the relay directory (signed descriptors, exit policies, the
//! directory document and testnet generation: [`directory`]), path selection with guards
//! ([`path`]), the sans-IO circuit core (building, relaying, teardown: [`overlay`]), the async
//! node that drives it over QUIC or UDP ([`node`]), streams and exits to TCP ([`stream`]), the
//! SOCKS5 entry that lets unmodified applications use the network ([`socks`]) and the
//! configuration file edge ([`config_file`]). The control API and the `nyx-daemon` / `nyx`
//! binaries arrive with issue 8.
//!
//! What it is not for: protocol primitives (buffers and limits live in nyx-core, cryptography
//! in nyx-crypto, error correction in nyx-fec, links in nyx-transport).

pub mod config_file;
pub mod directory;
mod error;
pub mod node;
pub mod overlay;
pub mod path;
pub mod socks;
pub mod stream;
pub mod telemetry;

pub use error::Error;
