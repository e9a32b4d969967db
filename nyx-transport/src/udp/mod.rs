//! The UDP transport's protocol engine (sans-IO): nyx-crypto's link handshake and datagram
//! sessions over raw datagrams, the WireGuard-like path with the least overhead per cell.
//!
//! ```text
//! 0x01 HELLO    [0x01][cookie 16][HELLO 1265]   initiator → responder (cookie zero at first)
//! 0x02 COOKIE   [0x02][cookie 16]               responder → initiator: "retry with this"
//! 0x03 WELCOME  [0x03][WELCOME 65]              responder → initiator
//! 0x04 DATA     [0x04][session datagram]        both ways: a cell (or empty: confirmation)
//! ```
//!
//! A stranger cannot make the responder do expensive work first: when HELLOs arrive faster
//! than `cookie_threshold` per second the responder answers a HELLO without a valid cookie
//! with a COOKIE (an HMAC of the source address under a key rotated every two minutes; one
//! HMAC, no state), so decapsulation only happens for sources that can receive at their
//! address; and every source prefix is rate-limited (nyx-core `KeyedLimiter`) before any
//! decapsulation. The responder counts a link as up only when the first DATA of the new
//! session authenticates (a replayed HELLO yields a session nobody can use); the initiator
//! sends an empty DATA right after WELCOME for that. A HELLO without an answer is followed,
//! after `handshake_timeout`, by a fresh HELLO (new ephemeral keys: an independent handshake,
//! so the responder's replay cache never has to accept a repeat), up to `handshake_attempts`;
//! see [`UdpEngine::handle_timeout`] for how both sides settle on one of several attempts.
//!
//! A client-only engine ([`UdpEngine::client`]) answers no HELLO and seals, in each HELLO it
//! sends, an identity generated for that dial alone: the relay authenticates a one-link
//! pseudonym, never the client's lasting key.

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hmac::{Hmac, KeyInit, Mac};
use nyx_core::rate::{IpPrefix, KeyedLimiter, Quota};
use nyx_core::redact::Redacted;
use nyx_core::{NodeId, Timestamp};
use nyx_crypto::hop::ReplayCache;
use nyx_crypto::identity::IdentityKey;
use nyx_crypto::kem::HybridPublicKey;
use nyx_crypto::link::{
    HELLO_LEN, LinkInitiator, LinkInitiatorSent, LinkKey, LinkResponder, WELCOME_LEN,
};
use nyx_crypto::session::{HEADER_LEN, OVERHEAD, RekeyPolicy, Session};
use sha2::Sha256;
use subtle::ConstantTimeEq;
use zeroize::Zeroizing;

mod table;
mod transport;

use crate::control::{ControlState, control_rto};
pub use crate::control::{MAX_CONTROL_IN_FLIGHT, MAX_CONTROL_LEN};
pub use transport::{UdpCommand, UdpSnapshot, UdpTransport};

use crate::Error;
use bytes::Bytes;
use nyx_core::buf::{BufferPool, PoolConfig as BufPoolConfig, PooledBuf};

const T_HELLO: u8 = 0x01;
const T_COOKIE: u8 = 0x02;
const T_WELCOME: u8 = 0x03;
const T_DATA: u8 = 0x04;
const COOKIE_LEN: usize = 16;
const COOKIE_ROTATION: Duration = Duration::from_secs(120);
const MAX_COOKIE_RESENDS: u32 = 2;
/// Initiator: HELLOs of one dial whose WELCOME is still accepted (a late WELCOME for an
/// earlier attempt still completes the dial), at most.
const MAX_HELLOS_KEPT: usize = 8;
/// Responder: sessions of handshakes from one address that wait for their first DATA besides
/// the link's own session, at most (the newest are kept).
const MAX_PENDING: usize = 4;
/// DATA payload kinds (inside the authenticated payload, so they cannot be altered).
const KIND_CELL: u8 = 0;
const KIND_CONTROL: u8 = 1;
const KIND_CONTROL_ACK: u8 = 2;
/// The sender closed the link (empty body).
const KIND_CLOSE: u8 = 3;
/// Confirms a new session to the responder (empty body).
const KIND_CONFIRM: u8 = 4;
/// DATA payload header: kind u8 ‖ body length u16.
const PAYLOAD_HEADER: usize = 3;

/// Settings of the UDP transport.
#[derive(Debug, Clone)]
pub struct UdpConfig {
    /// HELLOs per second across all sources above which a cookie is required. Default 64;
    /// 0 always requires one.
    pub cookie_threshold: u32,
    /// HELLOs per second accepted from one source prefix (IPv4 /24, IPv6 /48). Default 10.
    pub hello_rate_per_source: u32,
    /// Wait before an unanswered HELLO is followed by a fresh one. Default 1 s.
    pub handshake_timeout: Duration,
    /// HELLOs sent before a dial fails. Default 5.
    pub handshake_attempts: u32,
    /// Rekeying of the sessions.
    pub rekey: RekeyPolicy,
    /// Most peers with sessions or dials. Default 4096. A full table makes room for a
    /// newcomer by evicting the oldest unconfirmed or the quietest link (see `table.rs`).
    pub max_peers: usize,
    /// A link that heard nothing authenticated for this long is closed. Default 3 minutes
    /// (the overlay pings links that carry circuits every few seconds).
    pub idle_timeout: Duration,
    /// Every DATA datagram carries at least this many body bytes, padded (default 1156: the
    /// overlay's link cell, a circuit id and a 1152-byte onion cell): cells, control chunks,
    /// acknowledgements, confirmations and closes all leave as datagrams of one size, so the
    /// size does not tell circuit setup from data. Control messages are cut into chunks of
    /// `pad_to - 4` bytes. 0 turns padding off (tests of the engine's own limits).
    pub pad_to: usize,
    /// Longest cell carried. Default 1400 bytes (a 1152-byte onion cell plus link framing,
    /// with room). Datagram buffers come from a pool sized for it.
    pub max_cell_len: usize,
    /// Memory cap of the datagram buffer pool. Default 64 MiB.
    pub pool_bytes: usize,
    /// How the transport's socket moves datagrams ([`crate::socket`]). Default
    /// [`SocketMode::Auto`](crate::socket::SocketMode::Auto). The engine does not use it.
    pub socket: crate::socket::SocketMode,
}

