//! The link handshake over UDP: HELLO, COOKIE and WELCOME (see the module above), the
//! cookie that a stranger's HELLOs must carry once they come fast, and its key's rotation.

use std::collections::VecDeque;
use std::net::SocketAddr;

use hmac::{Hmac, KeyInit, Mac};
use nyx_core::Timestamp;
use nyx_core::rate::IpPrefix;
use nyx_core::redact::Redacted;
use nyx_crypto::link::{LinkInitiator, LinkResponder};
use sha2::Sha256;
use subtle::ConstantTimeEq;
use zeroize::Zeroizing;

use super::{
    COOKIE_LEN, HelloSent, Link, LinkStats, MAX_COOKIE_RESENDS, MAX_HELLOS_KEPT, MAX_PENDING,
    Pending, T_COOKIE, T_HELLO, T_WELCOME, UdpEngine, UdpEvent,
};
use crate::Error;
use crate::control::ControlState;

impl UdpEngine {
    /// Send a HELLO of the dial to `addr`: a new handshake if `fresh` (or none is held),
    /// else the latest one again (after a COOKIE: the responder did not process it, so it is
    /// not a replay).
    pub(super) fn send_hello(
        &mut self,
        addr: SocketAddr,
        fresh: bool,
        now: Timestamp,
    ) -> Result<(), Error> {
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

    pub(super) fn on_hello(&mut self, from: SocketAddr, body: &[u8], now: Timestamp) {
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

    pub(super) fn on_cookie(&mut self, from: SocketAddr, cookie: &[u8], now: Timestamp) {
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

    pub(super) fn on_welcome(&mut self, from: SocketAddr, welcome: &[u8], now: Timestamp) {
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

    fn cookie_valid(&self, from: SocketAddr, cookie: &[u8]) -> bool {
        let now = cookie_for(&self.cookie_key, from);
        let before = cookie_for(&self.previous_cookie_key, from);
        bool::from(now.ct_eq(cookie)) || bool::from(before.ct_eq(cookie))
    }

    pub(super) fn rotate_cookie(&mut self, now: Timestamp) -> Result<(), Error> {
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
