//! How many QUIC links an endpoint holds, and which one goes to make room.
//!
//! Admission ([`crate::admission`]) bounds the handshakes a stranger can start; this bounds
//! what is left once they finish. Keep-alive stops QUIC's idle timeout from closing a
//! link, so without a bound a stranger within its handshake budget could hold links open
//! for ever. The rule follows the UDP engine's table (`udp/table.rs`):
//!
//! * Every link the endpoint dials or accepts is counted, until it closes.
//! * When `max_links` are open, a newly accepted link makes room instead of being refused:
//!   the link quiet the longest goes, if nothing arrived on it (cells or control datagrams;
//!   QUIC's own keep-alives do not count) for [`MIN_QUIET_TO_EVICT`]. The overlay pings
//!   every link that carries circuits, so a quiet link carries none.
//! * Only a table full of links all heard within that time refuses a newcomer: a real
//!   capacity limit. The newcomer's link is closed at once.
//! * A link this node dials is never refused: the node dials only what its circuits need.
//!
//! Memory: an idle quinn connection with its buffers is a few KiB, so the default 4 096
//! links stay within tens of MiB.

use std::sync::{Arc, Weak};
use std::time::Duration;

use nyx_core::Timestamp;
use nyx_core::redact::Redacted;

use super::QuicLink;

/// A link heard from within this is never evicted to make room.
pub const MIN_QUIET_TO_EVICT: Duration = Duration::from_secs(10);

/// Counters of an endpoint's link table.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct QuicLinkStats {
    /// Links open now (dialled and accepted).
    pub open: usize,
    /// Links closed to make room for a newcomer.
    pub evicted: u64,
    /// Accepted links closed because every link was in use.
    pub refused: u64,
}

/// The links of one endpoint, by weak reference: the table never keeps a link alive.
#[derive(Debug)]
pub(super) struct LinkTable {
    max_links: usize,
    links: Vec<Weak<QuicLink>>,
    evicted: u64,
    refused: u64,
}

impl LinkTable {
    pub(super) fn new(max_links: usize) -> Self {
        LinkTable {
            max_links: max_links.max(1),
            links: Vec::new(),
            evicted: 0,
            refused: 0,
        }
    }

    /// Count a link this node dialled.
    pub(super) fn add_dialled(&mut self, link: &Arc<QuicLink>) {
        self.prune();
        self.links.push(Arc::downgrade(link));
    }

    /// Take an accepted link if there is room, making room by closing the quietest link
    /// if it was quiet for [`MIN_QUIET_TO_EVICT`]; false if every link is in use (the
    /// caller closes the newcomer).
    pub(super) fn admit(&mut self, link: &Arc<QuicLink>, now: Timestamp) -> bool {
        self.prune();
        if self.links.len() >= self.max_links {
            let quietest = self
                .links
                .iter()
                .enumerate()
                .filter_map(|(i, w)| w.upgrade().map(|l| (i, l.last_heard(), l)))
                .min_by_key(|(_, heard, _)| *heard)
                .filter(|(_, heard, _)| now >= heard.saturating_add(MIN_QUIET_TO_EVICT));
            let Some((i, _, victim)) = quietest else {
                self.refused += 1;
                return false;
            };
            tracing::debug!(peer = %Redacted(victim.peer()), "quic link evicted to make room");
            victim.close("evicted: link table full");
            self.links.swap_remove(i);
            self.evicted += 1;
        }
        self.links.push(Arc::downgrade(link));
        true
    }

    pub(super) fn stats(&mut self) -> QuicLinkStats {
        self.prune();
        QuicLinkStats {
            open: self.links.len(),
            evicted: self.evicted,
            refused: self.refused,
        }
    }

    /// Forget links that are closed or dropped.
    fn prune(&mut self) {
        self.links
            .retain(|w| w.upgrade().is_some_and(|l| !l.is_closed()));
    }
}
