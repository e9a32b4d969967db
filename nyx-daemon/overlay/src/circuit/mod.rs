//! The overlay's protocol core, sans-IO: circuits as their owner builds and uses them
//! (`client.rs`), circuits as a relay carries them (`relay.rs`), and the links between nodes
//! (`links.rs`). It takes cells and control messages with the time they arrived and returns
//! what to send ([`Output`]), what happened ([`Event`]) and when to call it again
//! ([`Overlay::poll_timeout`]); it opens no socket and reads no clock. The async driver in
//! nyx-node owns the transports and timers.
//!
//! Formats are in [`wire`] and docs/protocol.md ("Overlay").

mod arena;
mod client;
mod links;
mod relay;
mod resend;
mod timers;
pub mod wire;

#[cfg(test)]
mod tests;

use std::collections::{HashMap, VecDeque};
use std::num::NonZeroU32;
use std::time::Duration;

use bytes::Bytes;
use nyx_core::rate::{KeyedLimiter, Quota};
use nyx_core::{NodeId, Timestamp};
use nyx_crypto::hop::ReplayCache;
use nyx_crypto::kem::HybridPublicKey;
use nyx_crypto::onion_keys::OnionKeyRing;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::Error;
pub use arena::CellArena;
use client::ClientCirc;
use links::LinkState;
use relay::RelayCircuit;
pub use wire::{DestroyReason, LINK_CELL_LEN, MAX_BACKWARD_BODY, MAX_FORWARD_BODY};

/// Settings of the overlay core. Defaults suit a public node; tests shorten the timers.
#[derive(Debug, Clone)]
pub struct OverlayConfig {
    /// Whether this node relays others' circuits. A client-only node (false) refuses every
    /// CREATE and CREATE_FAST with DESTROY, whatever link it came over. Default true.
    pub relay: bool,
    /// A circuit not built within this is abandoned. Default 10 s.
    pub build_timeout: Duration,
    /// The shortest wait before an unanswered EXTEND is resent. The wait follows the round
    /// trips the build has measured and doubles with each resend. Default 50 ms.
    pub extend_resend: Duration,
    /// A built circuit is destroyed this long after it was built. Default 10 min (Tor's
    /// `MaxCircuitDirtiness`).
    pub max_circuit_lifetime: Duration,
    /// [`Event::Expiring`] comes this long before the end of a circuit's lifetime, so its
    /// owner can build the replacement in time. Default 1 min.
    pub rotate_before: Duration,
    /// A relayed circuit that carries nothing for this long is destroyed. Default 15 min.
    pub relay_idle_timeout: Duration,
    /// A relayed circuit whose next hop is gone waits this long for its owner to destroy
    /// it after TRUNCATED, then destroys it itself. Default 5 s.
    pub truncated_grace: Duration,
    /// A link with circuits that has heard nothing for this long is probed. Default 5 s.
    pub keepalive: Duration,
    /// A probe unanswered for this long declares the link dead. Default 15 s.
    pub link_timeout: Duration,
    /// How often timers are checked. Default 250 ms.
    pub timer_granularity: Duration,
    /// Most circuits relayed at once. Default 8192.
    pub max_relay_circuits: usize,
    /// Most relayed circuits arriving over one link. Default 2048.
    pub max_circuits_per_link: usize,
    /// Cells queued for one link at most before drops. Default 1024.
    pub link_queue_cells: usize,
    /// Cells of one relayed circuit queued at most before drops. Default 256.
    pub circuit_queue_cells: usize,
    /// Cells a peer may send over its link. Default 200000/s (about 230 MB/s), burst 20000.
    pub link_cells: Quota,
    /// Cells on one relayed circuit. Default 100000/s (about 115 MB/s), burst 10000.
    pub circuit_cells: Quota,
    /// CREATEs a peer may send. Default 10/s, burst 20.
    pub circuit_creates: Quota,
    /// CREATEs (not CREATE_FASTs) answered from all peers together: each costs a hybrid
    /// decapsulation, and
    /// peers (client links) are free to mint, so this bounds the CPU CREATEs take. Default
    /// 500/s (a few percent of one core), burst 1000.
    pub all_creates: Quota,
    /// Peers each keyed limiter tracks at most. Default 65536.
    pub max_limited_keys: usize,
    /// CREATE messages remembered to refuse replays. Default 65536.
    pub replay_cache: usize,
}

impl Default for OverlayConfig {
    fn default() -> Self {
        let quota = |rate, burst| match (NonZeroU32::new(rate), NonZeroU32::new(burst)) {
            (Some(rate), Some(burst)) => Quota::new(rate, burst),
            _ => Quota::new(NonZeroU32::MIN, NonZeroU32::MIN),
        };
        OverlayConfig {
            relay: true,
            build_timeout: Duration::from_secs(10),
            extend_resend: Duration::from_millis(50),
            max_circuit_lifetime: Duration::from_secs(600),
            rotate_before: Duration::from_secs(60),
            relay_idle_timeout: Duration::from_secs(900),
            truncated_grace: Duration::from_secs(5),
            keepalive: Duration::from_secs(5),
            link_timeout: Duration::from_secs(15),
            timer_granularity: Duration::from_millis(250),
            max_relay_circuits: 8192,
            max_circuits_per_link: 2048,
            link_queue_cells: 1024,
            circuit_queue_cells: 256,
            link_cells: quota(200_000, 20_000),
            circuit_cells: quota(100_000, 10_000),
            circuit_creates: quota(10, 20),
            all_creates: quota(500, 1000),
            max_limited_keys: 65_536,
            replay_cache: 65_536,
        }
    }
}

