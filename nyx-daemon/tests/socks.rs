//! The SOCKS and HTTP CONNECT entries end to end: an in-process testnet of five relays on
//! 127.0.x.y, a client node, both entry servers on 127.0.0.1 in front of it, and an HTTP
//! server on 127.0.0.1. Hand-written SOCKS5, SOCKS4a and HTTP CONNECT clients and curl
//! fetch files byte-exact; credentials (SOCKS5 pairs, SOCKS4 user ids, Basic credentials)
//! select circuits; malformed, refused and silent clients get their answer and the servers
//! keep serving; the connection limit and shutdown hold; headless Chromium, when installed,
//! tunnels through the HTTP CONNECT entry.

#![allow(clippy::unwrap_used)]

mod entries;
mod support;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use entries::fixture::*;
use nyx_daemon::Error;
use nyx_daemon::entry::{EntryConfig, EntryServer, Protocol};
use nyx_daemon::socks::Reply;
use nyx_node::{Node, unix_now};
use nyx_overlay::directory::testnet::{TestnetSpec, generate};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::timeout;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_socks_client_fetches_a_file_byte_exact_by_ipv4_and_by_host_name() {
    let f = fixture(83, EntryConfig::default()).await;
    let proxy = f.socks.local_addr();
    good_fetch(&f).await;
    // By name, with the HTTP request sent with the SOCKS request (optimistic data). The
    // loopback-only policy might allow a name; the exit resolves "localhost" and tries its
    // addresses until 127.0.0.1 answers.
    let dst = Dst::Host("localhost", f.http.port());
    let (conn, rep) = timeout(LONG, socks_open(proxy, None, &request(1, &dst), GET))
        .await
        .unwrap();
    assert_eq!(rep, 0);
    timeout(LONG, fetch_on(conn, false)).await.unwrap();
    // And with credentials.
    let (conn, rep) = timeout(
        LONG,
        socks_open(proxy, Some(("user", "pass")), &request(1, &dst), b""),
    )
    .await
    .unwrap();
    assert_eq!(rep, 0);
    timeout(LONG, fetch_on(conn, true)).await.unwrap();
    // SOCKS4a on the same port, by name, with the GET sent with the request.
    let req = entries::socks4_request(1, [0; 4], f.http.port(), "", Some("localhost"));
    let (conn, rep) = timeout(LONG, entries::socks4_open(proxy, &req, GET))
        .await
        .unwrap();
    assert_eq!(rep, 90);
    timeout(LONG, fetch_on(conn, false)).await.unwrap();
    // HTTP CONNECT, with the GET sent right after the head (before the 200): kept and
    // forwarded, then the whole file back after our half-close.
    let target = format!("127.0.0.1:{}", f.http.port());
    let (conn, head) = timeout(
        LONG,
        entries::connect_open(f.tunnel.local_addr(), &target, GET),
    )
    .await
    .unwrap();
    assert_eq!(head, "HTTP/1.1 200 Connection established\r\n\r\n");
    timeout(LONG, fetch_on(conn, false)).await.unwrap();
    for server in [&f.socks, &f.tunnel] {
        until_idle(server).await;
    }
    let stats = f.socks.stats();
    assert_eq!((stats.accepted, stats.succeeded), (4, 4), "{stats:?}");
    assert_eq!(stats.failed_total() + stats.malformed + stats.timeouts, 0);
    let stats = f.tunnel.stats();
    assert_eq!((stats.accepted, stats.succeeded), (1, 1), "{stats:?}");
}

