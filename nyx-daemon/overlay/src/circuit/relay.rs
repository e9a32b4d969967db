//! Circuits as a relay carries them: answer CREATE, peel forward cells and pass them on,
//! add a layer to backward cells, extend to the next relay, deliver payloads when this node
//! is the last hop, and tear down in both directions.
//!
//! The forwarding path (a cell in, a cell out) copies the cell once into a buffer carved
//! from the cell arena, peels or wraps it in place, and queues it: no heap allocation.

use nyx_core::rate::Limiter;
use nyx_core::{NodeId, Timestamp};
use nyx_crypto::fast_hop::{self, FAST_CREATE_LEN};
use nyx_crypto::hop::{CREATE_LEN, CREATED_LEN, HopResponder};
use nyx_crypto::onion::{BACKWARD_PAYLOAD_LEN, BACKWARD_PAYLOAD_OFFSET, Peeled, RelayHop};

use super::wire::{
    self, CIRC_ID_LEN, Control, DestroyReason, EXTEND_LEN, FRAGMENT_CAPACITY, RelayCommand,
};
use super::{Event, ExitHandle, Overlay, Slot};
use crate::Error;

/// Where a relayed circuit goes next.
#[derive(Debug)]
pub(super) enum NextHop {
    /// Nowhere yet: this node is the last hop.
    None,
    /// CREATE sent to the next relay; waiting for CREATED.
    Pending {
        peer: NodeId,
        circ: u32,
        deadline: Timestamp,
    },
    /// Extended.
    Open { peer: NodeId, circ: u32 },
    /// The next hop is gone; TRUNCATED (with `reason`) was sent to the client, who should
    /// destroy.
    Truncated {
        since: Timestamp,
        reason: DestroyReason,
    },
}

/// An EXTEND being reassembled from its two fragments.
#[derive(Debug)]
pub(super) struct Reassembly {
    handshake: u16,
    got: [bool; 2],
    bytes: Box<[u8; EXTEND_LEN]>,
    pub(super) started: Timestamp,
}

/// A relay's state for one circuit.
#[derive(Debug)]
pub(super) struct RelayCircuit {
    pub(super) prev: (NodeId, u32),
    hop: RelayHop,
    pub(super) next: NextHop,
    pub(super) extend: Option<Reassembly>,
    /// The handshake id of the EXTEND this hop acted on (it extends once).
    extended: Option<u16>,
    /// The next hop's CREATED, kept to answer a resent EXTEND (its owner may have lost the
    /// EXTENDED) until a cell for a later hop shows the owner has it.
    created: Option<Box<[u8; CREATED_LEN]>>,
    limiter: Limiter,
    pub(super) last_active: Timestamp,
    pub(super) queued: usize,
    /// Payloads were delivered here (the owner side of the exit knows this circuit).
    delivered: bool,
}

impl Overlay {
    /// CREATE from `from`: answer it and open the relayed circuit, or refuse with DESTROY.
    pub(super) fn relay_create(
        &mut self,
        from: NodeId,
        circ: u32,
        create: &[u8; CREATE_LEN],
        now: Timestamp,
    ) {
        if !self.may_create(from, circ, true, now) {
            return;
        }
        let responder = HopResponder::new(self.me, self.onion_keys.keys());
        match responder.respond(create, &mut self.replay) {
            Ok((hop, created)) => {
                self.open_relayed(from, circ, hop, now);
                self.shared
                    .send_control(from, &Control::Created { circ, created }, now);
            }
            Err(e) => {
                tracing::debug!(error = %e, "CREATE refused");
                self.refuse_create(from, circ, DestroyReason::Protocol, now);
            }
        }
    }

