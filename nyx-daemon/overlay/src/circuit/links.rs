//! What the overlay knows about each link: whether it is up, what waits for it, how many
//! circuits use it, and whether the peer still answers.
//!
//! A link that carries circuits and has heard nothing for `keepalive` gets a PING; a PING
//! unanswered (nothing at all heard) for `link_timeout` declares the link dead, which
//! destroys or truncates every circuit over it. The transports have their own idle
//! timeouts; this bound is the overlay's, the same for both, and it catches a peer that
//! vanished without closing anything.

use nyx_core::{NodeId, Timestamp};

use super::{Output, Overlay, Queued, Slot, wire};

/// Control messages held for a link that is still connecting, at most.
pub(super) const MAX_PENDING: usize = 256;

/// One peer's link, as the overlay sees it.
#[derive(Debug)]
pub(super) struct LinkState {
    /// The driver reported it up (or a message arrived over it).
    pub(super) up: bool,
    /// A [`Output::Connect`] is outstanding.
    pub(super) connecting: bool,
    /// When anything last arrived from the peer.
    pub(super) last_heard: Timestamp,
    /// When the unanswered PING was sent.
    pub(super) ping_since: Option<Timestamp>,
    /// Circuit ids in use on this link.
    pub(super) circuits: usize,
    /// Cells queued for it.
    pub(super) queued: usize,
    /// Control messages waiting for it to come up.
    pub(super) pending: Vec<Vec<u8>>,
}

impl LinkState {
    pub(super) fn new(up: bool, now: Timestamp) -> Self {
        LinkState {
            up,
            connecting: false,
            last_heard: now,
            ping_since: None,
            circuits: 0,
            queued: 0,
            pending: Vec::new(),
        }
    }

    pub(super) fn heard(&mut self, now: Timestamp) {
        self.up = true;
        self.connecting = false;
        self.last_heard = now;
        self.ping_since = None;
    }
}

impl Overlay {
    /// The driver has a link to `peer` (dialled or accepted): send what waited for it.
    pub fn link_up(&mut self, peer: NodeId, now: Timestamp) {
        let link = self.shared.link(peer, now);
        link.heard(now);
        let pending = std::mem::take(&mut link.pending);
        for msg in pending {
            self.shared.out.push_back(Queued {
                output: Output::Control { to: peer, msg },
                circuit: 0,
            });
        }
    }

    /// Dialling `peer` failed: circuits waiting for it fail.
    pub fn connect_failed(&mut self, peer: NodeId, now: Timestamp) {
        self.lose_link(peer, wire::DestroyReason::ConnectFailed, now);
    }

    /// The link to `peer` closed: circuits over it are destroyed (towards their other end
    /// with a reason) or, where this node is a relay that lost its next hop, truncated.
    pub fn link_down(&mut self, peer: NodeId, now: Timestamp) {
        self.lose_link(peer, wire::DestroyReason::LinkLost, now);
    }

    fn lose_link(&mut self, peer: NodeId, reason: wire::DestroyReason, now: Timestamp) {
        if let Some(link) = self.shared.links.get_mut(&peer) {
            link.up = false;
            link.connecting = false;
            link.ping_since = None;
            link.pending.clear();
        }
        let affected: Vec<(u32, Slot)> = self
            .shared
            .slots
            .iter()
            .filter(|((p, _), _)| *p == peer)
            .map(|((_, circ), slot)| (*circ, *slot))
            .collect();
        for (_, slot) in affected {
            match slot {
                Slot::Client(id) => self.client_lost(id, reason, Some(0), false, now),
                Slot::RelayPrev(id) => self.relay_destroy_from_prev(id, reason, now),
                Slot::RelayNext(id) => self.relay_next_gone(id, reason, now),
            }
        }
        // Forget idle links entirely so the table does not grow with every peer ever seen.
        if self
            .shared
            .links
            .get(&peer)
            .is_some_and(|l| l.circuits == 0)
        {
            self.shared.links.remove(&peer);
        }
    }

    /// Probe quiet links that carry circuits; declare dead those that stopped answering.
    pub(super) fn check_links(&mut self, now: Timestamp) {
        let mut dead = Vec::new();
        for (peer, link) in &mut self.shared.links {
            if !link.up || link.circuits == 0 {
                continue;
            }
            match link.ping_since {
                Some(since) if now >= since + self.config.link_timeout => {
                    dead.push(*peer);
                }
                Some(_) => {}
                None if now >= link.last_heard + self.config.keepalive => {
                    link.ping_since = Some(now);
                    self.shared.out.push_back(Queued {
                        output: Output::Control {
                            to: *peer,
                            msg: wire::Control::Ping.encode(),
                        },
                        circuit: 0,
                    });
                }
                None => {}
            }
        }
        for peer in dead {
            tracing::debug!("link declared dead: probes unanswered");
            self.shared.stats.links_dead += 1;
            self.shared.out.push_back(Queued {
                output: Output::Disconnect { peer },
                circuit: 0,
            });
            self.link_down(peer, now);
        }
    }
}
