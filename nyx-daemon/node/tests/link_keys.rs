//! Link-key rotation on the UDP transport: a relay answers handshakes for the keys it was
//! last given (`NodeHandle::set_link_keys`). During an overlap both the new and the previous
//! key work, so clients holding either descriptor get a link; once the previous key is
//! retired only the new descriptor reaches it; links made before stay up.

#![allow(clippy::unwrap_used)]

use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;

use nyx_core::config::TransportKind;
use nyx_crypto::kem::HybridSecretKey;
use nyx_crypto::link::LinkKey;
use nyx_node::nyx_overlay::directory::Descriptor;
use nyx_node::testing::node_settings;
use nyx_node::{
    BoundNode, Directory, DirectoryPeer, Node, NodeKeys, NodeRole, NodeSettings, unix_now,
};
use tokio::time::timeout;

/// Generous bound for liveness only (never speed): CI machines are shared and slow.
const LONG: Duration = Duration::from_secs(60);
/// A dial to a key the relay no longer has is given up well within this.
const REFUSED_WITHIN: Duration = Duration::from_secs(30);

fn link_key(seed: u8) -> LinkKey {
    LinkKey::new(HybridSecretKey::from_seed(&[seed; 96]))
}

fn client() -> Node {
    Node::builder()
        .settings(node_settings())
        .transport(TransportKind::Udp)
        .directory(Directory::default())
        .build()
        .unwrap()
}

/// Whether `client` gets a one-hop circuit to the relay `descriptor` names.
async fn reaches(client: &Node, descriptor: &Descriptor) -> bool {
    let peer = DirectoryPeer::Relay(Box::new(descriptor.clone()));
    matches!(
        timeout(LONG, client.handle().directory_circuit(peer)).await,
        Ok(Ok(_))
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rotated_link_keys_overlap_then_retire() {
    let now = unix_now();
    let mut keys = NodeKeys::generate(now).unwrap();
    keys.link_key = link_key(1);
    let identity = keys.identity.clone();
    let relay = BoundNode::bind(
        keys,
        NodeSettings {
            role: NodeRole::Relay,
            transport: TransportKind::Udp,
            listen: SocketAddr::from((Ipv4Addr::new(127, 0, 160, 1), 0)),
            ..node_settings()
        },
    )
    .unwrap();
    let validity = Duration::from_secs(3600);
    let builder = relay
        .descriptor_builder("rotating", 100, now, validity)
        .unwrap();
    let first = builder.clone().sign(&identity).unwrap();
    let second = {
        let mut b = builder;
        b.link_key = link_key(2).public().clone();
        b.sign(&identity).unwrap()
    };
    let relay = relay.start(Directory::default()).unwrap();

    let early = client();
    assert!(reaches(&early, &first).await, "the first key works");

    // Overlap: the new key and the previous one.
    relay
        .handle()
        .set_link_keys(vec![link_key(2), link_key(1)])
        .await
        .unwrap();
    assert!(reaches(&client(), &second).await, "the new key works");
    assert!(
        reaches(&client(), &first).await,
        "the previous key still works"
    );

    // The previous key retired: only the new descriptor reaches the relay.
    relay
        .handle()
        .set_link_keys(vec![link_key(2)])
        .await
        .unwrap();
    assert!(reaches(&client(), &second).await, "the new key works");
    let late = client();
    let peer = DirectoryPeer::Relay(Box::new(first.clone()));
    let refused = timeout(REFUSED_WITHIN, late.handle().directory_circuit(peer)).await;
    assert!(
        matches!(refused, Ok(Err(_))),
        "a HELLO for the retired key got a link: {refused:?}"
    );
    // A link made with the first key is still up and still carries new circuits.
    assert!(
        reaches(&early, &first).await,
        "an existing link was dropped"
    );
}
