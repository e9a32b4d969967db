//! A node's life ends with the last thing the application holds: a `Node` dropped without
//! `shutdown()` (and with no handle or stream left) ends its tasks and releases its socket;
//! a handle still held keeps it running.

#![allow(clippy::unwrap_used)]

use std::net::UdpSocket;
use std::time::Duration;

use nyx_core::config::TransportKind;
use nyx_node::testing::{LocalTestnet, LocalTestnetSpec, WebServer};
use nyx_node::{ErrorKind, ExitRequirement, Node, NodeSettings};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::time::{Instant, sleep, timeout};

/// Generous bound for liveness only (never speed): CI machines are shared and slow.
const LONG: Duration = Duration::from_secs(60);

/// Wait until `check` holds, or fail after [`LONG`] with `what`.
async fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + LONG;
    while !check() {
        assert!(Instant::now() < deadline, "{what}");
        sleep(Duration::from_millis(50)).await;
    }
}

/// Start a client on a known address in a runtime of its own (so that its tasks can be
/// counted apart from the relays'), move a page through it, then drop everything the
/// application holds without `shutdown()`.
async fn dropped_node_releases_everything(transport: TransportKind, net: u8) {
    let testnet = LocalTestnet::start(LocalTestnetSpec {
        net,
        transport,
        ..LocalTestnetSpec::default()
    })
    .await
    .unwrap();
    let site = WebServer::page("lifecycle").await.unwrap();
    let client_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let client = {
        let _in_client_rt = client_rt.enter();
        testnet.client().unwrap()
    };
    let addr = client.local_addr();
    let target = site.addr();
    let page = client_rt
        .spawn(async move {
            let mut stream = timeout(LONG, client.connect(target))
                .await
                .unwrap()
                .unwrap();
            stream.write_all(b"GET / HTTP/1.0\r\n\r\n").await.unwrap();
            let mut page = String::new();
            stream.read_to_string(&mut page).await.unwrap();
            // The address is taken while the node runs.
            assert!(
                UdpSocket::bind(addr).is_err(),
                "{addr} is bound by the node"
            );
            assert!(
                tokio::runtime::Handle::current()
                    .metrics()
                    .num_alive_tasks()
                    > 1,
                "the client runs tasks"
            );
            // Dropped here: the stream, then the node, without shutdown().
            page
        })
        .await
        .unwrap();
    assert!(page.ends_with("lifecycle"), "{page}");

    eventually("the client's socket is released", || {
        UdpSocket::bind(addr).is_ok()
    })
    .await;
    let metrics = client_rt.metrics();
    eventually("every task of the client ends", || {
        metrics.num_alive_tasks() == 0
    })
    .await;
    client_rt.shutdown_background();
    drop(testnet);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_quic_node_releases_its_socket_and_tasks() {
    dropped_node_releases_everything(TransportKind::Quic, 120).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_udp_node_releases_its_socket_and_tasks() {
    dropped_node_releases_everything(TransportKind::Udp, 121).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handle_keeps_the_node_running_until_it_is_dropped_too() {
    let testnet = LocalTestnet::start(LocalTestnetSpec {
        net: 122,
        ..LocalTestnetSpec::default()
    })
    .await
    .unwrap();
    let client = testnet.client().unwrap();
    let addr = client.local_addr();
    let handle = client.handle();
    drop(client);
    // Still running: the handle answers, and builds circuits.
    sleep(Duration::from_millis(200)).await;
    handle.stats().await.unwrap();
    let circuit = timeout(
        LONG,
        handle.build_circuit(nyx_overlay::path::ExitRequirement::Any),
    )
    .await
    .unwrap()
    .unwrap();
    assert_eq!(circuit.path().len(), 3);
    drop(circuit);
    let second = handle.clone();
    drop(handle);
    // A clone is a handle too: the node is still up.
    second.stats().await.unwrap();
    drop(second);
    eventually("the last handle's drop releases the socket", || {
        UdpSocket::bind(addr).is_ok()
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_node_answers_node_stopped() {
    let testnet = LocalTestnet::start(LocalTestnetSpec {
        net: 123,
        nodes: 4,
        ..LocalTestnetSpec::default()
    })
    .await
    .unwrap();
    let client = testnet.client().unwrap();
    let handle = client.handle();
    let mut before = handle.subscribe();
    client.shutdown().await;
    let err = handle.stats().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NodeStopped, "{err}");
    // Subscribers see the end instead of waiting forever, also while a handle is held.
    let end = timeout(LONG, async {
        loop {
            match before.recv().await {
                Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
                Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) | Ok(_) => {}
            }
        }
    });
    end.await.unwrap();
    let mut after = handle.subscribe();
    assert!(matches!(
        after.recv().await,
        Err(tokio::sync::broadcast::error::RecvError::Closed)
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_exit_closes_its_connections_to_targets() {
    let mut testnet = LocalTestnet::start(LocalTestnetSpec {
        net: 124,
        ..LocalTestnetSpec::default()
    })
    .await
    .unwrap();
    // A target that holds each connection open until the other side closes it.
    let target = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = target.local_addr().unwrap();
    let (closed_tx, mut closed_rx) = tokio::sync::mpsc::channel(1);
    tokio::spawn(async move {
        while let Ok((mut conn, _)) = target.accept().await {
            let closed = closed_tx.clone();
            tokio::spawn(async move {
                let mut buf = [0u8; 1024];
                while let Ok(n) = conn.read(&mut buf).await {
                    if n == 0 {
                        break;
                    }
                }
                let _ = closed.send(()).await;
            });
        }
    });
    let client = testnet.client().unwrap();
    let mut stream = timeout(LONG, client.connect(addr)).await.unwrap().unwrap();
    stream.write_all(b"hello").await.unwrap();
    stream.flush().await.unwrap();
    let exit = *stream.path().last().unwrap();
    let i = testnet.index(&exit).unwrap();
    let exit_node = testnet.nodes[i].take().unwrap();
    exit_node.shutdown().await;
    timeout(LONG, closed_rx.recv())
        .await
        .expect("the stopped exit's connection to the target closes")
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_started_with_saved_guards_enters_through_them() {
    let testnet = LocalTestnet::start(LocalTestnetSpec {
        net: 126,
        nodes: 6,
        ..LocalTestnetSpec::default()
    })
    .await
    .unwrap();
    let first = testnet.client().unwrap();
    let circuit = timeout(LONG, first.handle().build_circuit(ExitRequirement::Any))
        .await
        .unwrap()
        .unwrap();
    let saved = first.handle().guards().await.unwrap();
    assert!(!saved.is_empty());
    assert_eq!(circuit.path()[0], saved[0].node);
    drop(circuit);
    first.shutdown().await;

    // "Restarted": a new node with the same saved guards.
    let again = Node::builder()
        .settings(NodeSettings {
            guards: saved.clone(),
            ..testnet.spec.settings.clone()
        })
        .directory(testnet.directory_now())
        .build()
        .unwrap();
    assert_eq!(again.handle().guards().await.unwrap(), saved);
    for _ in 0..3 {
        let circuit = timeout(LONG, again.handle().build_circuit(ExitRequirement::Any))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(circuit.path()[0], saved[0].node);
        circuit.close().await;
    }
}
