//! Circuits as their owner builds and uses them: CREATE to the entry over its link, then
//! EXTEND through the circuit for each further hop (telescoping), then payloads to and from
//! the exit. Every hop's keys come from the hybrid hop handshake; each step consumes the
//! handshake state that produced it.

use nyx_core::{NodeId, Timestamp};
use nyx_crypto::fast_hop::{self, FastInitiatorSent};
use nyx_crypto::hop::{HopInitiator, HopInitiatorSent};
use nyx_crypto::kem::HybridPublicKey;
use nyx_crypto::onion::{ClientCircuit, ClientHop, FORWARD_PAYLOAD_LEN, FORWARD_PAYLOAD_OFFSET};

use super::resend::ExtendResend;
use super::wire::{self, CIRC_ID_LEN, Control, DestroyReason, RelayCommand};
use super::{CircuitHandle, Event, HopSpec, Overlay, Slot};
use crate::Error;

/// A hop handshake waiting for its answer.
#[derive(Debug)]
enum Sent {
    /// The hybrid onion-key handshake (CREATE or EXTEND).
    Onion(HopInitiatorSent),
    /// The fast handshake of a one-hop directory circuit (CREATE_FAST).
    Fast(FastInitiatorSent),
}

impl Sent {
    fn finish(self, created: &[u8]) -> Result<ClientHop, nyx_crypto::Error> {
        match self {
            Sent::Onion(sent) => sent.finish(created),
            Sent::Fast(sent) => sent.finish(created),
        }
    }
}

/// Where a circuit's build stands.
#[derive(Debug)]
enum BuildState {
    /// CREATE (or CREATE_FAST) sent to the entry (over its link, or waiting for the link).
    Creating(Sent),
    /// EXTEND sent for hop `hop` (its index in the path), in `fragments`, resent on
    /// `resend`'s schedule until EXTENDED comes.
    Extending {
        hop: usize,
        sent: HopInitiatorSent,
        fragments: [Vec<u8>; wire::EXTEND_FRAGMENTS as usize],
        resend: ExtendResend,
    },
    /// Every hop answered.
    Open,
    /// Between states (only while a step runs).
    Moving,
}

/// One of this node's circuits.
#[derive(Debug)]
pub(super) struct ClientCirc {
    path: Vec<NodeId>,
    /// The onion key of each hop; none for the entry of a one-hop directory circuit.
    keys: Vec<Option<HybridPublicKey>>,
    circ: u32,
    onion: ClientCircuit,
    state: BuildState,
    started: Timestamp,
    built: Option<Timestamp>,
    expiring_sent: bool,
    handshakes: u16,
    /// How long the last build step took, from its last clean sample (see
    /// [`ExtendResend::sample`]).
    last_step: Option<std::time::Duration>,
    /// Whether `last_step` is the latest step's own time (it was not resent).
    last_step_clean: bool,
}

impl ClientCirc {
    pub(super) fn path(&self) -> Vec<NodeId> {
        self.path.clone()
    }

    fn entry(&self) -> NodeId {
        self.path[0]
    }
}

impl Overlay {
    /// Start building a circuit through `path` (entry first; 1 to 3 distinct relays, not
    /// this node). [`Event::Built`] or [`Event::Failed`] follows.
    pub fn build(&mut self, path: Vec<HopSpec>, now: Timestamp) -> Result<CircuitHandle, Error> {
        if path.is_empty() || path.len() > nyx_crypto::onion::MAX_HOPS {
            return Err(Error::BadPath {
                reason: format!("{} hops (1 to 3 allowed)", path.len()),
            });
        }
        for (i, hop) in path.iter().enumerate() {
            if hop.node == self.me {
                return Err(Error::BadPath {
                    reason: "the path contains this node".into(),
                });
            }
            if path[..i].iter().any(|h| h.node == hop.node) {
                return Err(Error::BadPath {
                    reason: "a relay appears twice".into(),
                });
            }
        }
        let (sent, create) = HopInitiator::new(path[0].node, path[0].onion_key.clone()).start()?;
        let entry = path[0].node;
        let circ = self.alloc_circ_id(entry);
        let (path, keys) = path
            .into_iter()
            .map(|h| (h.node, Some(h.onion_key)))
            .unzip();
        let state = BuildState::Creating(Sent::Onion(sent));
        let id = self.insert_client(path, keys, circ, state, now)?;
        self.shared
            .send_control(entry, &Control::Create { circ, create }, now);
        Ok(CircuitHandle(id))
    }

