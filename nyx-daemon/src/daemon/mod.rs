//! The daemon around a node: configuration file, data directory and keys, the control
//! socket, the SOCKS and HTTP CONNECT entries, the metrics endpoint, signals, reloads and a
//! graceful stop. The `nyx-daemon` binary is [`cli::main`]: telemetry, then [`Daemon::start`] and
//! [`Daemon::wait`]; tests and embedders can run a daemon in-process the same way.
//!
//! What it is not for: the network itself (that is [`nyx_node`]), or choosing the tokio
//! runtime and installing the global tracing subscriber (the binary does both).

mod check;
pub mod cli;
pub mod config;
pub mod dir;
pub mod files;
mod held;
mod keeper;
pub mod link_keys;
mod run;
pub mod sd_notify;
pub mod service;
mod state;
pub mod stream_registry;
pub mod trust;

pub use config::{ConfigDiff, DaemonConfig};
pub use held::Bundle;
pub use run::{Daemon, READY_PREFIX, Ready};
pub use state::{DaemonState, Endpoints, LogControl, ReloadOutcome, StateParts};