impl Default for UdpConfig {
    fn default() -> Self {
        UdpConfig {
            cookie_threshold: 64,
            hello_rate_per_source: 10,
            handshake_timeout: Duration::from_secs(1),
            handshake_attempts: 5,
            rekey: RekeyPolicy::default(),
            max_peers: 4096,
            idle_timeout: Duration::from_secs(180),
            max_cell_len: 1400,
            pad_to: nyx_crypto::onion::CELL_LEN + 4,
            pool_bytes: 64 << 20,
            socket: crate::socket::SocketMode::Auto,
        }
    }
}

/// What the engine reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UdpEvent {
    /// A link is up (as initiator: WELCOME checked; as responder: the first DATA opened).
    Connected {
        /// The peer's verified identity.
        peer: NodeId,
        /// Its address.
        addr: SocketAddr,
    },
    /// A new handshake from a live link's address authenticated as another peer (a
    /// client-only node redialling with a fresh identity, or a restarted peer with new
    /// keys): the link to `old` is gone, and one to `peer` is up at `addr`.
    Replaced {
        /// The peer the link had.
        old: NodeId,
        /// The peer it has now.
        peer: NodeId,
        /// Its address.
        addr: SocketAddr,
    },
    /// A cell arrived.
    Cell {
        /// From whom.
        peer: NodeId,
        /// The cell: a slice of the pooled buffer it was decrypted in (no further copy).
        data: Bytes,
    },
    /// A control message arrived (reliable, in order).
    Control {
        /// From whom.
        peer: NodeId,
        /// The message.
        data: Vec<u8>,
    },
    /// A link is gone: idle for `idle_timeout`, closed by either end
    /// ([`UdpEngine::close`]), or evicted to make room.
    Closed {
        /// Its peer.
        peer: NodeId,
        /// Its address.
        addr: SocketAddr,
    },
    /// A dial failed.
    Failed {
        /// The address dialled.
        addr: SocketAddr,
        /// Why.
        reason: String,
    },
}

/// Counters of the UDP transport (plain data for metrics).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct UdpStats {
    /// Handshakes completed.
    pub handshakes_ok: u64,
    /// HELLOs or WELCOMEs refused (bad, replayed, wrong peer, failed confirmation).
    pub handshakes_failed: u64,
    /// COOKIE replies sent instead of doing the handshake.
    pub cookies_sent: u64,
    /// HELLOs dropped by the per-source rate limit.
    pub rate_limited: u64,
    /// Cells sent.
    pub cells_out: u64,
    /// Cells received.
    pub cells_in: u64,
    /// Datagrams dropped: unknown type, truncated, or from an address with no session.
    pub dropped_malformed: u64,
    /// DATA that failed authentication or was replayed.
    pub dropped_auth: u64,
    /// Cells the node asked to send to an address without a link.
    pub dropped_no_link: u64,
    /// Datagrams dropped because the buffer pool was exhausted (backpressure).
    pub dropped_no_buffer: u64,
    /// HELLOs dropped unread because this engine is a client's, which accepts no links.
    pub hellos_refused: u64,
    /// Responder links dropped because no DATA confirmed them in time.
    pub links_unconfirmed_expired: u64,
    /// Links closed after `idle_timeout` without an authenticated datagram.
    pub links_idle_closed: u64,
    /// Links evicted to make room for a newcomer in a full table.
    pub links_evicted: u64,
    /// Links closed by this node or by the peer.
    pub links_closed: u64,
    /// Crossed dials: a HELLO from a peer this node was dialling at that moment. The dial
    /// of the smaller node id goes on; the other node answers it and drops its own.
    pub crossed_dials: u64,
}

/// Counters of one UDP link (plain data for metrics).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LinkStats {
    /// Cells sent.
    pub cells_out: u64,
    /// Cells received.
    pub cells_in: u64,
    /// Cell bytes sent.
    pub bytes_out: u64,
    /// Cell bytes received.
    pub bytes_in: u64,
    /// DATA from this peer's address that failed authentication or was replayed.
    pub dropped_auth: u64,
    /// Round trip measured by the handshake (HELLO to WELCOME for the initiator, WELCOME to
    /// the first DATA for the responder).
    pub rtt: Option<Duration>,
}