    /// Start building a one-hop directory circuit to `relay` with the fast handshake
    /// (CREATE_FAST): no onion key is needed, only a link to the relay, which the driver
    /// dials by the address and link key it knows (a pinned authority's, for one). It is
    /// meant for directory requests: its only hop sees this node's link anyway, and its
    /// keys are only as strong as the link's (the relay does not tell it apart).
    pub fn build_directory(
        &mut self,
        relay: NodeId,
        now: Timestamp,
    ) -> Result<CircuitHandle, Error> {
        if relay == self.me {
            return Err(Error::BadPath {
                reason: "the path contains this node".into(),
            });
        }
        let (sent, create) = fast_hop::start(relay)?;
        let circ = self.alloc_circ_id(relay);
        let state = BuildState::Creating(Sent::Fast(sent));
        let id = self.insert_client(vec![relay], vec![None], circ, state, now)?;
        let msg = Control::CreateFast {
            circ,
            create: *create,
        };
        self.shared.send_control(relay, &msg, now);
        Ok(CircuitHandle(id))
    }

    fn insert_client(
        &mut self,
        path: Vec<NodeId>,
        keys: Vec<Option<HybridPublicKey>>,
        circ: u32,
        state: BuildState,
        now: Timestamp,
    ) -> Result<u64, Error> {
        let entry = path[0];
        let id = self.next_id();
        self.clients.insert(
            id,
            ClientCirc {
                path,
                keys,
                circ,
                onion: ClientCircuit::new()?,
                state,
                started: now,
                built: None,
                expiring_sent: false,
                handshakes: 0,
                last_step: None,
                last_step_clean: false,
            },
        );
        self.shared
            .insert_slot((entry, circ), Slot::Client(id), now);
        Ok(id)
    }

    /// How long a built circuit's last build step took: CREATE to CREATED for one hop, the
    /// EXTEND to the exit and its EXTENDED otherwise, which is a round trip over the whole
    /// circuit (and the exit's handshake; and the middle's dial to the exit if their link
    /// was not up, so it may overstate). `None` if that step was resent, or the circuit is
    /// not this node's or not built. A stream layer takes it as its first RTT estimate.
    pub fn circuit_rtt(&self, circuit: CircuitHandle) -> Option<std::time::Duration> {
        let c = self.clients.get(&circuit.0)?;
        c.built?;
        c.last_step_clean.then_some(c.last_step?)
    }

    /// Send a payload (at most [`wire::MAX_FORWARD_BODY`] bytes) to the exit of a built
    /// circuit.
    pub fn send(&mut self, circuit: CircuitHandle, payload: &[u8]) -> Result<(), Error> {
        if payload.len() > wire::MAX_FORWARD_BODY {
            return Err(Error::PayloadTooLarge {
                len: payload.len(),
                max: wire::MAX_FORWARD_BODY,
            });
        }
        let c = self.clients.get(&circuit.0).ok_or(Error::NoSuchCircuit)?;
        if !matches!(c.state, BuildState::Open) {
            return Err(Error::CircuitNotOpen);
        }
        let last = c.path.len() - 1;
        self.client_send_relay(circuit.0, last, RelayCommand::Data, payload)
    }

    /// Close one of this node's circuits (DESTROY towards the exit; no event follows).
    pub fn close(&mut self, circuit: CircuitHandle, now: Timestamp) -> Result<(), Error> {
        let c = self
            .clients
            .remove(&circuit.0)
            .ok_or(Error::NoSuchCircuit)?;
        self.client_forget(&c, Some(DestroyReason::Requested), now);
        Ok(())
    }

    /// A relay message for hop `dest` (0-based) of circuit `id`, wrapped and queued.
    pub(super) fn client_send_relay(
        &mut self,
        id: u64,
        dest: usize,
        command: RelayCommand,
        body: &[u8],
    ) -> Result<(), Error> {
        let c = self.clients.get_mut(&id).ok_or(Error::NoSuchCircuit)?;
        let mut buf = self.shared.arena.zeroed();
        buf[..CIRC_ID_LEN].copy_from_slice(&c.circ.to_be_bytes());
        let at = CIRC_ID_LEN + FORWARD_PAYLOAD_OFFSET;
        wire::write_relay(&mut buf[at..at + FORWARD_PAYLOAD_LEN], command, body).map_err(|_| {
            Error::PayloadTooLarge {
                len: body.len(),
                max: wire::MAX_FORWARD_BODY,
            }
        })?;
        c.onion.wrap(dest, &mut buf[CIRC_ID_LEN..])?;
        let entry = c.entry();
        let mut unused = 0;
        if self.shared.push_cell(entry, 0, &mut unused, buf.freeze()) {
            Ok(())
        } else {
            Err(Error::QueueFull)
        }
    }

