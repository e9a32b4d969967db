//! A QUIC endpoint holds at most `max_links` links. Keep-alive keeps an idle link open, so
//! without this bound a stranger within its handshake budget could hold links for ever. A
//! full table of links in use refuses a newcomer; once a link has gone quiet, a newcomer
//! makes room by closing it, and a link that keeps sending stays.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use nyx_crypto::identity::IdentityKey;
use nyx_transport::Error;
use nyx_transport::link::drive_quic_link;
use nyx_transport::quic::{MIN_QUIET_TO_EVICT, QuicConfig, QuicEndpoint, QuicLink};
use tokio::sync::mpsc;
use tokio::time::timeout;

/// Generous bound for liveness only (never speed): CI machines are shared and slow.
const LONG: Duration = Duration::from_secs(30);

fn client(ip: &str) -> QuicEndpoint {
    let addr: SocketAddr = format!("{ip}:0").parse().unwrap();
    QuicEndpoint::bind_client(addr, QuicConfig::default()).unwrap()
}

/// Complete every admitted attempt, drive each link (cells read and dropped), and report
/// each outcome.
fn serve(ep: Arc<QuicEndpoint>) -> mpsc::Receiver<Result<Arc<QuicLink>, Error>> {
    let (tx, rx) = mpsc::channel(16);
    tokio::spawn(async move {
        while let Some(incoming) = ep.accept_incoming().await {
            let tx = tx.clone();
            tokio::spawn(async move {
                let outcome = incoming.complete().await;
                if let Ok(link) = &outcome {
                    let (to, mut sink) = mpsc::channel(64);
                    tokio::spawn(drive_quic_link(link.clone(), to));
                    tokio::spawn(async move { while sink.recv().await.is_some() {} });
                }
                let _ = tx.send(outcome).await;
            });
        }
    });
    rx
}

async fn dial(c: &QuicEndpoint, id: &IdentityKey, to: SocketAddr) -> Arc<QuicLink> {
    timeout(LONG, c.connect(id.node_id(), to))
        .await
        .unwrap()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_table_refuses_while_links_are_in_use_then_the_quiet_one_makes_room() {
    let id = Arc::new(IdentityKey::from_seed(&[7; 32]));
    let config = QuicConfig {
        max_links: 2,
        ..QuicConfig::default()
    };
    let relay =
        Arc::new(QuicEndpoint::bind("127.0.74.1:0".parse().unwrap(), id.clone(), config).unwrap());
    let to = relay.local_addr().unwrap();
    let mut accepted = serve(relay.clone());

    let (ca, cb, cc, cd) = (
        client("127.0.74.2"),
        client("127.0.74.3"),
        client("127.0.74.4"),
        client("127.0.74.5"),
    );
    let quiet = dial(&ca, &id, to).await;
    accepted.recv().await.unwrap().unwrap();
    let busy = dial(&cb, &id, to).await;
    accepted.recv().await.unwrap().unwrap();

    // Both links were just made: nothing may go, so the third is refused and closed.
    let refused = dial(&cc, &id, to).await;
    let outcome = timeout(LONG, accepted.recv()).await.unwrap().unwrap();
    assert!(matches!(outcome, Err(Error::LinksFull)), "{outcome:?}");
    timeout(LONG, refused.raw_connection().closed())
        .await
        .unwrap();
    let stats = relay.link_stats();
    assert_eq!((stats.open, stats.refused, stats.evicted), (2, 1, 0));

    // One link keeps sending; the other goes quiet for longer than protects it.
    let deadline = tokio::time::Instant::now() + MIN_QUIET_TO_EVICT + Duration::from_secs(1);
    while tokio::time::Instant::now() < deadline {
        busy.send_cell(Bytes::from_static(b"\x00\x00\x00\x07 still here"))
            .unwrap();
        tokio::time::sleep(Duration::from_millis(250)).await;
    }

    // A newcomer gets a link; the quiet link made room and the busy one stayed.
    let newcomer = dial(&cd, &id, to).await;
    timeout(LONG, accepted.recv())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    timeout(LONG, quiet.raw_connection().closed())
        .await
        .unwrap();
    assert!(!busy.is_closed());
    assert!(!newcomer.is_closed());
    let stats = relay.link_stats();
    assert_eq!((stats.open, stats.refused, stats.evicted), (2, 1, 1));
}