struct Link {
    peer: NodeId,
    session: Session,
    stats: LinkStats,
    /// When this side sent its last handshake message, for the RTT.
    handshake_sent: Timestamp,
    /// Responder side: up only once the initiator's first DATA authenticated.
    confirmed: bool,
    /// When a datagram last authenticated under the link's session (or it was made).
    last_heard: Timestamp,
    /// Sessions of later HELLOs from this address (oldest first, at most [`MAX_PENDING`]),
    /// each waiting for a DATA that authenticates under it. Such a DATA promotes it to the
    /// link's session and discards the older ones (see `UdpEngine::on_data`); nothing else
    /// does, so a replayed HELLO, even with a spoofed source, cannot tear down a live link.
    pending: VecDeque<Pending>,
    control: ControlState,
}

/// A responder's session from a HELLO that is not (yet) the link's session.
struct Pending {
    peer: NodeId,
    session: Session,
    /// When its WELCOME was sent, for the RTT.
    welcome_sent: Timestamp,
}

struct Dial {
    peer: NodeId,
    peer_key: HybridPublicKey,
    /// Who this dial's HELLOs say we are: the relay's identity, or (client-only engine) one
    /// made for this link alone.
    identity: Arc<IdentityKey>,
    /// One entry per fresh HELLO sent, oldest first (at most [`MAX_HELLOS_KEPT`]): the
    /// initiator state a WELCOME for it finishes. The last is the one resent with a cookie.
    hellos: VecDeque<HelloSent>,
    cookie: [u8; COOKIE_LEN],
    /// HELLOs sent (fresh ones and cookie resends).
    attempts: u32,
    next_resend: Timestamp,
    /// HELLOs resent because of a COOKIE (bounded: a forged COOKIE stream must not turn this
    /// node into a HELLO amplifier).
    cookie_resends: u32,
}

/// One HELLO of a dial.
struct HelloSent {
    state: LinkInitiatorSent,
    hello: Box<[u8; HELLO_LEN]>,
    /// When it was last sent, for the RTT.
    sent: Timestamp,
}

/// The UDP transport's protocol state for one node: feed it datagrams and time, take
/// datagrams to send and events. One socket driver owns it.
pub struct UdpEngine {
    config: UdpConfig,
    /// The relay's identity; `None` for a client-only engine, which answers no HELLO and
    /// dials each link as a fresh identity.
    identity: Option<Arc<IdentityKey>>,
    link_keys: Vec<LinkKey>,
    replay: ReplayCache,
    /// HELLOs without a valid cookie, per source prefix.
    limiter: KeyedLimiter<IpPrefix>,
    /// HELLOs with a valid cookie (their source proved its address), per source prefix.
    validated_limiter: KeyedLimiter<IpPrefix>,
    cookie_key: Zeroizing<[u8; 32]>,
    previous_cookie_key: Zeroizing<[u8; 32]>,
    cookie_rotated: Timestamp,
    hello_second: (u64, u32),
    links: HashMap<SocketAddr, Link>,
    dials: HashMap<SocketAddr, Dial>,
    /// No control message is due for resending before this (a lower bound, so the driver
    /// does not scan every link on every wake-up; `None`: nothing is unacknowledged).
    control_due: Option<Timestamp>,
    /// When the table is next swept for expired links.
    sweep_due: Timestamp,
    pool: BufferPool,
    out: VecDeque<(SocketAddr, PooledBuf)>,
    events: VecDeque<UdpEvent>,
    stats: UdpStats,
}

impl UdpEngine {
    /// A relay's engine: it answers HELLOs for `link_keys`, and every link it dials shows
    /// `identity`.
    pub fn new(
        config: UdpConfig,
        identity: Arc<IdentityKey>,
        link_keys: Vec<LinkKey>,
        now: Timestamp,
    ) -> Result<Self, Error> {
        Self::with_role(config, Some(identity), link_keys, now)
    }

    /// A client-only engine: it answers no HELLO (counted in
    /// [`UdpStats::hellos_refused`]), and each link it dials shows an identity generated
    /// for that link alone, so its guard cannot link two of its links by identity and holds
    /// no signature by a lasting key of the client.
    pub fn client(config: UdpConfig, now: Timestamp) -> Result<Self, Error> {
        Self::with_role(config, None, Vec::new(), now)
    }

    fn with_role(
        config: UdpConfig,
        identity: Option<Arc<IdentityKey>>,
        link_keys: Vec<LinkKey>,
        now: Timestamp,
    ) -> Result<Self, Error> {
        let quota = Quota::per_second(config.hello_rate_per_source.max(1)).map_err(|e| {
            Error::TlsConfig {
                reason: e.to_string(),
            }
        })?;
        let max_peers = config.max_peers;
        let limiter = || {
            KeyedLimiter::new(quota, max_peers).map_err(|e| Error::TlsConfig {
                reason: e.to_string(),
            })
        };
        let (unvalidated, validated) = (limiter()?, limiter()?);
        let longest = config.max_cell_len.max(config.pad_to);
        let buffer = (1 + OVERHEAD + PAYLOAD_HEADER + longest).max(1 + COOKIE_LEN + HELLO_LEN);
        let pool = BufferPool::new(BufPoolConfig {
            max_bytes: config.pool_bytes,
            ..BufPoolConfig::new(buffer)
        })
        .map_err(|e| Error::TlsConfig {
            reason: e.to_string(),
        })?;
        let mut engine = UdpEngine {
            config,
            identity,
            link_keys,
            replay: ReplayCache::new(1 << 16),
            limiter: unvalidated,
            validated_limiter: validated,
            cookie_key: Zeroizing::new([0; 32]),
            previous_cookie_key: Zeroizing::new([0; 32]),
            cookie_rotated: now,
            hello_second: (0, 0),
            links: HashMap::new(),
            dials: HashMap::new(),
            control_due: None,
            sweep_due: now.saturating_add(table::SWEEP_INTERVAL),
            pool,
            out: VecDeque::new(),
            events: VecDeque::new(),
            stats: UdpStats::default(),
        };
        engine.rotate_cookie(now)?;
        engine.rotate_cookie(now)?;
        Ok(engine)
    }

