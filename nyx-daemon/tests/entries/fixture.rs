//! The network the entry tests share: a testnet of five relays, a client node with a SOCKS
//! and an HTTP CONNECT entry in front of it, a web server; and the SOCKS5 client and the
//! checks of a fetched file.

use std::net::SocketAddr;
use std::time::Duration;

use nyx_daemon::entry::{EntryConfig, EntryServer, Protocol};
use nyx_node::Node;
use nyx_node::testing::{LocalTestnet, LocalTestnetSpec, WebServer};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::timeout;

/// Generous bounds for liveness only (never speed): CI machines are shared and slow.
pub(crate) const LONG: Duration = Duration::from_secs(240);
/// The served file: more than a MiB, not a multiple of any buffer size.
pub(crate) const FILE_LEN: usize = 1536 * 1024 + 7;

pub(crate) fn file() -> Vec<u8> {
    (0..FILE_LEN)
        .map(|i| ((i as u64).wrapping_mul(2_654_435_761) >> 11) as u8)
        .collect()
}

/// A small file, for the runs that check a path or a circuit rather than the relay.
pub(crate) const SMALL: &[u8] = b"a small file\n";

/// A testnet (exits allow loopback only), a client node, an HTTP server, and a SOCKS and
/// an HTTP CONNECT server (both with `config`) in front of the client.
pub(crate) struct Fixture {
    _testnet: LocalTestnet,
    pub(crate) client: Node,
    pub(crate) http: SocketAddr,
    _web: WebServer,
    pub(crate) socks: EntryServer,
    pub(crate) tunnel: EntryServer,
}

pub(crate) async fn fixture(net: u8, config: EntryConfig) -> Fixture {
    let spec = LocalTestnetSpec {
        net,
        ..LocalTestnetSpec::default()
    };
    let testnet = LocalTestnet::start(spec).await.unwrap();
    let client = testnet.client().unwrap();
    let web = WebServer::start(vec![
        ("/file".into(), file()),
        ("/small".into(), SMALL.to_vec()),
    ])
    .await
    .unwrap();
    let local = "127.0.0.1:0".parse().unwrap();
    let bind = |protocol| EntryServer::bind(protocol, local, client.handle(), config.clone());
    let socks = bind(Protocol::Socks).await.unwrap();
    let tunnel = bind(Protocol::HttpConnect).await.unwrap();
    Fixture {
        _testnet: testnet,
        client,
        http: web.addr(),
        _web: web,
        socks,
        tunnel,
    }
}

/// A request for `dst` (CONNECT unless `cmd` says otherwise).
pub(crate) fn request(cmd: u8, dst: &Dst<'_>) -> Vec<u8> {
    let mut v = vec![5, cmd, 0];
    let port = match dst {
        Dst::V4(ip, port) => {
            v.push(1);
            v.extend_from_slice(ip);
            port
        }
        Dst::Host(name, port) => {
            v.push(3);
            v.push(name.len() as u8);
            v.extend_from_slice(name.as_bytes());
            port
        }
    };
    v.extend_from_slice(&port.to_be_bytes());
    v
}

pub(crate) enum Dst<'a> {
    V4([u8; 4], u16),
    Host(&'a str, u16),
}

/// A hand-written SOCKS5 client: greet (offering only the method it means to use),
/// authenticate if given credentials, send `request` followed by `early` bytes in the same
/// write, and read the reply. Returns the connection and the reply code.
pub(crate) async fn socks_open(
    proxy: SocketAddr,
    creds: Creds<'_>,
    request: &[u8],
    early: &[u8],
) -> (TcpStream, u8) {
    let mut conn = TcpStream::connect(proxy).await.unwrap();
    let method = if creds.is_some() { 2 } else { 0 };
    conn.write_all(&[5, 1, method]).await.unwrap();
    let mut choice = [0u8; 2];
    conn.read_exact(&mut choice).await.unwrap();
    assert_eq!(choice, [5, method]);
    if let Some((user, pass)) = creds {
        let mut msg = vec![1, user.len() as u8];
        msg.extend_from_slice(user.as_bytes());
        msg.push(pass.len() as u8);
        msg.extend_from_slice(pass.as_bytes());
        conn.write_all(&msg).await.unwrap();
        let mut status = [0u8; 2];
        conn.read_exact(&mut status).await.unwrap();
        assert_eq!(status, [1, 0]);
    }
    let mut msg = request.to_vec();
    msg.extend_from_slice(early);
    conn.write_all(&msg).await.unwrap();
    let mut head = [0u8; 4];
    conn.read_exact(&mut head).await.unwrap();
    assert_eq!([head[0], head[2]], [5, 0], "reply header {head:?}");
    let addr_len = match head[3] {
        1 => 4,
        4 => 16,
        atyp => panic!("reply address type {atyp}"),
    };
    let mut bound = vec![0u8; addr_len + 2];
    conn.read_exact(&mut bound).await.unwrap();
    (conn, head[1])
}

/// Username and password, if any.
pub(crate) type Creds<'a> = Option<(&'a str, &'a str)>;

pub(crate) const GET: &[u8] = b"GET /file HTTP/1.0\r\nHost: test\r\n\r\n";

/// Send GET (unless already sent as early data), close our side (the server must still
/// answer: half-close), read to the end, and check the body byte for byte.
pub(crate) async fn fetch_on(mut conn: TcpStream, send_get: bool) {
    if send_get {
        conn.write_all(GET).await.unwrap();
    }
    conn.shutdown().await.unwrap();
    let mut response = Vec::new();
    conn.read_to_end(&mut response).await.unwrap();
    check_response(&response);
}

pub(crate) fn check_response(response: &[u8]) {
    let split = response
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("a response head");
    let head = String::from_utf8_lossy(&response[..split]);
    assert!(head.starts_with("HTTP/1.0 200 OK"), "{head}");
    let body = &response[split + 4..];
    assert_eq!(body.len(), FILE_LEN, "body length");
    assert!(body == file().as_slice(), "body bytes differ");
}

/// A full good fetch by IPv4 without credentials: the server still serves.
pub(crate) async fn good_fetch(f: &Fixture) {
    let dst = Dst::V4([127, 0, 0, 1], f.http.port());
    let (conn, rep) = timeout(
        LONG,
        socks_open(f.socks.local_addr(), None, &request(1, &dst), b""),
    )
    .await
    .unwrap();
    assert_eq!(rep, 0);
    timeout(LONG, fetch_on(conn, true)).await.unwrap();
}

/// Wait (liveness only) until the server serves nobody.
pub(crate) async fn until_idle(server: &EntryServer) {
    timeout(LONG, async {
        while server.stats().active > 0 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .unwrap();
}
