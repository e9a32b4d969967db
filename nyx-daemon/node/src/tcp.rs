//! TCP streams as the ends of NyxNet streams read them (an exit's target, a SOCKS client).
//!
//! tokio's `TcpStream` treats a read that returns less than the buffer as proof that the
//! socket is drained and waits for the next readiness event before reading again. Linux
//! drains the whole receive queue into a large enough buffer, so that holds there; but a
//! short read is legal whenever the system likes (the Shadow simulator returns one segment
//! per call), and then the rest of the data sits unread until the peer sends more, which it
//! will not when its window is full: the transfer stalls for good. [`DrainingTcp`] reads
//! until the system itself says "would block", at the cost of one extra `recv` when a read
//! catches up with the sender.
//!
//! tokio treats a short write the same way, as proof that the send buffer is full. Shadow
//! takes at most 65 535 bytes per `send` however much room there is, so a 64 KiB write is
//! taken one byte short while the socket stays writable, and a socket whose writability
//! never changes raises no new readiness event: an entry writing a download to its client
//! in 64 KiB pieces waited for good (docs/benchmarks.md, issue 22, sessions 36-37).
//! [`DrainingTcp`] writes, too, until the system says "would block", at the cost of one
//! extra `send` when the send buffer is really full.
//!
//! An exit's connection to a nearby target also gets a receive buffer sized for the
//! target's round trip (`receive_buffer_for`, used by the exit), so that the target cannot fill the exit's
//! downlink queue ahead of the circuit's own cells.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

/// The fastest one stream is expected to go through a circuit, in bytes a second. An
/// exit's connection to its target needs a receive buffer of this rate times the target's
/// round trip, and no more.
const STREAM_RATE: u64 = 32_000_000;
/// The smallest receive buffer pinned.
const MIN_RECEIVE_BUFFER: u64 = 64 * 1024;
/// The largest pinned: Linux starts a connection at 128 KiB (`tcp_rmem`) and grows it with
/// what the application reads; a target farther away than this covers keeps that tuning.
const MAX_PINNED_RECEIVE_BUFFER: u64 = 128 * 1024;

/// The receive buffer to pin on an exit's connection to a target `rtt` away, or `None` to
/// leave the system's tuning alone.
///
/// A target near the exit (a web server in the same data centre) sends faster than the
/// exit's own link can take in, as far as the receive window lets it; a grown window lets
/// it keep megabytes in the queue of the exit's downlink, and the circuit's ACK cells, which
/// share that queue, wait behind them (40-90 ms under Shadow with 20 ms links, where the
/// circuit stalled for about two round trips at every download's start; docs/benchmarks.md).
/// A window of the rate a circuit carries times the target's round trip keeps that queue to
/// a few milliseconds and holds the target's leg below no circuit slower than that rate.
pub(crate) fn receive_buffer_for(rtt: std::time::Duration) -> Option<usize> {
    let want = (rtt.as_micros().saturating_mul(u128::from(STREAM_RATE)) / 1_000_000)
        .max(u128::from(MIN_RECEIVE_BUFFER));
    if want > u128::from(MAX_PINNED_RECEIVE_BUFFER) {
        return None;
    }
    usize::try_from(want).ok()
}

/// Pin the receive buffer of an exit's connection to its target, whose handshake took
/// `rtt` (see [`receive_buffer_for`]). Best effort: a system that refuses keeps its own.
pub(crate) fn fit_receive_buffer(tcp: &TcpStream, rtt: std::time::Duration) {
    if let Some(size) = receive_buffer_for(rtt) {
        let _ = socket2::SockRef::from(tcp).set_recv_buffer_size(size);
    }
}

/// Bytes one read takes, in the direction towards the user (a download: from the exit's
/// target into the stream, from the stream into the entry's SOCKS or HTTP CONNECT client),
/// when an exit or an entry relays a stream and its TCP connection. tokio's default of 8 KiB
/// made the entry write a clean loopback download to its client in about 34 000 `sendto`s
/// per 200 MB (5.9 KB each) and the exit read it in 25 000 `recvfrom`s; with 64 KiB, 11 000
/// and 4 200 (docs/benchmarks.md, issue 22, session 36). At an exit's connection limit
/// (`exit_max_connections`, 4096 by default) these buffers hold at most 256 MiB; a stream's
/// own window (2-8 MiB) is far larger.
pub const TOWARD_USER_BUFFER: usize = 64 * 1024;
/// Bytes one read takes in the other direction (requests, uploads): tokio's default.
pub const FROM_USER_BUFFER: usize = 8 * 1024;

/// A [`TcpStream`] whose reads trust only "would block" as the sign that it is drained, and
/// whose writes only "would block" as the sign that it is full.
#[derive(Debug)]
pub struct DrainingTcp(TcpStream);

impl DrainingTcp {
    /// Wrap `stream`.
    pub fn new(stream: TcpStream) -> Self {
        DrainingTcp(stream)
    }

    /// The stream itself (socket options, addresses).
    pub fn get_ref(&self) -> &TcpStream {
        &self.0
    }

