//! The fault shim between two real UDP sockets on 127.0.0.1.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::time::Duration;

use nyx_transport::fault::{FaultConfig, FaultySocket};
use tokio::net::UdpSocket;

#[tokio::test]
async fn loss_reordering_and_duplication_between_real_sockets() {
    let config = FaultConfig {
        loss: 0.10,
        duplicate: 0.05,
        reorder: 0.20,
        reorder_window: Duration::from_millis(5),
        delay: Duration::from_millis(1),
        seed: 42,
    };
    let rx = FaultySocket::new(UdpSocket::bind("127.0.0.1:0").await.unwrap(), config);
    let tx = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let to = rx.local_addr().unwrap();
    const N: u32 = 2000;
    let sender = async {
        for i in 0..N {
            tx.send_to(&i.to_be_bytes(), to).await.unwrap();
            if i % 50 == 0 {
                tokio::time::sleep(Duration::from_millis(1)).await; // do not overrun the socket buffer
            }
        }
    };
    let receiver = async {
        let mut got = Vec::new();
        let mut buf = [0u8; 16];
        while let Ok(Ok((n, _))) =
            tokio::time::timeout(Duration::from_millis(300), rx.recv_from(&mut buf)).await
        {
            assert_eq!(n, 4);
            got.push(u32::from_be_bytes(buf[..4].try_into().unwrap()));
        }
        got
    };
    let ((), got) = tokio::join!(sender, receiver);
    let stats = rx.stats().await;
    assert_eq!(
        stats.seen,
        u64::from(N),
        "the kernel delivered everything on loopback"
    );
    assert_eq!(
        got.len() as u64,
        stats.seen - stats.dropped + stats.duplicated
    );
    assert!(stats.dropped > 120 && stats.dropped < 280, "{stats:?}");
    let inversions = got.windows(2).filter(|w| w[1] < w[0]).count();
    assert!(inversions > 0, "no reordering seen");
    let mut unique = got.clone();
    unique.sort_unstable();
    unique.dedup();
    assert!(unique.len() < got.len(), "no duplicate seen");
}
