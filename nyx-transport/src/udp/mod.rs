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

use nyx_core::rate::{IpPrefix, KeyedLimiter};
use nyx_core::{NodeId, Timestamp};
use nyx_crypto::hop::ReplayCache;
use nyx_crypto::identity::IdentityKey;
use nyx_crypto::kem::HybridPublicKey;
use nyx_crypto::link::{HELLO_LEN, LinkInitiatorSent, LinkKey, WELCOME_LEN};
use nyx_crypto::session::{OVERHEAD, Session};
use zeroize::Zeroizing;

mod addressing;
mod config;
mod data;
mod events;
mod handshake;
mod table;
mod transport;

use crate::control::{ControlState, control_rto};
pub use crate::control::{MAX_CONTROL_IN_FLIGHT, MAX_CONTROL_LEN};
pub use config::UdpConfig;
pub use events::{LinkStats, UdpEvent, UdpStats};
pub use transport::{UdpCommand, UdpSnapshot, UdpTransport};

use crate::Error;
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
        let quota = config.hello_per_source;
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
