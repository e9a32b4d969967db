//! A running node: the overlay core driven by one async task that owns the transport,
//! the timers and the path selector; stream endpoints driven by one task per circuit; an
//! exit service that connects streams to TCP targets.
//!
//! An application embeds a node with [`Node::builder`] (or [`BoundNode`]: bind, publish a
//! descriptor, start with a directory), opens streams with [`Node::connect`] (a tokio
//! `AsyncRead + AsyncWrite`), and the same node relays for others. Circuits are also
//! available raw through [`NodeHandle::build_circuit`].
//!
//! This is the only place (with the binaries) that spawns tasks and binds sockets.
//!
//! ```no_run
//! # async fn demo(directory: nyx_daemon::directory::Directory) -> Result<(), Box<dyn std::error::Error>> {
//! use tokio::io::{AsyncReadExt, AsyncWriteExt};
//!
//! let node = nyx_daemon::node::Node::builder().directory(directory).build()?;
//! let mut stream = node.connect("127.0.0.1:8080").await?;
//! stream.write_all(b"GET / HTTP/1.0\r\n\r\n").await?;
//! let mut page = Vec::new();
//! stream.read_to_end(&mut page).await?;
//! node.shutdown().await;
//! # Ok(()) }
//! ```

mod builder;
mod client;
mod driver;
mod endpoint;
mod events;
mod exit;
mod links;
mod stream_io;
pub mod testnet;

pub use builder::NodeBuilder;
pub use client::IsolationGroup;
pub use events::{CircuitInfo, NodeEvent, PeerInfo};
pub use stream_io::NyxStream;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::stream::StreamConfig;
use bytes::Bytes;
use nyx_core::NodeId;
use nyx_core::config::TransportKind;
use nyx_crypto::identity::IdentityKey;
use nyx_crypto::kem::{HybridPublicKey, HybridSecretKey};
use nyx_crypto::link::LinkKey;
use nyx_crypto::onion_keys::{OnionKeyRing, RotationPolicy};
use nyx_transport::fault::{FaultConfig, WireTap};
use nyx_transport::quic::{QuicConfig, QuicEndpoint};
use nyx_transport::udp::UdpConfig;
use nyx_transport::udp_driver::UdpTransport;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

use crate::Error;
use crate::directory::{Descriptor, DescriptorBuilder, Directory, ExitPolicy};
use crate::overlay::{
    CircuitHandle, DestroyReason, ExitHandle, LiveLimits, OverlayConfig, OverlayStats,
};
use crate::path::{ExitRequirement, PathConfig};

/// A node's long-term keys.
pub struct NodeKeys {
    /// Identity (signs the descriptor; its hash is the NodeId).
    pub identity: Arc<IdentityKey>,
    /// Static key of the UDP transport's link handshake.
    pub link_key: LinkKey,
    /// Onion keys for circuit handshakes.
    pub onion_keys: OnionKeyRing,
}

impl std::fmt::Debug for NodeKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeKeys")
            .field("node", &self.identity.node_id())
            .finish_non_exhaustive()
    }
}

impl NodeKeys {
    /// Fresh keys, with onion keys certified from `now_unix`.
    pub fn generate(now_unix: u64) -> Result<Self, Error> {
        let identity = IdentityKey::generate()?;
        let link_key = LinkKey::new(HybridSecretKey::generate()?);
        let mut onion_keys = OnionKeyRing::new(RotationPolicy::default())?;
        onion_keys.rotate(&identity, now_unix)?;
        Ok(NodeKeys {
            identity: Arc::new(identity),
            link_key,
            onion_keys,
        })
    }
}

