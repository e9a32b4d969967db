//! Client-only nodes (the embedding API's default): they build circuits and carry streams
//! through a network of relays, but their guard never learns a lasting key of theirs. Each
//! link a client dials shows an identity made for that link alone; no relay's view of its
//! links (the identities it decrypted from the handshakes) ever holds the client's own node
//! id, and two links of one client show two unrelated ids. Relay-to-relay links still carry
//! the relays' real identities.

#![allow(clippy::unwrap_used)]

use std::collections::HashSet;
use std::time::Duration;

use nyx_core::NodeId;
use nyx_core::config::TransportKind;
use nyx_node::testing::{LocalTestnet, LocalTestnetSpec, WebServer, node_settings};
use nyx_node::{DirectoryPeer, Node, NodeKeys, NodeSettings, unix_now};
use tokio::time::timeout;

mod support;
use support::LONG;

/// The ids every relay of `testnet` sees at the other end of its links.
async fn peers_of_relays(testnet: &LocalTestnet) -> Vec<(usize, NodeId, bool)> {
    let mut seen = Vec::new();
    for (i, node) in testnet.nodes.iter().enumerate() {
        let Some(node) = node else { continue };
        for p in node.handle().peers().await.unwrap() {
            seen.push((i, p.peer, p.in_directory));
        }
    }
    seen
}

async fn client_shows_no_lasting_identity(transport: TransportKind, net: u8) {
    let testnet = LocalTestnet::start(LocalTestnetSpec {
        net,
        transport,
        ..LocalTestnetSpec::default()
    })
    .await
    .unwrap();
    let site = WebServer::page("through three relays").await.unwrap();
    let keys = NodeKeys::generate(unix_now()).unwrap();
    let client = Node::builder()
        .settings(node_settings())
        .transport(transport)
        .keys(keys)
        .directory(testnet.directory_now())
        .build()
        .unwrap();
    let me = client.node_id();

    // It works as a client: a page through a 3-hop circuit.
    let page = support::fetch(&client, site.addr()).await;
    assert!(page.ends_with(b"through three relays"), "got {page:?}");

    // One-hop circuits to two relays: two links of this client, at two relays.
    let relays: Vec<_> = testnet.directory.iter().take(2).cloned().collect();
    let mut at = Vec::new();
    for relay in &relays {
        let circuit = timeout(
            LONG,
            client
                .handle()
                .directory_circuit(DirectoryPeer::Relay(Box::new(relay.clone()))),
        )
        .await
        .unwrap()
        .unwrap();
        assert_eq!(circuit.path(), [relay.node_id()]);
        at.push((testnet.index(&relay.node_id()).unwrap(), circuit));
    }

    let seen = peers_of_relays(&testnet).await;
    let relay_ids: HashSet<NodeId> = testnet.ids.iter().copied().collect();
    assert!(
        seen.iter().all(|(_, peer, _)| *peer != me),
        "a relay saw the client's own node id"
    );
    // What each of the two relays saw of the client: one id not in the directory.
    let mut client_ids = Vec::new();
    for (relay, _) in &at {
        let strangers: Vec<NodeId> = seen
            .iter()
            .filter(|(i, peer, in_dir)| i == relay && !in_dir && !relay_ids.contains(peer))
            .map(|(_, peer, _)| *peer)
            .collect();
        assert!(
            !strangers.is_empty(),
            "relay {relay} has no link from the client"
        );
        client_ids.push(strangers);
    }
    // The two relays saw unrelated ids (a fresh identity per link).
    let first: HashSet<_> = client_ids[0].iter().collect();
    assert!(
        client_ids[1].iter().all(|id| !first.contains(id)),
        "two relays saw the same client id"
    );
    // Relay links still show relays' real identities: some relay has a relay as a peer
    // (the guard and middle of the 3-hop circuit).
    assert!(
        seen.iter()
            .any(|(_, peer, in_dir)| *in_dir && relay_ids.contains(peer)),
        "no relay-to-relay link with real identities"
    );

    // Nobody can make it a relay: it has no descriptor to publish.
    drop(at);
    client.shutdown().await;
    testnet.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quic_client_shows_no_lasting_identity() {
    client_shows_no_lasting_identity(TransportKind::Quic, 140).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn udp_client_shows_no_lasting_identity() {
    client_shows_no_lasting_identity(TransportKind::Udp, 141).await;
}

/// A client-only node binds no listener others can use and has no descriptor.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_publishes_no_descriptor() {
    for transport in [TransportKind::Quic, TransportKind::Udp] {
        let bound = nyx_node::BoundNode::bind(
            NodeKeys::generate(unix_now()).unwrap(),
            NodeSettings {
                transport,
                ..node_settings()
            },
        )
        .unwrap();
        let refused = bound
            .descriptor("client", 100, unix_now(), Duration::from_secs(3600))
            .unwrap_err();
        assert_eq!(refused.kind(), nyx_node::ErrorKind::BadConfig, "{refused}");
    }
}
