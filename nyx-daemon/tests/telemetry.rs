//! The Prometheus endpoint over real TCP: raw HTTP/1.1 requests against a server on
//! 127.0.0.1 with a snapshot source of known numbers; then a real Prometheus server
//! scraping a running daemon (tests/telemetry/scrape.rs).
#![allow(clippy::unwrap_used)]

#[path = "telemetry/scrape.rs"]
mod scrape;
mod support;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use nyx_daemon::telemetry::prometheus::{CONTENT_TYPE, PrometheusConfig, PrometheusServer};
use nyx_daemon::telemetry::{ExtraMetric, MetricsSnapshot, snapshot_source};
use nyx_node::NodeStats;
use nyx_overlay::stream::MuxStats;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// Guards against a hang; never reached when the server works.
const GUARD: Duration = Duration::from_secs(20);

struct Server {
    addr: SocketAddr,
    scrapes: Arc<AtomicU64>,
    stop: oneshot::Sender<()>,
    task: JoinHandle<()>,
}

async fn start(config: PrometheusConfig) -> Server {
    start_slow(config, Duration::ZERO).await
}

/// A server whose snapshots take `delay` to come.
async fn start_slow(config: PrometheusConfig, delay: Duration) -> Server {
    let scrapes = Arc::new(AtomicU64::new(0));
    let counter = Arc::clone(&scrapes);
    let source = snapshot_source(move || {
        let scrape = counter.fetch_add(1, Ordering::Relaxed) + 1;
        async move {
            tokio::time::sleep(delay).await;
            let mut node = NodeStats::default();
            node.overlay.relayed_forward = 7;
            node.overlay.relayed_backward = 8;
            node.overlay.dropped_queue_full = 5;
            node.links = 3;
            let mut streams = MuxStats::default();
            streams.window = 64;
            let mut s = MetricsSnapshot::new(node, streams, Duration::from_secs(scrape));
            s.extra.push(ExtraMetric::counter(
                "nyx_socks_connections_total",
                "SOCKS connections accepted.",
                scrape,
            ));
            s
        }
    });
    let server = PrometheusServer::bind("127.0.0.1:0".parse().unwrap(), source, config)
        .await
        .unwrap();
    let addr = server.local_addr().unwrap();
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(server.run(async move {
        let _ = stopped.await;
    }));
    Server {
        addr,
        scrapes,
        stop,
        task,
    }
}

/// Send `raw`, read until the server closes, split into status line, headers and body.
async fn request(addr: SocketAddr, raw: &[u8]) -> (String, Vec<(String, String)>, String) {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(raw).await.unwrap();
    let mut buf = Vec::new();
    tokio::time::timeout(GUARD, s.read_to_end(&mut buf))
        .await
        .unwrap()
        .unwrap();
    let text = String::from_utf8(buf).unwrap();
    let (head, body) = text.split_once("\r\n\r\n").unwrap();
    let mut lines = head.split("\r\n");
    let status = lines.next().unwrap().to_owned();
    let headers = lines
        .map(|l| {
            let (k, v) = l.split_once(": ").unwrap();
            (k.to_ascii_lowercase(), v.to_owned())
        })
        .collect();
    (status, headers, body.to_owned())
}

fn header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
}

/// Every line is a comment or `name{labels} value` with a valid name and a number.
fn assert_well_formed(body: &str) {
    assert!(body.ends_with('\n'));
    for line in body.lines() {
        if line.starts_with("# HELP ") || line.starts_with("# TYPE ") {
            continue;
        }
        let (series, value) = line.rsplit_once(' ').unwrap();
        assert!(value.parse::<f64>().is_ok() || value == "+Inf", "{line}");
        let name = series.split('{').next().unwrap();
        assert!(
            !name.is_empty()
                && name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':'),
            "{line}"
        );
        if let Some(labels) = series.strip_prefix(name).filter(|l| !l.is_empty()) {
            assert!(labels.starts_with('{') && labels.ends_with('}'), "{line}");
            assert!(labels.contains("=\""), "{line}");
        }
    }
}