    /// Dial `peer`, whose link key (from its descriptor) is `peer_key`, at `addr`.
    pub fn connect(
        &mut self,
        peer: NodeId,
        peer_key: HybridPublicKey,
        addr: SocketAddr,
        now: Timestamp,
    ) -> Result<(), Error> {
        let identity = crate::link::dial_identity(self.identity.as_ref())?;
        let dial = Dial {
            peer,
            peer_key,
            identity,
            hellos: VecDeque::new(),
            cookie: [0; COOKIE_LEN],
            attempts: 0,
            next_resend: now,
            cookie_resends: 0,
        };
        self.dials.insert(addr, dial);
        self.send_hello(addr, true, now).inspect_err(|_| {
            self.dials.remove(&addr);
        })
    }

    /// Seal and queue one cell to the peer at `addr`: one copy of the cell, into the pooled
    /// datagram buffer it is sealed in (the kernel takes a contiguous datagram).
    pub fn send_cell(
        &mut self,
        addr: SocketAddr,
        cell: &[u8],
        now: Timestamp,
    ) -> Result<(), Error> {
        self.send_data(addr, KIND_CELL, &[cell], now)?;
        if let Some(link) = self.links.get_mut(&addr) {
            link.stats.cells_out += 1;
            link.stats.bytes_out += cell.len() as u64;
        }
        self.stats.cells_out += 1;
        Ok(())
    }

    /// Queue a control message to the peer at `addr`: delivered reliably and in order (it is
    /// resent until acknowledged). At most [`MAX_CONTROL_IN_FLIGHT`] may be unacknowledged.
    pub fn send_control(
        &mut self,
        addr: SocketAddr,
        msg: &[u8],
        now: Timestamp,
    ) -> Result<(), Error> {
        let room = match self.config.pad_to {
            0 => self.config.max_cell_len,
            pad => pad.min(self.config.max_cell_len),
        };
        let chunk = room.max(8) - 4;
        let link = self.links.get_mut(&addr).ok_or_else(|| Error::Link {
            reason: "no link to that address".to_string(),
        })?;
        let chunks = link.control.queue(msg, chunk, now)?;
        let due = now.saturating_add(control_rto(link.stats.rtt));
        self.control_due = Some(self.control_due.map_or(due, |d| d.min(due)));
        for (seq, bytes) in chunks {
            self.send_data(addr, KIND_CONTROL, &[&seq.to_be_bytes(), &bytes], now)?;
        }
        Ok(())
    }

    /// A DATA that confirms a new session.
    fn send_empty(&mut self, addr: SocketAddr, now: Timestamp) -> Result<(), Error> {
        self.send_data(addr, KIND_CONFIRM, &[], now)
    }

    /// Seal `kind ‖ len ‖ parts ‖ padding` as one DATA datagram to `addr` (padded to
    /// `pad_to` body bytes).
    fn send_data(
        &mut self,
        addr: SocketAddr,
        kind: u8,
        parts: &[&[u8]],
        now: Timestamp,
    ) -> Result<(), Error> {
        let body = parts.iter().map(|p| p.len()).sum::<usize>();
        let body_len = match u16::try_from(body) {
            Ok(n) if body <= self.config.max_cell_len => n,
            _ => {
                return Err(Error::CellTooLarge {
                    len: body,
                    max: self.config.max_cell_len,
                });
            }
        };
        let len = PAYLOAD_HEADER + body.max(self.config.pad_to);
        let Some(link) = self.links.get_mut(&addr) else {
            self.stats.dropped_no_link += 1;
            return Err(Error::Link {
                reason: "no link to that address".to_string(),
            });
        };
        let Ok(mut buf) = self.pool.acquire() else {
            self.stats.dropped_no_buffer += 1;
            return Err(Error::Link {
                reason: "datagram buffer pool exhausted".to_string(),
            });
        };
        let full = buf.full_mut();
        full[0] = T_DATA;
        let mut at = 1 + HEADER_LEN;
        full[at] = kind;
        full[at + 1..at + PAYLOAD_HEADER].copy_from_slice(&body_len.to_be_bytes());
        at += PAYLOAD_HEADER;
        for part in parts {
            full[at..at + part.len()].copy_from_slice(part);
            at += part.len();
        }
        // The pooled buffer may hold an earlier datagram's bytes.
        full[at..1 + HEADER_LEN + len].fill(0);
        let n = link
            .session
            .seal(now, &mut full[1..1 + OVERHEAD + len], len)
            .map_err(|e| Error::Link {
                reason: e.to_string(),
            })?;
        buf.truncate(1 + n);
        self.out.push_back((addr, buf));
        Ok(())
    }

