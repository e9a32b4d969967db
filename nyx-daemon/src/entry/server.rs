//! The entry server: accept, run the protocol's handshake under a timeout, connect through
//! the node, answer, relay both ways until both sides are done.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, oneshot};
use tokio::task::{JoinHandle, JoinSet};

use super::stats::{Active, EntryCounters, EntryStats, Event};
use super::{Accepted, Answer, EntryConfig, HandshakeError, Protocol};
use crate::Error;
use crate::daemon::stream_registry::{Counted, StreamRegistry, StreamSource};
use crate::socks::{Reply, reply_for_error};
use nyx_node::tcp::DrainingTcp;
use nyx_node::{NodeHandle, NyxStream};
use nyx_overlay::stream::ResetReason;

/// A running entry server. Dropping it stops it too (without waiting).
#[derive(Debug)]
pub struct EntryServer {
    local_addr: SocketAddr,
    counters: EntryCounters,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<()>>,
}

impl EntryServer {
    /// Listen on `addr` and serve `protocol` (needs a tokio runtime).
    pub async fn bind(
        protocol: Protocol,
        addr: SocketAddr,
        node: NodeHandle,
        config: EntryConfig,
    ) -> Result<Self, Error> {
        let listener = TcpListener::bind(addr)
            .await
            .map_err(|source| Error::EntryListener {
                what: "bind",
                source,
            })?;
        Self::spawn(protocol, listener, node, config, None)
    }

    /// Serve `protocol` on a bound listener, in a task of its own (needs a tokio runtime),
    /// recording every open stream in `streams` if given (a daemon lists and closes them
    /// through its control API).
    pub fn spawn(
        protocol: Protocol,
        listener: TcpListener,
        node: NodeHandle,
        config: EntryConfig,
        streams: Option<StreamRegistry>,
    ) -> Result<Self, Error> {
        config.validate()?;
        let local_addr = listener
            .local_addr()
            .map_err(|source| Error::EntryListener {
                what: "local address",
                source,
            })?;
        let counters = EntryCounters::default();
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(serve(
            protocol,
            listener,
            node,
            config,
            counters.clone(),
            streams,
            async {
                let _ = stopped.await;
            },
        ));
        Ok(EntryServer {
            local_addr,
            counters,
            stop: Some(stop),
            task: Some(task),
        })
    }

    /// The address it listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// The counters now.
    pub fn stats(&self) -> EntryStats {
        self.counters.snapshot()
    }

    /// A handle on the live counters (for metrics).
    pub fn counters(&self) -> EntryCounters {
        self.counters.clone()
    }

