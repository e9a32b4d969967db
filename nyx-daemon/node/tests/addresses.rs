//! Relays that listen on an unspecified address (`[::]`, dual-stack) and publish the address
//! others reach them at (`advertise`), some over IPv4 and some over IPv6: a client on `[::]`
//! reaches each of them, replies leave from the address it dialled (a UDP peer matches
//! replies by address), and circuits cross between IPv4 and IPv6 relays.

#![allow(clippy::unwrap_used)]

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;

use nyx_core::config::TransportKind;
use nyx_core::rate::Quota;
use nyx_node::testing::{WebServer, node_settings};
use nyx_node::{
    BoundNode, Directory, DirectoryPeer, ExitPolicy, Node, NodeKeys, NodeRole, NodeSettings,
    unix_now,
};
use tokio::time::timeout;

mod support;
use support::LONG;

fn dual_stack_any() -> SocketAddr {
    SocketAddr::from((Ipv6Addr::UNSPECIFIED, 0))
}

async fn mixed_family_relays(transport: TransportKind, net: u8) {
    // Two relays reached over IPv4 (each at its own 127.0.net.x), two over IPv6 loopback;
    // all four listen on [::] with a free port, which `advertise` port 0 stands for.
    let advertised: [IpAddr; 4] = [
        Ipv4Addr::new(127, 0, net, 1).into(),
        Ipv6Addr::LOCALHOST.into(),
        Ipv4Addr::new(127, 0, net, 3).into(),
        Ipv6Addr::LOCALHOST.into(),
    ];
    let now = unix_now();
    let mut bound = Vec::new();
    let mut descriptors = Vec::new();
    for (i, ip) in advertised.iter().enumerate() {
        let keys = NodeKeys::generate(now).unwrap();
        let mut settings = NodeSettings {
            role: NodeRole::Relay,
            transport,
            listen: dual_stack_any(),
            advertise: Some(SocketAddr::new(*ip, 0)),
            exit_policy: ExitPolicy::loopback_only(),
            ..node_settings()
        };
        settings.udp.hello_per_source = Quota::per_second(1000).unwrap();
        let b = BoundNode::bind(keys, settings).unwrap();
        let published = b.advertised_addr().unwrap();
        assert_eq!(published.ip(), *ip);
        assert_eq!(published.port(), b.local_addr().port());
        let d = b
            .descriptor(&format!("mixed{i}"), 100, now, Duration::from_secs(3600))
            .unwrap();
        assert_eq!(
            d.addr(transport),
            Some(published),
            "the descriptor publishes it"
        );
        descriptors.push(d);
        bound.push(b);
    }
    let directory = Directory::from_descriptors(descriptors.clone()).unwrap();
    let relays: Vec<Node> = bound
        .into_iter()
        .map(|b| b.start(directory.clone()).unwrap())
        .collect();

    let client = Node::builder()
        .settings(NodeSettings {
            listen: dual_stack_any(),
            ..node_settings()
        })
        .transport(transport)
        .directory(directory.clone())
        .build()
        .unwrap();
    // A link and a one-hop circuit to each relay, at the address it advertises.
    for d in &descriptors {
        let peer = DirectoryPeer::Relay(Box::new(d.clone()));
        let circuit = timeout(LONG, client.handle().directory_circuit(peer))
            .await
            .unwrap()
            .unwrap_or_else(|e| panic!("relay at {:?}: {e}", d.addr(transport)));
        assert_eq!(circuit.path(), [d.node_id()]);
    }
    // Three-hop circuits over four relays always join an IPv4 and an IPv6 relay.
    let site = WebServer::page("across families").await.unwrap();
    for _ in 0..3 {
        let page = support::fetch(&client, site.addr()).await;
        assert!(page.ends_with(b"across families"), "{page:?}");
    }
    client.shutdown().await;
    for r in relays {
        r.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quic_relays_on_any_address_advertise_ipv4_and_ipv6() {
    mixed_family_relays(TransportKind::Quic, 150).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn udp_relays_on_any_address_advertise_ipv4_and_ipv6() {
    mixed_family_relays(TransportKind::Udp, 151).await;
}

/// A relay bound to an unspecified address with nothing to advertise has no descriptor.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relay_on_any_address_must_advertise() {
    let bound = BoundNode::bind(
        NodeKeys::generate(unix_now()).unwrap(),
        NodeSettings {
            role: NodeRole::Relay,
            listen: SocketAddr::from((Ipv4Addr::UNSPECIFIED, 0)),
            ..node_settings()
        },
    )
    .unwrap();
    let err = bound
        .descriptor("nowhere", 100, unix_now(), Duration::from_secs(3600))
        .unwrap_err();
    assert_eq!(err.kind(), nyx_node::ErrorKind::BadConfig, "{err}");
    assert!(err.to_string().contains("advertise"), "{err}");
}
