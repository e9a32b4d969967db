//! The testnet's demo web server on loopback: a page, and a file whose copy can be checked.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use super::free_or_fallback;
use crate::commands::Failure;

/// A tiny HTTP/1.0 server on loopback: `/` is a page, `/file` 1 MiB of bytes.
pub(super) async fn start_demo_server(port: u16) -> Result<SocketAddr, Failure> {
    let port = free_or_fallback(port).await;
    let listener = TcpListener::bind(("127.0.0.1", port))
        .await
        .map_err(|e| Failure::Call(format!("demo web server: {e}")))?;
    let addr = listener
        .local_addr()
        .map_err(|e| Failure::Call(format!("demo web server: {e}")))?;
    tokio::spawn(async move {
        while let Ok((mut conn, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut head = vec![0u8; 4096];
                let n = match tokio::time::timeout(Duration::from_secs(10), conn.read(&mut head))
                    .await
                {
                    Ok(Ok(n)) => n,
                    _ => return,
                };
                let request = String::from_utf8_lossy(&head[..n]);
                let path = request.split_whitespace().nth(1).unwrap_or("/");
                let (status, body) = match path {
                    "/" => ("200 OK", DEMO_PAGE.as_bytes().to_vec()),
                    "/file" => ("200 OK", demo_file()),
                    _ => ("404 Not Found", b"not found\n".to_vec()),
                };
                let header = format!(
                    "HTTP/1.0 {status}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                    body.len()
                );
                let _ = conn.write_all(header.as_bytes()).await;
                let _ = conn.write_all(&body).await;
                let _ = conn.shutdown().await;
            });
        }
    });
    Ok(addr)
}

const DEMO_PAGE: &str = "<!doctype html>\n<title>NyxNet testnet</title>\n\
<h1>Hello from the NyxNet testnet</h1>\n\
<p>This page crossed three relays, each hop keyed by X25519 + ML-KEM-768.</p>\n";

/// 1 MiB of a fixed pseudo-random sequence (xorshift), so a copy can be checked.
pub(super) fn demo_file() -> Vec<u8> {
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    (0..1 << 20)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}
