//! The SOCKS5 server: accept, run the handshake under a timeout, connect through the node,
//! reply, relay both ways until both sides are done.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, oneshot};
use tokio::task::{JoinHandle, JoinSet};

use super::proto::{self, Method, Parsed, Reply, SocksError, TargetAddr};
use super::stats::{Active, Event, SocksCounters, SocksStats};
use super::{isolation_group, reply_for_error};
use crate::Error;
use crate::daemon::stream_registry::{Counted, StreamRegistry, StreamSource};
use nyx_node::tcp::DrainingTcp;
use nyx_node::{IsolationGroup, NodeHandle, NyxStream};
use nyx_overlay::stream::ResetReason;

/// How the SOCKS5 server runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SocksConfig {
    /// A client must have sent a complete request within this time of connecting, or it is
    /// closed. Default 10 s.
    pub handshake_timeout: Duration,
    /// Building a circuit and opening the stream must finish within this time, or the
    /// client gets reply 0x06 (TTL expired). Default 60 s.
    pub connect_timeout: Duration,
    /// Clients served at once; one more is accepted and closed at once. Default 1024.
    pub max_connections: usize,
}

impl Default for SocksConfig {
    fn default() -> Self {
        SocksConfig {
            handshake_timeout: Duration::from_secs(10),
            connect_timeout: Duration::from_secs(60),
            max_connections: 1024,
        }
    }
}

impl SocksConfig {
    /// Refuse settings that cannot work: a zero timeout or no connections at all.
    pub fn validate(&self) -> Result<(), Error> {
        let bad = |field, reason: &str| {
            Err(Error::SocksConfig {
                field,
                reason: reason.to_string(),
            })
        };
        if self.handshake_timeout.is_zero() {
            return bad("handshake_timeout", "must be more than zero");
        }
        if self.connect_timeout.is_zero() {
            return bad("connect_timeout", "must be more than zero");
        }
        if self.max_connections == 0 {
            return bad("max_connections", "must be at least 1");
        }
        Ok(())
    }
}

/// A running SOCKS5 server. Dropping it stops it too (without waiting).
#[derive(Debug)]
pub struct SocksServer {
    local_addr: SocketAddr,
    counters: SocksCounters,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<()>>,
}

impl SocksServer {
    /// Listen on `addr` and serve (needs a tokio runtime).
    pub async fn bind(
        addr: SocketAddr,
        node: NodeHandle,
        config: SocksConfig,
    ) -> Result<Self, Error> {
        let listener = TcpListener::bind(addr)
            .await
            .map_err(|source| Error::SocksListener {
                what: "bind",
                source,
            })?;
        Self::spawn(listener, node, config)
    }

    /// Serve on a bound listener, in a task of its own (needs a tokio runtime).
    pub fn spawn(
        listener: TcpListener,
        node: NodeHandle,
        config: SocksConfig,
    ) -> Result<Self, Error> {
        Self::spawn_with_registry(listener, node, config, None)
    }