#[tokio::test]
async fn metrics_are_served_fresh_with_the_text_format_content_type() {
    let server = start(PrometheusConfig::default()).await;
    let (status, headers, body) =
        request(server.addr, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").await;
    assert_eq!(status, "HTTP/1.1 200 OK");
    assert_eq!(header(&headers, "content-type"), Some(CONTENT_TYPE));
    assert_eq!(
        header(&headers, "content-type"),
        Some("text/plain; version=0.0.4; charset=utf-8")
    );
    assert_eq!(header(&headers, "connection"), Some("close"));
    assert_eq!(
        header(&headers, "content-length"),
        Some(body.len().to_string().as_str())
    );
    assert_well_formed(&body);
    for line in [
        "# TYPE nyx_cells_relayed_total counter",
        "nyx_cells_relayed_total{direction=\"forward\"} 7",
        "nyx_cells_relayed_total{direction=\"backward\"} 8",
        "nyx_cells_dropped_total{reason=\"queue_full\"} 5",
        "nyx_links 3",
        "nyx_stream_congestion_window_cells 64",
        "nyx_uptime_seconds 1",
        "nyx_socks_connections_total 1",
    ] {
        assert!(body.lines().any(|l| l == line), "missing {line:?}:\n{body}");
    }

    // Each scrape asks the source again.
    let (_, _, body) = request(server.addr, b"GET /metrics?x=y HTTP/1.0\r\n\r\n").await;
    assert!(
        body.lines().any(|l| l == "nyx_socks_connections_total 2"),
        "{body}"
    );
    assert_eq!(server.scrapes.load(Ordering::Relaxed), 2);

    // HEAD: the headers only.
    let (status, headers, body) = request(server.addr, b"HEAD /metrics HTTP/1.1\r\n\r\n").await;
    assert_eq!(status, "HTTP/1.1 200 OK");
    assert_eq!(header(&headers, "content-type"), Some(CONTENT_TYPE));
    assert!(body.is_empty());

    server.stop.send(()).unwrap();
    tokio::time::timeout(GUARD, server.task)
        .await
        .unwrap()
        .unwrap();
}

#[tokio::test]
async fn wrong_paths_methods_and_heads_get_error_statuses() {
    let server = start(PrometheusConfig {
        max_head_bytes: 512,
        ..PrometheusConfig::default()
    })
    .await;
    let (status, headers, _) = request(server.addr, b"GET /other HTTP/1.1\r\n\r\n").await;
    assert_eq!(status, "HTTP/1.1 404 Not Found");
    assert_eq!(header(&headers, "connection"), Some("close"));

    let (status, headers, _) = request(
        server.addr,
        b"POST /metrics HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello",
    )
    .await;
    assert_eq!(status, "HTTP/1.1 405 Method Not Allowed");
    assert_eq!(header(&headers, "allow"), Some("GET, HEAD"));

    let (status, _, _) = request(server.addr, b"DELETE /metrics HTTP/1.1\r\n\r\n").await;
    assert_eq!(status, "HTTP/1.1 405 Method Not Allowed");

    let (status, _, _) = request(server.addr, b"hello there\r\n\r\n").await;
    assert_eq!(status, "HTTP/1.1 400 Bad Request");

    // A head over the limit, finished or not, is refused without a snapshot.
    let mut big = b"GET /metrics HTTP/1.1\r\n".to_vec();
    big.extend(std::iter::repeat_n(b'a', 2048));
    let (status, _, _) = request(server.addr, &big).await;
    assert_eq!(status, "HTTP/1.1 431 Request Header Fields Too Large");
    let mut big = b"GET /metrics HTTP/1.1\r\nX-Pad: ".to_vec();
    big.extend(std::iter::repeat_n(b'a', 600));
    big.extend(b"\r\n\r\n");
    let (status, _, _) = request(server.addr, &big).await;
    assert_eq!(status, "HTTP/1.1 431 Request Header Fields Too Large");

    // None of these asked for a snapshot.
    assert_eq!(server.scrapes.load(Ordering::Relaxed), 0);

    // A head within the limit is answered.
    let mut fits = b"GET /metrics HTTP/1.1\r\nX-Pad: ".to_vec();
    fits.extend(std::iter::repeat_n(b'a', 300));
    fits.extend(b"\r\n\r\n");
    let (status, _, _) = request(server.addr, &fits).await;
    assert_eq!(status, "HTTP/1.1 200 OK");
}

/// A snapshot slower than the write timeout: the connection is closed without an answer.
#[tokio::test]
async fn a_response_not_ready_in_time_is_dropped() {
    let server = start_slow(
        PrometheusConfig {
            write_timeout: Duration::from_millis(200),
            ..PrometheusConfig::default()
        },
        Duration::from_secs(30),
    )
    .await;
    let mut s = TcpStream::connect(server.addr).await.unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\n\r\n").await.unwrap();
    let mut buf = Vec::new();
    let read = tokio::time::timeout(GUARD, s.read_to_end(&mut buf))
        .await
        .unwrap();
    assert!(read.is_err() || read.unwrap() == 0);
    assert!(buf.is_empty(), "{}", String::from_utf8_lossy(&buf));
    assert_eq!(server.scrapes.load(Ordering::Relaxed), 1);
}

/// With every slot taken, a new client waits (unanswered) until a slot is freed.
#[tokio::test]
async fn connections_over_the_cap_wait_for_a_slot() {
    let server = start(PrometheusConfig {
        max_connections: 1,
        ..PrometheusConfig::default()
    })
    .await;
    let mut holder = TcpStream::connect(server.addr).await.unwrap();
    holder.write_all(b"GET /met").await.unwrap();
    let waiting = tokio::spawn(request(server.addr, b"GET /metrics HTTP/1.1\r\n\r\n"));
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !waiting.is_finished(),
        "served while the only slot was taken"
    );
    assert_eq!(server.scrapes.load(Ordering::Relaxed), 0);
    drop(holder);
    let (status, _, _) = tokio::time::timeout(GUARD, waiting).await.unwrap().unwrap();
    assert_eq!(status, "HTTP/1.1 200 OK");
}