/// curl, through the proxy, with the name resolved by the exit (`--socks5-hostname`).
fn curl(proxy: SocketAddr, url: &str, user: Option<&str>) -> Vec<u8> {
    let proxy = proxy.to_string();
    let mut args = vec!["--socks5-hostname", &proxy];
    if let Some(user) = user {
        args.extend(["--proxy-user", user]);
    }
    entries::curl(&args, url)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn curl_fetches_through_the_proxy_with_and_without_credentials() {
    let f = fixture(84, EntryConfig::default()).await;
    let proxy = f.socks.local_addr();
    let port = f.http.port();
    let runs = [
        (format!("http://127.0.0.1:{port}/file"), None),
        (format!("http://localhost:{port}/file"), None),
        (format!("http://127.0.0.1:{port}/file"), Some("a:b")),
    ];
    for (url, user) in runs {
        let body = tokio::task::spawn_blocking(move || curl(proxy, &url, user))
            .await
            .unwrap();
        assert_eq!(body.len(), FILE_LEN);
        assert!(body == file(), "curl body differs");
    }
    let stats = f.socks.stats();
    assert_eq!(stats.succeeded, 3, "{stats:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn distinct_credentials_get_distinct_circuits_and_equal_ones_share_one() {
    let f = fixture(85, EntryConfig::default()).await;
    let proxy = f.socks.local_addr();
    let node = f.client.handle();
    let req = request(1, &Dst::V4([127, 0, 0, 1], f.http.port()));
    // This node builds circuits only for the proxy's streams, so its circuit count tells
    // whether a stream got a new circuit. Every connection stays open (its stream alive)
    // until the end.
    let mut open = Vec::new();
    let steps: [(Creds<'_>, usize, &str); 8] = [
        (Some(("alice", "pw")), 1, "first pair: a new circuit"),
        (
            Some(("alice", "pw")),
            1,
            "same pair: the only circuit there is, alice's",
        ),
        (Some(("bob", "pw")), 2, "another user: a new circuit"),
        (Some(("alice", "pw2")), 3, "another password: a new circuit"),
        (None, 4, "no credentials: a new circuit"),
        (None, 4, "no credentials again: shared"),
        (
            Some(("", "")),
            5,
            "empty credentials are not the same as none",
        ),
        (Some(("bob", "pw")), 5, "bob again: shared"),
    ];
    assert_eq!(node.stats().await.unwrap().own_circuits, 0);
    for (creds, circuits, why) in steps {
        let (conn, rep) = timeout(LONG, socks_open(proxy, creds, &req, b""))
            .await
            .unwrap();
        assert_eq!(rep, 0, "{why}");
        assert_eq!(node.stats().await.unwrap().own_circuits, circuits, "{why}");
        open.push(conn);
    }
    // The shared streams work (and stay byte-exact).
    for conn in [open.remove(1), open.remove(6)] {
        timeout(LONG, fetch_on(conn, true)).await.unwrap();
    }
    // curl through the HTTP CONNECT entry and as a SOCKS4 client: Basic credentials are the
    // SOCKS5 pair's group, a SOCKS4 user id a group of its own, none the default group.
    // (The circuits stay pooled after curl's streams end.)
    let tunnel = format!("http://{}", f.tunnel.local_addr());
    let socks = proxy.to_string();
    // curl sends the user of --proxy-user as the SOCKS4 user id.
    let socks4a_alice = vec!["--socks4a", &socks, "--proxy-user", "alice:pw"];
    let via_tunnel = |user: Option<&'static str>| {
        let mut args = vec!["--proxy", tunnel.as_str(), "--proxytunnel"];
        args.extend(user.map(|u| ["--proxy-user", u]).into_iter().flatten());
        args
    };
    let steps: [(Vec<&str>, &str, usize, &str); 7] = [
        (
            via_tunnel(Some("alice:pw")),
            "/file",
            5,
            "alice's SOCKS5 circuit",
        ),
        (
            via_tunnel(Some("carol:pw")),
            "/small",
            6,
            "another user: a new circuit",
        ),
        (
            via_tunnel(Some("carol:pw")),
            "/small",
            6,
            "carol again: shared",
        ),
        (
            via_tunnel(None),
            "/small",
            6,
            "no credentials: the default group's",
        ),
        (
            socks4a_alice.clone(),
            "/small",
            7,
            "SOCKS4 alice is not SOCKS5 alice",
        ),
        (
            vec!["--socks4", &socks],
            "/small",
            7,
            "an empty user id: the default group's",
        ),
        (socks4a_alice, "/small", 7, "SOCKS4 alice again: shared"),
    ];
    for (args, path, circuits, why) in steps {
        let args: Vec<String> = args.into_iter().map(str::to_owned).collect();
        let url = format!("http://127.0.0.1:{}{path}", f.http.port());
        let body = tokio::task::spawn_blocking(move || {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            entries::curl(&args, &url)
        })
        .await
        .unwrap();
        let want = if path == "/file" {
            file()
        } else {
            SMALL.to_vec()
        };
        assert!(body == want, "{why}: curl body differs");
        assert_eq!(node.stats().await.unwrap().own_circuits, circuits, "{why}");
    }
    assert_eq!(f.tunnel.stats().succeeded, 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_clients_get_their_answer_and_the_server_keeps_serving() {
    let config = EntryConfig {
        handshake_timeout: Duration::from_millis(300),
        ..EntryConfig::default()
    };
    let f = fixture(86, config).await;
    let proxy = f.socks.local_addr();

    // Raw bytes; everything the server at `at` says until it closes.
    let exchange_at = |at: SocketAddr, bytes: Vec<u8>| async move {
        let mut conn = TcpStream::connect(at).await.unwrap();
        conn.write_all(&bytes).await.unwrap();
        let mut answer = Vec::new();
        let _ = timeout(LONG, conn.read_to_end(&mut answer)).await.unwrap();
        answer
    };
    let exchange = |bytes: Vec<u8>| exchange_at(proxy, bytes);
    let reply = |code: u8| vec![5, 0, 5, code, 0, 1, 0, 0, 0, 0, 0, 0];
    let greet = |rest: &[u8]| [&[5u8, 1, 0][..], rest].concat();

    // A version other than 4 and 5: closed without an answer.
    assert!(
        exchange(vec![6, 1, 0, 80, 127, 0, 0, 1, 0])
            .await
            .is_empty()
    );
    good_fetch(&f).await;
    // Garbage: an HTTP request to the proxy port.
    assert!(
        exchange(b"GET / HTTP/1.1\r\n\r\n".to_vec())
            .await
            .is_empty()
    );
    good_fetch(&f).await;
    // No acceptable method.
    assert_eq!(exchange(vec![5, 2, 0x80, 0x81]).await, [5, 0xff]);
    // BIND: command not supported.
    let bind = request(2, &Dst::V4([127, 0, 0, 1], f.http.port()));
    assert_eq!(exchange(greet(&bind)).await, reply(0x07));
    good_fetch(&f).await;
    // Unknown address type.
    assert_eq!(exchange(greet(&[5, 1, 0, 9, 1, 2])).await, reply(0x08));
    good_fetch(&f).await;
    // Two bytes, then silence: closed at the handshake timeout, not before.
    let started = Instant::now();
    assert!(exchange(vec![5, 1]).await.is_empty());
    assert!(started.elapsed() >= Duration::from_millis(300));
    good_fetch(&f).await;
    // Denied by every exit's policy (loopback only): not allowed by ruleset.
    let denied = request(1, &Dst::V4([10, 1, 2, 3], 80));
    assert_eq!(exchange(greet(&denied)).await, reply(0x02));
    good_fetch(&f).await;
    // Allowed, but nothing listens: connection refused.
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let refused = request(1, &Dst::V4([127, 0, 0, 1], closed.port()));
    assert_eq!(exchange(greet(&refused)).await, reply(0x05));
    good_fetch(&f).await;
    // SOCKS4: BIND and a denied target both get 91.
    let rejected = vec![0, 91, 0, 0, 0, 0, 0, 0];
    let bind4 = entries::socks4_request(2, [127, 0, 0, 1], f.http.port(), "", None);
    assert_eq!(exchange(bind4).await, rejected);
    let denied4 = entries::socks4_request(1, [10, 1, 2, 3], 80, "u", None);
    assert_eq!(exchange(denied4).await, rejected);

    // The HTTP CONNECT entry: each refusal with its status, then it still serves.
    let tunnel = f.tunnel.local_addr();
    let status_of = |answer: Vec<u8>| {
        let text = String::from_utf8_lossy(&answer).into_owned();
        assert!(text.ends_with("\r\n\r\n"), "{text:?}");
        text.lines().next().unwrap_or_default().to_owned()
    };
    let get = b"GET http://127.0.0.1/ HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".to_vec();
    let answer = String::from_utf8(exchange_at(tunnel, get).await).unwrap();
    assert!(
        answer.starts_with("HTTP/1.1 405 Method Not Allowed\r\n"),
        "{answer}"
    );
    assert!(answer.contains("\r\nAllow: CONNECT\r\n"), "{answer}");
    let huge = format!(
        "CONNECT a.org:1 HTTP/1.1\r\nX-Big: {}\r\n\r\n",
        "x".repeat(9000)
    );
    let answer = exchange_at(tunnel, huge.into_bytes()).await;
    assert_eq!(
        status_of(answer),
        "HTTP/1.1 431 Request Header Fields Too Large"
    );
    let zero_port = b"CONNECT 127.0.0.1:0 HTTP/1.1\r\n\r\n".to_vec();
    assert_eq!(
        status_of(exchange_at(tunnel, zero_port).await),
        "HTTP/1.1 400 Bad Request"
    );
    let started = Instant::now();
    assert!(exchange_at(tunnel, b"CONNECT ".to_vec()).await.is_empty());
    assert!(started.elapsed() >= Duration::from_millis(300));
    let connect = |target: String| format!("CONNECT {target} HTTP/1.1\r\n\r\n").into_bytes();
    let answer = exchange_at(tunnel, connect("10.1.2.3:80".into())).await;
    assert_eq!(status_of(answer), "HTTP/1.1 403 Forbidden");
    let answer = exchange_at(tunnel, connect(format!("127.0.0.1:{}", closed.port()))).await;
    assert_eq!(status_of(answer), "HTTP/1.1 502 Bad Gateway");
    // A 253-character host name (the parser's limit) makes a target over the 255 bytes a
    // stream's OPEN carries: refused at once as a bad request, before any circuit.
    let long = format!("{}.org:80", "a".repeat(249));
    let answer = exchange_at(tunnel, connect(long)).await;
    assert_eq!(status_of(answer), "HTTP/1.1 400 Bad Request");
    let small = format!("127.0.0.1:{}", f.http.port());
    let small_get = b"GET /small HTTP/1.0\r\n\r\n";
    let (mut conn, head) = timeout(LONG, entries::connect_open(tunnel, &small, small_get))
        .await
        .unwrap();
    assert!(head.starts_with("HTTP/1.1 200 "), "{head}");
    conn.shutdown().await.unwrap();
    let mut response = Vec::new();
    timeout(LONG, conn.read_to_end(&mut response))
        .await
        .unwrap()
        .unwrap();
    assert!(
        response.ends_with(SMALL),
        "{:?}",
        String::from_utf8_lossy(&response)
    );

    // A client that leaves in the middle of its request head: counted as aborted.
    let mut gone = TcpStream::connect(tunnel).await.unwrap();
    gone.write_all(b"CONNECT a.org:1 HTTP/1.1\r\n")
        .await
        .unwrap();
    drop(gone);
    timeout(LONG, async {
        while f.tunnel.stats().aborted == 0 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .unwrap();

    until_idle(&f.socks).await;
    let s = f.socks.stats();
    assert_eq!(s.malformed, 6, "{s:?}");
    assert_eq!(s.timeouts, 1, "{s:?}");
    assert_eq!(s.succeeded, 7, "{s:?}");
    assert_eq!(s.failed_with(Reply::CommandNotSupported), 2, "{s:?}");
    assert_eq!(s.failed_with(Reply::AddressTypeNotSupported), 1, "{s:?}");
    assert_eq!(s.failed_with(Reply::NotAllowed), 2, "{s:?}");
    assert_eq!(s.failed_with(Reply::ConnectionRefused), 1, "{s:?}");
    assert_eq!(s.failed_total(), 6, "{s:?}");
    assert_eq!(s.accepted, 17, "{s:?}");
    until_idle(&f.tunnel).await;
    let t = f.tunnel.stats();
    assert_eq!((t.malformed, t.timeouts, t.succeeded), (3, 1, 1), "{t:?}");
    assert_eq!(t.failed_with(Reply::CommandNotSupported), 1, "{t:?}");
    assert_eq!(t.failed_with(Reply::GeneralFailure), 2, "{t:?}");
    assert_eq!(t.failed_with(Reply::NotAllowed), 1, "{t:?}");
    assert_eq!(t.failed_with(Reply::ConnectionRefused), 1, "{t:?}");
    assert_eq!(t.failed_with(Reply::AddressTypeNotSupported), 1, "{t:?}");
    assert_eq!(
        (t.failed_total(), t.accepted, t.aborted),
        (6, 9, 1),
        "{t:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_over_the_limit_are_closed_and_shutdown_closes_the_rest() {
    // A node that never gets as far as a circuit: a generated directory nobody runs.
    let (_, directory) = generate(&TestnetSpec::default(), unix_now()).unwrap();
    let node = Node::builder().directory(directory).build().unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let zero = EntryConfig {
        max_connections: 0,
        ..EntryConfig::default()
    };
    match EntryServer::spawn(Protocol::Socks, listener, node.handle(), zero, None) {
        Err(Error::EntryConfig { field, .. }) => assert_eq!(field, "max_connections"),
        other => panic!("expected a config error, got {other:?}"),
    }
    let config = EntryConfig {
        max_connections: 1,
        ..EntryConfig::default()
    };
    let local = "127.0.0.1:0".parse().unwrap();
    let server = EntryServer::bind(Protocol::Socks, local, node.handle(), config)
        .await
        .unwrap();
    let addr = server.local_addr();
    let greeted = || async move {
        let mut conn = TcpStream::connect(addr).await.unwrap();
        conn.write_all(&[5, 1, 0]).await.unwrap();
        let mut choice = [0u8; 2];
        conn.read_exact(&mut choice).await.unwrap();
        assert_eq!(choice, [5, 0]);
        conn
    };
    let mut first = greeted().await;
    // The second is closed without a byte (whatever it sent).
    let mut second = TcpStream::connect(addr).await.unwrap();
    let _ = second.write_all(&[5, 1, 0]).await;
    let mut answer = Vec::new();
    let _ = timeout(LONG, second.read_to_end(&mut answer))
        .await
        .unwrap();
    assert!(answer.is_empty());
    assert_eq!(server.stats().over_limit, 1);
    // Once the first leaves, there is room again.
    first.shutdown().await.unwrap();
    let _ = first.read_to_end(&mut answer).await;
    until_idle(&server).await;
    let mut third = greeted().await;
    assert_eq!(server.stats().active, 1);
    // Shutdown closes the client mid-handshake and the listener.
    timeout(LONG, server.shutdown()).await.unwrap();
    assert_eq!(third.read(&mut [0u8; 16]).await.unwrap_or(0), 0);
    assert!(TcpStream::connect(addr).await.is_err());
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn headless_chromium_tunnels_through_the_http_connect_entry() {
    let Some(chromium) = entries::chromium() else {
        eprintln!(
            "skipped: no chromium, chromium-browser, google-chrome or headless_shell on PATH \
             (this test runs headless Chromium through the HTTP CONNECT entry)"
        );
        return;
    };
    let f = fixture(87, EntryConfig::default()).await;
    // Chromium tunnels only https:// through an HTTP proxy (it forwards http:// with GET,
    // which this entry refuses), so the target is a TCP listener that records what comes:
    // Chromium's TLS ClientHello, through the tunnel and three relays.
    let target = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("https://127.0.0.1:{}/", target.local_addr().unwrap().port());
    let proxy = f.tunnel.local_addr();
    let limit = Duration::from_secs(60);
    let browser =
        tokio::task::spawn_blocking(move || entries::run_chromium(&chromium, proxy, &url, limit));
    let (mut conn, _) = timeout(LONG, target.accept()).await.unwrap().unwrap();
    let mut hello = [0u8; 3];
    timeout(LONG, conn.read_exact(&mut hello))
        .await
        .unwrap()
        .unwrap();
    // A TLS handshake record: content type 22, version 3.x.
    assert_eq!(hello[..2], [0x16, 0x03], "{hello:?}");
    drop((conn, target));
    browser.await.unwrap();
    assert!(f.tunnel.stats().succeeded >= 1);
}