    /// CREATED (`fast` false) or CREATED_FAST (`fast` true) from the entry.
    pub(super) fn client_created(&mut self, id: u64, created: &[u8], fast: bool, now: Timestamp) {
        let Some(c) = self.clients.get_mut(&id) else {
            return;
        };
        match std::mem::replace(&mut c.state, BuildState::Moving) {
            BuildState::Creating(sent) if fast == matches!(sent, Sent::Fast(_)) => {
                // CREATE is not resent (the link carries it reliably), so this is a sample.
                let took = now.saturating_duration_since(c.started);
                self.client_hop_done(id, sent, created, Some(took), now)
            }
            other => {
                c.state = other;
                self.shared.stats.bad_control += 1;
            }
        }
    }

    /// A hop answered (after `took`, if that is a clean sample): add its layer, then extend
    /// further or report the circuit built.
    fn client_hop_done(
        &mut self,
        id: u64,
        sent: Sent,
        created: &[u8],
        took: Option<std::time::Duration>,
        now: Timestamp,
    ) {
        let Some(c) = self.clients.get_mut(&id) else {
            return;
        };
        c.last_step = took.or(c.last_step);
        c.last_step_clean = took.is_some();
        let hop = c.onion.len();
        let added = sent
            .finish(created)
            .map_err(Error::from)
            .and_then(|layer| c.onion.push(layer).map_err(Error::from));
        if let Err(e) = added {
            tracing::debug!(error = %e, hop, "hop handshake failed");
            return self.client_lost(id, DestroyReason::Protocol, Some(hop), true, now);
        }
        let next = c.onion.len();
        if next == c.path.len() {
            c.state = BuildState::Open;
            c.built = Some(now);
            self.shared.stats.circuits_built += 1;
            self.shared.events.push_back(Event::Built {
                circuit: CircuitHandle(id),
            });
            return;
        }
        let node = c.path[next];
        let Some(onion_key) = c.keys[next].clone() else {
            // Only an entry can lack an onion key, and one-hop circuits end there.
            return self.client_lost(id, DestroyReason::Internal, None, true, now);
        };
        let started = HopInitiator::new(node, onion_key).start();
        let (sent, create) = match started {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(error = %e, "cannot start a hop handshake");
                return self.client_lost(id, DestroyReason::Internal, None, true, now);
            }
        };
        c.handshakes = c.handshakes.wrapping_add(1);
        let fragments = wire::extend_fragments(c.handshakes, &node, &create);
        let resend = ExtendResend::new(next, c.last_step, self.config.extend_resend, now);
        self.extend_due = Some(
            self.extend_due
                .map_or(resend.due(), |d| d.min(resend.due())),
        );
        for fragment in &fragments {
            if let Err(e) = self.client_send_relay(id, next - 1, RelayCommand::Extend, fragment) {
                tracing::debug!(error = %e, "cannot send EXTEND");
                return self.client_lost(id, DestroyReason::ResourceLimit, None, true, now);
            }
        }
        if let Some(c) = self.clients.get_mut(&id) {
            c.state = BuildState::Extending {
                hop: next,
                sent,
                fragments,
                resend,
            };
        }
    }

    /// Resend every EXTEND whose wait is over, and note when the next one is due.
    pub(super) fn client_resends(&mut self, now: Timestamp) {
        let mut due = Vec::new();
        let mut next: Option<Timestamp> = None;
        for (id, c) in &mut self.clients {
            if let BuildState::Extending {
                hop,
                fragments,
                resend,
                ..
            } = &mut c.state
            {
                if resend.poll(now, self.config.build_timeout) {
                    due.push((*id, *hop, fragments.clone()));
                }
                next = Some(next.map_or(resend.due(), |t| t.min(resend.due())));
            }
        }
        self.extend_due = next;
        for (id, hop, fragments) in due {
            self.shared.stats.extends_resent += 1;
            for fragment in &fragments {
                // A full queue now is no reason to give up: the next resend may fit.
                if let Err(e) = self.client_send_relay(id, hop - 1, RelayCommand::Extend, fragment)
                {
                    tracing::debug!(error = %e, "cannot resend EXTEND");
                }
            }
        }
    }

    /// A cell from the entry: remove the layers, find the hop that sent it, act on it. One no
    /// hop authenticates destroys the circuit ([`DestroyReason::Tampered`]).
    pub(super) fn client_backward(&mut self, id: u64, frame: &[u8], now: Timestamp) {
        let Some(c) = self.clients.get_mut(&id) else {
            return;
        };
        let mut buf = self.shared.arena.copy_of(frame);
        let delivered = match c.onion.unwrap(&mut buf[CIRC_ID_LEN..]) {
            Ok(d) => d,
            Err(e) => {
                if self.shared.count_refused(&e) {
                    // Which relay modified it is unknown: blame none.
                    self.client_lost(id, DestroyReason::Tampered, None, true, now);
                }
                return;
            }
        };
        let range = delivered.payload.start + CIRC_ID_LEN..delivered.payload.end + CIRC_ID_LEN;
        let Ok((command, body)) = wire::read_relay(&buf[range.clone()]) else {
            self.shared.stats.protocol_errors += 1;
            return;
        };
        let body = range.start + body.start..range.start + body.end;
        let last = c.path.len() - 1;
        match (command, &c.state) {
            (RelayCommand::Data, BuildState::Open) if delivered.hop == last => {
                self.shared.stats.delivered += 1;
                let payload = buf.freeze().slice(body);
                self.shared.events.push_back(Event::Data {
                    circuit: CircuitHandle(id),
                    payload,
                });
            }
            (RelayCommand::Extended, BuildState::Extending { hop, .. })
                if delivered.hop + 1 == *hop && body.len() == nyx_crypto::hop::CREATED_LEN =>
            {
                if let BuildState::Extending { sent, resend, .. } =
                    std::mem::replace(&mut c.state, BuildState::Moving)
                {
                    let took = resend.sample(now);
                    self.client_hop_done(id, Sent::Onion(sent), &buf[body], took, now);
                }
            }
            // A hop that extended already answers a resent EXTEND again (relay.rs); the
            // first answer was used.
            (RelayCommand::Extended, _) if delivered.hop + 1 < c.onion.len() => {}
            (RelayCommand::Truncated, _) => {
                let reason = buf
                    .get(body.start)
                    .map_or(DestroyReason::Protocol, |&b| DestroyReason::from_code(b));
                let lost = delivered.hop + 1;
                self.client_lost(id, reason, Some(lost), true, now);
            }
            (RelayCommand::Drop, _) => {}
            _ => self.shared.stats.protocol_errors += 1,
        }
    }

    /// Circuit `id` ended (not on request): forget it, DESTROY towards the entry when
    /// `tell_entry`, and report it to the owner.
    pub(super) fn client_lost(
        &mut self,
        id: u64,
        reason: DestroyReason,
        hop: Option<usize>,
        tell_entry: bool,
        now: Timestamp,
    ) {
        let Some(c) = self.clients.remove(&id) else {
            return;
        };
        self.client_forget(&c, tell_entry.then_some(reason), now);
        let circuit = CircuitHandle(id);
        let relay = hop.and_then(|h| c.path.get(h)).copied();
        if c.built.is_some() {
            self.shared.events.push_back(Event::Destroyed {
                circuit,
                reason,
                hop,
                relay,
            });
        } else {
            self.shared.stats.circuits_failed += 1;
            self.shared.events.push_back(Event::Failed {
                circuit,
                reason,
                hop,
                relay,
            });
        }
    }

    fn client_forget(&mut self, c: &ClientCirc, destroy: Option<DestroyReason>, now: Timestamp) {
        let key = (c.entry(), c.circ);
        self.shared.remove_slot(key);
        if let Some(reason) = destroy
            && self.shared.links.get(&key.0).is_some_and(|l| l.up)
        {
            self.shared.send_control(
                key.0,
                &Control::Destroy {
                    circ: c.circ,
                    reason,
                },
                now,
            );
        }
    }

    /// Tear down every circuit this node owns or relays (shutting down): DESTROY to every
    /// neighbour, events for the owner.
    pub fn destroy_all(&mut self, reason: DestroyReason, now: Timestamp) {
        let own: Vec<u64> = self.clients.keys().copied().collect();
        for id in own {
            self.client_lost(id, reason, None, true, now);
        }
        let relayed: Vec<u64> = self.relays.keys().copied().collect();
        for id in relayed {
            self.relay_destroy(id, reason, now);
        }
    }

    /// Owner-side timers: build timeouts, lifetimes (EXTEND resends: `client_resends`).
    pub(super) fn client_timers(&mut self, now: Timestamp) {
        let mut lost = Vec::new();
        for (id, c) in &mut self.clients {
            match c.built {
                None if now >= c.started + self.config.build_timeout => {
                    // The hop being added did not answer (or its predecessor did not pass
                    // EXTEND on): blame the hop being added.
                    lost.push((*id, DestroyReason::Timeout, Some(c.onion.len())));
                }
                Some(built) => {
                    let end = built + self.config.max_circuit_lifetime;
                    if now >= end {
                        lost.push((*id, DestroyReason::Expired, None));
                    } else if !c.expiring_sent
                        && now >= end.saturating_sub(self.config.rotate_before)
                    {
                        c.expiring_sent = true;
                        self.shared.events.push_back(Event::Expiring {
                            circuit: CircuitHandle(*id),
                        });
                    }
                }
                None => {}
            }
        }
        for (id, reason, hop) in lost {
            self.client_lost(id, reason, hop, true, now);
        }
    }
}
