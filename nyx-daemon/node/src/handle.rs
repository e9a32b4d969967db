//! Handles on a running node: [`NodeHandle`] (cheap to clone) and [`Circuit`] (one of its
//! circuits, used raw), and the commands they send the driver.

use std::sync::Arc;

use bytes::Bytes;
use nyx_core::NodeId;
use nyx_overlay::circuit::{MAX_BACKWARD_BODY, MAX_FORWARD_BODY};
use nyx_overlay::directory::{Directory, ExitPolicy};
use nyx_overlay::path::{ExitRequirement, SampledGuard};
use nyx_overlay::{CircuitHandle, DestroyReason, ExitHandle, LiveLimits, OverlayStats};
use tokio::sync::{mpsc, oneshot};
use tracing::Instrument as _;

use crate::client::ClientStreams;
use crate::{CircuitInfo, Error, NodeEvent, PeerInfo};

/// What the owner of a circuit receives on it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CircuitMessage {
    /// A payload from the exit.
    Data(Bytes),
    /// The circuit nears the end of its lifetime; build a replacement.
    Expiring,
    /// The circuit ended; nothing more comes.
    Destroyed {
        /// Why.
        reason: DestroyReason,
        /// The path position of the relay believed lost, when known.
        hop: Option<usize>,
    },
}

/// A payload delivered to this node as the last hop of someone's circuit.
#[derive(Debug, Clone)]
pub struct ExitRequest {
    /// Which circuit (answer with [`NodeHandle::reply`]).
    pub exit: ExitHandle,
    /// The payload.
    pub payload: Bytes,
}

/// Counters of a running node.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct NodeStats {
    /// The overlay core's counters.
    pub overlay: OverlayStats,
    /// Links open now.
    pub links: usize,
    /// Circuits relayed now.
    pub relay_circuits: usize,
    /// This node's own circuits now.
    pub own_circuits: usize,
    /// Cells the transport refused (queue full, link gone).
    pub send_failures: u64,
    /// Payloads for a circuit's owner dropped because it did not read them.
    pub owner_drops: u64,
    /// Cells and control messages received and waiting for the driver now.
    pub inbound_queue: usize,
    /// Commands (sends, builds, closes) waiting for the driver now.
    pub command_queue: usize,
    /// Datagrams waiting for the UDP transport's socket task now (0 over QUIC).
    pub udp_send_queue: usize,
    /// What became of incoming QUIC connection attempts (all zero over UDP).
    pub quic_admission: nyx_transport::admission::AdmissionStats,
    /// The QUIC endpoint's links: open now, evicted to make room, refused (all zero over
    /// UDP).
    pub quic_links: nyx_transport::quic::QuicLinkStats,
    /// QUIC links closed because another link to the same peer came up: crossed dials
    /// (both ends dialled at once; one link stays) and redials.
    pub quic_links_retired: u64,
    /// The UDP transport's counters (handshakes, cookies, drops, link-table changes);
    /// `None` over QUIC, or when the transport did not answer.
    pub udp: Option<nyx_transport::udp::UdpStats>,
    /// The UDP transport's socket (plain or batched I/O, receive errors); `None` over QUIC.
    pub udp_socket: Option<nyx_transport::socket::SocketStats>,
}

/// What handles ask of the driver.
#[derive(Debug)]
pub(crate) enum Command {
    Build {
        req: ExitRequirement,
        reply: oneshot::Sender<Result<Circuit, Error>>,
    },
    BuildDirectory {
        peer: Box<crate::directory::DirectoryPeer>,
        reply: oneshot::Sender<Result<Circuit, Error>>,
    },
    Send {
        circuit: CircuitHandle,
        payload: Bytes,
    },
    Close {
        circuit: CircuitHandle,
    },
    Reply {
        exit: ExitHandle,
        payload: Bytes,
    },
    Stats(oneshot::Sender<NodeStats>),
    OnionCerts(oneshot::Sender<Vec<nyx_crypto::onion_cert::OnionKeyCert>>),
    Guards(oneshot::Sender<Vec<SampledGuard>>),
    CircuitIds(oneshot::Sender<Vec<(NodeId, u32)>>),
    Circuits(oneshot::Sender<Vec<CircuitInfo>>),
    Peers(oneshot::Sender<Vec<PeerInfo>>),
    CloseCircuit {
        circuit: CircuitHandle,
        reply: oneshot::Sender<bool>,
    },
    SetDirectory(Directory),
    SetExitPolicy(ExitPolicy),
    SetLinkKeys(Vec<nyx_crypto::link::LinkKey>),
    SetLimits {
        limits: LiveLimits,
        reply: oneshot::Sender<Result<(), Error>>,
    },
    Shutdown(oneshot::Sender<()>),
}

