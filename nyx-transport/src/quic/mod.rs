//! The QUIC transport: one quinn endpoint per node that both dials and accepts; on each link,
//! cells and control messages both travel in QUIC DATAGRAM frames.
//!
//! TLS is [`crate::identity_tls`] (peers verified by `NodeId`) over [`crate::pq_kx`]
//! (X25519MLKEM768 only); a link is up when TLS completes. Every cell send checks
//! `max_datagram_size()`, which changes with the path MTU. Cells go out as `bytes::Bytes`
//! (quinn copies them into its packet buffer); quinn hands received datagrams over as its
//! own `Bytes`. Control messages are made
//! reliable by the link itself ([`QuicControl`]): cut into chunks that leave as datagrams of
//! the cell size, acknowledged and resent, so an observer of the link's packet sizes does
//! not see circuit setup apart from data. The task that drives a link
//! ([`crate::link::drive_quic_link`]) tells control datagrams from cells by their first four
//! bytes.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use nyx_core::NodeId;
use nyx_core::redact::Redacted;
use nyx_core::time::CoarseClock;
use nyx_crypto::identity::IdentityKey;

use crate::admission::{Admission, AdmissionConfig, AdmissionStats, HandshakeSlot, Verdict};
use quinn::crypto::rustls::{QuicClientConfig, QuicServerConfig};

use crate::Error;
use crate::identity_tls::{Refusal, client_config_reporting, peer_node_id, server_config};
use crate::socket::{DatagramSocket, QuinnSocket, SocketMode};

mod congestion;
mod control;
mod link;
mod table;

pub use crate::control::{MAX_CONTROL_IN_FLIGHT, MAX_CONTROL_LEN};
pub use congestion::{CIRCUITS_ONLY_WINDOW, CircuitsOnly, CircuitsOnlyConfig};
pub use control::{CHUNK_HEADER, CONTROL_MARK, ControlDatagram, QuicControl, is_control};
pub use link::{LinkCounters, QuicLink};
use table::LinkTable;
pub use table::{MIN_QUIET_TO_EVICT, QuicLinkStats};

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
    /// it. Default [`QuicCongestion::CircuitsOnly`].
    pub congestion: QuicCongestion,
    /// Which incoming attempts get a handshake (Retry under load, per-source limits).
    pub admission: AdmissionConfig,
    /// How the endpoint's socket moves datagrams ([`crate::socket`]). Default
    /// [`SocketMode::Auto`].
    pub socket: SocketMode,
    /// The length of every control datagram, chunks and acknowledgements alike (default
    /// 1156: the overlay's link cell, a circuit id and a 1152-byte onion cell), so that they
    /// have the size of cell datagrams. Control messages are cut into chunks of
    /// `pad_to -` [`CHUNK_HEADER`] bytes. At least `CHUNK_HEADER + 1`; a control message is
    /// refused while the path carries no datagram this long.
    pub pad_to: usize,
    /// Links open at once (dialled and accepted) before an accepted one must make room by
    /// closing a quiet link, or is refused (see `quic/table.rs`). Default 4096.
    pub max_links: usize,
    /// A link's peer acknowledges once per this many packets that ask for an
    /// acknowledgement, or when its largest ACK delay has passed (QUIC's ACK-frequency
    /// extension, which quinn speaks at both ends); a gap in the packet numbers does not
    /// make it acknowledge at once. Default 32. Without it a peer acknowledges every second
    /// packet: every cell is a DATAGRAM frame, which asks for one, so a busy link carried
    /// an ACK-only packet per two cells the other way, on the uplink its cells also use.
    /// Only quinn reads these acknowledgements (DATAGRAM frames are never resent, and the
    /// default [`QuicCongestion::CircuitsOnly`] ignores loss); the circuits and the link's
    /// control messages acknowledge on their own. With [`QuicCongestion::Bbr`] or
    /// [`QuicCongestion::Cubic`] quinn's controller is clocked by them: 2 restores QUIC's
    /// usual rule. 0 counts as 1.
    pub ack_every: u32,
}

