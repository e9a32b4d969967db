//! The datagram socket under both transports.
//!
//! Where the system allows it, datagrams move in batches through quinn-udp: GSO and GRO,
//! `recvmmsg`, and the local address each datagram arrived at (`IP_PKTINFO`), which a socket
//! bound to an unspecified address needs to answer from the right address. Some systems
//! refuse part of that: network simulators such as Shadow return `ENOPROTOOPT` for
//! `IP_PKTINFO` and `ENOSYS` for `recvmmsg`, and some sandboxes filter those calls. There the
//! socket moves one datagram per `recvfrom` / `sendto` with no ancillary data ("plain" I/O).
//! [`SocketMode::Auto`], the default, starts batched and falls back to plain I/O, once and
//! with a warning, when the system refuses the batched path at bind or on a later call.
//!
//! What plain I/O gives up: batching (more system calls per datagram) and, on a socket bound
//! to `0.0.0.0` or `[::]`, the choice of source address (the kernel picks one per packet, so a
//! host with several addresses should bind the one it advertises).

use std::io::{self, IoSliceMut};
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll, ready};

use quinn_udp::{RecvMeta, Transmit, UdpSocketState};
use tokio::io::Interest;

use crate::Error;

/// Socket buffer size asked of the kernel (it caps it at `net.core.{r,w}mem_max`).
const SOCKET_BUFFER: usize = 4 << 20;

/// How a transport's socket moves datagrams.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SocketMode {
    /// Batched where the system allows it, plain where it refuses (the default).
    #[default]
    Auto,
    /// Batched only: binding fails where the system refuses it.
    Batched,
    /// One datagram per system call, no ancillary data.
    Plain,
}

/// What a socket reports.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SocketStats {
    /// Whether it moves one datagram per system call ([`SocketMode::Plain`], or
    /// [`SocketMode::Auto`] on a system that refuses batching).
    pub plain_io: bool,
    /// Receives that failed with an error other than "nothing to read".
    pub receive_errors: u64,
}

/// A bound UDP socket registered with tokio, batched or plain (see the module docs).
#[derive(Debug)]
pub(crate) struct DatagramSocket {
    io: tokio::net::UdpSocket,
    /// quinn-udp's state for the batched path; `None` when plain from the start.
    batched: Option<UdpSocketState>,
    /// The batched path was refused after binding ([`SocketMode::Auto`]): plain from now on.
    fell_back: AtomicBool,
    mode: SocketMode,
}

impl DatagramSocket {
    /// Bind `addr` (needs a tokio runtime) in `mode`.
    pub(crate) fn bind(addr: SocketAddr, mode: SocketMode) -> Result<Self, Error> {
        let std = std::net::UdpSocket::bind(addr).map_err(io_error("bind UDP socket"))?;
        std.set_nonblocking(true)
            .map_err(io_error("make UDP socket non-blocking"))?;
        // Bursts of cells must not overflow the kernel's default ~200 KiB buffers; getting
        // less than asked is not an error.
        let sock = socket2::SockRef::from(&std);
        let _ = sock.set_recv_buffer_size(SOCKET_BUFFER);
        let _ = sock.set_send_buffer_size(SOCKET_BUFFER);
        let batched = match mode {
            SocketMode::Plain => None,
            SocketMode::Batched => Some(UdpSocketState::new((&std).into()).map_err(io_error(
                "configure batched UDP I/O (try socket mode plain)",
            ))?),
            SocketMode::Auto => match UdpSocketState::new((&std).into()) {
                Ok(state) => Some(state),
                Err(e) => {
                    tracing::warn!(
                        error = %e,
                        "the system refuses batched UDP I/O; one datagram per system call"
                    );
                    None
                }
            },
        };
        let io = tokio::net::UdpSocket::from_std(std).map_err(io_error("register UDP socket"))?;
        Ok(DatagramSocket {
            io,
            batched,
            fell_back: AtomicBool::new(false),
            mode,
        })
    }

