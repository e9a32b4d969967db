//! The link pool between real QUIC endpoints on 127.0.0.x.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use nyx_core::NodeId;
use nyx_crypto::identity::IdentityKey;
use nyx_transport::Error;
use nyx_transport::pool::{LinkPool, PoolConfig};
use nyx_transport::quic::{QuicConfig, QuicEndpoint};

fn endpoint(seed: u8, addr: &str) -> (NodeId, Arc<QuicEndpoint>) {
    let id = Arc::new(IdentityKey::from_seed(&[seed; 32]));
    let node = id.node_id();
    let addr: SocketAddr = addr.parse().unwrap();
    (
        node,
        Arc::new(QuicEndpoint::bind(addr, id, QuicConfig::default()).unwrap()),
    )
}

/// A listener that accepts links (keeping them open) and counts handshakes.
fn listen(ep: Arc<QuicEndpoint>) -> Arc<AtomicUsize> {
    let count = Arc::new(AtomicUsize::new(0));
    let c = count.clone();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Some(link) = ep.accept().await {
            if let Ok(link) = link {
                c.fetch_add(1, Ordering::SeqCst);
                held.push(link);
            }
        }
    });
    count
}

#[tokio::test]
async fn one_handshake_serves_many_requests_and_concurrent_dials_merge() {
    let (_, a) = endpoint(1, "127.0.0.2:0");
    let (b, b_ep) = endpoint(2, "127.0.0.3:0");
    let b_addr = b_ep.local_addr().unwrap();
    let accepted = listen(b_ep);
    let pool = Arc::new(LinkPool::new(a, PoolConfig::default()));
    // Ten callers at once: one handshake.
    let calls: Vec<_> = (0..10)
        .map(|_| {
            let p = pool.clone();
            tokio::spawn(async move { p.get(b, b_addr).await })
        })
        .collect();
    let mut links = Vec::new();
    for c in calls {
        links.push(c.await.unwrap().unwrap());
    }
    assert!(links.windows(2).all(|w| Arc::ptr_eq(&w[0], &w[1])));
    for _ in 0..100 {
        assert!(Arc::ptr_eq(&pool.get(b, b_addr).await.unwrap(), &links[0]));
    }
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(accepted.load(Ordering::SeqCst), 1);
    let stats = pool.stats();
    assert_eq!(stats.dials, 1);
    assert_eq!(stats.merged + stats.reused, 109, "{stats:?}");
}

#[tokio::test]
async fn idle_links_close_and_the_cap_evicts_the_least_recently_used() {
    let (_, a) = endpoint(1, "127.0.0.2:0");
    let mut peers = Vec::new();
    for (i, ip) in ["127.0.0.3", "127.0.0.4", "127.0.0.5"].iter().enumerate() {
        let (id, ep) = endpoint(10 + i as u8, &format!("{ip}:0"));
        let addr = ep.local_addr().unwrap();
        listen(ep);
        peers.push((id, addr));
    }
    let config = PoolConfig {
        max_links: 2,
        idle_timeout: Duration::from_millis(200),
        ..PoolConfig::default()
    };
    let pool = LinkPool::new(a, config);
    let first = pool.get(peers[0].0, peers[0].1).await.unwrap();
    pool.get(peers[1].0, peers[1].1).await.unwrap();
    pool.get(peers[2].0, peers[2].1).await.unwrap();
    assert_eq!(pool.len(), 2);
    assert!(
        first.is_closed(),
        "the least recently used link was evicted"
    );
    assert_eq!(pool.stats().evicted, 1);

    tokio::time::sleep(Duration::from_millis(250)).await;
    pool.sweep();
    assert_eq!(pool.len(), 0);
    assert_eq!(pool.stats().idle_closed, 2);
    // A closed peer is simply dialled again.
    pool.get(peers[2].0, peers[2].1).await.unwrap();
    assert_eq!(pool.stats().dials, 4);
}

