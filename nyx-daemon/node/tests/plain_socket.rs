//! Nodes whose sockets move one datagram per system call (`SocketMode::Plain`, what the
//! Shadow simulator supports): a whole network of them, on either transport, builds 3-hop
//! circuits and carries a page byte for byte, and the UDP transport says it runs plain.

#![allow(clippy::unwrap_used)]

use nyx_core::config::TransportKind;
use nyx_node::testing::{LocalTestnet, LocalTestnetSpec, WebServer, node_settings};
use nyx_node::{Node, NodeKeys, NodeSettings, unix_now};
use nyx_transport::socket::SocketMode;

mod support;

fn plain() -> NodeSettings {
    let mut s = node_settings();
    s.udp.socket = SocketMode::Plain;
    s.quic.socket = SocketMode::Plain;
    s
}

async fn a_plain_network_carries_a_page(transport: TransportKind, net: u8) {
    let testnet = LocalTestnet::start(LocalTestnetSpec {
        net,
        transport,
        settings: plain(),
        ..LocalTestnetSpec::default()
    })
    .await
    .unwrap();
    // Large enough for many cells each way and a full circuit window.
    let body: String = (0..20_000).map(|i| format!("{i:09}\n")).collect();
    let site = WebServer::page(&body).await.unwrap();
    let client = Node::builder()
        .settings(plain())
        .transport(transport)
        .keys(NodeKeys::generate(unix_now()).unwrap())
        .directory(testnet.directory_now())
        .build()
        .unwrap();
    let page = support::fetch(&client, site.addr()).await;
    assert!(page.ends_with(body.as_bytes()), "{} bytes", page.len());
    if transport == TransportKind::Udp {
        let stats = client.handle().stats().await.unwrap();
        let socket = stats.udp_socket.expect("a UDP node reports its socket");
        assert!(socket.plain_io, "the socket runs plain");
        assert_eq!(socket.receive_errors, 0);
        assert!(stats.udp.expect("and its transport").cells_in > 100);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quic_with_plain_sockets() {
    a_plain_network_carries_a_page(TransportKind::Quic, 170).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn udp_with_plain_sockets() {
    a_plain_network_carries_a_page(TransportKind::Udp, 171).await;
}