    /// Whether datagrams move one per system call.
    pub(crate) fn is_plain(&self) -> bool {
        self.batch().is_none()
    }

    fn batch(&self) -> Option<&UdpSocketState> {
        match self.fell_back.load(Ordering::Relaxed) {
            true => None,
            false => self.batched.as_ref(),
        }
    }

    /// The bound address.
    pub(crate) fn local_addr(&self) -> io::Result<SocketAddr> {
        self.io.local_addr()
    }

    /// Datagrams one send may carry (GSO), 1 when plain.
    pub(crate) fn max_gso_segments(&self) -> usize {
        self.batch().map_or(1, UdpSocketState::max_gso_segments)
    }

    /// Datagrams one received buffer may hold (GRO), 1 when plain.
    pub(crate) fn gro_segments(&self) -> usize {
        self.batch().map_or(1, UdpSocketState::gro_segments)
    }

    /// Whether sent datagrams may be fragmented (plain I/O sets no don't-fragment flag).
    pub(crate) fn may_fragment(&self) -> bool {
        self.batch().is_none_or(UdpSocketState::may_fragment)
    }

    /// Wait until the socket may be readable.
    pub(crate) async fn readable(&self) -> io::Result<()> {
        self.io.readable().await
    }

    /// Wait until the socket may be writable.
    pub(crate) async fn writable(&self) -> io::Result<()> {
        self.io.writable().await
    }

    /// Receive what is ready, at most one datagram (or GRO batch) per buffer: how many
    /// buffers were filled. `WouldBlock` when nothing was ready (readiness is then cleared).
    ///
    /// A batched receive that fills fewer buffers than it was given found the socket's
    /// queue empty, so it clears the readiness itself: the next wait goes to epoll instead
    /// of to one more `recvmmsg` that could only say `EAGAIN`. (Tokio clears readiness only
    /// as of the event it had seen, so a datagram that arrived since keeps the socket
    /// ready.) On an idle relay that was one system call in five per forwarded datagram.
    pub(crate) fn try_recv(
        &self,
        bufs: &mut [IoSliceMut<'_>],
        meta: &mut [RecvMeta],
    ) -> io::Result<usize> {
        if let Some(state) = self.batch() {
            let capacity = bufs.len();
            let drained = std::cell::Cell::new(0);
            match self.io.try_io(Interest::READABLE, || {
                let n = state.recv((&self.io).into(), bufs, meta)?;
                if n < capacity {
                    drained.set(n);
                    return Err(io::ErrorKind::WouldBlock.into());
                }
                Ok(n)
            }) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock && drained.get() > 0 => {
                    return Ok(drained.get());
                }
                Err(e) if self.may_fall_back(&e) => {}
                other => return other,
            }
        }
        let mut filled = 0;
        for (buf, m) in bufs.iter_mut().zip(meta.iter_mut()) {
            match self.io.try_recv_from(buf) {
                Ok((len, addr)) => {
                    *m = RecvMeta {
                        addr,
                        len,
                        stride: len,
                        ecn: None,
                        dst_ip: None,
                    };
                    filled += 1;
                }
                // What was received so far is delivered; an error shows again next call.
                Err(_) if filled > 0 => break,
                Err(e) => return Err(e),
            }
        }
        Ok(filled)
    }