/// Which congestion controller quinn runs on a link.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum QuicCongestion {
    /// None of its own ([`CircuitsOnly`]): the circuits above already adapt to the path end
    /// to end, and their FEC makes random loss cheap, so the link neither holds cells back
    /// nor drops them from a full send buffer. The UDP transport behaves the same.
    #[default]
    CircuitsOnly,
    /// Model-based (bandwidth and RTT): random loss does not shrink the window. Measured on
    /// a 5-node testnet with 20% path loss, an 8 MiB echo took 15.9 s with Cubic and about
    /// 1 s with BBR (as over the UDP transport, which has no link congestion control).
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
            congestion: QuicCongestion::CircuitsOnly,
            admission: AdmissionConfig::default(),
            socket: SocketMode::Auto,
            pad_to: nyx_crypto::onion::CELL_LEN + 4,
            max_links: 4096,
            ack_every: 32,
        }
    }
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
    /// The links open now, bounded by `config.max_links`.
    table: Arc<std::sync::Mutex<LinkTable>>,
    clock: CoarseClock,
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
        control::chunk_len(config.pad_to)?;
        Ok(QuicEndpoint {
            endpoint,
            identity,
            admission: std::sync::Mutex::new(Admission::new(config.admission)?),
            table: Arc::new(std::sync::Mutex::new(LinkTable::new(config.max_links))),
            config,
            clock: CoarseClock::new(),
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
    pub async fn connect(&self, peer: NodeId, addr: SocketAddr) -> Result<Arc<QuicLink>, Error> {
        let started = self.clock.tick();
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
        let control = QuicControl::new(self.config.pad_to)?;
        let clock = self.clock.clone();
        let link = Arc::new(QuicLink::new(conn, peer, true, started, control, clock));
        if let Ok(mut table) = self.table.lock() {
            table.add_dialled(&link);
        }
        Ok(link)
    }

    /// The next incoming link (its dialler's identity verified), or `None` once the endpoint
    /// is closed. This waits for the handshake: a server should use
    /// [`accept_incoming`](Self::accept_incoming) and complete handshakes concurrently, so a
    /// slow or silent dialler cannot hold up the others.
    #[tracing::instrument(name = "quic_accept", skip_all)]
    pub async fn accept(&self) -> Option<Result<Arc<QuicLink>, Error>> {
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
            let now = self.clock.tick();
            let (verdict, slot) = match self.admission.lock() {
                Ok(mut admission) => admission.decide(from, validated, now),
                Err(_) => (Verdict::Refuse(crate::admission::Refusal::Busy), None),
            };
            match (verdict, slot) {
                (Verdict::Accept, Some(slot)) => {
                    return Some(IncomingLink {
                        incoming,
                        _slot: slot,
                        pad_to: self.config.pad_to,
                        started: now,
                        clock: self.clock.clone(),
                        table: self.table.clone(),
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

    /// The counters of the links open now.
    pub fn link_stats(&self) -> QuicLinkStats {
        self.table.lock().map(|mut t| t.stats()).unwrap_or_default()
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

/// A connection attempt whose handshake has not finished yet.
#[derive(Debug)]
pub struct IncomingLink {
    incoming: quinn::Incoming,
    /// Its place among the handshakes in progress, freed when the handshake ends.
    _slot: HandshakeSlot,
    pad_to: usize,
    /// When it was admitted: the handshake's start here.
    started: nyx_core::Timestamp,
    clock: CoarseClock,
    table: Arc<std::sync::Mutex<LinkTable>>,
}

impl IncomingLink {
    /// Finish the handshake: the link, with its dialler's identity verified by TLS.
    /// Refused with [`Error::LinksFull`] (and closed) when the endpoint holds `max_links`
    /// links and none has been quiet long enough to make room.
    pub async fn complete(self) -> Result<Arc<QuicLink>, Error> {
        let IncomingLink {
            incoming,
            _slot,
            pad_to,
            started,
            clock,
            table,
        } = self;
        let conn = incoming.await.map_err(connection_error)?;
        // The handshake is over: its slot goes back.
        drop(_slot);
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
        let control = QuicControl::new(pad_to)?;
        let link = Arc::new(QuicLink::new(conn, peer, false, started, control, clock));
        let admitted = table.lock().is_ok_and(|mut t| t.admit(&link, link.up_at()));
        if !admitted {
            link.close("busy: link table full");
            return Err(Error::LinksFull);
        }
        tracing::debug!(peer = %Redacted(peer), "quic link up (accepted)");
        Ok(link)
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
    let mut acks = quinn::AckFrequencyConfig::default();
    acks.ack_eliciting_threshold(config.ack_every.saturating_sub(1).into())
        .reordering_threshold(0u32.into());
    t.ack_frequency_config(Some(acks));
    match config.congestion {
        QuicCongestion::CircuitsOnly => {
            t.congestion_controller_factory(Arc::new(CircuitsOnlyConfig));
        }
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