    /// Take one datagram from `from`. Nothing a stranger sends makes this panic or disturb
    /// a live link; refusals are counted.
    ///
    /// True if the datagram authenticated under a link's session: it proves that the peer
    /// sends from `from` to the local address it arrived at.
    pub fn handle_datagram(&mut self, from: SocketAddr, datagram: &[u8], now: Timestamp) -> bool {
        let Some((&kind, body)) = datagram.split_first() else {
            self.stats.dropped_malformed += 1;
            return false;
        };
        match kind {
            T_HELLO if body.len() == COOKIE_LEN + HELLO_LEN => self.on_hello(from, body, now),
            T_COOKIE if body.len() == COOKIE_LEN => self.on_cookie(from, body, now),
            T_WELCOME if body.len() == WELCOME_LEN => self.on_welcome(from, body, now),
            T_DATA => return self.on_data(from, body, now),
            _ => self.stats.dropped_malformed += 1,
        }
        false
    }

    /// Follow unanswered HELLOs with fresh ones, resend unacknowledged control messages, give
    /// up on dials that ran out of attempts, rotate the cookie key.
    ///
    /// A HELLO is never resent as is after a timeout: a responder that processed it (its
    /// WELCOME was lost) would refuse the repeat as a replay. Each resend is a new handshake
    /// instead (new ephemeral keys), so the responder's replay protection stays as strict as
    /// it is. Several handshakes of one dial may then be answered, and neither side can tell
    /// which WELCOME the network delivers, so both keep the recent ones: the initiator
    /// finishes the first WELCOME that completes any HELLO it still holds (a late answer to
    /// an earlier attempt is as good as the latest) and sends its confirming DATA under that
    /// session; the responder holds the session of each HELLO from that address and promotes
    /// the one a DATA authenticates under (see `on_data`). (The alternative, the responder
    /// caching its WELCOME for a repeated HELLO, would work too; fresh HELLOs need no
    /// exception to the replay rule, and nothing binds to a HELLO: the cookie is an HMAC of
    /// the source address only, so it carries over to the next HELLO.)
    pub fn handle_timeout(&mut self, now: Timestamp) {
        if now >= self.sweep_due {
            self.sweep(now);
        }
        let mut resend = Vec::new();
        if self.control_due.is_some_and(|due| now >= due) {
            // Scan the links only when something may be due, and recompute the bound.
            let mut next: Option<Timestamp> = None;
            for (addr, link) in &mut self.links {
                let rto = control_rto(link.stats.rtt);
                let due = link.control.resend_due(now, rto);
                resend.extend(due.into_iter().map(|(seq, msg)| (*addr, seq, msg)));
                next = next.into_iter().chain(link.control.next_resend(rto)).min();
            }
            self.control_due = next;
        }
        for (addr, seq, msg) in resend {
            let _ = self.send_data(addr, KIND_CONTROL, &[&seq.to_be_bytes(), &msg], now);
        }
        if now.saturating_duration_since(self.cookie_rotated) >= COOKIE_ROTATION {
            // The RNG failing is reported on the next new() instead; keep the old key.
            let _ = self.rotate_cookie(now);
        }
        let due: Vec<SocketAddr> = self
            .dials
            .iter()
            .filter(|(_, d)| now >= d.next_resend)
            .map(|(a, _)| *a)
            .collect();
        for addr in due {
            let out_of_attempts = self
                .dials
                .get(&addr)
                .is_some_and(|d| d.attempts >= self.config.handshake_attempts);
            if out_of_attempts {
                self.dials.remove(&addr);
                self.events.push_back(UdpEvent::Failed {
                    addr,
                    reason: "no answer to HELLO".to_string(),
                });
            } else if let Err(e) = self.send_hello(addr, true, now) {
                self.dials.remove(&addr);
                self.events.push_back(UdpEvent::Failed {
                    addr,
                    reason: e.to_string(),
                });
            }
        }
    }

    /// When [`handle_timeout`](Self::handle_timeout) is next needed.
    pub fn poll_timeout(&self) -> Option<Timestamp> {
        let rotate = self.cookie_rotated.saturating_add(COOKIE_ROTATION);
        // Unacknowledged control messages too: without this their resends waited for the
        // next HELLO resend or cookie rotation (up to two minutes) in the driver.
        let first = self.control_due.map_or(rotate, |due| due.min(rotate));
        let first = match self.links.is_empty() {
            true => first,
            false => first.min(self.sweep_due),
        };
        Some(
            self.dials
                .values()
                .map(|d| d.next_resend)
                .fold(first, Timestamp::min),
        )
    }

    /// The next datagram to send (a pooled buffer: dropping it returns it to the pool).
    pub fn poll_transmit(&mut self) -> Option<(SocketAddr, PooledBuf)> {
        self.out.pop_front()
    }

    /// The next event.
    pub fn poll_event(&mut self) -> Option<UdpEvent> {
        self.events.pop_front()
    }

    /// Answer HELLOs for `link_keys` from now on (a link-key rotation: the new key and, for
    /// an overlap, the previous one). Links already up keep their sessions. A client-only
    /// engine answers no HELLO and ignores this.
    pub fn set_link_keys(&mut self, link_keys: Vec<LinkKey>) {
        if self.identity.is_some() {
            self.link_keys = link_keys;
        }
    }