    /// Send `transmit` (a GSO batch when `segment_size` is set). `WouldBlock` when the
    /// socket's buffer is full and nothing was sent; plain I/O sends a batch's segments one
    /// by one and drops the rest of it if the buffer fills part way (datagrams are
    /// unreliable; senders batch only up to [`max_gso_segments`](Self::max_gso_segments)).
    pub(crate) fn try_send(&self, transmit: &Transmit<'_>) -> io::Result<()> {
        if let Some(state) = self.batch() {
            match self.io.try_io(Interest::WRITABLE, || {
                state.send((&self.io).into(), transmit)
            }) {
                Err(e) if self.may_fall_back(&e) => {}
                other => return other,
            }
        }
        let size = transmit
            .segment_size
            .unwrap_or(transmit.contents.len())
            .max(1);
        for (i, segment) in transmit.contents.chunks(size).enumerate() {
            match self.io.try_send_to(segment, transmit.destination) {
                Ok(_) => {}
                Err(_) if i > 0 => return Ok(()),
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// In [`SocketMode::Auto`], an error that says the system does not support a batched
    /// call switches the socket to plain I/O for good (logged once); true if it did.
    fn may_fall_back(&self, e: &io::Error) -> bool {
        if self.mode != SocketMode::Auto || !refused(e) {
            return false;
        }
        if !self.fell_back.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                error = %e,
                "the system refuses batched UDP I/O; one datagram per system call from now on"
            );
        }
        true
    }
}

/// Whether `e` says the system does not support the call or option, rather than that the
/// network or a peer failed.
fn refused(e: &io::Error) -> bool {
    const ENOSYS: i32 = 38;
    const ENOPROTOOPT: i32 = 92;
    const EOPNOTSUPP: i32 = 95;
    e.kind() == io::ErrorKind::Unsupported
        || matches!(e.raw_os_error(), Some(ENOSYS | ENOPROTOOPT | EOPNOTSUPP))
}

/// An [`Error::Io`] for a failed `what`, keeping the system's error as the source.
pub(crate) fn io_error(what: &'static str) -> impl FnOnce(io::Error) -> Error {
    move |e| Error::Io {
        what,
        source: Arc::new(e),
    }
}

/// The socket as quinn's endpoint sees it.
#[derive(Debug)]
pub(crate) struct QuinnSocket(pub(crate) Arc<DatagramSocket>);

/// Wakes quinn when the socket may take more datagrams.
#[derive(Debug)]
struct Writable(Arc<DatagramSocket>);

impl quinn::UdpPoller for Writable {
    fn poll_writable(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.0.io.poll_send_ready(cx)
    }
}

impl quinn::AsyncUdpSocket for QuinnSocket {
    fn create_io_poller(self: Arc<Self>) -> Pin<Box<dyn quinn::UdpPoller>> {
        Box::pin(Writable(self.0.clone()))
    }

    fn try_send(&self, transmit: &Transmit<'_>) -> io::Result<()> {
        self.0.try_send(transmit)
    }

    fn poll_recv(
        &self,
        cx: &mut Context<'_>,
        bufs: &mut [IoSliceMut<'_>],
        meta: &mut [RecvMeta],
    ) -> Poll<io::Result<usize>> {
        loop {
            ready!(self.0.io.poll_recv_ready(cx))?;
            match self.0.try_recv(bufs, meta) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                other => return Poll::Ready(other),
            }
        }
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        self.0.local_addr()
    }

    fn max_transmit_segments(&self) -> usize {
        self.0.max_gso_segments()
    }

    fn max_receive_segments(&self) -> usize {
        self.0.gro_segments()
    }