    /// [`spawn`](Self::spawn), recording every open stream in `streams` (a daemon lists and
    /// closes them through its control API).
    pub fn spawn_with_registry(
        listener: TcpListener,
        node: NodeHandle,
        config: SocksConfig,
        streams: Option<StreamRegistry>,
    ) -> Result<Self, Error> {
        config.validate()?;
        let local_addr = listener
            .local_addr()
            .map_err(|source| Error::SocksListener {
                what: "local address",
                source,
            })?;
        let counters = SocksCounters::default();
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(serve(
            listener,
            node,
            config,
            counters.clone(),
            streams,
            async {
                let _ = stopped.await;
            },
        ));
        Ok(SocksServer {
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
    pub fn stats(&self) -> SocksStats {
        self.counters.snapshot()
    }

    /// A handle on the live counters (for metrics).
    pub fn counters(&self) -> SocksCounters {
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

impl Drop for SocksServer {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

/// Serve SOCKS5 clients from `listener` through `node` until `shutdown` completes, then
/// close every client's connection and return. `counters` is updated as clients come and
/// go. A listener error (out of file descriptors) pauses accepting for 100 ms.
pub async fn serve(
    listener: TcpListener,
    node: NodeHandle,
    config: SocksConfig,
    counters: SocksCounters,
    streams: Option<StreamRegistry>,
    shutdown: impl Future<Output = ()>,
) {
    let permits = config.max_connections.min(Semaphore::MAX_PERMITS);
    let permits = Arc::new(Semaphore::new(permits));
    let config = Arc::new(config);
    let mut clients = JoinSet::new();
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
                tracing::debug!(kind = ?e.kind(), "socks accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        counters.count(Event::Accepted);
        let Ok(permit) = permits.clone().try_acquire_owned() else {
            counters.count(Event::OverLimit);
            tracing::debug!("socks client over the connection limit closed");
            drop(conn);
            continue;
        };
        let (node, config, counters) = (node.clone(), config.clone(), counters.clone());
        let streams = streams.clone();
        clients.spawn(async move {
            handle(conn, node, &config, &counters, streams.as_ref()).await;
            drop(permit);
        });
    }
    drop(listener);
    clients.shutdown().await;
}

/// One client, from the greeting to the end of the relay.
async fn handle(
    mut conn: TcpStream,
    node: NodeHandle,
    config: &SocksConfig,
    c: &SocksCounters,
    streams: Option<&StreamRegistry>,
) {
    let _active = Active::new(c);
    let _ = conn.set_nodelay(true);
    let accepted = match tokio::time::timeout(config.handshake_timeout, handshake(&mut conn)).await
    {
        Ok(Ok(accepted)) => accepted,
        Ok(Err(HandshakeError::Protocol { error, replied })) => {
            c.count(Event::Malformed);
            if let Some(reply) = replied {
                c.count(Event::Replied(reply));
            }
            tracing::debug!(reason = %error, "socks handshake refused");
            return;
        }
        Ok(Err(HandshakeError::Gone)) => {
            c.count(Event::Aborted);
            return;
        }
        Err(_) => {
            c.count(Event::Timeout);
            tracing::debug!("socks handshake timed out");
            return;
        }
    };
    let target = accepted.target.to_string();
    let opened = tokio::time::timeout(
        config.connect_timeout,
        node.connect_isolated(&target, &accepted.group),
    )
    .await;
    let stream = match opened {
        Ok(Ok(stream)) => stream,
        Ok(Err(e)) => return fail(&mut conn, reply_for_error(&e), c).await,
        Err(_) => return fail(&mut conn, Reply::TtlExpired, c).await,
    };
    // Listed (and closable) through the control API while it lasts: from before the client
    // hears of it, so a client that asks the API right after its reply finds it.
    let ticket = streams
        .map(|streams| streams.register(StreamSource::Socks, &target, stream.path().to_vec()));
    if conn
        .write_all(&proto::encode_reply(Reply::Succeeded))
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
async fn fail(conn: &mut TcpStream, reply: Reply, c: &SocksCounters) {
    c.count(Event::Replied(reply));
    tracing::debug!(code = reply.code(), "socks request failed");
    let _ = conn.write_all(&proto::encode_reply(reply)).await;
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
    if let Err(e) = tokio::io::copy_bidirectional(&mut conn, &mut stream).await {
        let from_stream = e
            .get_ref()
            .is_some_and(|inner| inner.downcast_ref::<Error>().is_some());
        if from_stream {
            conn.abort_on_close();
        } else {
            stream.reset(ResetReason::Cancelled);
        }
        tracing::debug!(kind = ?e.kind(), stream = from_stream, "socks relay ended on an error");
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

/// A completed handshake.
#[derive(Debug)]
pub(super) struct Accepted {
    pub(super) target: TargetAddr,
    pub(super) group: IsolationGroup,
    /// Bytes the client sent after its request (optimistic data), for the stream.
    pub(super) early: Vec<u8>,
}

/// Why a handshake ended without a request.
#[derive(Debug)]
pub(super) enum HandshakeError {
    /// The client broke the protocol; `replied` is the reply it was sent, if any.
    Protocol {
        error: SocksError,
        replied: Option<Reply>,
    },
    /// The client closed its connection, or it failed.
    Gone,
}

impl From<SocksError> for HandshakeError {
    fn from(error: SocksError) -> Self {
        HandshakeError::Protocol {
            error,
            replied: None,
        }
    }
}

/// Greeting, method selection, optional username/password, request. Answers protocol
/// errors the way the phase allows (method 0xFF, auth status 1, or a reply), but not
/// success: the caller replies once the stream is open.
pub(super) async fn handshake<S>(conn: &mut S) -> Result<Accepted, HandshakeError>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let mut buf = Vec::with_capacity(512);
    let greeting = read_message(conn, &mut buf, proto::parse_greeting).await?;
    let method = proto::choose_method(&greeting);
    send(conn, &proto::encode_method(method)).await?;
    let credentials = match method {
        None => return Err(SocksError::NoAcceptableMethod.into()),
        Some(Method::NoAuth) => None,
        Some(Method::UserPassword) => match read_message(conn, &mut buf, proto::parse_auth).await {
            Ok(creds) => Some(creds),
            Err(e) => {
                if let HandshakeError::Protocol { .. } = e {
                    let _ = conn.write_all(&proto::encode_auth_status(false)).await;
                }
                return Err(e);
            }
        },
    };
    if credentials.is_some() {
        send(conn, &proto::encode_auth_status(true)).await?;
    }
    let request = match read_message(conn, &mut buf, proto::parse_request).await {
        Ok(request) => request,
        Err(HandshakeError::Protocol { error, .. }) => {
            let reply = error.reply();
            let _ = conn.write_all(&proto::encode_reply(reply)).await;
            let _ = conn.shutdown().await;
            return Err(HandshakeError::Protocol {
                error,
                replied: Some(reply),
            });
        }
        Err(e) => return Err(e),
    };
    Ok(Accepted {
        target: request.target,
        group: isolation_group(credentials.as_ref()),
        early: buf,
    })
}

async fn send<S: AsyncWrite + Unpin>(conn: &mut S, bytes: &[u8]) -> Result<(), HandshakeError> {
    conn.write_all(bytes)
        .await
        .map_err(|_| HandshakeError::Gone)?;
    conn.flush().await.map_err(|_| HandshakeError::Gone)
}

/// Read until `parse` has a whole message at the front of `buf`, and remove it. The buffer
/// never grows past the longest message plus one read (every parser decides by then).
async fn read_message<S, T>(
    conn: &mut S,
    buf: &mut Vec<u8>,
    parse: fn(&[u8]) -> Parsed<T>,
) -> Result<T, HandshakeError>
where
    S: AsyncRead + Unpin,
{
    loop {
        if let Some((value, used)) = parse(buf)? {
            buf.drain(..used);
            return Ok(value);
        }
        let mut chunk = [0u8; 512];
        match conn.read(&mut chunk).await {
            Ok(0) | Err(_) => return Err(HandshakeError::Gone),
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}
