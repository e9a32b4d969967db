//! Onion keys rotate while nodes run: in fast time (a 3-second period, 2 seconds of overlap)
//! circuits keep being built and streams keep working through several rotations, without
//! restarting any node. Before nodes rotated their keys, every CREATE failed once the
//! start-up key expired (5 seconds here, 27 hours with the default policy).

#![allow(clippy::unwrap_used)]

use std::time::Duration;

use nyx_crypto::onion_keys::RotationPolicy;
use nyx_node::testing::{LocalTestnet, LocalTestnetSpec};
use nyx_node::{IsolationGroup, NodeEvent};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::time::{Instant, sleep, timeout};

/// Generous bound for liveness only (never speed).
const LONG: Duration = Duration::from_secs(60);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn circuits_keep_being_built_across_onion_key_rotations() {
    let rotation = RotationPolicy {
        period: Duration::from_secs(3),
        overlap: Duration::from_secs(2),
    };
    let testnet = LocalTestnet::start(LocalTestnetSpec {
        net: 125,
        rotation,
        ..LocalTestnetSpec::default()
    })
    .await
    .unwrap();
    let client = testnet.client().unwrap();
    let mut rotations = testnet.node(1).unwrap().handle().subscribe();

    let echo = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let target = echo.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut conn, _)) = echo.accept().await {
            tokio::spawn(async move {
                let (mut r, mut w) = conn.split();
                let _ = tokio::io::copy(&mut r, &mut w).await;
            });
        }
    });

    // Twelve seconds: four periods, so the start-up key and its first two successors expire.
    let end = Instant::now() + Duration::from_secs(12);
    let mut round = 0u32;
    while Instant::now() < end {
        round += 1;
        // A new isolation group each round: a new circuit, so a new CREATE with the onion
        // keys the client knows now.
        let group = IsolationGroup::new(format!("round-{round}"));
        let mut stream = timeout(LONG, client.connect_isolated(target, &group))
            .await
            .unwrap()
            .unwrap_or_else(|e| panic!("round {round}: {e}"));
        let message = format!("round {round}");
        stream.write_all(message.as_bytes()).await.unwrap();
        let mut back = vec![0u8; message.len()];
        timeout(LONG, stream.read_exact(&mut back))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(back, message.as_bytes());
        sleep(Duration::from_millis(500)).await;
    }
    assert!(round >= 10, "only {round} rounds");

    let mut seen = 0;
    let mut last = None;
    while let Ok(event) = rotations.try_recv() {
        if let NodeEvent::OnionKeysRotated { certs } = event {
            seen += 1;
            last = Some(certs);
        }
    }
    // What a subscriber that lagged asks for is what the last event said (asked again if
    // a rotation came in between).
    let handle = testnet.node(1).unwrap().handle();
    loop {
        let now = handle.onion_certs().await.unwrap();
        let mut newer = false;
        while let Ok(event) = rotations.try_recv() {
            if let NodeEvent::OnionKeysRotated { certs } = event {
                seen += 1;
                last = Some(certs);
                newer = true;
            }
        }
        if !newer {
            assert_eq!(Some(now), last);
            break;
        }
    }
    assert!(
        seen >= 3,
        "node 1 rotated its onion keys {seen} times in 12 s"
    );
    assert_ne!(testnet.directory_now(), testnet.directory);
}