#[tokio::test]
async fn a_silent_client_is_dropped_while_others_are_served() {
    let server = start(PrometheusConfig {
        read_timeout: Duration::from_millis(300),
        ..PrometheusConfig::default()
    })
    .await;
    // Connects and sends half a request line, then nothing.
    let mut silent = TcpStream::connect(server.addr).await.unwrap();
    silent.write_all(b"GET /met").await.unwrap();
    let mut idle = TcpStream::connect(server.addr).await.unwrap();

    // Another client is answered while those two hang on.
    let (status, _, body) = request(server.addr, b"GET /metrics HTTP/1.1\r\n\r\n").await;
    assert_eq!(status, "HTTP/1.1 200 OK");
    assert!(body.contains("nyx_cells_relayed_total"));

    // The server gives up on both without writing a byte: their reads see the close.
    for s in [&mut silent, &mut idle] {
        let mut buf = Vec::new();
        let read = tokio::time::timeout(GUARD, s.read_to_end(&mut buf))
            .await
            .unwrap();
        // A close with unread bytes may arrive as a reset; either way, nothing was sent.
        assert!(read.is_err() || read.unwrap() == 0);
        assert!(buf.is_empty());
    }
}

#[tokio::test]
async fn after_shutdown_the_listener_is_closed() {
    let server = start(PrometheusConfig::default()).await;
    let addr = server.addr;
    server.stop.send(()).unwrap();
    tokio::time::timeout(GUARD, server.task)
        .await
        .unwrap()
        .unwrap();
    assert!(TcpStream::connect(addr).await.is_err());
}
