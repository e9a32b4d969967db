//! The QUIC transport: one quinn endpoint per node that both dials and accepts, cells in
//! QUIC DATAGRAM frames, control messages on one reliable stream per link.
//!
//! TLS is [`crate::identity_tls`] (peers verified by `NodeId`) over [`crate::pq_kx`]
//! (X25519MLKEM768 only). Every cell send checks `max_datagram_size()`, which changes with
//! the path MTU. Cells go out as `bytes::Bytes` (a pooled buffer frozen with
//! `nyx_core::buf::PooledBuf::freeze` goes out without a copy); quinn hands received
//! datagrams over as its own `Bytes`.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use nyx_core::NodeId;
use nyx_core::redact::Redacted;
use nyx_crypto::identity::IdentityKey;

use crate::admission::{Admission, AdmissionConfig, AdmissionStats, HandshakeSlot, Verdict};
use quinn::crypto::rustls::{QuicClientConfig, QuicServerConfig};
use tokio::sync::{Mutex, mpsc};

use crate::Error;
use crate::identity_tls::{Refusal, client_config_reporting, peer_node_id, server_config};
use crate::socket::{DatagramSocket, QuinnSocket, SocketMode};

/// Longest control message.
pub const MAX_CONTROL_LEN: usize = 64 * 1024;

/// Settings of the QUIC transport.
#[derive(Debug, Clone)]
pub struct QuicConfig {
    /// A link with no traffic for this long is closed by QUIC. Default 30 s.
    pub idle_timeout: Duration,
    /// Keep-alive interval, so an idle but wanted link survives NAT and the idle timeout.
    /// Default 10 s.
    pub keep_alive: Duration,
    /// Bytes of received datagrams quinn buffers per link before dropping the oldest.
    /// Default 4 MiB.
    pub datagram_receive_buffer: usize,
    /// The link's congestion controller. Cells ride DATAGRAM frames, which quinn paces by
    /// it. Default [`QuicCongestion::Bbr`].
    pub congestion: QuicCongestion,
    /// Which incoming attempts get a handshake (Retry under load, per-source limits).
    pub admission: AdmissionConfig,
    /// How the endpoint's socket moves datagrams ([`crate::socket`]). Default
    /// [`SocketMode::Auto`].
    pub socket: SocketMode,
}

/// Which congestion controller quinn runs on a link.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum QuicCongestion {
    /// Model-based (bandwidth and RTT): random loss does not shrink the window. The default:
    /// the circuits above already adapt to the path end to end, and their FEC makes random
    /// loss cheap, so the link must not collapse on it. Measured on a 5-node testnet with
    /// 20% path loss, an 8 MiB echo took 15.9 s with Cubic and about 1 s with BBR (as over
    /// the UDP transport, which has no link congestion control).
    #[default]
    Bbr,
    /// Loss-based (RFC 9438), quinn's own default.
    Cubic,
}

impl Default for QuicConfig {
    fn default() -> Self {
        QuicConfig {
            idle_timeout: Duration::from_secs(30),
            keep_alive: Duration::from_secs(10),
            datagram_receive_buffer: 4 << 20,
            congestion: QuicCongestion::Bbr,
            admission: AdmissionConfig::default(),
            socket: SocketMode::Auto,
        }
    }
}

/// Per-link counters, plain data for the daemon's metrics.
#[derive(Debug, Default)]
pub struct LinkCounters {
    /// Cells sent.
    pub cells_out: AtomicU64,
    /// Cells received.
    pub cells_in: AtomicU64,
    /// Cell bytes sent.
    pub bytes_out: AtomicU64,
    /// Cell bytes received.
    pub bytes_in: AtomicU64,
    /// Cells refused because they exceeded the path's datagram size.
    pub dropped_too_large: AtomicU64,
}

/// A node's QUIC endpoint.
#[derive(Debug)]
pub struct QuicEndpoint {
    endpoint: quinn::Endpoint,
    /// The relay's identity, shown on every link; `None` for a client-only endpoint, which
    /// accepts no links and shows a fresh identity made for each link it dials.
    identity: Option<Arc<IdentityKey>>,
    config: QuicConfig,
    /// Which incoming attempts get a handshake.
    admission: std::sync::Mutex<Admission>,
    clock: nyx_core::time::CoarseClock,
}