    /// Whether `addr` has a link or a dial (what the socket driver keeps per peer is kept
    /// for these).
    pub fn knows(&self, addr: SocketAddr) -> bool {
        self.links.contains_key(&addr) || self.dials.contains_key(&addr)
    }

    /// The transport's counters.
    pub fn stats(&self) -> UdpStats {
        self.stats
    }

    /// Every link with its peer and counters.
    pub fn links(&self) -> Vec<(SocketAddr, NodeId, LinkStats)> {
        self.links
            .iter()
            .filter(|(_, l)| l.confirmed)
            .map(|(a, l)| (*a, l.peer, l.stats))
            .collect()
    }

    /// Send a HELLO of the dial to `addr`: a new handshake if `fresh` (or none is held),
    /// else the latest one again (after a COOKIE: the responder did not process it, so it is
    /// not a replay).
    fn send_hello(&mut self, addr: SocketAddr, fresh: bool, now: Timestamp) -> Result<(), Error> {
        let timeout = self.config.handshake_timeout;
        let Some(dial) = self.dials.get_mut(&addr) else {
            return Ok(());
        };
        if fresh || dial.hellos.is_empty() {
            let (state, hello) =
                LinkInitiator::new(&dial.identity, dial.peer, dial.peer_key.clone())
                    .start()
                    .map_err(|e| Error::Link {
                        reason: e.to_string(),
                    })?;
            dial.hellos.push_back(HelloSent {
                state,
                hello,
                sent: now,
            });
            if dial.hellos.len() > MAX_HELLOS_KEPT {
                dial.hellos.pop_front();
            }
        }
        let Some(latest) = dial.hellos.back_mut() else {
            return Ok(());
        };
        latest.sent = now;
        dial.attempts += 1;
        dial.next_resend = now.saturating_add(timeout);
        let (cookie, hello) = (dial.cookie, latest.hello.clone());
        self.queue(addr, &[&[T_HELLO], &cookie, &hello[..]]);
        Ok(())
    }

    fn on_hello(&mut self, from: SocketAddr, body: &[u8], now: Timestamp) {
        // A client accepts no links: no cookie, no decapsulation, nothing to learn.
        let Some(node) = self.identity.as_ref().map(|i| i.node_id()) else {
            self.stats.hellos_refused += 1;
            return;
        };
        let (cookie, hello) = body.split_at(COOKIE_LEN);
        // Load: HELLOs in the current second.
        let second = now.as_nanos() / 1_000_000_000;
        if self.hello_second.0 != second {
            self.hello_second = (second, 0);
        }
        self.hello_second.1 = self.hello_second.1.saturating_add(1);
        // Also while the table is three quarters full: spoofed sources then add nothing.
        let crowded = self.links.len() + self.dials.len() >= (self.config.max_peers / 4 * 3).max(1);
        let loaded = self.hello_second.1 > self.config.cookie_threshold || crowded;
        // Sources that proved their address (a valid cookie) and those that did not have
        // separate per-prefix budgets, and a source without a cookie over its budget gets a
        // COOKIE rather than silence: spoofed HELLOs in a victim's prefix cost the victim a
        // round trip, never its handshakes.
        let validated = self.cookie_valid(from, cookie);
        let prefix = IpPrefix::of(from.ip(), 24, 48);
        if !validated && (loaded || self.limiter.check(&prefix, now).is_err()) {
            let cookie = cookie_for(&self.cookie_key, from);
            self.queue(from, &[&[T_COOKIE], &cookie]);
            self.stats.cookies_sent += 1;
            return;
        }
        if validated && self.validated_limiter.check(&prefix, now).is_err() {
            self.stats.rate_limited += 1;
            return;
        }
        let known = self.links.contains_key(&from);
        let Some(make_room) = (if known { Some(None) } else { self.room(now) }) else {
            self.stats.handshakes_failed += 1;
            return;
        };
        match LinkResponder::new(node, &self.link_keys).respond(
            hello,
            &mut self.replay,
            self.config.rekey,
            now,
        ) {
            Ok((session, welcome, initiator)) => {
                let peer = initiator.node_id();
                // Both ends dialled each other at once (two relays that start together):
                // each would finish its own handshake and answer the other's, and the two
                // ends would settle on different sessions. Both decide by the node ids alike:
                // the smaller id's dial goes on and its HELLO is answered; the larger drops
                // its own dial (the link it answers reports `Connected` when confirmed).
                if self.dials.get(&from).is_some_and(|d| d.peer == peer) {
                    self.stats.crossed_dials += 1;
                    if node < peer {
                        return; // ours goes on: the peer answers it and drops its dial
                    }
                    self.dials.remove(&from);
                }
                match self.links.get_mut(&from) {
                    // A later HELLO from an address with a link (up, or still waiting for its
                    // first DATA): the initiator's next attempt after a lost WELCOME, a
                    // restarted peer, or a replay with a spoofed source. Which one is known
                    // only when a DATA authenticates, so the new session waits beside the
                    // link's own; the link is left as it is.
                    Some(link) => {
                        link.pending.push_back(Pending {
                            peer,
                            session,
                            welcome_sent: now,
                        });
                        if link.pending.len() > MAX_PENDING {
                            let oldest = link.pending.pop_front();
                            // A link not yet up is itself only the oldest candidate: drop it
                            // first. A live link is never dropped for a HELLO.
                            if let (false, Some(next)) = (link.confirmed, oldest) {
                                link.peer = next.peer;
                                link.session = next.session;
                                link.handshake_sent = next.welcome_sent;
                            }
                        }
                    }
                    None => {
                        if let Some(old) = make_room {
                            self.evict(old, now);
                        }
                        self.links.insert(
                            from,
                            Link {
                                peer,
                                session,
                                stats: LinkStats::default(),
                                handshake_sent: now,
                                confirmed: false,
                                last_heard: now,
                                pending: VecDeque::new(),
                                control: ControlState::default(),
                            },
                        );
                    }
                }
                self.queue(from, &[&[T_WELCOME], &welcome]);
            }
            Err(error) => {
                self.stats.handshakes_failed += 1;
                tracing::debug!(%error, "udp HELLO refused");
            }
        }
    }