    /// Stop accepting, close every client's connection (their streams are reset), and wait
    /// until all of it is done.
    pub async fn shutdown(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

impl Drop for EntryServer {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

/// Serve `protocol` clients from `listener` through `node` until `shutdown` completes,
/// then close every client's connection and return. `counters` is updated as clients come
/// and go. A listener error (out of file descriptors) pauses accepting for 100 ms.
pub async fn serve(
    protocol: Protocol,
    listener: TcpListener,
    node: NodeHandle,
    config: EntryConfig,
    counters: EntryCounters,
    streams: Option<StreamRegistry>,
    shutdown: impl Future<Output = ()>,
) {
    let permits = config.max_connections.min(Semaphore::MAX_PERMITS);
    let permits = Arc::new(Semaphore::new(permits));
    let config = Arc::new(config);
    let mut clients = JoinSet::new();
    let entry = protocol.as_str();
    tokio::pin!(shutdown);
    loop {
        let accepted = tokio::select! {
            () = &mut shutdown => break,
            Some(_) = clients.join_next(), if !clients.is_empty() => continue,
            accepted = listener.accept() => accepted,
        };
        let conn = match accepted {
            Ok((conn, _peer)) => conn,
            Err(e) => {
                tracing::debug!(entry, kind = ?e.kind(), "entry accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        counters.count(Event::Accepted);
        let Ok(permit) = permits.clone().try_acquire_owned() else {
            counters.count(Event::OverLimit);
            tracing::debug!(entry, "client over the connection limit closed");
            drop(conn);
            continue;
        };
        let (node, config, counters) = (node.clone(), config.clone(), counters.clone());
        let streams = streams.clone();
        clients.spawn(async move {
            handle(protocol, conn, node, &config, &counters, streams.as_ref()).await;
            drop(permit);
        });
    }
    drop(listener);
    clients.shutdown().await;
}

/// The handshake of `protocol`.
async fn handshake(protocol: Protocol, conn: &mut TcpStream) -> Result<Accepted, HandshakeError> {
    match protocol {
        Protocol::Socks => crate::socks::handshake(conn).await,
        Protocol::HttpConnect => crate::http_connect::handshake(conn).await,
    }
}

/// One client, from the first byte to the end of the relay.
async fn handle(
    protocol: Protocol,
    mut conn: TcpStream,
    node: NodeHandle,
    config: &EntryConfig,
    c: &EntryCounters,
    streams: Option<&StreamRegistry>,
) {
    let entry = protocol.as_str();
    let _active = Active::new(c);
    let _ = conn.set_nodelay(true);
    let handshake = handshake(protocol, &mut conn);
    let accepted = match tokio::time::timeout(config.handshake_timeout, handshake).await {
        Ok(Ok(accepted)) => accepted,
        Ok(Err(HandshakeError::Protocol { reason, replied })) => {
            c.count(Event::Malformed);
            if let Some(reply) = replied {
                c.count(Event::Replied(reply));
            }
            tracing::debug!(entry, %reason, "handshake refused");
            if protocol == Protocol::HttpConnect && replied.is_some() {
                crate::http_connect::drain_refused(&mut conn).await;
            }
            return;
        }
        Ok(Err(HandshakeError::Gone)) => {
            c.count(Event::Aborted);
            return;
        }
        Err(_) => {
            c.count(Event::Timeout);
            tracing::debug!(entry, "handshake timed out");
            return;
        }
    };
    let answer = accepted.answer;
    let target = accepted.target.to_string();
    let opened = tokio::time::timeout(
        config.connect_timeout,
        node.connect_isolated(&target, &accepted.group),
    )
    .await;
    let stream = match opened {
        Ok(Ok(stream)) => stream,
        Ok(Err(e)) => return fail(&mut conn, answer, reply_for_error(&e), c).await,
        Err(_) => return fail(&mut conn, answer, Reply::TtlExpired, c).await,
    };
    // Listed (and closable) through the control API while it lasts: from before the client
    // hears of it, so a client that asks the API right after its reply finds it.
    let source = match protocol {
        Protocol::Socks => StreamSource::Socks,
        Protocol::HttpConnect => StreamSource::HttpConnect,
    };
    let ticket = streams.map(|streams| streams.register(source, &target, stream.path().to_vec()));
    if conn
        .write_all(&answer.encode(Reply::Succeeded))
        .await
        .is_err()
    {
        // The client left: dropping the stream resets it (and the ticket unlists it).
        return c.count(Event::Aborted);
    }
    c.count(Event::Replied(Reply::Succeeded));
    let conn = DrainingTcp::new(conn);
    match ticket {
        Some(ticket) => {
            tokio::select! {
                () = relay(Counted::new(conn, &ticket), stream, &accepted.early) => {}
                () = ticket.closed() => {}
            }
        }
        None => relay(conn, stream, &accepted.early).await,
    }
}

/// Answer a request with a failure; the connection closes when dropped.
async fn fail(conn: &mut TcpStream, answer: Answer, reply: Reply, c: &EntryCounters) {
    c.count(Event::Replied(reply));
    tracing::debug!(code = reply.code(), "entry request failed");
    let _ = conn.write_all(&answer.encode(reply)).await;
    let _ = conn.shutdown().await;
}

/// Relay until both directions are finished; a failure on one side is passed on as a
/// reset (of the stream, or of the client's TCP connection, so that a cut transfer never
/// looks complete).
async fn relay<C: Linger>(mut conn: C, mut stream: NyxStream, early: &[u8]) {
    if !early.is_empty() && stream.write_all(early).await.is_err() {
        conn.abort_on_close();
        return;
    }
    if let Err(e) = tokio::io::copy_bidirectional_with_sizes(
        &mut conn,
        &mut stream,
        nyx_node::tcp::FROM_USER_BUFFER,
        nyx_node::tcp::TOWARD_USER_BUFFER,
    )
    .await
    {
        let from_stream = e
            .get_ref()
            .is_some_and(|inner| inner.downcast_ref::<Error>().is_some());
        if from_stream {
            conn.abort_on_close();
        } else {
            stream.reset(ResetReason::Cancelled);
        }
        tracing::debug!(kind = ?e.kind(), stream = from_stream, "entry relay ended on an error");
    }
}

/// A client connection that can be made to end with a TCP reset instead of a FIN, so
/// that a cut transfer never looks complete.
trait Linger: AsyncRead + AsyncWrite + Unpin {
    fn abort_on_close(&mut self);
}

impl Linger for DrainingTcp {
    fn abort_on_close(&mut self) {
        let _ = self.get_ref().set_zero_linger();
    }
}

impl Linger for Counted<'_, DrainingTcp> {
    fn abort_on_close(&mut self) {
        let _ = self.get_mut().get_ref().set_zero_linger();
    }
}
