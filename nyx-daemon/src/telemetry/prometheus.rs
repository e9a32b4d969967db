//! A minimal HTTP/1.1 server for Prometheus scrapes.
//!
//! What it is for: answering `GET /metrics` (and `HEAD`) on `telemetry.prometheus_listen`
//! with the rendered [`MetricsSnapshot`](super::MetricsSnapshot), `404` for any other path,
//! `405` for any other method, and closing every connection after its one response. It is
//! built to sit on a local or private address without trusting its clients: the request
//! head is limited in size (default 8 KiB) and must arrive within a timeout (default 5 s),
//! at most a fixed number of connections are served at once (default 32; more wait in the
//! kernel's backlog), and bodies are never read.
//!
//! The numbers come from a [`SnapshotSource`], called once per scrape, so every scrape sees
//! fresh counters and nothing runs between scrapes.
//!
//! What it is not for: anything else HTTP (keep-alive, chunked bodies, TLS,
//! authentication). Bind it to an address only the monitoring system reaches.
//!
//! ```no_run
//! # async fn demo(node: nyx_node::NodeHandle) -> Result<(), Box<dyn std::error::Error>> {
//! use nyx_daemon::telemetry::prometheus::{PrometheusConfig, PrometheusServer};
//! use nyx_daemon::telemetry::{MetricsSnapshot, snapshot_source};
//!
//! let started = std::time::Instant::now();
//! let source = snapshot_source(move || {
//!     let node = node.clone();
//!     async move {
//!         let stats = node.stats().await.unwrap_or_default();
//!         let streams = node.stream_stats().await;
//!         MetricsSnapshot::new(stats, streams, started.elapsed())
//!     }
//! });
//! let addr = "127.0.0.1:9464".parse()?;
//! let server = PrometheusServer::bind(addr, source, PrometheusConfig::default()).await?;
//! let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
//! let task = tokio::spawn(server.run(async move {
//!     let _ = stopped.await;
//! }));
//! // ... later:
//! let _ = stop.send(());
//! let _ = task.await;
//! # Ok(()) }
//! ```

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio::time::timeout;

use super::metrics::{SnapshotSource, render_prometheus};
use crate::Error;

/// The content type of the text exposition format.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Limits of the metrics server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PrometheusConfig {
    /// Time from accepting a connection to the end of its request head (default 5 s); a
    /// client that is slower is disconnected without an answer.
    pub read_timeout: Duration,
    /// Time to take the snapshot and write the response (default 10 s).
    pub write_timeout: Duration,
    /// Largest request head accepted, in bytes (default 8192); larger ones get `431`.
    pub max_head_bytes: usize,
    /// Connections served at once (default 32).
    pub max_connections: usize,
}

impl Default for PrometheusConfig {
    fn default() -> Self {
        PrometheusConfig {
            read_timeout: Duration::from_secs(5),
            write_timeout: Duration::from_secs(10),
            max_head_bytes: 8 * 1024,
            max_connections: 32,
        }
    }
}

/// A bound metrics server; [`run`](Self::run) it (usually in `tokio::spawn`).
pub struct PrometheusServer {
    listener: TcpListener,
    source: SnapshotSource,
    config: Arc<PrometheusConfig>,
}