/// The limits of an overlay that can change while it runs ([`Overlay::set_limits`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LiveLimits {
    /// Cells a peer may send over its link.
    pub link_cells: Quota,
    /// Cells on one relayed circuit.
    pub circuit_cells: Quota,
    /// CREATEs a peer may send.
    pub circuit_creates: Quota,
    /// Most circuits relayed at once.
    pub max_relay_circuits: usize,
}

/// The owner's name for a circuit it built (local, never on the wire).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CircuitHandle(u64);

impl CircuitHandle {
    /// The handle as a number (the control API shows it; local, never on the wire).
    pub fn id(self) -> u64 {
        self.0
    }

    /// The handle numbered `id` (as [`id`](Self::id) returned it).
    pub fn from_id(id: u64) -> Self {
        CircuitHandle(id)
    }
}

/// A relayed circuit that delivered a payload to this node (this node is its exit).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ExitHandle(u64);

/// One hop of a path to build: the relay and the onion key its descriptor certifies.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HopSpec {
    /// The relay.
    pub node: NodeId,
    /// Its current onion key.
    pub onion_key: HybridPublicKey,
}

/// Something for the driver to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Output {
    /// Send a link cell ([`LINK_CELL_LEN`] bytes) to a peer; drop it if that fails.
    Cell {
        /// The peer.
        to: NodeId,
        /// The cell.
        cell: Bytes,
    },
    /// Send a control message to a peer (reliable).
    Control {
        /// The peer.
        to: NodeId,
        /// The message.
        msg: Vec<u8>,
    },
    /// Open a link to a peer, then call [`Overlay::link_up`] (or
    /// [`Overlay::connect_failed`]).
    Connect {
        /// The peer.
        peer: NodeId,
    },
    /// The link to this peer is dead (probes unanswered): close it.
    Disconnect {
        /// The peer.
        peer: NodeId,
    },
}

/// Something that happened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// A circuit this node is building is ready.
    Built {
        /// Which.
        circuit: CircuitHandle,
    },
    /// A circuit this node was building failed.
    Failed {
        /// Which.
        circuit: CircuitHandle,
        /// Why.
        reason: DestroyReason,
        /// The position in the path of the relay believed at fault, when known.
        hop: Option<usize>,
        /// That relay.
        relay: Option<NodeId>,
    },
    /// A built circuit of this node ended (not on its owner's request).
    Destroyed {
        /// Which.
        circuit: CircuitHandle,
        /// Why.
        reason: DestroyReason,
        /// The position in the path of the relay believed lost, when known.
        hop: Option<usize>,
        /// That relay.
        relay: Option<NodeId>,
    },
    /// A built circuit nears the end of its lifetime: build its replacement.
    Expiring {
        /// Which.
        circuit: CircuitHandle,
    },
    /// A payload from the exit of one of this node's circuits.
    Data {
        /// Which circuit.
        circuit: CircuitHandle,
        /// The payload.
        payload: Bytes,
    },
    /// A payload for this node as the last hop of a relayed circuit.
    ExitData {
        /// Which circuit (answer with [`Overlay::send_backward`]).
        exit: ExitHandle,
        /// The payload.
        payload: Bytes,
    },
    /// A relayed circuit that delivered payloads here ended.
    ExitClosed {
        /// Which.
        exit: ExitHandle,
        /// Why.
        reason: DestroyReason,
    },
}

/// Counters of the overlay (plain data for metrics).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct OverlayStats {
    /// Link cells received.
    pub cells_in: u64,
    /// Cells this node relayed towards the exit.
    pub relayed_forward: u64,
    /// Cells this node relayed towards the client.
    pub relayed_backward: u64,
    /// Payloads delivered to this node (as exit, or as owner).
    pub delivered: u64,
    /// Cells of the wrong length or with circuit id 0.
    pub dropped_malformed: u64,
    /// Cells for no circuit this node knows.
    pub dropped_unknown_circuit: u64,
    /// Cells that failed authentication (modified, or not for this hop).
    pub dropped_unauthenticated: u64,
    /// Circuits destroyed because a cell failed its onion-layer authentication (relays:
    /// forward cells; owners: backward cells). Each such cell is also counted in
    /// `dropped_unauthenticated`.
    pub circuits_tampered: u64,
    /// Cells refused as replays (repeated or too old).
    pub dropped_replayed: u64,
    /// Cells over a peer's rate limit.
    pub dropped_link_rate: u64,
    /// Cells over a circuit's rate limit.
    pub dropped_circuit_rate: u64,
    /// Cells dropped because a link or circuit queue was full.
    pub dropped_queue_full: u64,
    /// Cells dropped because the link to their next hop is not up.
    pub dropped_no_link: u64,
    /// Authenticated cells with a relay message that breaks the protocol.
    pub protocol_errors: u64,
    /// Control messages that could not be decoded or did not fit the state.
    pub bad_control: u64,
    /// CREATEs answered.
    pub creates_answered: u64,
    /// CREATEs refused (bad, replayed, unknown key, limits).
    pub creates_refused: u64,
    /// CREATEs over a peer's rate limit.
    pub creates_rate_limited: u64,
    /// Circuits this node built.
    pub circuits_built: u64,
    /// Circuit builds that failed.
    pub circuits_failed: u64,
    /// Links declared dead by probes.
    pub links_dead: u64,
    /// EXTENDs this node resent as a circuit's owner (no EXTENDED within the wait).
    pub extends_resent: u64,
    /// Repeated EXTENDs this node received as the extending hop: answered again with the
    /// cached EXTENDED, or ignored while CREATE is out.
    pub extends_repeated: u64,
}

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
