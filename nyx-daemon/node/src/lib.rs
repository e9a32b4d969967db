//! # nyx-node: an embeddable NyxNet node
//!
//! What it is for: running a NyxNet node inside an application. It drives the sans-IO
//! overlay (nyx-overlay) over QUIC or UDP links (nyx-transport): one async task owns the
//! overlay, the links and the timers; one task per circuit runs its streams; an exit service
//! connects streams to TCP targets under the exit policy. An application gets:
//!
//! * [`Node::builder`]: a node in a few lines (or [`BoundNode`]: bind, sign and publish a
//!   descriptor, then start);
//! * [`Node::connect`]: a [`NyxStream`] (`AsyncRead + AsyncWrite`) to `"host:port"` or
//!   `(host, port)` through a 3-hop circuit, with [isolation groups](IsolationGroup);
//! * [`NodeHandle::subscribe`]: [`NodeEvent`]s (circuits, peers, directory changes);
//! * [`Error::kind`]: what went wrong, as an [`ErrorKind`] to match on;
//! * [`tcp::DrainingTcp`]: a TCP stream to relay into a [`NyxStream`] that never stalls on
//!   a short read (the exit uses it; so does nyx-daemon's SOCKS entry).
//! * `tracing` spans for whatever subscriber the application installs: `circuit_build` and
//!   `stream_open`, with counts, kinds and outcomes only (never a target, an address or a
//!   relay; the fields are listed in docs/telemetry.md).
//!
//! The node stops when the application drops the [`Node`], every [`NodeHandle`] and every
//! [`NyxStream`] (or at once with [`Node::shutdown`]); its tasks end and its socket is
//! released.
//!
//! What it is not for: protocol decisions (nyx-overlay makes them), files, configuration
//! files, signals, the control API, SOCKS or telemetry exporters (nyx-daemon). It installs no
//! tracing subscriber and picks no runtime: it needs to be called inside a tokio runtime.
//! With the `testing` feature, the `testing` module runs a network of nodes in one process.
//!
//! ```no_run
//! # async fn demo(directory: nyx_node::Directory) -> Result<(), nyx_node::Error> {
//! use tokio::io::{AsyncReadExt, AsyncWriteExt};
//!
//! let node = nyx_node::Node::builder().directory(directory).build()?;
//! let mut stream = node.connect(("example.org", 80)).await?;
//! stream.write_all(b"GET / HTTP/1.0\r\nHost: example.org\r\n\r\n").await.ok();
//! let mut page = Vec::new();
//! stream.read_to_end(&mut page).await.ok();
//! # Ok(()) }
//! ```

#![forbid(unsafe_code)]

mod bound;
mod builder;
mod client;
mod directory;
mod driver;
mod endpoint;
mod error;
mod events;
mod exit;
mod handle;
mod links;
mod node;
mod nyx_stream;
mod settings;
mod spans;
mod target;
pub mod tcp;
#[cfg(feature = "testing")]
pub mod testing;

pub use bound::BoundNode;
pub use builder::NodeBuilder;
pub use client::IsolationGroup;
pub use directory::{DirectoryPeer, PinnedPeer};
pub use error::{Error, ErrorKind};
pub use events::{CircuitInfo, NodeEvent, PeerInfo};
pub use handle::{Circuit, CircuitMessage, ExitRequest, NodeHandle, NodeStats};
pub use node::Node;
pub use nyx_stream::NyxStream;
pub use settings::{ExitServiceKind, NodeKeys, NodeRole, NodeSettings};
pub use target::IntoTarget;

// What an embedder needs from the crates below, so that it depends on nyx-node alone and
// always gets the versions nyx-node was built with.
pub use nyx_core::NodeId;
pub use nyx_core::config::TransportKind;
pub use nyx_overlay::circuit::{CircuitHandle, DestroyReason};
pub use nyx_overlay::directory::{Directory, ExitPolicy, ExitTarget};
pub use nyx_overlay::path::{ExitRequirement, SampledGuard};
pub use nyx_overlay::stream::ResetReason;
/// The crates nyx-node is built on, for everything else their APIs offer (settings, keys,
/// descriptors, counters).
pub use {nyx_core, nyx_crypto, nyx_overlay, nyx_transport};

use std::time::{SystemTime, UNIX_EPOCH};

/// Seconds since the Unix epoch (for descriptor validity).
pub fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}