impl QuicEndpoint {
    /// Bind `addr` (needs a tokio runtime) as the relay `identity`: it accepts links, and
    /// every link it dials or accepts shows `identity`.
    pub fn bind(
        addr: SocketAddr,
        identity: Arc<IdentityKey>,
        config: QuicConfig,
    ) -> Result<Self, Error> {
        let socket = Arc::new(QuinnSocket(Arc::new(DatagramSocket::bind(
            addr,
            config.socket,
        )?)));
        Self::on_socket(socket, Some(identity), config)
    }

    /// Bind `addr` (needs a tokio runtime) as a client-only endpoint: it accepts no links
    /// (quinn refuses every incoming connection), and each link it dials presents a
    /// certificate of an identity generated for that link alone, so a relay cannot tell two
    /// links of one client from links of two clients, and holds no signature by a lasting
    /// key of the client.
    pub fn bind_client(addr: SocketAddr, config: QuicConfig) -> Result<Self, Error> {
        let socket = Arc::new(QuinnSocket(Arc::new(DatagramSocket::bind(
            addr,
            config.socket,
        )?)));
        Self::on_socket(socket, None, config)
    }

    /// [`bind`](Self::bind) (`Some(identity)`) or [`bind_client`](Self::bind_client)
    /// (`None`) with the fault shim on everything this endpoint sends (tests); returns the
    /// shim too, for its counters. The shim sends one datagram per system call.
    pub fn bind_with_faults(
        addr: SocketAddr,
        identity: Option<Arc<IdentityKey>>,
        config: QuicConfig,
        faults: crate::fault::FaultConfig,
    ) -> Result<(Self, Arc<crate::fault::FaultyQuicSocket>), Error> {
        let inner = Arc::new(QuinnSocket(Arc::new(DatagramSocket::bind(
            addr,
            config.socket,
        )?)));
        let shim = Arc::new(crate::fault::FaultyQuicSocket::new(inner, faults));
        Ok((Self::on_socket(shim.clone(), identity, config)?, shim))
    }

    /// The endpoint on `socket`: a relay's if `identity` is given, else client-only.
    fn on_socket(
        socket: Arc<dyn quinn::AsyncUdpSocket>,
        identity: Option<Arc<IdentityKey>>,
        config: QuicConfig,
    ) -> Result<Self, Error> {
        let server = match &identity {
            Some(identity) => Some(server(identity, &config)?),
            None => None,
        };
        let endpoint = quinn::Endpoint::new_with_abstract_socket(
            quinn::EndpointConfig::default(),
            server,
            socket,
            Arc::new(quinn::TokioRuntime),
        )
        .map_err(io)?;
        QuicEndpoint::new(endpoint, identity, config)
    }

    fn new(
        endpoint: quinn::Endpoint,
        identity: Option<Arc<IdentityKey>>,
        config: QuicConfig,
    ) -> Result<Self, Error> {
        Ok(QuicEndpoint {
            endpoint,
            identity,
            admission: std::sync::Mutex::new(Admission::new(config.admission)?),
            config,
            clock: nyx_core::time::CoarseClock::new(),
        })
    }

    /// This node's identity on its links; `None` for a client-only endpoint.
    pub fn node_id(&self) -> Option<NodeId> {
        self.identity.as_ref().map(|i| i.node_id())
    }

    /// Whether this endpoint accepts links (a relay's does, a client's does not).
    pub fn accepts_links(&self) -> bool {
        self.identity.is_some()
    }

    /// The bound address.
    pub fn local_addr(&self) -> Result<SocketAddr, Error> {
        self.endpoint.local_addr().map_err(io)
    }

