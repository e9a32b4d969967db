//! A NyxNet network in one process, for tests, benchmarks and examples (feature `testing`).
//!
//! [`LocalTestnet`] starts nodes on `127.0.<net>.1..=n`, every one a relay and an exit, and
//! the directory made from their descriptors; [`LocalTestnet::client`] adds a client-only
//! node that uses them. [`node_settings`] are the settings they run with. [`WebServer`] serves fixed bodies
//! on loopback for streams to fetch. `nyx testnet` (in nyx-daemon) runs the same kind of
//! network as separate processes.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use nyx_node::testing::{LocalTestnet, LocalTestnetSpec, WebServer};
//!
//! let testnet = LocalTestnet::start(LocalTestnetSpec::default()).await?;
//! let site = WebServer::page("hello").await?;
//! let client = testnet.client()?;
//! let stream = client.connect(site.addr()).await?;
//! # Ok(()) }
//! ```

use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;

use nyx_core::NodeId;
use nyx_core::config::TransportKind;
use nyx_core::rate::Quota;
use nyx_overlay::OverlayConfig;
use nyx_overlay::directory::{Directory, ExitPolicy};
use nyx_overlay::path::PathConfig;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

use crate::NodeEvent;
use crate::handle::Command;
use crate::{BoundNode, Error, ExitServiceKind, Node, NodeKeys, NodeRole, NodeSettings, unix_now};
use nyx_crypto::identity::IdentityKey;
use nyx_crypto::onion_keys::RotationPolicy;
use nyx_overlay::directory::{Descriptor, DescriptorBuilder};
use std::sync::{Arc, Mutex};
use tokio::sync::{broadcast, mpsc};

/// The settings of every node of a local testnet, and of clients that use one: link probes
/// every 500 ms and links declared dead after 3 s (so tests that stop a relay see it within
/// seconds), and no rule against relays in one subnet (every node is on 127/8).
pub fn node_settings() -> NodeSettings {
    NodeSettings {
        overlay: OverlayConfig {
            keepalive: Duration::from_millis(500),
            link_timeout: Duration::from_secs(3),
            ..OverlayConfig::default()
        },
        path: PathConfig {
            distinct_subnets: false,
            ..PathConfig::default()
        },
        ..NodeSettings::default()
    }
}

/// What to start.
#[derive(Debug, Clone)]
pub struct LocalTestnetSpec {
    /// Nodes (at least 4 for 3-hop circuits from one of them). Default 5.
    pub nodes: u8,
    /// Third octet of the 127.0.x.y addresses, so concurrent testnets do not meet. Default 0.
    pub net: u8,
    /// The link transport of every node. Default QUIC.
    pub transport: TransportKind,
    /// Settings of every node (`role`, `listen`, `transport`, `exit_policy` and
    /// `exit_service` are set per node) and of its clients. Default [`node_settings`].
    pub settings: NodeSettings,
    /// Exit policy of every node. Default: loopback only.
    pub exit_policy: ExitPolicy,
    /// Answer every payload an exit receives with the same payload instead of running
    /// streams (cell-level tests). Default false.
    pub echo: bool,
    /// Run the raw exit service without answering: payloads wait in
    /// [`Node::take_exit_requests`] for the caller (cell-level benchmarks). Ignored with
    /// `echo`. Default false.
    pub raw_exits: bool,
    /// How the nodes' onion keys rotate. Default [`RotationPolicy::default`] (daily).
    pub rotation: RotationPolicy,
    /// The runtime each node runs on, by position (node `i` on `runtimes[i]`: its socket,
    /// its tasks and the testnet's watch of its key rotations); nodes past the list's end
    /// run on the caller's. A deployment runs each node as its own process,
    /// so a benchmark that compares one node with a thread of its own gives each node a
    /// runtime of its own. Default: none (every node on the caller's runtime).
    pub runtimes: Vec<tokio::runtime::Handle>,
}

impl LocalTestnetSpec {
    /// Make node `i`'s runtime the current one while the guard lives (nothing for a node
    /// on the caller's runtime).
    fn enter(&self, i: usize) -> Option<tokio::runtime::EnterGuard<'_>> {
        self.runtimes.get(i).map(tokio::runtime::Handle::enter)
    }
}

impl Default for LocalTestnetSpec {
    fn default() -> Self {
        LocalTestnetSpec {
            nodes: 5,
            net: 0,
            transport: TransportKind::Quic,
            settings: node_settings(),
            exit_policy: ExitPolicy::loopback_only(),
            echo: false,
            raw_exits: false,
            rotation: RotationPolicy::default(),
            runtimes: Vec::new(),
        }
    }
}

