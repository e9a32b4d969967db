//! [`NyxStream`]: a stream through the network as a tokio `AsyncRead + AsyncWrite`.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use std::sync::Arc;

use crate::Error;
use crate::endpoint::Endpoint;
use crate::handle::Liveness;
use nyx_overlay::stream::{ReadOutcome, ResetReason, StreamId};

/// A reliable byte stream to a TCP target, carried over a 3-hop circuit. Reads end (0
/// bytes) when the target closed its side; [`shutdown`](tokio::io::AsyncWriteExt::shutdown)
/// closes ours (half-close). A stream that fails reports an `io::Error` whose inner error is
/// the crate's [`Error`] (a stream reset with its [`Error::reset_reason`], for example), and whose
/// kind follows the reason: `ConnectionRefused`, `TimedOut`, `PermissionDenied` (exit
/// policy), `HostUnreachable`, `ConnectionAborted` (circuit lost), `ConnectionReset`.
/// Dropping a stream that was not read to its end resets it.
pub struct NyxStream {
    ep: Endpoint,
    id: StreamId,
    /// A client's stream keeps its node running (an exit's streams belong to the node).
    _node: Option<Arc<Liveness>>,
}

impl std::fmt::Debug for NyxStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NyxStream").field("id", &self.id).finish()
    }
}

impl NyxStream {
    pub(crate) fn new(ep: Endpoint, id: StreamId, node: Option<Arc<Liveness>>) -> Self {
        NyxStream {
            ep,
            id,
            _node: node,
        }
    }

    /// The stream's id on its circuit.
    pub fn id(&self) -> StreamId {
        self.id
    }

    /// The relays of the stream's circuit, entry first (empty at an exit).
    pub fn path(&self) -> &[nyx_core::NodeId] {
        &self.ep.path
    }

    /// Whether two streams share a circuit.
    pub fn same_circuit(&self, other: &NyxStream) -> bool {
        self.ep.same(&other.ep)
    }

    /// Abandon the stream at once in both directions, telling the other end why.
    pub fn reset(&self, reason: ResetReason) {
        self.ep.reset(self.id, reason);
    }

    pub(super) fn endpoint(&self) -> &Endpoint {
        &self.ep
    }
}

/// The `io::Error` for a stream error.
pub(crate) fn io_error(e: impl Into<Error>) -> io::Error {
    let e = e.into();
    let kind = match &e {
        Error::Overlay(e) => match e {
            nyx_overlay::Error::StreamReset { reason } => match reason {
                ResetReason::Refused => io::ErrorKind::ConnectionRefused,
                ResetReason::Timeout => io::ErrorKind::TimedOut,
                ResetReason::Policy => io::ErrorKind::PermissionDenied,
                ResetReason::Unreachable => io::ErrorKind::HostUnreachable,
                ResetReason::CircuitLost => io::ErrorKind::ConnectionAborted,
                ResetReason::Protocol => io::ErrorKind::InvalidData,
                _ => io::ErrorKind::ConnectionReset,
            },
            nyx_overlay::Error::StreamFinished => io::ErrorKind::BrokenPipe,
            nyx_overlay::Error::NoSuchStream => io::ErrorKind::NotConnected,
            _ => io::ErrorKind::Other,
        },
        _ => io::ErrorKind::Other,
    };
    io::Error::new(kind, e)
}

impl AsyncRead for NyxStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let mut s = self.ep.lock();
        let dst = buf.initialize_unfilled();
        match s.mux.read(self.id, dst) {
            Ok(ReadOutcome::Data(n)) => {
                buf.advance(n);
                let wake = s.mux.has_queued_controls();
                drop(s);
                if wake {
                    self.ep.notify.notify_one();
                }
                Poll::Ready(Ok(()))
            }
            Ok(ReadOutcome::Finished) => {
                // DONE was queued for the peer.
                drop(s);
                self.ep.notify.notify_one();
                Poll::Ready(Ok(()))
            }
            Ok(ReadOutcome::Blocked) => {
                s.wakers.entry(self.id).or_default().read = Some(cx.waker().clone());
                Poll::Pending
            }
            Err(e) => Poll::Ready(Err(io_error(e))),
        }
    }
}

impl AsyncWrite for NyxStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        if data.is_empty() {
            return Poll::Ready(Ok(0));
        }
        let mut s = self.ep.lock();
        let now = s.now();
        match s.mux.write(self.id, data, now) {
            Ok(0) => {
                s.wakers.entry(self.id).or_default().write = Some(cx.waker().clone());
                Poll::Pending
            }
            Ok(n) => {
                drop(s);
                self.ep.notify.notify_one();
                Poll::Ready(Ok(n))
            }
            Err(e) => Poll::Ready(Err(io_error(e))),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let mut s = self.ep.lock();
        let now = s.now();
        let r = s.mux.flush(self.id, now);
        drop(s);
        self.ep.notify.notify_one();
        Poll::Ready(r.map_err(io_error))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let mut s = self.ep.lock();
        let now = s.now();
        let r = s.mux.finish(self.id, now);
        drop(s);
        self.ep.notify.notify_one();
        Poll::Ready(r.map_err(io_error))
    }
}

impl Drop for NyxStream {
    fn drop(&mut self) {
        let mut s = self.ep.lock();
        let now = s.now();
        s.mux.release(self.id, now);
        s.wakers.remove(&self.id);
        s.opens.remove(&self.id);
        drop(s);
        self.ep.notify.notify_one();
    }
}