    /// Dial `peer` at `addr`; refused with [`Error::WrongPeer`] if another node answers.
    #[tracing::instrument(name = "quic_dial", skip_all, fields(peer = %Redacted(peer)))]
    pub async fn connect(&self, peer: NodeId, addr: SocketAddr) -> Result<QuicLink, Error> {
        let refusal = Refusal::default();
        // A client shows an identity made for this link alone (dropped with the config).
        let identity = crate::link::dial_identity(self.identity.as_ref())?;
        let tls = Arc::new(client_config_reporting(&identity, peer, refusal.clone())?);
        let crypto = QuicClientConfig::try_from(tls).map_err(|e| Error::TlsConfig {
            reason: e.to_string(),
        })?;
        let mut client = quinn::ClientConfig::new(Arc::new(crypto));
        client.transport_config(Arc::new(transport(&self.config)?));
        let connecting = self
            .endpoint
            .connect_with(client, addr, "nyx")
            .map_err(|e| Error::Link {
                reason: e.to_string(),
            })?;
        let conn = match connecting.await {
            Ok(conn) => conn,
            // Our verifier's typed reason (wrong peer, not an identity) beats TLS's string.
            Err(e) => {
                let recorded = refusal.lock().ok().and_then(|mut slot| slot.take());
                let error = recorded.unwrap_or_else(|| connection_error(e));
                // Never the address; the identity dialled only with sensitive logging on.
                tracing::info!(peer = %Redacted(peer), %error, "quic dial failed");
                return Err(error);
            }
        };
        tracing::debug!(peer = %Redacted(peer), "quic link up (dialled)");
        let (send, recv) = conn.open_bi().await.map_err(connection_error)?;
        let link = QuicLink::new(conn, peer, send, recv);
        // The stream exists for the peer once it carries a byte: announce it.
        link.send_control(&[]).await?;
        Ok(link)
    }

    /// The next incoming link (its dialler's identity verified), or `None` once the endpoint
    /// is closed. This waits for the handshake: a server should use
    /// [`accept_incoming`](Self::accept_incoming) and complete handshakes concurrently, so a
    /// slow or silent dialler cannot hold up the others.
    #[tracing::instrument(name = "quic_accept", skip_all)]
    pub async fn accept(&self) -> Option<Result<QuicLink, Error>> {
        let incoming = self.accept_incoming().await?;
        Some(incoming.complete().await)
    }

    /// The next incoming connection attempt admitted for a handshake (see
    /// [`crate::admission`]: others got a Retry or were dropped), before its handshake;
    /// `None` once the endpoint is closed.
    pub async fn accept_incoming(&self) -> Option<IncomingLink> {
        loop {
            let incoming = self.endpoint.accept().await?;
            let from = incoming.remote_address();
            let from = SocketAddr::new(from.ip().to_canonical(), from.port());
            let validated = incoming.remote_address_validated();
            let now = self.clock.now();
            let (verdict, slot) = match self.admission.lock() {
                Ok(mut admission) => admission.decide(from, validated, now),
                Err(_) => (Verdict::Refuse(crate::admission::Refusal::Busy), None),
            };
            match (verdict, slot) {
                (Verdict::Accept, Some(slot)) => {
                    return Some(IncomingLink {
                        incoming,
                        _slot: slot,
                    });
                }
                (Verdict::Retry, _) if incoming.may_retry() => {
                    // Fails only if the attempt already carried a token.
                    let _ = incoming.retry();
                }
                _ => incoming.ignore(),
            }
        }
    }

    /// The admission counters of incoming attempts.
    pub fn admission_stats(&self) -> AdmissionStats {
        self.admission.lock().map(|a| a.stats()).unwrap_or_default()
    }

    /// Close every link and stop accepting.
    pub fn close(&self) {
        self.endpoint.close(0u32.into(), b"closing");
    }

    /// Wait until every link's close has been sent.
    pub async fn wait_idle(&self) {
        self.endpoint.wait_idle().await;
    }
}

/// How long an accepted dialler has, after the handshake, to open its control stream.
const STREAM_DEADLINE: Duration = Duration::from_secs(10);

/// A connection attempt whose handshake has not finished yet.
#[derive(Debug)]
pub struct IncomingLink {
    incoming: quinn::Incoming,
    /// Its place among the handshakes in progress, freed when the handshake ends.
    _slot: HandshakeSlot,
}

impl IncomingLink {
    /// Finish the handshake: the link, with its dialler's identity verified.
    pub async fn complete(self) -> Result<QuicLink, Error> {
        let IncomingLink { incoming, _slot } = self;
        let conn = incoming.await.map_err(connection_error)?;
        // The expensive part is over: the slot goes back. The stream step that follows has
        // a deadline, so a dialler that stops after the handshake holds nothing long.
        drop(_slot);
        let opened = tokio::time::timeout(STREAM_DEADLINE, Self::open_link(conn)).await;
        opened.unwrap_or_else(|_| {
            Err(Error::Link {
                reason: "the dialler opened no control stream in time".to_string(),
            })
        })
    }