    /// CREATE_FAST from `from` (a one-hop directory circuit): answer it, or refuse with
    /// DESTROY. The same limits as CREATE apply.
    pub(super) fn relay_create_fast(
        &mut self,
        from: NodeId,
        circ: u32,
        create: &[u8; FAST_CREATE_LEN],
        now: Timestamp,
    ) {
        if !self.may_create(from, circ, false, now) {
            return;
        }
        match fast_hop::respond(self.me, create) {
            Ok((hop, created)) => {
                self.open_relayed(from, circ, hop, now);
                self.shared
                    .send_control(from, &Control::CreatedFast { circ, created }, now);
            }
            Err(e) => {
                tracing::debug!(error = %e, "CREATE_FAST refused");
                self.refuse_create(from, circ, DestroyReason::Protocol, now);
            }
        }
    }

    /// Whether a CREATE on `circ` from `from` passes the slot, rate and circuit limits; if
    /// not, it was refused with DESTROY. `costly`: a hybrid decapsulation follows (a CREATE;
    /// a CREATE_FAST costs a hash), so it counts against the limit across all peers too.
    fn may_create(&mut self, from: NodeId, circ: u32, costly: bool, now: Timestamp) -> bool {
        if !self.config.relay {
            self.refuse_create(from, circ, DestroyReason::Protocol, now);
            return false;
        }
        // Either half of the id space is accepted (docs/protocol.md, "Circuit ids"): a
        // client-only peer cannot know which half its one-link identity gives it.
        if self.shared.slots.contains_key(&(from, circ)) {
            self.shared.stats.bad_control += 1;
            self.refuse_create(from, circ, DestroyReason::Protocol, now);
            return false;
        }
        if self.create_limiter.check(&from, now).is_err()
            || (costly && self.all_creates.check(now).is_err())
        {
            self.shared.stats.creates_rate_limited += 1;
            self.refuse_create(from, circ, DestroyReason::ResourceLimit, now);
            return false;
        }
        let per_link = self.shared.links.get(&from).map_or(0, |l| l.circuits);
        if self.relays.len() >= self.config.max_relay_circuits
            || per_link >= self.config.max_circuits_per_link
        {
            self.refuse_create(from, circ, DestroyReason::ResourceLimit, now);
            return false;
        }
        true
    }

    fn refuse_create(&mut self, from: NodeId, circ: u32, reason: DestroyReason, now: Timestamp) {
        self.shared.stats.creates_refused += 1;
        self.shared
            .send_control(from, &Control::Destroy { circ, reason }, now);
    }

    /// Open the relayed circuit `circ` from `from`, keyed by `hop`.
    fn open_relayed(&mut self, from: NodeId, circ: u32, hop: RelayHop, now: Timestamp) {
        let id = self.next_id();
        self.relays.insert(
            id,
            RelayCircuit {
                prev: (from, circ),
                hop,
                next: NextHop::None,
                extend: None,
                extended: None,
                created: None,
                limiter: Limiter::new(self.config.circuit_cells),
                last_active: now,
                queued: 0,
                delivered: false,
            },
        );
        self.shared
            .insert_slot((from, circ), Slot::RelayPrev(id), now);
        self.shared.stats.creates_answered += 1;
    }

