//! A local network of nodes in one process on `127.0.<net>.1..=n`: every node a relay and an
//! exit, a directory made from their descriptors. Tests and benchmarks use it; `nyx testnet`
//! (issue 8) runs the same thing as separate processes.

use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;

use nyx_core::NodeId;
use nyx_core::config::TransportKind;

use super::{BoundNode, ExitServiceKind, Node, NodeKeys, NodeSettings, unix_now};
use crate::Error;
use crate::directory::{Directory, ExitPolicy};

/// What to start.
#[derive(Debug, Clone)]
pub struct LocalTestnetSpec {
    /// Nodes (at least 4 for 3-hop circuits from one of them). Default 5.
    pub nodes: u8,
    /// Third octet of the 127.0.x.y addresses, so concurrent testnets do not meet. Default 0.
    pub net: u8,
    /// Settings of every node (`listen` and `transport` are set per node). Default: QUIC.
    pub settings: NodeSettings,
    /// Exit policy of every node. Default: loopback only.
    pub exit_policy: ExitPolicy,
    /// Answer every payload an exit receives with the same payload instead of running
    /// streams (cell-level tests). Default false.
    pub echo: bool,
}

impl Default for LocalTestnetSpec {
    fn default() -> Self {
        LocalTestnetSpec {
            nodes: 5,
            net: 0,
            settings: NodeSettings::default(),
            exit_policy: ExitPolicy::loopback_only(),
            echo: false,
        }
    }
}

/// A running local network.
#[derive(Debug)]
pub struct LocalTestnet {
    /// The nodes (`None` once stopped by the caller).
    pub nodes: Vec<Option<Node>>,
    /// Their ids, in the same order.
    pub ids: Vec<NodeId>,
    /// Their addresses.
    pub addrs: Vec<SocketAddr>,
    /// The directory they all use.
    pub directory: Directory,
}

impl LocalTestnet {
    /// Bind every node, sign the descriptors, and start them (needs a tokio runtime).
    pub async fn start(spec: LocalTestnetSpec, transport: TransportKind) -> Result<Self, Error> {
        let now = unix_now();
        let mut bound = Vec::new();
        for i in 1..=spec.nodes {
            let keys = NodeKeys::generate(now)?;
            let mut settings = NodeSettings {
                transport,
                listen: SocketAddr::from((Ipv4Addr::new(127, 0, spec.net, i), 0)),
                exit_policy: spec.exit_policy.clone(),
                exit_service: if spec.echo {
                    ExitServiceKind::Raw
                } else {
                    ExitServiceKind::Streams
                },
                ..spec.settings.clone()
            };
            // Every node of a local testnet is in one /24, the UDP transport's unit for its
            // per-source HELLO limit (10/s by default): raise it so that the nodes dialling
            // each other at start do not refuse each other.
            settings.udp.hello_rate_per_source = settings.udp.hello_rate_per_source.max(1000);
            // Each node's fault shim draws its own random sequence.
            settings.faults.seed = settings.faults.seed.wrapping_add(u64::from(i));
            bound.push(BoundNode::bind(keys, settings)?);
        }
        let mut descriptors = Vec::new();
        for (i, b) in bound.iter().enumerate() {
            let d = b.descriptor(
                &format!("node{i}"),
                100,
                now,
                Duration::from_secs(24 * 3600),
            )?;
            descriptors.push(d);
        }
        let directory = Directory::from_descriptors(descriptors)?;
        let ids = bound.iter().map(BoundNode::node_id).collect();
        let addrs = bound.iter().map(BoundNode::local_addr).collect();
        let mut nodes = Vec::new();
        for b in bound {
            let mut node = b.start(directory.clone())?;
            if spec.echo
                && let Some(mut exits) = node.take_exit_requests()
            {
                let handle = node.handle();
                tokio::spawn(async move {
                    while let Some(req) = exits.recv().await {
                        let _ = handle.reply(req.exit, &req.payload).await;
                    }
                });
            }
            nodes.push(Some(node));
        }
        Ok(LocalTestnet {
            nodes,
            ids,
            addrs,
            directory,
        })
    }

    /// Node `i`, if still running.
    pub fn node(&self, i: usize) -> Option<&Node> {
        self.nodes.get(i).and_then(Option::as_ref)
    }

    /// The position of a node by id.
    pub fn index(&self, id: &NodeId) -> Option<usize> {
        self.ids.iter().position(|x| x == id)
    }
}