impl std::fmt::Debug for PrometheusServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PrometheusServer")
            .field("listener", &self.listener)
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl PrometheusServer {
    /// Listen on `addr`.
    pub async fn bind(
        addr: SocketAddr,
        source: SnapshotSource,
        config: PrometheusConfig,
    ) -> Result<Self, Error> {
        let listener = TcpListener::bind(addr)
            .await
            .map_err(|source| Error::Listen {
                what: "Prometheus metrics",
                addr,
                source,
            })?;
        Ok(PrometheusServer {
            listener,
            source,
            config: Arc::new(config),
        })
    }

    /// The address it listens on (to find the port after binding port 0).
    pub fn local_addr(&self) -> Result<SocketAddr, Error> {
        self.listener.local_addr().map_err(|e| Error::Telemetry {
            what: "prometheus local address",
            reason: e.to_string(),
        })
    }

    /// Serve until `shutdown` completes; connections still open then are dropped.
    pub async fn run(self, shutdown: impl Future<Output = ()> + Send) {
        let PrometheusServer {
            listener,
            source,
            config,
        } = self;
        let slots = Arc::new(Semaphore::new(config.max_connections.max(1)));
        let mut connections = JoinSet::new();
        tokio::pin!(shutdown);
        loop {
            while connections.try_join_next().is_some() {}
            let next = async {
                let slot = Arc::clone(&slots).acquire_owned().await;
                (slot, listener.accept().await)
            };
            let (slot, accepted) = tokio::select! {
                biased;
                () = &mut shutdown => break,
                next = next => next,
            };
            let Ok(slot) = slot else { break };
            let stream = match accepted {
                Ok((stream, _peer)) => stream,
                Err(e) => {
                    // Out of descriptors and the like: wait instead of spinning.
                    tracing::warn!(error = %e, "metrics server: accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            };
            let (source, config) = (Arc::clone(&source), Arc::clone(&config));
            connections.spawn(async move {
                serve(stream, &source, &config).await;
                drop(slot);
            });
        }
    }
}

/// One connection: one request, one response, close.
async fn serve(mut stream: TcpStream, source: &SnapshotSource, config: &PrometheusConfig) {
    let head = timeout(
        config.read_timeout,
        read_head(&mut stream, config.max_head_bytes),
    )
    .await;
    let route = match head {
        Ok(Ok(Some(head))) => route(&head),
        Ok(Ok(None)) => Route::Status(431, ""),
        // Closed, failed or too slow: nothing worth answering.
        Ok(Err(_)) | Err(_) => return,
    };
    let written = timeout(config.write_timeout, async {
        match route {
            Route::Metrics { send_body } => {
                let body = render_prometheus(&source().await);
                let body = if send_body { body.as_bytes() } else { &[][..] };
                respond(&mut stream, 200, "", body).await
            }
            Route::Status(code, extra) => respond(&mut stream, code, extra, b"").await,
        }
    })
    .await;
    if matches!(written, Ok(Ok(()))) {
        // Let the client read the response before the socket goes away: unread request
        // bytes at close would make the kernel reset the connection.
        let _ = stream.shutdown().await;
        let mut sink = [0u8; 1024];
        let linger = async {
            let mut left = 64 * 1024usize;
            while let Ok(n @ 1..) = stream.read(&mut sink).await {
                left = left.saturating_sub(n);
                if left == 0 {
                    break;
                }
            }
        };
        let _ = timeout(config.read_timeout.min(Duration::from_secs(1)), linger).await;
    }
}

/// Read until the blank line ending the head; `None` when it exceeds `max` bytes.
async fn read_head(stream: &mut TcpStream, max: usize) -> std::io::Result<Option<Vec<u8>>> {
    let mut head = Vec::with_capacity(512.min(max));
    let mut chunk = [0u8; 1024];
    loop {
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        let searched = head.len().saturating_sub(3);
        head.extend_from_slice(&chunk[..n]);
        if let Some(end) = find_end(&head[searched..]) {
            head.truncate(searched + end);
            return Ok(Some(head));
        }
        if head.len() > max {
            return Ok(None);
        }
    }
}

/// Where the head ends (`\r\n\r\n`, or bare `\n\n`), as an offset into `buf`.
fn find_end(buf: &[u8]) -> Option<usize> {
    let crlf = buf.windows(4).position(|w| w == b"\r\n\r\n");
    let lf = buf.windows(2).position(|w| w == b"\n\n");
    match (crlf, lf) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

#[derive(Debug, PartialEq, Eq)]
enum Route {
    /// `GET` or `HEAD /metrics`.
    Metrics { send_body: bool },
    /// An error status, with extra header lines.
    Status(u16, &'static str),
}

fn route(head: &[u8]) -> Route {
    let line = head.split(|&b| b == b'\n').next().unwrap_or_default();
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let mut parts = line.split(|&b| b == b' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Route::Status(400, "");
    };
    if !version.starts_with(b"HTTP/1.") || method.is_empty() {
        return Route::Status(400, "");
    }
    let path = target.split(|&b| b == b'?').next().unwrap_or_default();
    if path != b"/metrics" {
        return Route::Status(404, "");
    }
    match method {
        b"GET" => Route::Metrics { send_body: true },
        b"HEAD" => Route::Metrics { send_body: false },
        _ => Route::Status(405, "Allow: GET, HEAD\r\n"),
    }
}

async fn respond(
    stream: &mut TcpStream,
    code: u16,
    extra_headers: &str,
    body: &[u8],
) -> std::io::Result<()> {
    let (reason, content_type, length) = match code {
        200 => ("OK", CONTENT_TYPE, body.len()),
        400 => ("Bad Request", "", 0),
        404 => ("Not Found", "", 0),
        405 => ("Method Not Allowed", "", 0),
        _ => ("Request Header Fields Too Large", "", 0),
    };
    let mut head = format!("HTTP/1.1 {code} {reason}\r\n");
    if !content_type.is_empty() {
        head.push_str("Content-Type: ");
        head.push_str(content_type);
        head.push_str("\r\n");
    }
    head.push_str(&format!(
        "Content-Length: {length}\r\n{extra_headers}Connection: close\r\n\r\n"
    ));
    stream.write_all(head.as_bytes()).await?;
    stream.write_all(body).await?;
    stream.flush().await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_routed_by_method_and_path() {
        let metrics = Route::Metrics { send_body: true };
        assert_eq!(route(b"GET /metrics HTTP/1.1\r\nHost: x"), metrics);
        assert_eq!(route(b"GET /metrics?x=1 HTTP/1.0"), metrics);
        assert_eq!(
            route(b"HEAD /metrics HTTP/1.1"),
            Route::Metrics { send_body: false }
        );
        assert_eq!(
            route(b"POST /metrics HTTP/1.1"),
            Route::Status(405, "Allow: GET, HEAD\r\n")
        );
        assert_eq!(route(b"GET /other HTTP/1.1"), Route::Status(404, ""));
        assert_eq!(route(b"GET /metricsx HTTP/1.1"), Route::Status(404, ""));
        assert_eq!(route(b"GET /metrics"), Route::Status(400, ""));
        assert_eq!(route(b"GET /metrics SPDY/3"), Route::Status(400, ""));
        assert_eq!(route(b"\x00\xff garbage"), Route::Status(400, ""));
        assert_eq!(route(b""), Route::Status(400, ""));
    }

    #[test]
    fn the_head_ends_at_the_first_blank_line() {
        assert_eq!(find_end(b"GET / HTTP/1.1\r\n\r\nbody"), Some(14));
        assert_eq!(find_end(b"GET / HTTP/1.1\n\n"), Some(14));
        assert_eq!(find_end(b"GET / HTTP/1.1\r\nHost: x\r\n"), None);
    }
}