    /// A cell from the previous hop: peel our layer, then forward or deliver. One that fails
    /// authentication destroys the circuit both ways ([`DestroyReason::Tampered`]).
    pub(super) fn relay_forward(&mut self, id: u64, frame: &[u8], now: Timestamp) {
        let Some(c) = self.relays.get_mut(&id) else {
            return;
        };
        if c.limiter.check(now).is_err() {
            self.shared.stats.dropped_circuit_rate += 1;
            return;
        }
        let mut buf = self.shared.arena.copy_of(frame);
        match c.hop.peel(&mut buf[CIRC_ID_LEN..]) {
            Err(e) => {
                if self.shared.count_refused(&e) {
                    self.relay_destroy(id, DestroyReason::Tampered, now);
                }
            }
            Ok(Peeled::Forward) => {
                c.last_active = now;
                c.created = None;
                if let NextHop::Open { peer, circ } = c.next {
                    buf[..CIRC_ID_LEN].copy_from_slice(&circ.to_be_bytes());
                    if self.shared.push_cell(peer, id, &mut c.queued, buf.freeze()) {
                        self.shared.stats.relayed_forward += 1;
                    }
                } else {
                    // The client asked to forward past the end of the circuit.
                    self.shared.stats.protocol_errors += 1;
                }
            }
            Ok(Peeled::Deliver(range)) => {
                c.last_active = now;
                let range = range.start + CIRC_ID_LEN..range.end + CIRC_ID_LEN;
                let (command, body) = match wire::read_relay(&buf[range.clone()]) {
                    Ok(m) => m,
                    Err(_) => {
                        self.shared.stats.protocol_errors += 1;
                        return;
                    }
                };
                let body = range.start + body.start..range.start + body.end;
                match command {
                    RelayCommand::Data => {
                        c.delivered = true;
                        self.shared.stats.delivered += 1;
                        let payload = buf.freeze().slice(body);
                        self.shared.events.push_back(Event::ExitData {
                            exit: ExitHandle(id),
                            payload,
                        });
                    }
                    RelayCommand::Extend => self.relay_extend_fragment(id, &buf[body], now),
                    RelayCommand::Drop => {}
                    _ => self.shared.stats.protocol_errors += 1,
                }
            }
        }
    }

    /// A cell from the next hop: add our layer and pass it back.
    pub(super) fn relay_backward(&mut self, id: u64, frame: &[u8], now: Timestamp) {
        let Some(c) = self.relays.get_mut(&id) else {
            return;
        };
        if !matches!(c.next, NextHop::Open { .. }) {
            self.shared.stats.dropped_unknown_circuit += 1;
            return;
        }
        if c.limiter.check(now).is_err() {
            self.shared.stats.dropped_circuit_rate += 1;
            return;
        }
        let mut buf = self.shared.arena.copy_of(frame);
        if c.hop.wrap_backward(&mut buf[CIRC_ID_LEN..]).is_err() {
            self.shared.stats.dropped_unauthenticated += 1;
            return;
        }
        c.last_active = now;
        let (peer, circ) = c.prev;
        buf[..CIRC_ID_LEN].copy_from_slice(&circ.to_be_bytes());
        if self.shared.push_cell(peer, id, &mut c.queued, buf.freeze()) {
            self.shared.stats.relayed_backward += 1;
        }
    }

    /// Answer a payload delivered here ([`Event::ExitData`]) with one towards the client.
    pub fn send_backward(
        &mut self,
        exit: ExitHandle,
        payload: &[u8],
        _now: Timestamp,
    ) -> Result<(), Error> {
        if payload.len() > wire::MAX_BACKWARD_BODY {
            return Err(Error::PayloadTooLarge {
                len: payload.len(),
                max: wire::MAX_BACKWARD_BODY,
            });
        }
        if !self.relays.contains_key(&exit.0) {
            return Err(Error::NoSuchCircuit);
        }
        self.relay_originate(exit.0, RelayCommand::Data, payload);
        Ok(())
    }

    /// Originate a backward cell from this hop.
    fn relay_originate(&mut self, id: u64, command: RelayCommand, body: &[u8]) {
        let Some(c) = self.relays.get_mut(&id) else {
            return;
        };
        let mut buf = self.shared.arena.zeroed();
        let (peer, circ) = c.prev;
        buf[..CIRC_ID_LEN].copy_from_slice(&circ.to_be_bytes());
        let at = CIRC_ID_LEN + BACKWARD_PAYLOAD_OFFSET;
        if wire::write_relay(&mut buf[at..at + BACKWARD_PAYLOAD_LEN], command, body).is_err()
            || c.hop.seal_backward(&mut buf[CIRC_ID_LEN..]).is_err()
        {
            self.shared.stats.protocol_errors += 1;
            return;
        }
        self.shared.push_cell(peer, id, &mut c.queued, buf.freeze());
    }

