//! Fetch a web page through NyxNet, all in one process: five relays on 127.0.0.1-5 (a local
//! testnet whose exits allow loopback targets), a tiny web server on 127.0.0.1, and an
//! embedded client node that opens a stream to the server over a 3-hop circuit.
//!
//! ```text
//! cargo run --release -p nyx-node --features testing --example fetch_page
//! ```

use nyx_node::testing::{LocalTestnet, LocalTestnetSpec, WebServer};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[tokio::main]
pub(crate) async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let testnet = LocalTestnet::start(LocalTestnetSpec::default()).await?;
    let site = WebServer::page("<h1>Hello from the other side of three hops</h1>\n").await?;

    let client = testnet.client()?; // an embedded node that knows the testnet's relays
    let mut stream = client.connect(site.addr()).await?;
    eprintln!("circuit: {:?}", stream.path());
    stream.write_all(b"GET / HTTP/1.0\r\n\r\n").await?;
    let mut response = String::new();
    stream.read_to_string(&mut response).await?;
    print!("{response}");
    Ok(())
}