    /// Write with `write` once the socket is writable, until it takes bytes or fails with
    /// anything but "would block". tokio's `try_write*` clear the write readiness only on
    /// WouldBlock, never on a short write.
    fn poll_write_with(
        &self,
        cx: &mut Context<'_>,
        mut write: impl FnMut(&TcpStream) -> io::Result<usize>,
    ) -> Poll<io::Result<usize>> {
        loop {
            ready!(self.0.poll_write_ready(cx))?;
            match write(&self.0) {
                Ok(n) => return Poll::Ready(Ok(n)),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
    }
}

impl AsyncRead for DrainingTcp {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        loop {
            ready!(self.0.poll_read_ready(cx))?;
            // `try_read` clears readiness only on WouldBlock, never on a short read.
            match self.0.try_read(buf.initialize_unfilled()) {
                Ok(n) => {
                    buf.advance(n);
                    return Poll::Ready(Ok(()));
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
    }
}

impl AsyncWrite for DrainingTcp {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.poll_write_with(cx, |tcp| tcp.try_write(buf))
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        self.poll_write_with(cx, |tcp| tcp.try_write_vectored(bufs))
    }

    fn is_write_vectored(&self) -> bool {
        self.0.is_write_vectored()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    #[test]
    fn a_near_target_gets_a_buffer_for_its_round_trip_and_a_far_one_keeps_the_systems() {
        use std::time::Duration;
        assert_eq!(receive_buffer_for(Duration::ZERO), Some(64 * 1024));
        assert_eq!(
            receive_buffer_for(Duration::from_millis(2)),
            Some(64 * 1024)
        );
        assert_eq!(receive_buffer_for(Duration::from_millis(3)), Some(96_000));
        assert_eq!(
            receive_buffer_for(Duration::from_micros(4_096)),
            Some(131_072)
        );
        assert_eq!(receive_buffer_for(Duration::from_millis(5)), None);
        assert_eq!(receive_buffer_for(Duration::from_secs(1)), None);
        assert_eq!(receive_buffer_for(Duration::MAX), None);
    }

    /// The size reaches the socket; a far target's socket is left as the system made it.
    #[tokio::test]
    async fn the_buffer_is_set_on_the_socket_only_for_a_near_target() {
        use std::time::Duration;
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let size = |t: &TcpStream| socket2::SockRef::from(t).recv_buffer_size().unwrap();
        let far = TcpStream::connect(addr).await.unwrap();
        let before = size(&far);
        fit_receive_buffer(&far, Duration::from_millis(50));
        assert_eq!(size(&far), before);
        let near = TcpStream::connect(addr).await.unwrap();
        fit_receive_buffer(&near, Duration::from_millis(3));
        // Linux doubles what it is given (for its bookkeeping); others keep it.
        let got = size(&near);
        assert!((96_000..=2 * 96_000).contains(&got), "{got}");
        assert_ne!(got, before);
    }

    /// Large writes into a socket that a slow reader keeps full are taken whole and in
    /// order: a write that would block waits for room, and one taken in part leaves the
    /// rest to the next.
    #[tokio::test]
    async fn writes_everything_in_order_to_a_slow_reader() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let want: Vec<u8> = (0..4 * 1024 * 1024u32).map(|i| (i % 251) as u8).collect();
        let reader = tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.unwrap();
            let mut got = Vec::new();
            let mut buf = vec![0u8; 16 * 1024];
            loop {
                let n = s.read(&mut buf).await.unwrap();
                if n == 0 {
                    return got;
                }
                got.extend_from_slice(&buf[..n]);
                tokio::time::sleep(std::time::Duration::from_micros(200)).await;
            }
        });
        let tcp = TcpStream::connect(addr).await.unwrap();
        let _ = socket2::SockRef::from(&tcp).set_send_buffer_size(16 * 1024);
        let mut tcp = DrainingTcp::new(tcp);
        let mut short = 0usize;
        for chunk in want.chunks(64 * 1024) {
            let mut rest = chunk;
            while !rest.is_empty() {
                let n = tcp.write(rest).await.unwrap();
                assert!(n > 0);
                short += usize::from(n < rest.len());
                rest = &rest[n..];
            }
        }
        tcp.shutdown().await.unwrap();
        let got = reader.await.unwrap();
        assert_eq!(got.len(), want.len());
        assert!(got == want, "bytes out of order");
        // The send buffer is far smaller than a write: the socket filled, and writes were
        // taken in part.
        assert!(short > 0);
    }

    /// What arrives in pieces, with pauses between them, is read whole and in order, and
    /// the end of the stream is seen.
    #[tokio::test]
    async fn reads_everything_in_order_and_the_end() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let sender = tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.unwrap();
            for i in 0..50u8 {
                s.write_all(&vec![i; 3000]).await.unwrap();
                if i % 10 == 0 {
                    tokio::time::sleep(std::time::Duration::from_millis(2)).await;
                }
            }
        });
        let mut tcp = DrainingTcp::new(TcpStream::connect(addr).await.unwrap());
        let mut got = Vec::new();
        tcp.read_to_end(&mut got).await.unwrap();
        sender.await.unwrap();
        let want: Vec<u8> = (0..50u8).flat_map(|i| vec![i; 3000]).collect();
        assert_eq!(got, want);
        assert!(tcp.get_ref().peer_addr().is_ok());
    }
}
