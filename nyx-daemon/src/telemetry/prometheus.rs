//! The HTTP endpoint Prometheus scrapes, served with hyper (HTTP/1.1 only).
//!
//! What it is for: answering `GET /metrics` (and `HEAD`) on `telemetry.prometheus_listen`
//! with the rendered [`MetricsSnapshot`](super::MetricsSnapshot), `404` for any other path,
//! `405` for any other method, and closing every connection after its one response. It is
//! built to sit on a local or private address without trusting its clients: the request
//! head is limited in size (default 8 KiB; larger ones get `431`) and must arrive within a
//! timeout (default 5 s), the answer must be written within another (default 10 s), at most
//! a fixed number of connections are served at once (default 32; more wait in the kernel's
//! backlog), and request bodies are never read.
//!
//! The numbers come from a [`SnapshotSource`], called once per scrape, so every scrape sees
//! fresh counters and nothing runs between scrapes.
//!
//! What it is not for: anything else HTTP (keep-alive, HTTP/2, TLS, authentication). Bind
//! it to an address only the monitoring system reaches.
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

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::header::{self, HeaderValue};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, Semaphore};
use tokio::task::JoinSet;

use super::metrics::{SnapshotSource, render_prometheus};
use crate::Error;

/// The content type of the text exposition format.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// hyper's smallest read buffer: a smaller [`PrometheusConfig::max_head_bytes`] still
/// limits the head, but the buffer is this large.
const MIN_READ_BUFFER: usize = 8 * 1024;

/// Limits of the metrics server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PrometheusConfig {
    /// Time from accepting a connection to the end of its request head (default 5 s); a
    /// client that is slower is disconnected without an answer.
    pub read_timeout: Duration,
    /// Time from the end of the request head to the end of the response: taking the
    /// snapshot and writing it (default 10 s). A connection still busy then is dropped.
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
                serve(stream, source, &config).await;
                drop(slot);
            });
        }
    }
}

/// One connection: one request, one response, close. hyper enforces the head's size and
/// its read timeout (closing without an answer); the write timeout starts when the head
/// is complete.
async fn serve(stream: TcpStream, source: SnapshotSource, config: &PrometheusConfig) {
    let _ = stream.set_nodelay(true);
    let head_done = Arc::new(Notify::new());
    let signal = Arc::clone(&head_done);
    let service = service_fn(move |request: Request<Incoming>| {
        signal.notify_one();
        let source = Arc::clone(&source);
        async move { Ok::<_, Infallible>(answer(&request, &source).await) }
    });
    let connection = http1::Builder::new()
        .keep_alive(false)
        .timer(TokioTimer::new())
        .header_read_timeout(config.read_timeout)
        .max_header_size(config.max_head_bytes)
        .max_buf_size(config.max_head_bytes.max(MIN_READ_BUFFER))
        .serve_connection(TokioIo::new(stream), service);
    let write_deadline = async {
        head_done.notified().await;
        tokio::time::sleep(config.write_timeout).await;
    };
    tokio::select! {
        // Errors (a slow or broken client, a reset) end the connection; nothing to report.
        _ = connection => {}
        () = write_deadline => {}
    }
}

/// The response to one request; the body is never read.
async fn answer(request: &Request<Incoming>, source: &SnapshotSource) -> Response<Full<Bytes>> {
    if request.uri().path() != "/metrics" {
        return status(StatusCode::NOT_FOUND);
    }
    match *request.method() {
        Method::GET | Method::HEAD => {
            let body = render_prometheus(&source().await);
            let mut response = status(StatusCode::OK);
            response
                .headers_mut()
                .insert(header::CONTENT_TYPE, HeaderValue::from_static(CONTENT_TYPE));
            // For HEAD, hyper sends the length and leaves the body out.
            *response.body_mut() = Full::new(Bytes::from(body));
            response
        }
        _ => {
            let mut response = status(StatusCode::METHOD_NOT_ALLOWED);
            response
                .headers_mut()
                .insert(header::ALLOW, HeaderValue::from_static("GET, HEAD"));
            response
        }
    }
}

/// An empty response with `code`, announcing the close.
fn status(code: StatusCode) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::new()));
    *response.status_mut() = code;
    response
        .headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    response
}
