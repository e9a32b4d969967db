//! The streams a daemon carries for local applications (SOCKS and HTTP CONNECT connections
//! and control-API streams): listed and closed through the control API, counted for
//! metrics.
//!
//! A stream is registered when it opens and leaves the registry when its [`StreamTicket`]
//! is dropped. [`Counted`] counts an application connection's bytes on its ticket. The
//! registry's [`StreamHistograms`] observe each stream's time to first byte (from the
//! registration), and its bytes and duration when it leaves.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nyx_core::NodeId;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::watch;

use crate::telemetry::{HistogramMetric, StreamHistograms};

/// Who opened a stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamSource {
    /// An application through the SOCKS entry.
    Socks,
    /// An application through the HTTP CONNECT entry.
    HttpConnect,
    /// A control-API client (`OpenStream`, `nyx connect`).
    Control,
}

impl StreamSource {
    /// `socks`, `http_connect` or `control`.
    pub fn as_str(self) -> &'static str {
        match self {
            StreamSource::Socks => "socks",
            StreamSource::HttpConnect => "http_connect",
            StreamSource::Control => "control",
        }
    }
}

/// One open stream, as the control API lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamView {
    /// The daemon's number for it.
    pub id: u64,
    /// Who opened it.
    pub source: StreamSource,
    /// Where it goes ("host:port").
    pub target: String,
    /// How long it has been open.
    pub age: Duration,
    /// Bytes sent into the network.
    pub sent: u64,
    /// Bytes received from the network.
    pub received: u64,
    /// Its circuit's relays, entry first.
    pub path: Vec<NodeId>,
}

#[derive(Debug)]
struct Entry {
    source: StreamSource,
    target: String,
    opened: Instant,
    path: Vec<NodeId>,
    sent: AtomicU64,
    received: AtomicU64,
    /// A byte came from the network (its time to first byte is observed).
    first_byte: AtomicBool,
    close: watch::Sender<bool>,
}

/// Every open stream of the daemon (cheap to clone).
#[derive(Debug, Clone, Default)]
pub struct StreamRegistry {
    inner: Arc<Registry>,
}

#[derive(Debug, Default)]
struct Registry {
    next: AtomicU64,
    streams: Mutex<BTreeMap<u64, Arc<Entry>>>,
    opened_total: AtomicU64,
    histograms: StreamHistograms,
}

impl StreamRegistry {
    /// Record a stream that just opened; it stays listed while the ticket lives.
    pub fn register(&self, source: StreamSource, target: &str, path: Vec<NodeId>) -> StreamTicket {
        let id = self.inner.next.fetch_add(1, Ordering::Relaxed) + 1;
        let (close, _) = watch::channel(false);
        let entry = Arc::new(Entry {
            source,
            target: target.to_owned(),
            opened: Instant::now(),
            path,
            sent: AtomicU64::new(0),
            received: AtomicU64::new(0),
            first_byte: AtomicBool::new(false),
            close,
        });
        if let Ok(mut map) = self.inner.streams.lock() {
            map.insert(id, entry.clone());
        }
        self.inner.opened_total.fetch_add(1, Ordering::Relaxed);
        StreamTicket {
            id,
            entry,
            registry: self.inner.clone(),
        }
    }

    /// The open streams, by id.
    pub fn list(&self) -> Vec<StreamView> {
        let Ok(map) = self.inner.streams.lock() else {
            return Vec::new();
        };
        map.iter()
            .map(|(id, e)| StreamView {
                id: *id,
                source: e.source,
                target: e.target.clone(),
                age: e.opened.elapsed(),
                sent: e.sent.load(Ordering::Relaxed),
                received: e.received.load(Ordering::Relaxed),
                path: e.path.clone(),
            })
            .collect()
    }

    /// Ask the stream `id` to close (its relay stops and the stream is reset); false if no
    /// stream has that id.
    pub fn close(&self, id: u64) -> bool {
        let entry = match self.inner.streams.lock() {
            Ok(map) => map.get(&id).cloned(),
            Err(_) => None,
        };
        match entry {
            Some(e) => {
                e.close.send_replace(true);
                true
            }
            None => false,
        }
    }

    /// Streams open now.
    pub fn open_count(&self) -> usize {
        self.inner.streams.lock().map_or(0, |m| m.len())
    }

    /// Streams opened since the daemon started.
    pub fn opened_total(&self) -> u64 {
        self.inner.opened_total.load(Ordering::Relaxed)
    }

    /// The distributions of the streams that sent a first byte or ended.
    pub fn histograms(&self) -> Vec<HistogramMetric> {
        self.inner.histograms.snapshot()
    }
}

/// A registered stream; dropping it removes the stream from the registry.
#[derive(Debug)]
pub struct StreamTicket {
    id: u64,
    entry: Arc<Entry>,
    registry: Arc<Registry>,
}

impl StreamTicket {
    /// The stream's number.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// Count bytes sent into the network.
    pub fn add_sent(&self, n: usize) {
        self.entry.sent.fetch_add(n as u64, Ordering::Relaxed);
    }

