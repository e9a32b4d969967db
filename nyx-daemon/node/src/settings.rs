//! What a node is made of: its long-term keys ([`NodeKeys`]) and how it runs
//! ([`NodeSettings`]).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use nyx_core::NodeId;
use nyx_core::config::TransportKind;
use nyx_crypto::identity::IdentityKey;
use nyx_crypto::kem::HybridSecretKey;
use nyx_crypto::link::LinkKey;
use nyx_crypto::onion_keys::{OnionKeyRing, RotationPolicy};
use nyx_overlay::OverlayConfig;
use nyx_overlay::directory::ExitPolicy;
use nyx_overlay::path::{PathConfig, SampledGuard};
use nyx_overlay::stream::StreamConfig;
use nyx_transport::fault::{FaultConfig, WireTap};
use nyx_transport::quic::QuicConfig;
use nyx_transport::udp::UdpConfig;

use crate::Error;

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
    /// Fresh keys, with onion keys certified from `now_unix` and rotated daily
    /// ([`RotationPolicy::default`]).
    pub fn generate(now_unix: u64) -> Result<Self, Error> {
        Self::generate_rotating(now_unix, RotationPolicy::default())
    }

    /// Fresh keys whose onion keys rotate by `policy` (the running node rotates them).
    pub fn generate_rotating(now_unix: u64, policy: RotationPolicy) -> Result<Self, Error> {
        let identity = IdentityKey::generate()?;
        let link_key = LinkKey::new(HybridSecretKey::generate()?);
        let mut onion_keys = OnionKeyRing::new(policy)?;
        onion_keys.rotate(&identity, now_unix)?;
        Ok(NodeKeys {
            identity: Arc::new(identity),
            link_key,
            onion_keys,
        })
    }
}

/// How a node runs. Defaults: a client-only node ([`NodeRole::Client`]) over QUIC from a
/// free port on every IPv4 interface, default overlay and path settings, three build
/// attempts.
#[derive(Debug, Clone)]
pub struct NodeSettings {
    /// Client-only (the default) or relay.
    pub role: NodeRole,
    /// The transport.
    pub transport: TransportKind,
    /// The local address of the node's socket: where a relay listens for links, where a
    /// client's links start from. `[::]` is dual-stack (IPv4 peers too). Default `0.0.0.0:0`
    /// (any IPv4 interface, a free port), fit for a client of IPv4 relays.
    pub listen: SocketAddr,
    /// What a relay's descriptor publishes as its address, when that is not `listen`: a
    /// relay listening on an unspecified address (`0.0.0.0`, `[::]`) or behind NAT or port
    /// forwarding. Port 0 means the bound port. Default: none (`listen` itself, which must
    /// then be a specific address).
    pub advertise: Option<SocketAddr>,
    /// The overlay core's settings.
    pub overlay: OverlayConfig,
    /// Path selection.
    pub path: PathConfig,
    /// QUIC settings.
    pub quic: QuicConfig,
    /// UDP transport settings.
    pub udp: UdpConfig,
    /// Entry guards saved by an earlier run ([`NodeHandle::guards`](crate::NodeHandle::guards)),
    /// to keep using them. Default: none (sampled afresh).
    pub guards: Vec<SampledGuard>,
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
    /// The relays this node declares as its family in its descriptor (at most
    /// [`MAX_FAMILY`](nyx_overlay::directory::MAX_FAMILY) besides its own id, which is left
    /// out if listed). Paths avoid two relays of one family only where each declares the
    /// other. Default: none.
    pub family: Vec<NodeId>,
    /// What this node does with payloads it receives as an exit. Default: streams.
    pub exit_service: ExitServiceKind,
    /// Streams (both as a client and as an exit).
    pub streams: StreamConfig,
    /// A client waits this long for a stream to open, over every circuit it tries (an exit
    /// that times out, is full or cannot reach the target is left for another circuit, up to
    /// [`MAX_OPEN_ATTEMPTS`](nyx_overlay::stream::MAX_OPEN_ATTEMPTS)). Default 30 s.
    pub stream_open_timeout: Duration,
    /// An exit gives a target this long to resolve and accept. Default 10 s.
    pub exit_connect_timeout: Duration,
    /// TCP connections an exit keeps open at once, over all circuits. Default 4096. Each
    /// holds a copy buffer of [`TOWARD_USER_BUFFER`](crate::tcp::TOWARD_USER_BUFFER) and one of
    /// [`FROM_USER_BUFFER`](crate::tcp::FROM_USER_BUFFER) while it is open.
    pub exit_max_connections: usize,
}

/// What a node is to the network.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum NodeRole {
    /// Builds circuits for its own application and nothing else: it accepts no links,
    /// publishes no descriptor, answers no CREATE, and each link it dials shows an identity
    /// made for that link alone (fresh keys per link, QUIC without a lasting client
    /// certificate), so its guard learns no lasting key of it. The default.
    #[default]
    Client,
    /// Also relays others' circuits: it listens for links, publishes a descriptor, rotates
    /// onion keys, and shows its identity on every link (relay links are mutually
    /// authenticated).
    Relay,
}

impl NodeRole {
    /// Whether the node relays for others.
    pub fn is_relay(self) -> bool {
        self == NodeRole::Relay
    }
}

/// What a node does with the payloads it receives as the last hop of a circuit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ExitServiceKind {
    /// Run streams and connect them to TCP targets its exit policy allows.
    #[default]
    Streams,
    /// Hand raw payloads to [`Node::take_exit_requests`](crate::Node::take_exit_requests) (cell-level tests and tools).
    Raw,
}

impl Default for NodeSettings {
    fn default() -> Self {
        NodeSettings {
            role: NodeRole::Client,
            transport: TransportKind::Quic,
            listen: SocketAddr::from(([0, 0, 0, 0], 0)),
            advertise: None,
            overlay: OverlayConfig::default(),
            path: PathConfig::default(),
            quic: QuicConfig::default(),
            udp: UdpConfig::default(),
            guards: Vec::new(),
            build_attempts: 3,
            circuit_queue: 1024,
            tap: None,
            faults: FaultConfig::default(),
            exit_policy: ExitPolicy::reject_all(),
            family: Vec::new(),
            exit_service: ExitServiceKind::Streams,
            streams: StreamConfig::default(),
            stream_open_timeout: Duration::from_secs(30),
            exit_connect_timeout: Duration::from_secs(10),
            exit_max_connections: 4096,
        }
    }
}