    async fn open_link(conn: quinn::Connection) -> Result<QuicLink, Error> {
        let peer = conn
            .peer_identity()
            .and_then(|any| {
                any.downcast::<Vec<rustls::pki_types::CertificateDer<'static>>>()
                    .ok()
            })
            .and_then(|certs| certs.first().map(peer_node_id))
            .ok_or_else(|| Error::BadCertificate {
                reason: "no certificate".to_string(),
            })??;
        let (send, recv) = conn.accept_bi().await.map_err(connection_error)?;
        let mut link = QuicLink::new(conn, peer, send, recv);
        link.dialled_by_us = false;
        // The dialler's announcement (an empty control message).
        link.recv_control().await?;
        tracing::debug!(peer = %Redacted(peer), "quic link up (accepted)");
        Ok(link)
    }
}

/// One authenticated QUIC link to a peer node.
#[derive(Debug)]
pub struct QuicLink {
    conn: quinn::Connection,
    peer: NodeId,
    control_send: Mutex<quinn::SendStream>,
    control_recv: Mutex<quinn::RecvStream>,
    counters: Arc<LinkCounters>,
    dialled_by_us: bool,
    /// Control messages queued without waiting ([`crate::link::CellLink::send_control`]),
    /// written to the stream by [`crate::link::drive_quic_link`].
    control_queue: mpsc::Sender<Vec<u8>>,
    control_queued: std::sync::Mutex<Option<mpsc::Receiver<Vec<u8>>>>,
}

/// Control messages a QUIC link queues without waiting, at most.
pub const CONTROL_QUEUE: usize = 256;

impl QuicLink {
    fn new(
        conn: quinn::Connection,
        peer: NodeId,
        send: quinn::SendStream,
        recv: quinn::RecvStream,
    ) -> Self {
        let queue = mpsc::channel(CONTROL_QUEUE);
        QuicLink {
            conn,
            peer,
            control_send: Mutex::new(send),
            control_recv: Mutex::new(recv),
            counters: Arc::new(LinkCounters::default()),
            dialled_by_us: true,
            control_queue: queue.0,
            control_queued: std::sync::Mutex::new(Some(queue.1)),
        }
    }

    /// The peer's verified identity.
    pub fn peer(&self) -> NodeId {
        self.peer
    }

    /// Queue a control message without waiting; [`crate::link::drive_quic_link`] writes it.
    pub fn queue_control(&self, msg: Vec<u8>) -> Result<(), Error> {
        if msg.len() > MAX_CONTROL_LEN {
            return Err(Error::ControlTooLarge { len: msg.len() });
        }
        self.control_queue.try_send(msg).map_err(|_| Error::Link {
            reason: "control queue full or link not driven".to_string(),
        })
    }

    /// The queued control messages, for the one task that drives the link.
    pub(crate) fn take_control_queue(&self) -> Option<mpsc::Receiver<Vec<u8>>> {
        self.control_queued.lock().ok().and_then(|mut q| q.take())
    }

    /// Whether this node dialled the link (false: the peer did).
    pub fn dialled_by_us(&self) -> bool {
        self.dialled_by_us
    }

    /// The link's counters.
    pub fn counters(&self) -> &Arc<LinkCounters> {
        &self.counters
    }

    /// The largest cell the path carries now (it changes with path-MTU discovery).
    pub fn max_cell(&self) -> Option<usize> {
        self.conn.max_datagram_size()
    }

    /// The current round-trip estimate.
    pub fn rtt(&self) -> Duration {
        self.conn.rtt()
    }

    /// Send one cell as a QUIC datagram (unreliable, unordered).
    pub fn send_cell(&self, cell: Bytes) -> Result<(), Error> {
        let max = self.conn.max_datagram_size().unwrap_or(0);
        if cell.len() > max {
            self.counters
                .dropped_too_large
                .fetch_add(1, Ordering::Relaxed);
            return Err(Error::CellTooLarge {
                len: cell.len(),
                max,
            });
        }
        let len = cell.len() as u64;
        self.conn.send_datagram(cell).map_err(|e| Error::Link {
            reason: e.to_string(),
        })?;
        self.counters.cells_out.fetch_add(1, Ordering::Relaxed);
        self.counters.bytes_out.fetch_add(len, Ordering::Relaxed);
        Ok(())
    }

