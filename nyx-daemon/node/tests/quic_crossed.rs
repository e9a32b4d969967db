//! Two relays that dial each other over QUIC at the same moment end up with one link
//! between them, the same one at both ends, and both keep using it.

#![allow(clippy::unwrap_used)]

use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;

use nyx_core::config::TransportKind;
use nyx_node::testing::node_settings;
use nyx_node::{BoundNode, Directory, DirectoryPeer, Node, NodeKeys, NodeRole, NodeSettings};
use tokio::time::timeout;

/// Generous bound for liveness only (never speed): CI machines are shared and slow.
const LONG: Duration = Duration::from_secs(60);

const NET: u8 = 146;

/// Two bound relays and their (signed) descriptors.
fn relays() -> (Vec<BoundNode>, Vec<DirectoryPeer>, Directory) {
    let now = nyx_node::unix_now();
    let mut bound = Vec::new();
    let mut descriptors = Vec::new();
    for host in 1..=2u8 {
        let keys = NodeKeys::generate(now).unwrap();
        let identity = keys.identity.clone();
        let settings = NodeSettings {
            role: NodeRole::Relay,
            transport: TransportKind::Quic,
            listen: SocketAddr::from((Ipv4Addr::new(127, 0, NET, host), 0)),
            ..node_settings()
        };
        let b = BoundNode::bind(keys, settings).unwrap();
        let descriptor = b
            .descriptor_builder(
                &format!("crossed{host}"),
                100,
                now,
                Duration::from_secs(3600),
            )
            .unwrap()
            .sign(&identity)
            .unwrap();
        descriptors.push(descriptor);
        bound.push(b);
    }
    let directory = Directory::from_descriptors(descriptors.clone()).unwrap();
    let peers = descriptors
        .into_iter()
        .map(|d| DirectoryPeer::Relay(Box::new(d)))
        .collect();
    (bound, peers, directory)
}

async fn one_hop(node: &Node, peer: &DirectoryPeer) {
    let circuit = timeout(LONG, node.handle().directory_circuit(peer.clone()))
        .await
        .unwrap()
        .unwrap();
    circuit.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crossed_quic_dials_leave_one_link() {
    // Dials cross only if both start before either link is up; on a loaded machine one may
    // finish first, so try a few pairs and require that at least one pair crossed.
    let mut crossed = false;
    for _ in 0..3 {
        let (bound, peers, directory) = relays();
        let nodes: Vec<Node> = bound
            .into_iter()
            .map(|b| b.start(directory.clone()).unwrap())
            .collect();
        // Each relay needs a link to the other at the same moment.
        tokio::join!(one_hop(&nodes[0], &peers[1]), one_hop(&nodes[1], &peers[0]));
        // The losing link is read for a moment, then closed.
        tokio::time::sleep(Duration::from_secs(4)).await;
        let a = nodes[0].handle().stats().await.unwrap();
        let b = nodes[1].handle().stats().await.unwrap();
        assert_eq!(a.quic_links.open, 1, "{a:?}");
        assert_eq!(b.quic_links.open, 1, "{b:?}");
        // One end (the smaller id) closed the link it did not keep, or neither had two.
        let retired = a.quic_links_retired + b.quic_links_retired;
        assert!(retired <= 1, "{a:?} {b:?}");
        crossed |= retired == 1;
        // The link that stayed carries circuits both ways, and no new link was needed.
        tokio::join!(one_hop(&nodes[0], &peers[1]), one_hop(&nodes[1], &peers[0]));
        let a = nodes[0].handle().stats().await.unwrap();
        let b = nodes[1].handle().stats().await.unwrap();
        assert_eq!((a.quic_links.open, b.quic_links.open), (1, 1));
        for node in nodes {
            node.shutdown().await;
        }
        if crossed {
            break;
        }
    }
    assert!(crossed, "no pair of dials crossed in 3 tries");
}
