//! Directory streams (Tor's BEGIN_DIR): a client reaches a relay itself over a one-hop
//! circuit, either by a pinned id, address and link key (fast handshake) or by the relay's
//! descriptor (onion handshake), and the relay's owner answers; a descriptor that claims
//! another relay's address does not reach anyone.

#![allow(clippy::unwrap_used)]

use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;

use nyx_core::config::TransportKind;
use nyx_node::testing::{LocalTestnet, LocalTestnetSpec, node_settings};
use nyx_node::{
    Directory, DirectoryPeer, ErrorKind, Node, NodeKeys, NodeRole, NodeSettings, NyxStream,
    PinnedPeer,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::time::timeout;

/// Generous bound for liveness only (never speed): CI machines are shared and slow.
const LONG: Duration = Duration::from_secs(60);

/// A node that knows no relay at all (as a client bootstrapping from pinned authorities).
fn bare_client(transport: TransportKind, net: u8) -> Node {
    Node::builder()
        .settings(NodeSettings {
            listen: SocketAddr::from((Ipv4Addr::new(127, 0, net, 100), 0)),
            ..node_settings()
        })
        .transport(transport)
        .directory(Directory::default())
        .build()
        .unwrap()
}

/// Answer every directory stream of node 0 with "re:" and what it read.
fn serve_node0(testnet: &mut LocalTestnet) {
    let mut streams = testnet.nodes[0]
        .as_mut()
        .unwrap()
        .take_directory_streams()
        .unwrap();
    tokio::spawn(async move {
        while let Some(mut stream) = streams.recv().await {
            tokio::spawn(async move {
                let mut request = Vec::new();
                stream.read_to_end(&mut request).await.unwrap();
                stream.write_all(b"re:").await.unwrap();
                stream.write_all(&request).await.unwrap();
                stream.shutdown().await.unwrap();
            });
        }
    });
}

/// A relay bound at `listen`, publishing `advertise` if given, and its identity.
fn bind_relay(
    transport: TransportKind,
    listen: SocketAddr,
    advertise: Option<SocketAddr>,
) -> (
    nyx_node::BoundNode,
    std::sync::Arc<nyx_node::nyx_crypto::identity::IdentityKey>,
) {
    let keys = NodeKeys::generate(nyx_node::unix_now()).unwrap();
    let identity = keys.identity.clone();
    let settings = NodeSettings {
        role: NodeRole::Relay,
        transport,
        listen,
        advertise,
        ..node_settings()
    };
    (nyx_node::BoundNode::bind(keys, settings).unwrap(), identity)
}

/// A running relay that tests others (as an authority does), and its descriptor.
fn start_tester(
    transport: TransportKind,
    listen: SocketAddr,
) -> (Node, nyx_node::nyx_overlay::directory::Descriptor) {
    let (tester, id) = bind_relay(transport, listen, None);
    let desc = tester
        .descriptor_builder(
            "tester",
            100,
            nyx_node::unix_now(),
            Duration::from_secs(3600),
        )
        .unwrap()
        .sign(&id)
        .unwrap();
    (tester.start(Directory::default()).unwrap(), desc)
}

async fn ask(mut stream: NyxStream, request: &[u8]) -> Vec<u8> {
    stream.write_all(request).await.unwrap();
    stream.shutdown().await.unwrap();
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).await.unwrap();
    answer
}