/// How a node runs. Defaults: QUIC on 127.0.0.1 with a free port, default overlay and path
/// settings, three build attempts.
#[derive(Debug, Clone)]
pub struct NodeSettings {
    /// The transport.
    pub transport: TransportKind,
    /// Where to listen.
    pub listen: SocketAddr,
    /// The overlay core's settings.
    pub overlay: OverlayConfig,
    /// Path selection.
    pub path: PathConfig,
    /// QUIC settings.
    pub quic: QuicConfig,
    /// UDP transport settings.
    pub udp: UdpConfig,
    /// Paths tried per circuit request before giving up. Default 3.
    pub build_attempts: usize,
    /// Payloads buffered for a circuit's owner before drops. Default 1024.
    pub circuit_queue: usize,
    /// Tests: record every datagram sent.
    pub tap: Option<WireTap>,
    /// Tests: loss, duplication, reordering and delay applied to every datagram this node
    /// receives (UDP) or sends (QUIC). Default: none.
    pub faults: FaultConfig,
    /// What this node lets its circuits' streams connect to, as an exit (also what its
    /// descriptor publishes). Default: nothing (`reject *:*`).
    pub exit_policy: ExitPolicy,
    /// What this node does with payloads it receives as an exit. Default: streams.
    pub exit_service: ExitServiceKind,
    /// Streams (both as a client and as an exit).
    pub streams: StreamConfig,
    /// A client waits this long for the exit to connect a stream. Default 30 s.
    pub stream_open_timeout: Duration,
    /// An exit gives a target this long to resolve and accept. Default 10 s.
    pub exit_connect_timeout: Duration,
    /// TCP connections an exit keeps open at once, over all circuits. Default 4096.
    pub exit_max_connections: usize,
}

/// What a node does with the payloads it receives as the last hop of a circuit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ExitServiceKind {
    /// Run streams and connect them to TCP targets its exit policy allows.
    #[default]
    Streams,
    /// Hand raw payloads to [`Node::take_exit_requests`] (cell-level tests and tools).
    Raw,
}

impl Default for NodeSettings {
    fn default() -> Self {
        NodeSettings {
            transport: TransportKind::Quic,
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            overlay: OverlayConfig::default(),
            path: PathConfig::default(),
            quic: QuicConfig::default(),
            udp: UdpConfig::default(),
            build_attempts: 3,
            circuit_queue: 1024,
            tap: None,
            faults: FaultConfig::default(),
            exit_policy: ExitPolicy::reject_all(),
            exit_service: ExitServiceKind::Streams,
            streams: StreamConfig::default(),
            stream_open_timeout: Duration::from_secs(30),
            exit_connect_timeout: Duration::from_secs(10),
            exit_max_connections: 4096,
        }
    }
}

/// The transport of a bound node.
#[derive(Debug)]
enum Bound {
    Quic(QuicEndpoint),
    Udp(Box<UdpTransport>),
}

/// A node with its socket bound, not yet running: publish its descriptor, then
/// [`start`](Self::start) it with the directory.
#[derive(Debug)]
pub struct BoundNode {
    identity: Arc<IdentityKey>,
    onion_keys: OnionKeyRing,
    link_public: HybridPublicKey,
    settings: NodeSettings,
    bound: Bound,
    addr: SocketAddr,
}

impl BoundNode {
    /// Bind the transport (needs a tokio runtime).
    pub fn bind(keys: NodeKeys, settings: NodeSettings) -> Result<Self, Error> {
        let NodeKeys {
            identity,
            link_key,
            onion_keys,
        } = keys;
        let link_public = link_key.public().clone();
        let bound = match settings.transport {
            TransportKind::Quic => {
                let (endpoint, shim) = QuicEndpoint::bind_with_faults(
                    settings.listen,
                    identity.clone(),
                    settings.quic.clone(),
                    settings.faults.clone(),
                )?;
                if let Some(tap) = &settings.tap {
                    shim.set_tap(tap.clone());
                }
                Bound::Quic(endpoint)
            }
            TransportKind::Udp => {
                let mut udp = UdpTransport::bind(
                    settings.listen,
                    identity.clone(),
                    vec![link_key],
                    settings.udp.clone(),
                )?;
                if let Some(tap) = &settings.tap {
                    udp.set_tap(tap.clone())?;
                }
                if settings.faults != FaultConfig::default() {
                    let _counters = udp.set_faults(settings.faults.clone());
                }
                Bound::Udp(Box::new(udp))
            }
        };
        let addr = match &bound {
            Bound::Quic(e) => e.local_addr()?,
            Bound::Udp(u) => u.local_addr()?,
        };
        Ok(BoundNode {
            identity,
            onion_keys,
            link_public,
            settings,
            bound,
            addr,
        })
    }