    /// The next cell from the peer.
    pub async fn recv_cell(&self) -> Result<Bytes, Error> {
        let cell = self.conn.read_datagram().await.map_err(connection_error)?;
        self.counters.cells_in.fetch_add(1, Ordering::Relaxed);
        self.counters
            .bytes_in
            .fetch_add(cell.len() as u64, Ordering::Relaxed);
        Ok(cell)
    }

    /// Send a control message (reliable, ordered; at most [`MAX_CONTROL_LEN`] bytes).
    pub async fn send_control(&self, msg: &[u8]) -> Result<(), Error> {
        if msg.len() > MAX_CONTROL_LEN {
            return Err(Error::ControlTooLarge { len: msg.len() });
        }
        let mut send = self.control_send.lock().await;
        let len = (msg.len() as u32).to_be_bytes();
        send.write_all(&len).await.map_err(|e| Error::Link {
            reason: e.to_string(),
        })?;
        send.write_all(msg).await.map_err(|e| Error::Link {
            reason: e.to_string(),
        })?;
        Ok(())
    }

    /// The next control message from the peer.
    pub async fn recv_control(&self) -> Result<Vec<u8>, Error> {
        let mut recv = self.control_recv.lock().await;
        let mut len = [0u8; 4];
        recv.read_exact(&mut len).await.map_err(|e| Error::Link {
            reason: e.to_string(),
        })?;
        let len = u32::from_be_bytes(len) as usize;
        if len > MAX_CONTROL_LEN {
            return Err(Error::ControlTooLarge { len });
        }
        let mut msg = vec![0u8; len];
        recv.read_exact(&mut msg).await.map_err(|e| Error::Link {
            reason: e.to_string(),
        })?;
        Ok(msg)
    }

    /// The underlying quinn connection (for baselines and diagnostics).
    pub fn raw_connection(&self) -> &quinn::Connection {
        &self.conn
    }

    /// Whether the link is closed (by either side, an error or the idle timeout).
    pub fn is_closed(&self) -> bool {
        self.conn.close_reason().is_some()
    }

    /// Close the link with a reason the peer sees.
    pub fn close(&self, reason: &str) {
        self.conn.close(0u32.into(), reason.as_bytes());
    }
}

/// The server side of a relay's endpoint: TLS as `identity`, dialler certificates required.
fn server(identity: &IdentityKey, config: &QuicConfig) -> Result<quinn::ServerConfig, Error> {
    let tls = Arc::new(server_config(identity)?);
    let crypto = QuicServerConfig::try_from(tls).map_err(|e| Error::TlsConfig {
        reason: e.to_string(),
    })?;
    let mut server = quinn::ServerConfig::with_crypto(Arc::new(crypto));
    server.transport_config(Arc::new(transport(config)?));
    Ok(server)
}

fn transport(config: &QuicConfig) -> Result<quinn::TransportConfig, Error> {
    let mut t = quinn::TransportConfig::default();
    let idle = quinn::IdleTimeout::try_from(config.idle_timeout).map_err(|_| Error::TlsConfig {
        reason: "idle_timeout out of range".to_string(),
    })?;
    t.max_idle_timeout(Some(idle));
    t.keep_alive_interval(Some(config.keep_alive));
    t.datagram_receive_buffer_size(Some(config.datagram_receive_buffer));
    t.datagram_send_buffer_size(config.datagram_receive_buffer);
    match config.congestion {
        QuicCongestion::Bbr => {
            t.congestion_controller_factory(Arc::new(quinn::congestion::BbrConfig::default()));
        }
        QuicCongestion::Cubic => {
            t.congestion_controller_factory(Arc::new(quinn::congestion::CubicConfig::default()));
        }
    }
    Ok(t)
}

fn io(e: std::io::Error) -> Error {
    Error::Io {
        what: "QUIC socket",
        source: Arc::new(e),
    }
}

fn connection_error(e: quinn::ConnectionError) -> Error {
    Error::Connection(e)
}