async fn pinned_and_descriptor_peers_answer(transport: TransportKind, net: u8) {
    let mut testnet = LocalTestnet::start(LocalTestnetSpec {
        nodes: 2,
        net,
        transport,
        ..LocalTestnetSpec::default()
    })
    .await
    .unwrap();
    serve_node0(&mut testnet);
    let relay = testnet.directory.get(&testnet.ids[0]).unwrap().clone();

    // Known only by id, address and link key: the fast handshake.
    let client = bare_client(transport, net);
    let pinned = DirectoryPeer::Pinned(PinnedPeer {
        node_id: relay.node_id(),
        addr: testnet.addrs[0],
        link_key: relay.link_key().clone(),
    });
    let stream = timeout(LONG, client.handle().directory_stream(pinned))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(stream.path(), [relay.node_id()]);
    assert_eq!(ask(stream, b"consensus?").await, b"re:consensus?");

    // By descriptor: the onion handshake with its certified onion key, even though the
    // client's directory does not list it.
    let by_descriptor = DirectoryPeer::Relay(Box::new(relay.clone()));
    let stream = timeout(LONG, client.handle().directory_stream(by_descriptor))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(ask(stream, b"vote").await, b"re:vote");

    // The one-hop circuits close with their streams.
    let handle = client.handle();
    let deadline = tokio::time::Instant::now() + LONG;
    while !handle.circuits().await.unwrap().is_empty() {
        assert!(tokio::time::Instant::now() < deadline, "circuits left open");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    testnet.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn directory_streams_over_quic() {
    pinned_and_descriptor_peers_answer(TransportKind::Quic, 60).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn directory_streams_over_udp() {
    pinned_and_descriptor_peers_answer(TransportKind::Udp, 61).await;
}

/// A relay that publishes another relay's address cannot complete a circuit there (the
/// node at that address holds other keys): an authority's reachability test fails. A
/// pinned peer with the wrong link key fails likewise.
async fn claimed_addresses_do_not_reach(transport: TransportKind, net: u8) {
    let testnet = LocalTestnet::start(LocalTestnetSpec {
        nodes: 2,
        net,
        transport,
        ..LocalTestnetSpec::default()
    })
    .await
    .unwrap();
    let now = nyx_node::unix_now();
    let keys = NodeKeys::generate(now).unwrap();
    let identity = keys.identity.clone();
    let impostor = nyx_node::BoundNode::bind(
        keys,
        NodeSettings {
            role: NodeRole::Relay,
            transport,
            listen: SocketAddr::from((Ipv4Addr::new(127, 0, net, 50), 0)),
            ..node_settings()
        },
    )
    .unwrap();
    let mut builder = impostor
        .descriptor_builder("impostor", 100, now, Duration::from_secs(3600))
        .unwrap();
    match transport {
        TransportKind::Quic => builder.quic_addr = Some(testnet.addrs[0]),
        TransportKind::Udp => builder.udp_addr = Some(testnet.addrs[0]),
    }
    let claim = builder.sign(&identity).unwrap();
    let client = bare_client(transport, net);
    let handle = client.handle();
    let probe = handle.directory_circuit(DirectoryPeer::Relay(Box::new(claim)));
    let err = timeout(LONG, probe).await.unwrap().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::CircuitFailed, "{err}");

    let relay = testnet.directory.get(&testnet.ids[0]).unwrap();
    let other = testnet.directory.get(&testnet.ids[1]).unwrap();
    let wrong_key = DirectoryPeer::Pinned(PinnedPeer {
        node_id: relay.node_id(),
        addr: testnet.addrs[0],
        link_key: other.link_key().clone(),
    });
    let wrong_id = DirectoryPeer::Pinned(PinnedPeer {
        node_id: other.node_id(),
        addr: testnet.addrs[0],
        link_key: relay.link_key().clone(),
    });
    let result = timeout(LONG, client.handle().directory_circuit(wrong_id))
        .await
        .unwrap();
    assert!(result.is_err(), "a relay answered for another relay's id");
    // The UDP handshake is made to the link key; QUIC checks the id and needs no link key.
    if transport == TransportKind::Udp {
        let result = timeout(LONG, client.handle().directory_circuit(wrong_key))
            .await
            .unwrap();
        assert!(
            result.is_err(),
            "a link handshake succeeded with the wrong key"
        );
    }
    drop(impostor);
    testnet.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claimed_addresses_do_not_reach_over_quic() {
    claimed_addresses_do_not_reach(TransportKind::Quic, 62).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claimed_addresses_do_not_reach_over_udp() {
    claimed_addresses_do_not_reach(TransportKind::Udp, 63).await;
}

/// A node whose owner does not read directory streams refuses them once the queue is
/// gone, with a reset the client sees.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unserved_directory_streams_are_refused() {
    let mut testnet = LocalTestnet::start(LocalTestnetSpec {
        nodes: 2,
        net: 64,
        ..LocalTestnetSpec::default()
    })
    .await
    .unwrap();
    drop(testnet.nodes[0].as_mut().unwrap().take_directory_streams());
    let relay = testnet.directory.get(&testnet.ids[0]).unwrap().clone();
    let client = bare_client(TransportKind::Quic, 64);
    let err = timeout(
        LONG,
        client
            .handle()
            .directory_stream(DirectoryPeer::Relay(Box::new(relay))),
    )
    .await
    .unwrap()
    .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::ResourceLimit, "{err}");
    testnet.shutdown().await;
}

/// A relay that claims another relay's address and reaches the tester first, over a link
/// from its real address, still fails: the circuit runs over that link, but the link does
/// not come from the advertised address.
async fn an_impostor_that_connected_first_is_refused(transport: TransportKind, net: u8) {
    let testnet = LocalTestnet::start(LocalTestnetSpec {
        nodes: 2,
        net,
        transport,
        ..LocalTestnetSpec::default()
    })
    .await
    .unwrap();
    let now = nyx_node::unix_now();
    let validity = Duration::from_secs(3600);
    let at = |host: u8| SocketAddr::from((Ipv4Addr::new(127, 0, net, host), 0));
    let bind = |host: u8| bind_relay(transport, at(host), None);
    // The tester, with a descriptor the impostor can reach it by.
    let (tester, tester_desc) = start_tester(transport, at(60));
    // The impostor runs at its own address but publishes node 0's.
    let (impostor, impostor_id) = bind(61);
    let mut claim = impostor
        .descriptor_builder("impostor", 100, now, validity)
        .unwrap();
    match transport {
        TransportKind::Quic => claim.quic_addr = Some(testnet.addrs[0]),
        TransportKind::Udp => claim.udp_addr = Some(testnet.addrs[0]),
    }
    let claim = claim.sign(&impostor_id).unwrap();
    let impostor = impostor.start(Directory::default()).unwrap();
    let impostor_handle = impostor.handle();
    let first = impostor_handle.directory_circuit(DirectoryPeer::Relay(Box::new(tester_desc)));
    let link = timeout(LONG, first).await.unwrap().unwrap();
    let handle = tester.handle();
    let probe = handle.directory_circuit(DirectoryPeer::Relay(Box::new(claim)));
    let err = timeout(LONG, probe).await.unwrap().unwrap_err();
    assert!(err.to_string().contains("advertises"), "{err}");
    drop(link);
    testnet.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_impostor_that_connected_first_is_refused_over_quic() {
    an_impostor_that_connected_first_is_refused(TransportKind::Quic, 65).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_impostor_that_connected_first_is_refused_over_udp() {
    an_impostor_that_connected_first_is_refused(TransportKind::Udp, 66).await;
}

/// A relay that listens on `0.0.0.0` and advertises one of its addresses reaches the tester
/// first (its link comes from the address the kernel picks, not the advertised one): the
/// tester still reaches it at the advertised address, over a new link, and lists it.
async fn a_relay_that_connected_first_from_elsewhere_is_reached(transport: TransportKind, net: u8) {
    let now = nyx_node::unix_now();
    let validity = Duration::from_secs(3600);
    let tester_at = SocketAddr::from((Ipv4Addr::new(127, 0, net, 60), 0));
    let (tester, tester_desc) = start_tester(transport, tester_at);
    // Bound to every address; its links to 127.0.net.60 leave from 127.0.0.1.
    let advertised = SocketAddr::from((Ipv4Addr::new(127, 0, net, 61), 0));
    let (relay, relay_id) = bind_relay(
        transport,
        SocketAddr::from((Ipv4Addr::UNSPECIFIED, 0)),
        Some(advertised),
    );
    let relay_desc = relay
        .descriptor_builder("relay", 100, now, validity)
        .unwrap()
        .sign(&relay_id)
        .unwrap();
    assert_eq!(relay_desc.addr(transport).unwrap().ip(), advertised.ip());
    let relay = relay.start(Directory::default()).unwrap();
    let relay_handle = relay.handle();
    let upload = relay_handle.directory_circuit(DirectoryPeer::Relay(Box::new(tester_desc)));
    let first = timeout(LONG, upload).await.unwrap().unwrap();
    let tester_handle = tester.handle();
    let probe = tester_handle.directory_circuit(DirectoryPeer::Relay(Box::new(relay_desc)));
    let circuit = timeout(LONG, probe).await.unwrap();
    assert!(circuit.is_ok(), "{:?}", circuit.err());
    drop(first);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relay_that_connected_first_from_elsewhere_is_reached_over_quic() {
    a_relay_that_connected_first_from_elsewhere_is_reached(TransportKind::Quic, 142).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relay_that_connected_first_from_elsewhere_is_reached_over_udp() {
    a_relay_that_connected_first_from_elsewhere_is_reached(TransportKind::Udp, 143).await;
}