    /// The bound address.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// This node's id.
    pub fn node_id(&self) -> NodeId {
        self.identity.node_id()
    }

    /// This node's descriptor, signed, valid for `validity` from `now_unix`; it publishes
    /// the exit policy of the node's settings.
    pub fn descriptor(
        &self,
        nickname: &str,
        bandwidth: u32,
        now_unix: u64,
        validity: Duration,
    ) -> Result<Descriptor, Error> {
        let builder = self.descriptor_builder(nickname, bandwidth, now_unix, validity);
        Ok(builder.sign(&self.identity)?)
    }

    /// The contents of [`descriptor`](Self::descriptor), unsigned: a daemon keeps it to
    /// publish again later (a new exit policy, a renewal) with the same keys and address.
    pub fn descriptor_builder(
        &self,
        nickname: &str,
        bandwidth: u32,
        now_unix: u64,
        validity: Duration,
    ) -> DescriptorBuilder {
        let (quic_addr, udp_addr) = match self.settings.transport {
            TransportKind::Quic => (Some(self.addr), None),
            TransportKind::Udp => (None, Some(self.addr)),
        };
        DescriptorBuilder {
            nickname: nickname.to_string(),
            quic_addr,
            udp_addr,
            link_key: self.link_public.clone(),
            onion_certs: self.onion_keys.certs().to_vec(),
            exit_policy: self.settings.exit_policy.clone(),
            bandwidth,
            published: now_unix,
            valid_until: now_unix + validity.as_secs(),
        }
    }

    /// Run the node with `directory` (spawns its tasks).
    pub fn start(self, directory: Directory) -> Result<Node, Error> {
        driver::start(self, directory)
    }
}

/// Seconds since the Unix epoch (for descriptor validity).
pub fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

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
}

#[derive(Debug)]
enum Command {
    Build {
        req: ExitRequirement,
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
    CircuitIds(oneshot::Sender<Vec<(NodeId, u32)>>),
    Circuits(oneshot::Sender<Vec<CircuitInfo>>),
    Peers(oneshot::Sender<Vec<PeerInfo>>),
    CloseCircuit {
        circuit: CircuitHandle,
        reply: oneshot::Sender<bool>,
    },
    SetDirectory(Directory),
    SetExitPolicy(ExitPolicy),
    SetLimits {
        limits: LiveLimits,
        reply: oneshot::Sender<Result<(), Error>>,
    },
    Shutdown(oneshot::Sender<()>),
}

/// A handle on a running node (cheap to clone).
#[derive(Debug, Clone)]
pub struct NodeHandle {
    id: NodeId,
    commands: mpsc::Sender<Command>,
    streams: Arc<client::ClientStreams>,
    events: tokio::sync::broadcast::Sender<NodeEvent>,
}

impl NodeHandle {
    /// The node's id.
    pub fn node_id(&self) -> NodeId {
        self.id
    }

    /// Build a circuit whose exit satisfies `req`: up to the configured number of paths are
    /// tried, each path avoiding relays that failed before.
    pub async fn build_circuit(&self, req: ExitRequirement) -> Result<Circuit, Error> {
        let (reply, rx) = oneshot::channel();
        self.command(Command::Build { req, reply }).await?;
        rx.await.map_err(|_| Error::NodeStopped)?
    }

    /// Answer an [`ExitRequest`] with a payload towards the circuit's owner.
    pub async fn reply(&self, exit: ExitHandle, payload: &[u8]) -> Result<(), Error> {
        check_len(payload.len(), crate::overlay::MAX_BACKWARD_BODY)?;
        let payload = Bytes::copy_from_slice(payload);
        self.command(Command::Reply { exit, payload }).await
    }

    /// The node's counters.
    pub async fn stats(&self) -> Result<NodeStats, Error> {
        let (reply, rx) = oneshot::channel();
        self.command(Command::Stats(reply)).await?;
        rx.await.map_err(|_| Error::NodeStopped)
    }

