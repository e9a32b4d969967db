//! The overlay's protocol core, sans-IO: circuits as their owner builds and uses them
//! (`client.rs`), circuits as a relay carries them (`relay.rs`), and the links between nodes
//! (`links.rs`). It takes cells and control messages with the time they arrived and returns
//! what to send ([`Output`]), what happened ([`Event`]) and when to call it again
//! ([`Overlay::poll_timeout`]); it opens no socket and reads no clock. The async driver in
//! nyx-node owns the transports and timers.
//!
//! Formats are in [`wire`] and docs/protocol.md ("Overlay").

mod api;
mod arena;
mod client;
mod config;
mod links;
mod relay;
mod resend;
mod timers;
pub mod wire;

#[cfg(test)]
mod tests;

use std::collections::{HashMap, VecDeque};

use bytes::Bytes;
use nyx_core::rate::KeyedLimiter;
use nyx_core::{NodeId, Timestamp};
use nyx_crypto::hop::ReplayCache;
use nyx_crypto::onion_keys::OnionKeyRing;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::Error;
pub use api::{CircuitHandle, Event, ExitHandle, HopSpec, Output, OverlayStats};
pub use arena::CellArena;
use client::ClientCirc;
pub use config::{LiveLimits, OverlayConfig};
use links::LinkState;
use relay::RelayCircuit;
pub use wire::{DestroyReason, LINK_CELL_LEN, MAX_BACKWARD_BODY, MAX_FORWARD_BODY};

/// A circuit id on a link, with the peer it is shared with.
type SlotKey = (NodeId, u32);

/// What a circuit id on a link belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Slot {
    /// The inbound side of a relayed circuit (its previous hop).
    RelayPrev(u64),
    /// The outbound side of a relayed circuit (its next hop).
    RelayNext(u64),
    /// One of this node's own circuits (its first hop).
    Client(u64),
}

/// A queued output and the relayed circuit it counts against (0 = none).
#[derive(Debug)]
struct Queued {
    output: Output,
    circuit: u64,
}

/// What every circuit writes to besides its own table: the links and their circuit-id
/// slots, the queues of outputs and events, the cell arena and the counters.
#[derive(Debug)]
struct Shared {
    out: VecDeque<Queued>,
    events: VecDeque<Event>,
    arena: CellArena,
    stats: OverlayStats,
    links: HashMap<NodeId, LinkState>,
    slots: HashMap<SlotKey, Slot>,
    link_queue_cells: usize,
    circuit_queue_cells: usize,
}

/// The overlay protocol state of one node.
#[derive(Debug)]
pub struct Overlay {
    me: NodeId,
    config: OverlayConfig,
    onion_keys: OnionKeyRing,
    replay: ReplayCache,
    relays: HashMap<u64, RelayCircuit>,
    clients: HashMap<u64, ClientCirc>,
    shared: Shared,
    next_id: u64,
    /// Draws circuit ids: a CSPRNG (ChaCha12), so that a neighbour who sees some ids cannot
    /// predict the next ones.
    circ_ids: StdRng,
    link_limiter: KeyedLimiter<NodeId>,
    create_limiter: KeyedLimiter<NodeId>,
    all_creates: nyx_core::rate::Limiter,
    next_tick: Timestamp,
    /// The earliest EXTEND resend due (it may be stale-early: the check then finds none).
    extend_due: Option<Timestamp>,
}

impl Overlay {
    /// The overlay of node `me`, answering CREATEs with `onion_keys` (rotated by the caller
    /// through [`onion_keys_mut`](Self::onion_keys_mut)). `seed` seeds the cryptographic RNG
    /// that draws circuit ids: give it 32 bytes from the operating system, used for nothing
    /// else (tests give a fixed one for reproducible runs). Ids travel inside the link's
    /// encryption, but every neighbour sees the ids this node picks on their link.
    pub fn new(
        me: NodeId,
        onion_keys: OnionKeyRing,
        config: OverlayConfig,
        seed: [u8; 32],
        now: Timestamp,
    ) -> Result<Self, Error> {
        let limiter = |quota| {
            KeyedLimiter::new(quota, config.max_limited_keys).map_err(|e| Error::OverlayConfig {
                reason: e.to_string(),
            })
        };
        Ok(Overlay {
            me,
            link_limiter: limiter(config.link_cells)?,
            create_limiter: limiter(config.circuit_creates)?,
            all_creates: nyx_core::rate::Limiter::new(config.all_creates),
            replay: ReplayCache::new(config.replay_cache),
            onion_keys,
            relays: HashMap::new(),
            clients: HashMap::new(),
            shared: Shared {
                out: VecDeque::with_capacity(1024),
                events: VecDeque::with_capacity(64),
                arena: CellArena::new(LINK_CELL_LEN),
                stats: OverlayStats::default(),
                links: HashMap::new(),
                slots: HashMap::new(),
                link_queue_cells: config.link_queue_cells,
                circuit_queue_cells: config.circuit_queue_cells,
            },
            next_id: 1,
            circ_ids: StdRng::from_seed(seed),
            next_tick: now + config.timer_granularity,
            extend_due: None,
            config,
        })
    }

