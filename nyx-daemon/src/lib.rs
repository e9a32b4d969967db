//! # nyx-daemon: the NyxNet daemon
//!
//! What it is for: the process around a node ([`nyx_node`]): its configuration file, keys
//! on disk, signals and reload ([`daemon`]), the local gRPC control API ([`control`]), the
//! entries for applications (SOCKS5, SOCKS4a: [`socks`]; HTTP CONNECT: [`http_connect`];
//! the server they share: [`entry`]) and logs, traces and metrics ([`telemetry`]).
//! The `nyx-daemon` and `nyx` binaries are thin wrappers around it.
//!
//! What it is not for: the network itself. Protocol decisions are nyx-overlay's, the async
//! node is nyx-node's, and an application that embeds a client depends on nyx-node alone,
//! without this crate's gRPC, telemetry exporters or command line.

pub mod control;
pub mod daemon;
pub mod entry;
mod error;
pub mod http_connect;
pub mod socks;
pub mod telemetry;

pub use error::Error;