    fn on_cookie(&mut self, from: SocketAddr, cookie: &[u8], now: Timestamp) {
        let Some(dial) = self.dials.get_mut(&from) else {
            self.stats.dropped_malformed += 1;
            return;
        };
        // One resend per COOKIE, at most twice per dial; further COOKIEs only update the
        // cookie the timer's next resend carries.
        dial.cookie.copy_from_slice(cookie);
        if dial.cookie_resends >= MAX_COOKIE_RESENDS {
            return;
        }
        dial.cookie_resends += 1;
        // The RNG failing (only when no HELLO is held) leaves the dial to its timer.
        let _ = self.send_hello(from, false, now);
    }

    fn on_welcome(&mut self, from: SocketAddr, welcome: &[u8], now: Timestamp) {
        let Some(dial) = self.dials.get_mut(&from) else {
            self.stats.dropped_malformed += 1;
            return;
        };
        // Which HELLO this answers is not in the WELCOME: try the held ones, newest first
        // (usually the one answered). `finish` consumes the state it tries, so a WELCOME
        // that completes none (forged or corrupted) ends the attempts in flight, not the
        // dial: its timer sends a fresh HELLO.
        let mut finished = None;
        while let Some(attempt) = dial.hellos.pop_back() {
            if let Ok(session) = attempt.state.finish(welcome, self.config.rekey, now) {
                finished = Some((session, attempt.sent));
                break;
            }
        }
        let Some((session, hello_sent)) = finished else {
            self.stats.handshakes_failed += 1;
            tracing::debug!(from = %Redacted(from), "udp WELCOME refused");
            return;
        };
        let peer = dial.peer;
        self.dials.remove(&from);
        let stats = LinkStats {
            rtt: Some(now.saturating_duration_since(hello_sent)),
            ..LinkStats::default()
        };
        self.links.insert(
            from,
            Link {
                peer,
                session,
                stats,
                handshake_sent: now,
                confirmed: true,
                last_heard: now,
                pending: VecDeque::new(),
                control: ControlState::default(),
            },
        );
        self.stats.handshakes_ok += 1;
        self.events
            .push_back(UdpEvent::Connected { peer, addr: from });
        // A DATA with no payload confirms the session to the responder at once.
        let _ = self.send_empty(from, now);
    }

