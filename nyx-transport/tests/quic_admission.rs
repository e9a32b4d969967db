//! Incoming QUIC attempts are admitted before any handshake work: under load a dialler must
//! prove its address with a Retry (quinn's clients do), one source prefix cannot take every
//! handshake, and a dialler from elsewhere still gets a link.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use nyx_core::rate::Quota;
use nyx_crypto::identity::IdentityKey;
use nyx_transport::admission::AdmissionConfig;
use nyx_transport::quic::{QuicConfig, QuicEndpoint};

fn relay(seed: u8, ip: &str, admission: AdmissionConfig) -> (Arc<IdentityKey>, Arc<QuicEndpoint>) {
    let id = Arc::new(IdentityKey::from_seed(&[seed; 32]));
    let addr: SocketAddr = format!("{ip}:0").parse().unwrap();
    let config = QuicConfig {
        admission,
        ..QuicConfig::default()
    };
    let ep = QuicEndpoint::bind(addr, id.clone(), config).unwrap();
    (id, Arc::new(ep))
}

fn client(ip: &str) -> QuicEndpoint {
    let addr: SocketAddr = format!("{ip}:0").parse().unwrap();
    QuicEndpoint::bind_client(addr, QuicConfig::default()).unwrap()
}

/// Accept and complete every admitted attempt, in the background.
fn serve(ep: Arc<QuicEndpoint>) {
    tokio::spawn(async move {
        while let Some(incoming) = ep.accept_incoming().await {
            tokio::spawn(async move {
                if let Ok(link) = incoming.complete().await {
                    // Keep the link open until the peer closes it.
                    link.raw_connection().closed().await;
                }
            });
        }
    });
}

#[tokio::test]
async fn under_load_a_dialler_proves_its_address_first_and_gets_its_link() {
    let always = AdmissionConfig {
        retry_threshold: 0,
        ..AdmissionConfig::default()
    };
    let (id, r) = relay(1, "127.0.70.1", always);
    serve(r.clone());
    let c = client("127.0.70.2");
    let link = tokio::time::timeout(
        Duration::from_secs(20),
        c.connect(id.node_id(), r.local_addr().unwrap()),
    )
    .await
    .unwrap()
    .unwrap();
    assert_eq!(link.peer(), id.node_id());
    let stats = r.admission_stats();
    assert_eq!(stats.retries, 1, "{stats:?}");
    assert_eq!(stats.accepted, 1, "{stats:?}");
}

#[tokio::test]
async fn one_prefix_gets_its_share_and_a_dialler_from_elsewhere_still_gets_a_link() {
    let strict = AdmissionConfig {
        per_source: Quota::per_second(3).unwrap(),
        // Loopback is this test's network.
        loopback_unlimited: false,
        ..AdmissionConfig::default()
    };
    let (id, r) = relay(2, "127.0.71.1", strict);
    serve(r.clone());
    let to = r.local_addr().unwrap();
    // Eight diallers from one /24 at once: three handshakes; the other five are asked to
    // prove their address (a Retry), and of those three more get a handshake, from the
    // prefix's budget for validated attempts; the last two are dropped unanswered. Each
    // dial gets 600 ms: a dropped dialler resends its Initial after about a second, when
    // the prefix's budget (3 a second) has come back and it would get its handshake.
    let mut attempts = tokio::task::JoinSet::new();
    for h in 2..10 {
        let c = client(&format!("127.0.71.{h}"));
        let node = id.node_id();
        attempts.spawn(async move {
            let dial = c.connect(node, to);
            let linked = tokio::time::timeout(Duration::from_millis(600), dial).await;
            // The endpoint lives until the attempt is over.
            drop(c);
            matches!(linked, Ok(Ok(_)))
        });
    }
    let linked = attempts.join_all().await.into_iter().filter(|l| *l).count();
    assert_eq!(linked, 6);
    let stats = r.admission_stats();
    assert!(stats.retries >= 5, "{stats:?}");
    assert!(stats.refused_source_rate >= 2, "{stats:?}");
    // Another network is not held up.
    let other = client("127.0.72.2");
    let link = tokio::time::timeout(Duration::from_secs(20), other.connect(id.node_id(), to))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(link.peer(), id.node_id());
}

/// A prefix's budgets come back with time: the relay reads its clock for every attempt.
#[tokio::test]
async fn a_prefix_that_spent_its_budget_gets_links_again_a_second_later() {
    let strict = AdmissionConfig {
        per_source: Quota::per_second(1).unwrap(),
        loopback_unlimited: false,
        ..AdmissionConfig::default()
    };
    let (id, r) = relay(3, "127.0.73.1", strict);
    serve(r.clone());
    let (node, to) = (id.node_id(), r.local_addr().unwrap());
    let dial = |host: u8, wait: Duration| {
        let c = client(&format!("127.0.73.{host}"));
        async move {
            let linked = tokio::time::timeout(wait, c.connect(node, to)).await;
            matches!(linked, Ok(Ok(_)))
        }
    };
    // One unvalidated and one validated attempt a second from the prefix: dial until one
    // is refused (well within the second; a refused dial waits for QUIC's resend).
    let mut host = 2;
    while dial(host, Duration::from_millis(400)).await {
        host += 1;
        assert!(host < 6, "the prefix's budget was never spent");
    }
    tokio::time::sleep(Duration::from_millis(1200)).await;
    assert!(
        dial(host + 1, Duration::from_secs(5)).await,
        "the budget did not come back"
    );
}