    /// Every circuit id in use on this node's links, with the peer (diagnostics).
    pub async fn link_circuit_ids(&self) -> Result<Vec<(NodeId, u32)>, Error> {
        let (reply, rx) = oneshot::channel();
        self.command(Command::CircuitIds(reply)).await?;
        rx.await.map_err(|_| Error::NodeStopped)
    }

    /// Events from now on (circuits built, failed and closed, peers up and down, directory
    /// changes, errors). A subscriber more than 1024 events behind misses the oldest.
    pub fn subscribe(&self) -> tokio::sync::broadcast::Receiver<NodeEvent> {
        self.events.subscribe()
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
    /// descriptor the operator publishes should say the same (see [`BoundNode::descriptor`]).
    pub async fn set_exit_policy(&self, policy: ExitPolicy) -> Result<(), Error> {
        self.command(Command::SetExitPolicy(policy)).await
    }

    /// Change the overlay's rate limits and relayed-circuit cap while it runs
    /// ([`Overlay::set_limits`](crate::overlay::Overlay::set_limits)).
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
        return Err(Error::PayloadTooLarge { len, max });
    }
    Ok(())
}

/// One of this node's circuits, built.
#[derive(Debug)]
pub struct Circuit {
    handle: CircuitHandle,
    path: Vec<NodeId>,
    exit_policy: ExitPolicy,
    commands: mpsc::Sender<Command>,
    messages: mpsc::Receiver<CircuitMessage>,
    closed: bool,
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

    /// Send a payload (at most [`crate::overlay::MAX_FORWARD_BODY`] bytes) to the exit.
    /// Cells are datagrams: delivery is not guaranteed (streams, part 2, add reliability).
    pub async fn send(&self, payload: &[u8]) -> Result<(), Error> {
        check_len(payload.len(), crate::overlay::MAX_FORWARD_BODY)?;
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

/// A running node: its handle, the payloads it receives as an exit, and its tasks.
#[derive(Debug)]
pub struct Node {
    handle: NodeHandle,
    exits: Option<mpsc::Receiver<ExitRequest>>,
    task: JoinHandle<()>,
    aux: Arc<std::sync::Mutex<Vec<JoinHandle<()>>>>,
}

impl Node {
    /// Configure, bind and start a node (see [`NodeBuilder`]).
    pub fn builder() -> NodeBuilder {
        NodeBuilder::default()
    }

    /// Open a stream to `target` ("host:port") through a 3-hop circuit; see
    /// [`NodeHandle::connect`].
    pub async fn connect(&self, target: &str) -> Result<NyxStream, Error> {
        self.handle.connect(target).await
    }

    /// [`connect`](Self::connect) in an isolation group; see
    /// [`NodeHandle::connect_isolated`].
    pub async fn connect_isolated(
        &self,
        target: &str,
        group: &IsolationGroup,
    ) -> Result<NyxStream, Error> {
        self.handle.connect_isolated(target, group).await
    }

    /// A handle for using the node.
    pub fn handle(&self) -> NodeHandle {
        self.handle.clone()
    }

    /// The payloads delivered to this node as an exit (taken once; part 2 connects them to
    /// streams). Until taken, they are dropped and counted.
    pub fn take_exit_requests(&mut self) -> Option<mpsc::Receiver<ExitRequest>> {
        self.exits.take()
    }

    /// Stop gracefully within 5 seconds; see [`shutdown_within`](Self::shutdown_within).
    pub async fn shutdown(self) {
        self.shutdown_within(Duration::from_secs(5)).await;
    }

    /// Stop gracefully: tear every circuit down (DESTROY with reason shutdown, so streams
    /// fail at once at the other end), close links, and wait for the tasks, at most `grace`.
    pub async fn shutdown_within(self, grace: Duration) {
        let (reply, rx) = oneshot::channel();
        if self
            .handle
            .commands
            .send(Command::Shutdown(reply))
            .await
            .is_ok()
        {
            let _ = tokio::time::timeout(grace, rx).await;
        }
        self.kill();
    }

    /// Stop at once, as a crash would: no DESTROY, no close; peers find out by themselves.
    pub fn kill(self) {
        self.task.abort();
        if let Ok(mut aux) = self.aux.lock() {
            for t in aux.drain(..) {
                t.abort();
            }
        }
    }
}