    fn may_fragment(&self) -> bool {
        self.0.may_fragment()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn pair(mode: SocketMode) -> (DatagramSocket, DatagramSocket) {
        let a = DatagramSocket::bind("127.0.0.1:0".parse().unwrap(), mode).unwrap();
        let b = DatagramSocket::bind("127.0.0.1:0".parse().unwrap(), mode).unwrap();
        (a, b)
    }

    async fn exchange(mode: SocketMode) {
        let (a, b) = pair(mode).await;
        assert_eq!(a.is_plain(), mode == SocketMode::Plain);
        let to = b.local_addr().unwrap();
        // A batch of three equal segments (sent as one GSO transmit where batched).
        let contents: Vec<u8> = (0..3u8).flat_map(|i| [i; 100]).collect();
        let segments = a.max_gso_segments().min(3);
        let transmit = Transmit {
            destination: to,
            ecn: None,
            contents: &contents[..segments * 100],
            segment_size: Some(100),
            src_ip: None,
        };
        a.writable().await.unwrap();
        a.try_send(&transmit).unwrap();
        let mut got = Vec::new();
        let mut storage = vec![0u8; 8 * 65536];
        while got.len() < segments * 100 {
            b.readable().await.unwrap();
            let mut chunks = storage.chunks_mut(65536);
            let mut bufs: Vec<IoSliceMut<'_>> = (0..8)
                .map(|_| IoSliceMut::new(chunks.next().unwrap()))
                .collect();
            let mut meta = [RecvMeta::default(); 8];
            let n = match b.try_recv(&mut bufs, &mut meta) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                other => other.unwrap(),
            };
            for (buf, m) in bufs.iter().zip(&meta).take(n) {
                assert_eq!(m.addr, a.local_addr().unwrap());
                for d in buf[..m.len].chunks(m.stride) {
                    assert_eq!(d.len(), 100, "one datagram per segment");
                    got.extend_from_slice(d);
                }
            }
        }
        assert_eq!(got, &contents[..segments * 100]);
        // Nothing more: WouldBlock, not an error and not an empty success.
        let mut buf = [0u8; 2048];
        let mut bufs = [IoSliceMut::new(&mut buf)];
        let mut meta = [RecvMeta::default(); 1];
        let nothing = b.try_recv(&mut bufs, &mut meta).unwrap_err();
        assert_eq!(nothing.kind(), io::ErrorKind::WouldBlock);
    }

    #[tokio::test]
    async fn plain_io_moves_datagrams_one_per_call() {
        exchange(SocketMode::Plain).await;
        let (a, _) = pair(SocketMode::Plain).await;
        assert_eq!(a.max_gso_segments(), 1);
        assert_eq!(a.gro_segments(), 1);
    }

    #[tokio::test]
    async fn batched_io_moves_the_same_datagrams() {
        exchange(SocketMode::Batched).await;
        exchange(SocketMode::Auto).await;
    }

    /// A batched receive that found the queue empty leaves the socket not ready (the next
    /// wait goes to epoll), and a datagram sent after it makes it ready again: nothing is
    /// left unreceived.
    #[tokio::test]
    async fn a_short_batch_clears_readiness_without_losing_a_wake_up() {
        let (a, b) = pair(SocketMode::Batched).await;
        let to = b.local_addr().unwrap();
        let send = |byte: u8| {
            let contents = [byte; 100];
            a.try_send(&Transmit {
                destination: to,
                ecn: None,
                contents: &contents,
                segment_size: None,
                src_ip: None,
            })
        };
        let mut storage = vec![0u8; 8 * 2048];
        let mut recv = || {
            let mut chunks = storage.chunks_mut(2048);
            let mut bufs: Vec<IoSliceMut<'_>> = (0..8)
                .map(|_| IoSliceMut::new(chunks.next().unwrap()))
                .collect();
            let mut meta = [RecvMeta::default(); 8];
            b.try_recv(&mut bufs, &mut meta)
                .map(|n| meta[..n].iter().map(|m| m.len).sum::<usize>())
        };
        for round in 0..3u8 {
            a.writable().await.unwrap();
            send(round).unwrap();
            b.readable().await.unwrap();
            let mut got = 0;
            while got < 100 {
                match recv() {
                    Ok(len) => got += len,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                        b.readable().await.unwrap();
                    }
                    Err(e) => panic!("receive failed: {e}"),
                }
            }
            assert_eq!(got, 100, "round {round}");
            if !b.is_plain() {
                let wait = tokio::time::timeout(std::time::Duration::from_millis(20), b.readable());
                assert!(wait.await.is_err(), "still ready after a short batch");
            }
        }
    }

    #[test]
    fn only_unsupported_calls_cause_a_fall_back() {
        assert!(refused(&io::Error::from_raw_os_error(38)));
        assert!(refused(&io::Error::from_raw_os_error(92)));
        assert!(!refused(&io::Error::from_raw_os_error(111))); // ECONNREFUSED
        assert!(!refused(&io::Error::from(io::ErrorKind::WouldBlock)));
    }
}