    /// One EXTEND fragment; with both, extend the circuit.
    fn relay_extend_fragment(&mut self, id: u64, body: &[u8], now: Timestamp) {
        let Some(c) = self.relays.get_mut(&id) else {
            return;
        };
        let Ok(frag) = wire::parse_fragment(body) else {
            self.shared.stats.protocol_errors += 1;
            return;
        };
        if let Some(handshake) = c.extended {
            if handshake != frag.handshake {
                // One extension per hop: a circuit is a path, not a tree.
                self.shared.stats.protocol_errors += 1;
                return;
            }
            // The owner resent it: answer again once extended, or truncated (CREATE itself
            // went over the reliable link, so while it is out there is nothing to do).
            self.shared.stats.extends_repeated += 1;
            match (&c.next, &c.created) {
                (NextHop::Open { .. }, Some(created)) => {
                    let created = **created;
                    self.relay_originate(id, RelayCommand::Extended, &created);
                }
                (NextHop::Truncated { reason, .. }, _) => {
                    let code = reason.code();
                    self.relay_originate(id, RelayCommand::Truncated, &[code]);
                }
                _ => {}
            }
            return;
        }
        let r = match &mut c.extend {
            Some(r) if r.handshake == frag.handshake => r,
            slot => slot.insert(Reassembly {
                handshake: frag.handshake,
                got: [false; 2],
                bytes: Box::new([0u8; EXTEND_LEN]),
                started: now,
            }),
        };
        let index = usize::from(frag.index);
        let at = index * FRAGMENT_CAPACITY;
        r.bytes[at..at + frag.bytes.len()].copy_from_slice(frag.bytes);
        r.got[index] = true;
        if r.got != [true, true] {
            return;
        }
        let Some(r) = c.extend.take() else { return };
        let next = NodeId::from_bytes(r.bytes[..32].try_into().unwrap_or([0; 32]));
        if next == self.me || next == c.prev.0 {
            self.shared.stats.protocol_errors += 1;
            self.relay_destroy(id, DestroyReason::Protocol, now);
            return;
        }
        c.extended = Some(r.handshake);
        let mut create = Box::new([0u8; CREATE_LEN]);
        create.copy_from_slice(&r.bytes[32..]);
        let circ = self.alloc_circ_id(next);
        if let Some(c) = self.relays.get_mut(&id) {
            c.next = NextHop::Pending {
                peer: next,
                circ,
                deadline: now + self.config.build_timeout,
            };
        }
        self.shared
            .insert_slot((next, circ), Slot::RelayNext(id), now);
        self.shared
            .send_control(next, &Control::Create { circ, create }, now);
    }

    /// CREATED from the next relay: the circuit is extended; tell the client.
    pub(super) fn relay_created(
        &mut self,
        id: u64,
        from: NodeId,
        created: &[u8; CREATED_LEN],
        now: Timestamp,
    ) {
        let Some(c) = self.relays.get_mut(&id) else {
            return;
        };
        match c.next {
            NextHop::Pending { peer, circ, .. } if peer == from => {
                c.next = NextHop::Open { peer, circ };
                c.last_active = now;
                c.created = Some(Box::new(*created));
                self.relay_originate(id, RelayCommand::Extended, created);
            }
            _ => self.shared.stats.bad_control += 1,
        }
    }

    /// DESTROY from the previous hop (or its link died): gone, and onwards.
    pub(super) fn relay_destroy_from_prev(
        &mut self,
        id: u64,
        reason: DestroyReason,
        now: Timestamp,
    ) {
        self.relay_destroy_towards_next(id, reason, now);
    }

    /// Remove a relayed circuit, telling both neighbours.
    pub(super) fn relay_destroy(&mut self, id: u64, reason: DestroyReason, now: Timestamp) {
        if let Some(c) = self.relays.get(&id) {
            let (peer, circ) = c.prev;
            if self.shared.links.get(&peer).is_some_and(|l| l.up) {
                self.shared
                    .send_control(peer, &Control::Destroy { circ, reason }, now);
            }
        }
        self.relay_destroy_towards_next(id, reason, now);
    }