    fn on_data(&mut self, from: SocketAddr, body: &[u8], now: Timestamp) -> bool {
        let Some(link) = self.links.get_mut(&from) else {
            self.stats.dropped_malformed += 1;
            return false;
        };
        // One copy, from the socket's reused receive buffer into a pooled buffer the cell
        // is decrypted in and delivered from.
        if body.len() > self.pool.buffer_size() {
            self.stats.dropped_malformed += 1;
            return false;
        }
        let Ok(mut buf) = self.pool.acquire() else {
            self.stats.dropped_no_buffer += 1;
            return false;
        };
        buf.truncate(body.len());
        buf.copy_from_slice(body);
        let range = match link.session.open(now, &mut buf) {
            Ok(range) => range,
            Err(_) => {
                // Perhaps a later handshake from this address completed: the initiator's
                // next attempt after a lost WELCOME, or a restarted peer. Newest first. (A
                // failed open changes neither the session nor the buffer.)
                let opened = link
                    .pending
                    .iter_mut()
                    .enumerate()
                    .rev()
                    .find_map(|(i, p)| p.session.open(now, &mut buf).ok().map(|r| (i, r)));
                let Some((i, range)) = opened else {
                    self.stats.dropped_auth += 1;
                    link.stats.dropped_auth += 1;
                    return false;
                };
                // The newest completed handshake wins: it becomes the link's session, the
                // older ones go (the initiator finishes one handshake per dial, so they
                // cannot complete any more). Newer ones stay: they may still complete (the
                // peer restarted again). Only the initiator, who holds the ephemeral
                // secrets, can make a DATA authenticate, so a replayed HELLO never gets here.
                link.pending.drain(..i);
                let Some(promoted) = link.pending.pop_front() else {
                    return false;
                };
                if link.confirmed && promoted.peer != link.peer {
                    self.events.push_back(UdpEvent::Replaced {
                        old: link.peer,
                        peer: promoted.peer,
                        addr: from,
                    });
                }
                link.peer = promoted.peer;
                link.session = promoted.session;
                link.handshake_sent = promoted.welcome_sent;
                if link.confirmed {
                    // A new handshake replaces a live session: the peer's control channel
                    // starts afresh (as the initiator's side does), and so must ours.
                    link.control = ControlState::default();
                    link.stats.rtt = Some(now.saturating_duration_since(promoted.welcome_sent));
                }
                range
            }
        };
        let peer = link.peer;
        link.last_heard = now;
        if !link.confirmed {
            link.confirmed = true;
            link.stats.rtt = Some(now.saturating_duration_since(link.handshake_sent));
            self.stats.handshakes_ok += 1;
            // A dial of ours to the same peer, begun after its HELLO arrived, is served by
            // this link: ending it keeps a later WELCOME from replacing the session.
            if self.dials.get(&from).is_some_and(|d| d.peer == peer) {
                self.dials.remove(&from);
            }
            tracing::debug!(peer = %Redacted(peer), "udp link up (accepted)");
            self.events
                .push_back(UdpEvent::Connected { peer, addr: from });
        }
        // kind ‖ len ‖ body ‖ padding
        let declared = match buf.get(range.start..range.start + PAYLOAD_HEADER) {
            Some(&[_, a, b]) => usize::from(u16::from_be_bytes([a, b])),
            _ => usize::MAX,
        };
        if declared > range.len().saturating_sub(PAYLOAD_HEADER) {
            self.stats.dropped_malformed += 1;
            return true;
        }
        let kind = buf[range.start];
        let body = range.start + PAYLOAD_HEADER..range.start + PAYLOAD_HEADER + declared;
        match kind {
            KIND_CONFIRM => {} // its authentication is all it says
            KIND_CELL => {
                self.stats.cells_in += 1;
                link.stats.cells_in += 1;
                link.stats.bytes_in += body.len() as u64;
                self.events.push_back(UdpEvent::Cell {
                    peer,
                    data: buf.freeze().slice(body),
                });
            }
            KIND_CONTROL if body.len() >= 4 => {
                let seq = u32::from_be_bytes([
                    buf[body.start],
                    buf[body.start + 1],
                    buf[body.start + 2],
                    buf[body.start + 3],
                ]);
                let c = &mut link.control;
                match c.receive(seq, &buf[body.start + 4..body.end]) {
                    Ok(messages) => {
                        for data in messages {
                            self.events.push_back(UdpEvent::Control { peer, data });
                        }
                    }
                    // The peer framed its stream wrongly; its messages are lost.
                    Err(_) => self.stats.dropped_malformed += 1,
                }
                let ack = c.expected().to_be_bytes();
                let _ = self.send_data(from, KIND_CONTROL_ACK, &[&ack], now);
            }
            KIND_CONTROL_ACK if body.len() == 4 => {
                let next = u32::from_be_bytes([
                    buf[body.start],
                    buf[body.start + 1],
                    buf[body.start + 2],
                    buf[body.start + 3],
                ]);
                // Everything before `next` arrived.
                link.control.acked(next);
            }
            KIND_CLOSE if body.is_empty() => self.closed_by_peer(from, now),
            _ => self.stats.dropped_malformed += 1,
        }
        true
    }

    /// Queue a handshake message assembled from `parts` in a pooled buffer.
    fn queue(&mut self, to: SocketAddr, parts: &[&[u8]]) {
        let Ok(mut buf) = self.pool.acquire() else {
            self.stats.dropped_no_buffer += 1;
            return;
        };
        let mut at = 0;
        let full = buf.full_mut();
        for part in parts {
            full[at..at + part.len()].copy_from_slice(part);
            at += part.len();
        }
        buf.truncate(at);
        self.out.push_back((to, buf));
    }

    fn cookie_valid(&self, from: SocketAddr, cookie: &[u8]) -> bool {
        let now = cookie_for(&self.cookie_key, from);
        let before = cookie_for(&self.previous_cookie_key, from);
        bool::from(now.ct_eq(cookie)) || bool::from(before.ct_eq(cookie))
    }

    fn rotate_cookie(&mut self, now: Timestamp) -> Result<(), Error> {
        let mut fresh = Zeroizing::new([0u8; 32]);
        getrandom::fill(fresh.as_mut_slice()).map_err(|e| Error::Link {
            reason: format!("random number generator: {e}"),
        })?;
        self.previous_cookie_key = std::mem::replace(&mut self.cookie_key, fresh);
        self.cookie_rotated = now;
        Ok(())
    }
}

/// HMAC-SHA256(key, address)[..16].
fn cookie_for(key: &[u8; 32], addr: SocketAddr) -> [u8; COOKIE_LEN] {
    let mut out = [0u8; COOKIE_LEN];
    // A 32-byte key is always accepted by HMAC.
    if let Ok(mut mac) = <Hmac<Sha256> as KeyInit>::new_from_slice(key) {
        match addr {
            SocketAddr::V4(a) => mac.update(&a.ip().octets()),
            SocketAddr::V6(a) => mac.update(&a.ip().octets()),
        }
        mac.update(&addr.port().to_be_bytes());
        out.copy_from_slice(&mac.finalize().into_bytes()[..COOKIE_LEN]);
    }
    out
}

impl std::fmt::Debug for UdpEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UdpEngine")
            .field("links", &self.links.len())
            .field("dials", &self.dials.len())
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}