/// A running local network. Dropping it stops every node still in it.
///
/// It also plays the directory's part: when a node's onion keys rotate, its descriptor is
/// signed again with the new certificates and every node of the network (and every client
/// made by [`client`](Self::client)) gets the new directory.
#[derive(Debug)]
pub struct LocalTestnet {
    /// The nodes (`None` once taken out by the caller, to stop or kill one).
    pub nodes: Vec<Option<Node>>,
    /// Their ids, in the same order.
    pub ids: Vec<NodeId>,
    /// Their addresses.
    pub addrs: Vec<SocketAddr>,
    /// The directory they all used at start ([`directory_now`](Self::directory_now) after
    /// rotations).
    pub directory: Directory,
    /// The spec it was started with.
    pub spec: LocalTestnetSpec,
    keeper: Arc<Mutex<Keeper>>,
}

/// What the testnet keeps to sign descriptors again and hand out directories.
#[derive(Debug)]
struct Keeper {
    builders: Vec<DescriptorBuilder>,
    identities: Vec<Arc<IdentityKey>>,
    directory: Directory,
    /// The command queues of every node and client to give new directories to.
    members: Vec<mpsc::Sender<Command>>,
}

/// How long a testnet's descriptors are valid.
const VALIDITY: Duration = Duration::from_secs(24 * 3600);

impl LocalTestnet {
    /// Bind every node, sign the descriptors, and start them (needs a tokio runtime).
    pub async fn start(spec: LocalTestnetSpec) -> Result<Self, Error> {
        let now = unix_now();
        let mut bound = Vec::new();
        let mut identities = Vec::new();
        for i in 1..=spec.nodes {
            let keys = NodeKeys::generate_rotating(now, spec.rotation)?;
            identities.push(keys.identity.clone());
            let mut settings = NodeSettings {
                role: NodeRole::Relay,
                transport: spec.transport,
                listen: SocketAddr::from((Ipv4Addr::new(127, 0, spec.net, i), 0)),
                exit_policy: spec.exit_policy.clone(),
                exit_service: if spec.echo || spec.raw_exits {
                    ExitServiceKind::Raw
                } else {
                    ExitServiceKind::Streams
                },
                ..spec.settings.clone()
            };
            // Every node of a local testnet is in one /24, the UDP transport's unit for its
            // per-source HELLO limit (10/s by default): raise it so that the nodes dialling
            // each other at start do not refuse each other.
            if let Ok(many) = Quota::per_second(1000)
                && settings.udp.hello_per_source.burst() < many.burst()
            {
                settings.udp.hello_per_source = many;
            }
            // Each node's fault shim draws its own random sequence.
            settings.faults.seed = settings.faults.seed.wrapping_add(u64::from(i));
            // Sockets register with the runtime current at bind: the node's own.
            let _on = spec.enter(usize::from(i - 1));
            bound.push(BoundNode::bind(keys, settings)?);
        }
        let mut descriptors = Vec::new();
        let mut builders = Vec::new();
        for (i, b) in bound.iter().enumerate() {
            let builder = b.descriptor_builder(&format!("node{i}"), 100, now, VALIDITY)?;
            let signed = builder.clone().sign(&identities[i]);
            descriptors.push(signed.map_err(nyx_overlay::Error::from)?);
            builders.push(builder);
        }
        let directory =
            Directory::from_descriptors(descriptors).map_err(nyx_overlay::Error::from)?;
        let ids = bound.iter().map(BoundNode::node_id).collect();
        let addrs = bound.iter().map(BoundNode::local_addr).collect();
        let mut nodes = Vec::new();
        for (i, b) in bound.into_iter().enumerate() {
            // The node's tasks (and its echo's) go to its own runtime while this is held.
            let _on = spec.enter(i);
            let mut node = b.start(directory.clone())?;
            if spec.echo {
                spawn_echo(&mut node);
            }
            nodes.push(Some(node));
        }
        let keeper = Arc::new(Mutex::new(Keeper {
            builders,
            identities,
            directory: directory.clone(),
            members: nodes
                .iter()
                .flatten()
                .map(|n| n.handle.commands.clone())
                .collect(),
        }));
        // One hand-out at a time, so members get directories in the order they were made
        // (each includes every earlier update): with concurrent hand-outs, an older
        // directory could arrive last and undo other nodes' rotations at the client.
        let handing_out = Arc::new(tokio::sync::Mutex::new(()));
        for (i, node) in nodes.iter().flatten().enumerate() {
            let _on = spec.enter(i);
            spawn_rotation_watch(i, node, keeper.clone(), handing_out.clone());
        }
        Ok(LocalTestnet {
            nodes,
            ids,
            addrs,
            directory,
            spec,
            keeper,
        })
    }

    /// A client-only node that builds circuits through this network: the testnet's settings
    /// and transport, its links starting from the settings' `listen` address (by default
    /// any interface, a free port).
    pub fn client(&self) -> Result<Node, Error> {
        let node = Node::builder()
            .settings(self.spec.settings.clone())
            .transport(self.spec.transport)
            .directory(self.directory_now())
            .build()?;
        lock(&self.keeper)
            .members
            .push(node.handle.commands.clone());
        Ok(node)
    }

    /// The directory as it is now (with every rotated descriptor).
    pub fn directory_now(&self) -> Directory {
        lock(&self.keeper).directory.clone()
    }