    fn relay_destroy_towards_next(&mut self, id: u64, reason: DestroyReason, now: Timestamp) {
        let Some(c) = self.relays.remove(&id) else {
            return;
        };
        self.shared.remove_slot(c.prev);
        match c.next {
            NextHop::Pending { peer, circ, .. } | NextHop::Open { peer, circ } => {
                self.shared.remove_slot((peer, circ));
                if self.shared.links.get(&peer).is_some_and(|l| l.up) {
                    self.shared
                        .send_control(peer, &Control::Destroy { circ, reason }, now);
                }
            }
            NextHop::None | NextHop::Truncated { .. } => {}
        }
        if c.delivered {
            self.shared.events.push_back(Event::ExitClosed {
                exit: ExitHandle(id),
                reason,
            });
        }
    }

    /// The next hop destroyed the circuit, or its link died, or extending failed: tell the
    /// client with TRUNCATED and wait for it to destroy the circuit.
    pub(super) fn relay_next_gone(&mut self, id: u64, reason: DestroyReason, now: Timestamp) {
        let Some(c) = self.relays.get_mut(&id) else {
            return;
        };
        if let NextHop::Pending { peer, circ, .. } | NextHop::Open { peer, circ } = c.next {
            self.shared.remove_slot((peer, circ));
        }
        c.next = NextHop::Truncated { since: now, reason };
        self.relay_originate(id, RelayCommand::Truncated, &[reason.code()]);
    }

    /// Relay timers: pending extensions, truncated circuits, idle circuits, reassembly.
    pub(super) fn relay_timers(&mut self, now: Timestamp) {
        let mut gone = Vec::new();
        let mut destroy = Vec::new();
        for (id, c) in &mut self.relays {
            if c.extend
                .as_ref()
                .is_some_and(|r| now >= r.started + self.config.build_timeout)
            {
                c.extend = None;
            }
            match c.next {
                NextHop::Pending { deadline, .. } if now >= deadline => gone.push(*id),
                NextHop::Truncated { since, .. } if now >= since + self.config.truncated_grace => {
                    destroy.push((*id, DestroyReason::LinkLost));
                }
                _ if now >= c.last_active + self.config.relay_idle_timeout => {
                    destroy.push((*id, DestroyReason::Timeout));
                }
                _ => {}
            }
        }
        for id in gone {
            self.relay_next_gone(id, DestroyReason::Timeout, now);
        }
        for (id, reason) in destroy {
            self.relay_destroy(id, reason, now);
        }
    }
}

impl super::Shared {
    /// Count a cell the onion layer refused, and say whether its circuit must be destroyed:
    /// a cell that fails authentication was modified by someone on the path (the link layer
    /// refuses corruption and replays between neighbours), and letting the circuit live
    /// would leave a drop pattern a colluding relay downstream could read. A replayed or too
    /// old cell is only dropped: authenticating it proves nothing was modified, and a drop is
    /// something any relay on the path can do anyway.
    pub(super) fn count_refused(&mut self, e: &nyx_crypto::Error) -> bool {
        match e {
            nyx_crypto::Error::Replayed { .. } | nyx_crypto::Error::TooOld { .. } => {
                self.stats.dropped_replayed += 1;
                false
            }
            nyx_crypto::Error::AuthenticationFailed => {
                self.stats.dropped_unauthenticated += 1;
                self.stats.circuits_tampered += 1;
                true
            }
            // Authenticated, so the owner's software made it.
            nyx_crypto::Error::UnknownCellCommand { .. } => {
                self.stats.protocol_errors += 1;
                false
            }
            _ => {
                self.stats.dropped_unauthenticated += 1;
                false
            }
        }
    }
}