/// Keeps a node running while the application holds the [`Node`], a [`NodeHandle`] or a
/// client [`NyxStream`](crate::NyxStream): they share one. When the
/// last is dropped the driver's receiver sees the sender go and the node stops.
///
/// [`Node`]: crate::Node
#[derive(Debug)]
pub(crate) struct Liveness(#[allow(dead_code)] oneshot::Sender<()>);

impl Liveness {
    /// A token for the handles, and what the driver watches.
    pub(crate) fn new() -> (Arc<Liveness>, oneshot::Receiver<()>) {
        let (tx, rx) = oneshot::channel();
        (Arc::new(Liveness(tx)), rx)
    }
}

/// A handle on a running node (cheap to clone). The node runs while the [`Node`](crate::Node)
/// or any handle or client stream exists.
#[derive(Debug, Clone)]
pub struct NodeHandle {
    pub(crate) id: NodeId,
    pub(crate) commands: mpsc::Sender<Command>,
    pub(crate) streams: Arc<ClientStreams>,
    /// Only the driver holds the sender, so subscribers see the end when the node stops.
    pub(crate) events: tokio::sync::broadcast::WeakSender<NodeEvent>,
    pub(crate) liveness: Arc<Liveness>,
}

impl NodeHandle {
    /// The node's id.
    pub fn node_id(&self) -> NodeId {
        self.id
    }

    /// Build a circuit whose exit satisfies `req`: up to the configured number of paths are
    /// tried, each path avoiding relays that failed before.
    /// Traced as a `circuit_build` span (fields in the crate's `spans` module).
    pub async fn build_circuit(&self, req: ExitRequirement) -> Result<Circuit, Error> {
        let span = crate::spans::circuit_build(&req);
        let result = async {
            let (reply, rx) = oneshot::channel();
            self.command(Command::Build { req, reply }).await?;
            rx.await.map_err(|_| Error::NodeStopped)?
        }
        .instrument(span.clone())
        .await;
        if let Ok(circuit) = &result {
            span.record("hops", circuit.path.len());
        }
        crate::spans::record_outcome(&span, &result, "built");
        result
    }

    /// Answer an [`ExitRequest`] with a payload towards the circuit's owner.
    pub async fn reply(&self, exit: ExitHandle, payload: &[u8]) -> Result<(), Error> {
        check_len(payload.len(), MAX_BACKWARD_BODY)?;
        let payload = Bytes::copy_from_slice(payload);
        self.command(Command::Reply { exit, payload }).await
    }

    /// The node's counters.
    pub async fn stats(&self) -> Result<NodeStats, Error> {
        let (reply, rx) = oneshot::channel();
        self.command(Command::Stats(reply)).await?;
        rx.await.map_err(|_| Error::NodeStopped)
    }

    /// The certificates of the onion keys this node answers CREATEs with now (empty for a
    /// client-only node): what [`NodeEvent::OnionKeysRotated`](crate::NodeEvent) last
    /// reported, for a subscriber that lagged and may have missed it.
    pub async fn onion_certs(&self) -> Result<Vec<nyx_crypto::onion_cert::OnionKeyCert>, Error> {
        let (reply, rx) = oneshot::channel();
        self.command(Command::OnionCerts(reply)).await?;
        rx.await.map_err(|_| Error::NodeStopped)
    }

    /// The entry guards sampled so far, with when (save them and pass them back in
    /// [`NodeSettings::guards`](crate::NodeSettings::guards) to keep them across restarts).
    pub async fn guards(&self) -> Result<Vec<SampledGuard>, Error> {
        let (reply, rx) = oneshot::channel();
        self.command(Command::Guards(reply)).await?;
        rx.await.map_err(|_| Error::NodeStopped)
    }

    /// Every circuit id in use on this node's links, with the peer (diagnostics).
    pub async fn link_circuit_ids(&self) -> Result<Vec<(NodeId, u32)>, Error> {
        let (reply, rx) = oneshot::channel();
        self.command(Command::CircuitIds(reply)).await?;
        rx.await.map_err(|_| Error::NodeStopped)
    }

    /// Events from now on (circuits built, failed and closed, peers up and down, directory
    /// changes, errors). A subscriber more than 1024 events behind misses the oldest; every
    /// subscriber sees `Closed` once the node has stopped.
    pub fn subscribe(&self) -> tokio::sync::broadcast::Receiver<NodeEvent> {
        match self.events.upgrade() {
            Some(sender) => sender.subscribe(),
            None => tokio::sync::broadcast::channel(1).1,
        }
    }

    /// This node's built circuits (those carrying streams and those built raw), oldest first.
    pub async fn circuits(&self) -> Result<Vec<CircuitInfo>, Error> {
        let (reply, rx) = oneshot::channel();
        self.command(Command::Circuits(reply)).await?;
        rx.await.map_err(|_| Error::NodeStopped)
    }

    /// The peers this node has a link with now.
    pub async fn peers(&self) -> Result<Vec<PeerInfo>, Error> {
        let (reply, rx) = oneshot::channel();
        self.command(Command::Peers(reply)).await?;
        rx.await.map_err(|_| Error::NodeStopped)
    }

    /// Close one of this node's built circuits (DESTROY towards the exit; its streams fail
    /// with `CircuitLost`). `Ok(false)` if there is no such circuit.
    pub async fn close_circuit(&self, circuit: CircuitHandle) -> Result<bool, Error> {
        let (reply, rx) = oneshot::channel();
        self.command(Command::CloseCircuit { circuit, reply })
            .await?;
        rx.await.map_err(|_| Error::NodeStopped)
    }

    /// Build circuits through the relays of `directory` from now on (circuits built already
    /// keep their paths).
    pub async fn set_directory(&self, directory: Directory) -> Result<(), Error> {
        self.command(Command::SetDirectory(directory)).await
    }

    /// Check the streams opened on this node as an exit against `policy` from now on. The
    /// descriptor the operator publishes should say the same (see [`BoundNode::descriptor`](crate::BoundNode::descriptor)).
    pub async fn set_exit_policy(&self, policy: ExitPolicy) -> Result<(), Error> {
        self.command(Command::SetExitPolicy(policy)).await
    }

    /// Answer UDP link handshakes for `keys` from now on: a link-key rotation hands the new
    /// key (the one the next descriptor publishes) and the previous one, kept while
    /// descriptors naming it may still be in use; a later call without it retires it. Links
    /// already up are not affected. QUIC links authenticate relays by their identity
    /// certificate, not by this key, and a client-only node accepts no links: for them
    /// there is nothing to change.
    pub async fn set_link_keys(&self, keys: Vec<nyx_crypto::link::LinkKey>) -> Result<(), Error> {
        self.command(Command::SetLinkKeys(keys)).await
    }

    /// Change the overlay's rate limits and relayed-circuit cap while it runs
    /// ([`Overlay::set_limits`](nyx_overlay::Overlay::set_limits)).
    pub async fn set_limits(&self, limits: LiveLimits) -> Result<(), Error> {
        let (reply, rx) = oneshot::channel();
        self.command(Command::SetLimits { limits, reply }).await?;
        rx.await.map_err(|_| Error::NodeStopped)?
    }

    async fn command(&self, command: Command) -> Result<(), Error> {
        self.commands
            .send(command)
            .await
            .map_err(|_| Error::NodeStopped)
    }
}

fn check_len(len: usize, max: usize) -> Result<(), Error> {
    if len > max {
        return Err(nyx_overlay::Error::PayloadTooLarge { len, max }.into());
    }
    Ok(())
}

/// One of this node's circuits, built. It does not keep the node running: when the node
/// stops, the circuit receives [`CircuitMessage::Destroyed`] with reason `Shutdown`.
#[derive(Debug)]
pub struct Circuit {
    pub(crate) handle: CircuitHandle,
    pub(crate) path: Vec<NodeId>,
    pub(crate) exit_policy: ExitPolicy,
    /// Its round trip as the build measured it, if it did (`Overlay::circuit_rtt`).
    pub(crate) rtt: Option<std::time::Duration>,
    pub(crate) commands: mpsc::Sender<Command>,
    pub(crate) messages: mpsc::Receiver<CircuitMessage>,
    pub(crate) closed: bool,
}

impl Circuit {
    /// The circuit's local handle.
    pub fn handle(&self) -> CircuitHandle {
        self.handle
    }

    /// Its relays, entry first.
    pub fn path(&self) -> &[NodeId] {
        &self.path
    }

    /// The exit policy its exit published.
    pub fn exit_policy(&self) -> &ExitPolicy {
        &self.exit_policy
    }

    /// Send a payload (at most [`MAX_FORWARD_BODY`] bytes) to the exit.
    /// Cells are datagrams: delivery is not guaranteed (streams, part 2, add reliability).
    pub async fn send(&self, payload: &[u8]) -> Result<(), Error> {
        check_len(payload.len(), MAX_FORWARD_BODY)?;
        let payload = Bytes::copy_from_slice(payload);
        self.commands
            .send(Command::Send {
                circuit: self.handle,
                payload,
            })
            .await
            .map_err(|_| Error::NodeStopped)
    }

    /// The next message on the circuit; `None` once it is gone and drained.
    pub async fn recv(&mut self) -> Option<CircuitMessage> {
        self.messages.recv().await
    }

    /// Close the circuit (DESTROY towards the exit).
    pub async fn close(mut self) {
        self.closed = true;
        let _ = self
            .commands
            .send(Command::Close {
                circuit: self.handle,
            })
            .await;
    }
}

impl Drop for Circuit {
    fn drop(&mut self) {
        if !self.closed {
            let _ = self.commands.try_send(Command::Close {
                circuit: self.handle,
            });
        }
    }
}
