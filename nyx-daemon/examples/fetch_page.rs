//! Fetch a web page through NyxNet, all in one process: five relays on 127.0.0.x (a local
//! testnet whose exits allow loopback targets), a tiny HTTP server on 127.0.0.1, and an
//! embedded client node that opens a stream to the server over a 3-hop circuit.
//!
//! ```text
//! cargo run --release -p nyx-daemon --example fetch_page
//! ```

use std::net::SocketAddr;

use nyx_core::config::TransportKind;
use nyx_daemon::node::Node;
use nyx_daemon::node::testnet::{LocalTestnet, LocalTestnetSpec};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// The page the local server serves.
pub(crate) const PAGE: &str =
    "<html><body><h1>Hello from the other side of three hops</h1></body></html>\n";

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let response = fetch().await?;
    print!("{response}");
    Ok(())
}

/// Start the network, the server and the client; fetch the page; stop everything. Returns
/// the HTTP response as text.
pub(crate) async fn fetch() -> Result<String, Box<dyn std::error::Error>> {
    let testnet = LocalTestnet::start(
        LocalTestnetSpec {
            net: 90,
            ..LocalTestnetSpec::default()
        },
        TransportKind::Quic,
    )
    .await?;
    let server = serve_page().await?;

    // The embedding API: a node that knows the relays, used like a socket factory.
    let client = Node::builder()
        .directory(testnet.directory.clone())
        .build()?;
    let mut stream = client.connect(&server.to_string()).await?;
    let path: Vec<String> = stream.path().iter().map(|id| format!("{id}")).collect();
    eprintln!("circuit: {}", path.join(" -> "));

    stream
        .write_all(b"GET / HTTP/1.0\r\nHost: localhost\r\n\r\n")
        .await?;
    let mut response = String::new();
    stream.read_to_string(&mut response).await?;
    drop(stream);

    client.shutdown().await;
    for node in testnet.nodes.into_iter().flatten() {
        node.shutdown().await;
    }
    Ok(response)
}

/// An HTTP/1.0 server on 127.0.0.1 that answers every request with [`PAGE`].
async fn serve_page() -> std::io::Result<SocketAddr> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move {
        while let Ok((mut conn, _)) = listener.accept().await {
            tokio::spawn(async move {
                // Read the request head, then answer and close.
                let mut head = Vec::new();
                let mut buf = [0u8; 1024];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match conn.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                let reply = format!(
                    "HTTP/1.0 200 OK\r\nContent-Type: text/html\r\nContent-Length: {}\r\n\r\n{PAGE}",
                    PAGE.len()
                );
                let _ = conn.write_all(reply.as_bytes()).await;
                let _ = conn.shutdown().await;
            });
        }
    });
    Ok(addr)
}
