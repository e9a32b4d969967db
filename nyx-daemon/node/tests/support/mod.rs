//! What several integration tests of nyx-node share.

use std::net::SocketAddr;
use std::time::Duration;

use nyx_node::Node;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::time::timeout;

/// Generous bound for liveness only (never speed): CI machines are shared and slow.
pub(crate) const LONG: Duration = Duration::from_secs(60);

/// GET / from `site` through `client`'s network; the whole response.
pub(crate) async fn fetch(client: &Node, site: SocketAddr) -> Vec<u8> {
    let mut stream = timeout(LONG, client.connect(site))
        .await
        .expect("connect within LONG")
        .expect("a stream to the site");
    stream
        .write_all(b"GET / HTTP/1.0\r\nHost: site\r\n\r\n")
        .await
        .expect("the request is written");
    let mut page = Vec::new();
    timeout(LONG, stream.read_to_end(&mut page))
        .await
        .expect("the response within LONG")
        .expect("the response is read");
    page
}
