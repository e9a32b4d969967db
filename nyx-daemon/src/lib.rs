//! # nyx-daemon: the NyxNet node
//!
//! What it is for: everything that turns the lower crates into a running node. Today that is
//! the configuration file edge ([`config_file`]), the relay directory (signed descriptors,
//! exit policies, the directory document and testnet generation: [`directory`]) and path
//! selection with guards ([`path`]); circuits, relaying, streams, exits, the control API and
//! the `nyx-daemon` / `nyx` binaries arrive with issues 6, 7 and 8.
//!
//! What it is not for: protocol primitives (buffers and limits live in nyx-core, cryptography
//! in nyx-crypto, error correction in nyx-fec, links in nyx-transport).

pub mod config_file;
pub mod directory;
mod error;
pub mod path;

pub use error::Error;
