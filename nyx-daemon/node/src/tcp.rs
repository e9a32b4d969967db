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

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

/// A [`TcpStream`] whose reads trust only "would block" as the sign that it is drained.
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
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.0).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.0).poll_write_vectored(cx, bufs)
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