    /// Count bytes received from the network.
    pub fn add_received(&self, n: usize) {
        self.entry.received.fetch_add(n as u64, Ordering::Relaxed);
        // A load first: after the first byte, a read costs no write to the shared flag.
        if n > 0
            && !self.entry.first_byte.load(Ordering::Relaxed)
            && !self.entry.first_byte.swap(true, Ordering::Relaxed)
        {
            let waited = self.entry.opened.elapsed();
            self.registry.histograms.first_byte.observe_duration(waited);
        }
    }

    /// Resolves when the operator closes the stream.
    pub async fn closed(&self) {
        let mut rx = self.entry.close.subscribe();
        let _ = rx.wait_for(|closed| *closed).await;
    }
}

impl Drop for StreamTicket {
    fn drop(&mut self) {
        if let Ok(mut map) = self.registry.streams.lock() {
            map.remove(&self.id);
        }
        let (h, e) = (&self.registry.histograms, &self.entry);
        h.duration.observe_duration(e.opened.elapsed());
        h.sent.observe(e.sent.load(Ordering::Relaxed) as f64);
        h.received
            .observe(e.received.load(Ordering::Relaxed) as f64);
    }
}

/// An application's connection whose traffic is counted on a stream's ticket: bytes read
/// from it go into the network (sent), bytes written to it came from the network
/// (received).
#[derive(Debug)]
pub struct Counted<'a, T> {
    inner: T,
    ticket: &'a StreamTicket,
}

impl<'a, T> Counted<'a, T> {
    /// Count `inner`'s traffic on `ticket`.
    pub fn new(inner: T, ticket: &'a StreamTicket) -> Self {
        Counted { inner, ticket }
    }

    /// The connection.
    pub fn get_mut(&mut self) -> &mut T {
        &mut self.inner
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Counted<'_, T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let r = Pin::new(&mut self.inner).poll_read(cx, buf);
        let n = buf.filled().len() - before;
        self.ticket.add_sent(n);
        r
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Counted<'_, T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write(cx, buf);
        if let Poll::Ready(Ok(n)) = r {
            self.ticket.add_received(n);
        }
        r
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tickets_list_count_and_leave() {
        let reg = StreamRegistry::default();
        let a = reg.register(StreamSource::Socks, "example.org:80", Vec::new());
        let b = reg.register(StreamSource::Control, "127.0.0.1:9", Vec::new());
        assert_ne!(a.id(), b.id());
        a.add_sent(10);
        a.add_received(7);
        let list = reg.list();
        assert_eq!(list.len(), 2);
        assert_eq!(list[0].target, "example.org:80");
        assert_eq!((list[0].sent, list[0].received), (10, 7));
        assert_eq!(list[1].source.as_str(), "control");
        drop(a);
        assert_eq!(reg.open_count(), 1);
        assert_eq!(reg.opened_total(), 2);
        assert!(!reg.close(999));
    }

    /// The first received byte gives one time to first byte; the end gives the duration
    /// and the bytes each way.
    #[test]
    fn tickets_feed_the_stream_histograms() {
        let reg = StreamRegistry::default();
        let count = |name: &str, direction: Option<&str>| {
            reg.histograms()
                .iter()
                .find(|h| {
                    h.name == name && direction.is_none_or(|d| h.labels.contains(&("direction", d)))
                })
                .map(|h| (h.count(), h.sum))
                .unwrap()
        };
        let t = reg.register(StreamSource::Socks, "a:1", Vec::new());
        t.add_sent(300);
        t.add_received(0);
        assert_eq!(count("nyx_stream_first_byte_seconds", None).0, 0);
        t.add_received(5);
        t.add_received(7);
        assert_eq!(count("nyx_stream_first_byte_seconds", None).0, 1);
        assert_eq!(count("nyx_stream_duration_seconds", None).0, 0);
        drop(t);
        assert_eq!(count("nyx_stream_duration_seconds", None).0, 1);
        assert_eq!(count("nyx_stream_bytes", Some("sent")), (1, 300.0));
        assert_eq!(count("nyx_stream_bytes", Some("received")), (1, 12.0));
        assert_eq!(count("nyx_stream_first_byte_seconds", None).0, 1);
    }

    #[tokio::test]
    async fn counted_connections_count_both_ways() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let reg = StreamRegistry::default();
        let t = reg.register(StreamSource::Socks, "a:1", Vec::new());
        let (app, mut other) = tokio::io::duplex(64);
        let mut counted = Counted::new(app, &t);
        other.write_all(b"hello").await.unwrap();
        let mut buf = [0u8; 5];
        counted.read_exact(&mut buf).await.unwrap();
        counted.write_all(b"abc").await.unwrap();
        let view = &reg.list()[0];
        assert_eq!((view.sent, view.received), (5, 3));
    }

    #[tokio::test]
    async fn close_wakes_the_ticket() {
        let reg = StreamRegistry::default();
        let t = reg.register(StreamSource::Socks, "a:1", Vec::new());
        let id = t.id();
        let waiter = tokio::spawn(async move {
            t.closed().await;
            t.id()
        });
        tokio::task::yield_now().await;
        assert!(reg.close(id));
        assert_eq!(waiter.await.unwrap(), id);
    }
}
