//! The driver's QUIC links: which of two links to one peer it uses, and moving to the other
//! when the one in use closes (see `links::keep`).

use std::sync::Arc;

use nyx_transport::quic::QuicLink;

use super::{Driver, push_task};
use crate::links::{Keep, LinkFacts, LinkRef, keep, retire_quic, spawn_quic_driver};

/// Open links to one peer besides the one in use, at most: a peer that keeps dialling does
/// not pile links up here (the oldest spare is closed).
const MAX_SPARES: usize = 1;

impl Driver {
    /// A QUIC link is up (dialled or accepted).
    pub(super) fn quic_up(&mut self, link: Arc<QuicLink>) {
        let now = self.now();
        let peer = link.peer();
        // Every link is read until it closes, the one in use or not.
        let task = spawn_quic_driver(
            link.clone(),
            self.inbound_tx.clone(),
            self.link_events_tx.clone(),
        );
        push_task(&self.aux, task);
        let old = match self.links.live.get(&peer) {
            Some(LinkRef::Quic(old)) if !old.is_closed() => Some(old.clone()),
            _ => None,
        };
        let Some(old) = old else {
            self.links.live.insert(peer, LinkRef::Quic(link));
            self.peer_up(peer);
            self.overlay.link_up(peer, now);
            self.probe_link_up(peer);
            return;
        };
        let me = self.identity.node_id();
        let choice = keep(me, peer, LinkFacts::of(&old), LinkFacts::of(&link));
        let (used, other) = match choice {
            Keep::Old => (old, link),
            Keep::New => (link, old),
        };
        // The smaller id closes the other link; the larger waits for that close.
        if me < peer {
            self.quic_retired += 1;
            push_task(&self.aux, retire_quic(other.clone()));
        }
        let spares = self.links.quic_spare.entry(peer).or_default();
        spares.retain(|l| !l.is_closed());
        spares.push(other);
        while spares.len() > MAX_SPARES {
            let oldest = spares.remove(0);
            oldest.close("overlay: too many links to one peer");
        }
        if choice == Keep::New {
            self.links.live.insert(peer, LinkRef::Quic(used));
            // The overlay's link to the peer stays up; a probe may wait for this address.
            self.probe_link_up(peer);
        }
    }

    /// A QUIC link closed: if it was the one in use, move to a spare, else the peer is
    /// gone.
    pub(super) fn quic_closed(&mut self, link: &Arc<QuicLink>) {
        let now = self.now();
        let peer = link.peer();
        let current =
            matches!(self.links.live.get(&peer), Some(LinkRef::Quic(l)) if Arc::ptr_eq(l, link));
        let spares = self.links.quic_spare.entry(peer).or_default();
        spares.retain(|l| !Arc::ptr_eq(l, link) && !l.is_closed());
        let spare = if current { spares.pop() } else { None };
        if spares.is_empty() {
            self.links.quic_spare.remove(&peer);
        }
        if !current {
            return;
        }
        match spare {
            Some(spare) => {
                self.links.live.insert(peer, LinkRef::Quic(spare));
                self.probe_link_up(peer);
            }
            None => {
                self.links.live.remove(&peer);
                self.peer_down(peer);
                self.overlay.link_down(peer, now);
            }
        }
    }
}