    /// Node `i`, if still running.
    pub fn node(&self, i: usize) -> Option<&Node> {
        self.nodes.get(i).and_then(Option::as_ref)
    }

    /// The position of a node by id.
    pub fn index(&self, id: &NodeId) -> Option<usize> {
        self.ids.iter().position(|x| x == id)
    }

    /// Stop every node gracefully (DESTROYs sent, links closed).
    pub async fn shutdown(self) {
        for node in self.nodes.into_iter().flatten() {
            node.shutdown().await;
        }
    }
}

fn lock(keeper: &Mutex<Keeper>) -> std::sync::MutexGuard<'_, Keeper> {
    keeper
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Follow node `i`'s rotations: sign its descriptor again with the new certificates and
/// give every member the new directory. The task holds a subscription and command queues,
/// not a handle, so the nodes still stop when they are dropped.
fn spawn_rotation_watch(
    i: usize,
    node: &Node,
    keeper: Arc<Mutex<Keeper>>,
    handing_out: Arc<tokio::sync::Mutex<()>>,
) {
    let mut events = node.handle.subscribe();
    tokio::spawn(async move {
        loop {
            let certs = match events.recv().await {
                Ok(NodeEvent::OnionKeysRotated { certs }) => certs,
                Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => continue,
                Err(broadcast::error::RecvError::Closed) => return,
            };
            let _turn = handing_out.lock().await;
            let (directory, members) = {
                let mut k = lock(&keeper);
                let now = unix_now();
                let builder = &mut k.builders[i];
                builder.onion_certs = certs;
                builder.published = now;
                builder.valid_until = now + VALIDITY.as_secs();
                let signed = builder.clone().sign(&k.identities[i]);
                let Ok(descriptor) = signed else {
                    tracing::warn!(node = i, "testnet: a rotated descriptor did not sign");
                    continue;
                };
                let mut all: Vec<Descriptor> = k
                    .directory
                    .iter()
                    .filter(|d| d.node_id() != descriptor.node_id())
                    .cloned()
                    .collect();
                all.push(descriptor);
                let Ok(directory) = Directory::from_descriptors(all) else {
                    continue;
                };
                k.directory = directory.clone();
                k.members.retain(|m| !m.is_closed());
                (directory, k.members.clone())
            };
            for m in members {
                let _ = m.send(Command::SetDirectory(directory.clone())).await;
            }
        }
    });
}

/// Answer every payload the node receives as an exit with the same payload. The task holds
/// only the command channel, not a handle, so the node still stops when it is dropped.
fn spawn_echo(node: &mut Node) {
    let Some(mut exits) = node.take_exit_requests() else {
        return;
    };
    let commands = node.handle.commands.clone();
    tokio::spawn(async move {
        while let Some(req) = exits.recv().await {
            let reply = Command::Reply {
                exit: req.exit,
                payload: req.payload,
            };
            if commands.send(reply).await.is_err() {
                return;
            }
        }
    });
}

/// An HTTP/1.0 server on 127.0.0.1 that answers `GET <path>` with the body registered for
/// the path (404 otherwise) and closes the connection. Dropping it stops it and every
/// connection it is serving.
#[derive(Debug)]
pub struct WebServer {
    addr: SocketAddr,
    task: JoinHandle<()>,
}

impl WebServer {
    /// Serve `page` at `/`.
    pub async fn page(page: &str) -> std::io::Result<WebServer> {
        WebServer::start(vec![("/".to_owned(), page.as_bytes().to_vec())]).await
    }

    /// Serve each `(path, body)`.
    pub async fn start(routes: Vec<(String, Vec<u8>)>) -> std::io::Result<WebServer> {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await?;
        let addr = listener.local_addr()?;
        let routes = std::sync::Arc::new(routes);
        let task = tokio::spawn(async move {
            // Connections are tasks of this set: aborting the server drops the set, which
            // aborts them too.
            let mut connections = tokio::task::JoinSet::new();
            while let Ok((mut conn, _)) = listener.accept().await {
                while connections.try_join_next().is_some() {}
                let routes = routes.clone();
                connections.spawn(async move {
                    let mut head = Vec::new();
                    let mut buf = [0u8; 1024];
                    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 16 << 10 {
                        match conn.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => head.extend_from_slice(&buf[..n]),
                        }
                    }
                    let head = String::from_utf8_lossy(&head);
                    let path = head.split_whitespace().nth(1).unwrap_or("/");
                    let body = routes.iter().find(|(p, _)| p == path).map(|(_, b)| b);
                    let (status, body) = match body {
                        Some(body) => ("200 OK", body.as_slice()),
                        None => ("404 Not Found", &b"not found\n"[..]),
                    };
                    let header = format!(
                        "HTTP/1.0 {status}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                        body.len()
                    );
                    let _ = conn.write_all(header.as_bytes()).await;
                    let _ = conn.write_all(body).await;
                    let _ = conn.shutdown().await;
                });
            }
        });
        Ok(WebServer { addr, task })
    }

    /// Where it listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for WebServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}