    /// This node.
    pub fn node_id(&self) -> NodeId {
        self.me
    }

    /// The onion keys CREATEs are answered with.
    pub fn onion_keys(&self) -> &OnionKeyRing {
        &self.onion_keys
    }

    /// The onion keys, to rotate them.
    pub fn onion_keys_mut(&mut self) -> &mut OnionKeyRing {
        &mut self.onion_keys
    }

    /// Change the rate limits and the relayed-circuit cap of a running overlay. The link and
    /// CREATE limiters start afresh (every peer gets a full burst); circuits relayed now keep
    /// their per-circuit limiter until they end, new ones use `limits.circuit_cells`.
    pub fn set_limits(&mut self, limits: &LiveLimits) -> Result<(), Error> {
        let limiter = |quota| {
            KeyedLimiter::new(quota, self.config.max_limited_keys).map_err(|e| {
                Error::OverlayConfig {
                    reason: e.to_string(),
                }
            })
        };
        let link = limiter(limits.link_cells)?;
        let create = limiter(limits.circuit_creates)?;
        self.link_limiter = link;
        self.create_limiter = create;
        self.config.link_cells = limits.link_cells;
        self.config.circuit_creates = limits.circuit_creates;
        self.config.circuit_cells = limits.circuit_cells;
        self.config.max_relay_circuits = limits.max_relay_circuits;
        Ok(())
    }

    /// The limits [`set_limits`](Self::set_limits) changes, as they are now.
    pub fn limits(&self) -> LiveLimits {
        LiveLimits {
            link_cells: self.config.link_cells,
            circuit_cells: self.config.circuit_cells,
            circuit_creates: self.config.circuit_creates,
            max_relay_circuits: self.config.max_relay_circuits,
        }
    }

    /// Counters.
    pub fn stats(&self) -> OverlayStats {
        self.shared.stats
    }

    /// Circuits this node relays now.
    pub fn relay_circuits(&self) -> usize {
        self.relays.len()
    }

    /// This node's own circuits now (building or built).
    pub fn own_circuits(&self) -> usize {
        self.clients.len()
    }

    /// Every circuit id in use on this node's links, with the peer it is shared with
    /// (diagnostics: the control API lists them; tests look for them on the wire).
    pub fn link_circuit_ids(&self) -> Vec<(NodeId, u32)> {
        self.shared.slots.keys().copied().collect()
    }

    /// The path of one of this node's circuits.
    pub fn path(&self, circuit: CircuitHandle) -> Option<Vec<NodeId>> {
        self.clients.get(&circuit.0).map(ClientCirc::path)
    }

    /// A link cell from `from`.
    pub fn handle_cell(&mut self, from: NodeId, frame: &[u8], now: Timestamp) {
        self.shared.stats.cells_in += 1;
        self.shared.link(from, now).heard(now);
        if self.link_limiter.check(&from, now).is_err() {
            self.shared.stats.dropped_link_rate += 1;
            return;
        }
        let Ok(circ) = wire::link_cell_id(frame) else {
            self.shared.stats.dropped_malformed += 1;
            return;
        };
        match self.shared.slots.get(&(from, circ)).copied() {
            Some(Slot::RelayPrev(id)) => self.relay_forward(id, frame, now),
            Some(Slot::RelayNext(id)) => self.relay_backward(id, frame, now),
            Some(Slot::Client(id)) => self.client_backward(id, frame, now),
            None => self.shared.stats.dropped_unknown_circuit += 1,
        }
    }

    /// A control message from `from`.
    pub fn handle_control(&mut self, from: NodeId, msg: &[u8], now: Timestamp) {
        self.shared.link(from, now).heard(now);
        if self.link_limiter.check(&from, now).is_err() {
            self.shared.stats.dropped_link_rate += 1;
            return;
        }
        let msg = match wire::Control::decode(msg) {
            Ok(msg) => msg,
            Err(e) => {
                tracing::debug!(error = %e, "bad control message");
                self.shared.stats.bad_control += 1;
                return;
            }
        };
        match msg {
            wire::Control::Create { circ, create } => self.relay_create(from, circ, &create, now),
            wire::Control::Created { circ, created } => {
                match self.shared.slots.get(&(from, circ)).copied() {
                    Some(Slot::Client(id)) => self.client_created(id, &created, false, now),
                    Some(Slot::RelayNext(id)) => self.relay_created(id, from, &created, now),
                    _ => self.shared.stats.bad_control += 1,
                }
            }
            wire::Control::CreateFast { circ, create } => {
                self.relay_create_fast(from, circ, &create, now)
            }
            wire::Control::CreatedFast { circ, created } => {
                match self.shared.slots.get(&(from, circ)).copied() {
                    Some(Slot::Client(id)) => self.client_created(id, &created, true, now),
                    _ => self.shared.stats.bad_control += 1,
                }
            }
            wire::Control::Destroy { circ, reason } => {
                match self.shared.slots.get(&(from, circ)).copied() {
                    Some(Slot::Client(id)) => self.client_lost(id, reason, Some(0), false, now),
                    Some(Slot::RelayPrev(id)) => self.relay_destroy_from_prev(id, reason, now),
                    Some(Slot::RelayNext(id)) => self.relay_next_gone(id, reason, now),
                    None => self.shared.stats.bad_control += 1,
                }
            }
            wire::Control::Ping => self.shared.send_control(from, &wire::Control::Pong, now),
            wire::Control::Pong => {}
        }
    }