#[tokio::test]
async fn a_restarted_peer_is_redialled_and_an_absent_one_backs_off() {
    let (_, a) = endpoint(1, "127.0.0.2:0");
    let (b, b_ep) = endpoint(2, "127.0.0.3:0");
    let b_addr = b_ep.local_addr().unwrap();
    listen(b_ep.clone());
    let pool = LinkPool::new(a, PoolConfig::default());
    let old = pool.get(b, b_addr).await.unwrap();
    // B restarts (on a new address: the old socket lingers while quinn drains it).
    b_ep.close();
    b_ep.wait_idle().await;
    drop(b_ep);
    for _ in 0..50 {
        if old.is_closed() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(old.is_closed(), "the old link noticed the peer left");
    let id = Arc::new(IdentityKey::from_seed(&[2; 32]));
    let b_again = Arc::new(
        QuicEndpoint::bind("127.0.0.5:0".parse().unwrap(), id, QuicConfig::default()).unwrap(),
    );
    let b_addr = b_again.local_addr().unwrap();
    listen(b_again);
    let new = pool.get(b, b_addr).await.unwrap();
    assert!(!Arc::ptr_eq(&old, &new) && !new.is_closed());

    // Nobody at this address: the dial fails, and the next request backs off.
    let (c, c_ep) = endpoint(3, "127.0.0.4:0");
    let c_addr = c_ep.local_addr().unwrap();
    c_ep.close();
    drop(c_ep);
    let quick = QuicConfig {
        idle_timeout: Duration::from_millis(300),
        ..QuicConfig::default()
    };
    let (_, a2) = {
        let id = Arc::new(IdentityKey::from_seed(&[1; 32]));
        (
            id.node_id(),
            Arc::new(QuicEndpoint::bind("127.0.0.2:0".parse().unwrap(), id, quick).unwrap()),
        )
    };
    let pool = LinkPool::new(
        a2,
        PoolConfig {
            backoff_initial: Duration::from_secs(5),
            ..PoolConfig::default()
        },
    );
    assert!(matches!(pool.get(c, c_addr).await, Err(Error::Link { .. })));
    match pool.get(c, c_addr).await {
        Err(Error::Backoff { retry_in }) => assert!(retry_in > Duration::from_secs(3)),
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn nodes_dialling_each_other_at_once_keep_the_same_single_link() {
    let (a_id, a_ep) = endpoint(1, "127.0.0.2:0");
    let (b_id, b_ep) = endpoint(2, "127.0.0.3:0");
    let (a_addr, b_addr) = (a_ep.local_addr().unwrap(), b_ep.local_addr().unwrap());
    let pool_a = Arc::new(LinkPool::new(a_ep.clone(), PoolConfig::default()));
    let pool_b = Arc::new(LinkPool::new(b_ep.clone(), PoolConfig::default()));
    // Each node puts the links it accepts into its pool.
    for (ep, pool) in [
        (a_ep.clone(), pool_a.clone()),
        (b_ep.clone(), pool_b.clone()),
    ] {
        tokio::spawn(async move {
            while let Some(incoming) = ep.accept_incoming().await {
                let pool = pool.clone();
                tokio::spawn(async move {
                    if let Ok(link) = incoming.complete().await {
                        pool.insert_accepted(link);
                    }
                });
            }
        });
    }
    let (ab, ba) = tokio::join!(pool_a.get(b_id, b_addr), pool_b.get(a_id, a_addr));
    ab.unwrap();
    ba.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let ab = pool_a.get(b_id, b_addr).await.unwrap();
    let ba = pool_b.get(a_id, a_addr).await.unwrap();
    assert!(!ab.is_closed() && !ba.is_closed());
    // The surviving link is the one the smaller NodeId dialled, on both sides.
    let a_smaller = a_id < b_id;
    assert_eq!(ab.dialled_by_us(), a_smaller);
    assert_eq!(ba.dialled_by_us(), !a_smaller);
    ab.send_cell(bytes::Bytes::from_static(b"same link"))
        .unwrap();
    assert_eq!(&ba.recv_cell().await.unwrap()[..], b"same link");
}
