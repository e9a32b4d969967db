//! How links leave the UDP engine's table, so that it never fills for good.
//!
//! * A responder's link that no DATA confirmed (a spoofed HELLO, or an initiator that gave
//!   up) expires once the initiator could no longer be trying: `handshake_timeout` times
//!   `handshake_attempts`.
//! * A link that heard nothing authenticated for `idle_timeout` is closed (the overlay pings
//!   every link that carries circuits, so only unused or dead links go quiet).
//! * Either end may close a link ([`UdpEngine::close`]): the other is told by a CLOSE inside
//!   the session (authenticated and replay-protected like a cell), and reports
//!   [`UdpEvent::Closed`]. A confirmed link closed for idleness or evicted is closed the same
//!   way, so its peer redials instead of sending into a link that is gone.
//! * When the table is full, a new HELLO makes room instead of being refused, once it has
//!   proved to be a handshake (decapsulated): the oldest unconfirmed link older than
//!   `handshake_timeout` goes first, then the link quiet the longest, if it has been quiet
//!   for [`MIN_QUIET_TO_EVICT`]. Only a table full of links all heard within that time (or
//!   handshakes younger than that) refuses a newcomer: a real capacity limit, which spoofed
//!   sources cannot reach (their links are never confirmed, so they go first once their
//!   WELCOME has had time to come back).
//!
//! Memory: a link holds its session (keys and replay window, about 300 bytes), its counters,
//! at most [`MAX_PENDING`](super::MAX_PENDING) waiting sessions and its control channel's
//! queues (bounded by [`MAX_CONTROL_IN_FLIGHT`](super::MAX_CONTROL_IN_FLIGHT) messages each
//! way); an idle link is about 1 KiB, so the default 4 096 entries stay within a few MiB.

use std::net::SocketAddr;
use std::time::Duration;

use nyx_core::Timestamp;
use nyx_core::redact::Redacted;

use super::{KIND_CLOSE, UdpEngine, UdpEvent};

/// How often the table is swept for expired links.
pub(super) const SWEEP_INTERVAL: Duration = Duration::from_secs(1);
/// A confirmed link heard from within this is never evicted to make room.
pub(super) const MIN_QUIET_TO_EVICT: Duration = Duration::from_secs(10);

/// Why a link left the table.
#[derive(Debug, Clone, Copy)]
enum Gone {
    /// Never confirmed in time.
    Unconfirmed,
    /// Quiet for `idle_timeout`.
    Idle,
    /// Evicted to make room.
    Evicted,
    /// Closed by this node.
    Closed,
    /// Closed by the peer.
    ClosedByPeer,
}

impl UdpEngine {
    /// Close the link to `peer` at `addr`: tell the peer (a CLOSE inside the session) and
    /// forget the link. False if `addr` has no link to `peer` (it may have been replaced by
    /// a newer handshake from that address, which stays). [`UdpEvent::Closed`] is reported
    /// as for any link that leaves.
    pub fn close(&mut self, peer: nyx_core::NodeId, addr: SocketAddr, now: Timestamp) -> bool {
        if self.links.get(&addr).is_none_or(|l| l.peer != peer) {
            return false;
        }
        self.forget(addr, Gone::Closed, now);
        true
    }

    /// The peer at `from` closed the link.
    pub(super) fn closed_by_peer(&mut self, from: SocketAddr, now: Timestamp) {
        self.forget(from, Gone::ClosedByPeer, now);
    }

    /// Drop expired links; called by `handle_timeout` every [`SWEEP_INTERVAL`].
    pub(super) fn sweep(&mut self, now: Timestamp) {
        self.sweep_due = now.saturating_add(SWEEP_INTERVAL);
        let unconfirmed = self.unconfirmed_timeout();
        let idle = self.config.idle_timeout;
        let expired: Vec<(SocketAddr, Gone)> = self
            .links
            .iter()
            .filter_map(|(addr, l)| {
                if !l.confirmed && now >= l.handshake_sent.saturating_add(unconfirmed) {
                    Some((*addr, Gone::Unconfirmed))
                } else if l.confirmed && now >= l.last_heard.saturating_add(idle) {
                    Some((*addr, Gone::Idle))
                } else {
                    None
                }
            })
            .collect();
        for (addr, why) in expired {
            self.forget(addr, why, now);
        }
    }

    /// Whether a HELLO from a new address may have a link: `Some(None)` if the table has
    /// room, `Some(Some(addr))` if the link at `addr` would make room, `None` if every entry
    /// is in use. Nothing is evicted yet: [`evict`](Self::evict) does that once the HELLO
    /// has proved to be a handshake. An unconfirmed link younger than `handshake_timeout`
    /// is in use (its WELCOME may be on its way back).
    pub(super) fn room(&self, now: Timestamp) -> Option<Option<SocketAddr>> {
        if self.links.len() + self.dials.len() < self.config.max_peers {
            return Some(None);
        }
        let young = self.config.handshake_timeout;
        let unconfirmed = self
            .links
            .iter()
            .filter(|(_, l)| !l.confirmed)
            .min_by_key(|(_, l)| l.handshake_sent)
            .filter(|(_, l)| now >= l.handshake_sent.saturating_add(young))
            .map(|(a, _)| *a);
        let quietest = || {
            self.links
                .iter()
                .filter(|(_, l)| l.confirmed)
                .min_by_key(|(_, l)| l.last_heard)
                .filter(|(_, l)| now >= l.last_heard.saturating_add(MIN_QUIET_TO_EVICT))
                .map(|(a, _)| *a)
        };
        unconfirmed.or_else(quietest).map(Some)
    }

    /// Evict the link at `addr` to make room (see [`room`](Self::room)).
    pub(super) fn evict(&mut self, addr: SocketAddr, now: Timestamp) {
        self.forget(addr, Gone::Evicted, now);
    }

    /// How long a responder's link may wait for the DATA that confirms it.
    fn unconfirmed_timeout(&self) -> Duration {
        self.config
            .handshake_timeout
            .saturating_mul(self.config.handshake_attempts.max(1))
    }

    fn forget(&mut self, addr: SocketAddr, why: Gone, now: Timestamp) {
        let confirmed = self.links.get(&addr).is_some_and(|l| l.confirmed);
        if confirmed && !matches!(why, Gone::ClosedByPeer) {
            // A peer that does not hear it finds out by its own idle timeout.
            let _ = self.send_data(addr, KIND_CLOSE, &[], now);
        }
        let Some(link) = self.links.remove(&addr) else {
            return;
        };
        match why {
            Gone::Unconfirmed => self.stats.links_unconfirmed_expired += 1,
            Gone::Idle => self.stats.links_idle_closed += 1,
            Gone::Evicted => self.stats.links_evicted += 1,
            Gone::Closed | Gone::ClosedByPeer => self.stats.links_closed += 1,
        }
        tracing::debug!(peer = %Redacted(link.peer), reason = ?why, "udp link removed");
        // Every link the node was told of is reported, even one it closed itself: by the
        // time the close is carried out the address may hold a newer link of the same peer
        // that the node took up, and must now let go of.
        if link.confirmed {
            self.events.push_back(UdpEvent::Closed {
                peer: link.peer,
                addr,
            });
        }
    }
}