    /// The next thing to send or do, if any.
    pub fn poll_output(&mut self) -> Option<Output> {
        let Queued { output, circuit } = self.shared.out.pop_front()?;
        if let Output::Cell { to, .. } = &output {
            if let Some(link) = self.shared.links.get_mut(to) {
                link.queued = link.queued.saturating_sub(1);
            }
            if circuit != 0
                && let Some(c) = self.relays.get_mut(&circuit)
            {
                c.queued = c.queued.saturating_sub(1);
            }
        }
        Some(output)
    }

    /// The next event, if any.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.shared.events.pop_front()
    }

    fn next_id(&mut self) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        id
    }

    /// A fresh circuit id on the link to `peer`, drawn at random and not in use on that
    /// link: ids a node picks have the top bit set iff its NodeId is the larger, so the two
    /// ends never pick the same one.
    fn alloc_circ_id(&mut self, peer: NodeId) -> u32 {
        let high = if self.me > peer { 0x8000_0000 } else { 0 };
        loop {
            let z = self.circ_ids.next_u32();
            // A client-only node draws the top bit too: tied to its lasting id, the half
            // would be one constant bit about it across its one-link identities.
            let id = match self.config.relay {
                true => (z & 0x7fff_ffff) | high,
                false => z,
            };
            if id != 0 && !self.shared.slots.contains_key(&(peer, id)) {
                return id;
            }
        }
    }
}

impl Shared {
    /// The state of the link to `peer`, created (as up) on first contact.
    fn link(&mut self, peer: NodeId, now: Timestamp) -> &mut LinkState {
        self.links
            .entry(peer)
            .or_insert_with(|| LinkState::new(true, now))
    }

    fn insert_slot(&mut self, key: SlotKey, slot: Slot, now: Timestamp) {
        if self.slots.insert(key, slot).is_none() {
            self.links
                .entry(key.0)
                .or_insert_with(|| LinkState::new(false, now))
                .circuits += 1;
        }
    }

    fn remove_slot(&mut self, key: SlotKey) {
        if self.slots.remove(&key).is_some()
            && let Some(link) = self.links.get_mut(&key.0)
        {
            link.circuits = link.circuits.saturating_sub(1);
        }
    }

    /// Queue a cell for `to`, counted against relayed circuit `circuit` (0 = none) whose
    /// queue count is `queued`. Full queues drop the cell.
    fn push_cell(&mut self, to: NodeId, circuit: u64, queued: &mut usize, cell: Bytes) -> bool {
        let Some(link) = self.links.get_mut(&to).filter(|l| l.up) else {
            self.stats.dropped_no_link += 1;
            return false;
        };
        if link.queued >= self.link_queue_cells || *queued >= self.circuit_queue_cells {
            self.stats.dropped_queue_full += 1;
            return false;
        }
        link.queued += 1;
        *queued += 1;
        self.out.push_back(Queued {
            output: Output::Cell { to, cell },
            circuit,
        });
        true
    }

    /// Send a control message to `to` now, or once its link is up (asking for it).
    fn send_control(&mut self, to: NodeId, msg: &wire::Control, now: Timestamp) {
        let msg = msg.encode();
        let link = self.link_or_connecting(to, now);
        if link.up {
            self.out.push_back(Queued {
                output: Output::Control { to, msg },
                circuit: 0,
            });
        } else if link.pending.len() < links::MAX_PENDING {
            link.pending.push(msg);
        }
    }

    /// The link to `peer`, asking the driver to connect when it is not up.
    fn link_or_connecting(&mut self, peer: NodeId, now: Timestamp) -> &mut LinkState {
        let link = self
            .links
            .entry(peer)
            .or_insert_with(|| LinkState::new(false, now));
        if !link.up && !link.connecting {
            link.connecting = true;
            self.out.push_back(Queued {
                output: Output::Connect { peer },
                circuit: 0,
            });
        }
        link
    }
}
