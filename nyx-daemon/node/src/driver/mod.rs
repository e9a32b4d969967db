//! The node's one driver task: it owns the [`Overlay`], the [`BuildPolicy`] and the links,
//! feeds them what arrives (cells, control messages, link changes, commands, the time:
//! `inputs.rs`) and carries out what they ask (send, dial, answer, deliver: `outputs.rs`).
//! Every decision is theirs; this module only moves things between them and the sockets.

mod direct;
mod inputs;
mod outputs;
mod quic;

use std::collections::HashMap;
use std::sync::Arc;

use nyx_core::time::CoarseClock;
use nyx_core::{NodeId, Timestamp};
use nyx_overlay::circuit::{CircuitHandle, DestroyReason, ExitHandle, Overlay};
use nyx_overlay::directory::Directory;
use nyx_overlay::path::PathSelector;
use nyx_overlay::{BuildId, BuildPolicy};
use nyx_transport::link::Inbound;
use nyx_transport::quic::QuicEndpoint;
use nyx_transport::udp::{UdpCommand, UdpEvent};
use tokio::sync::{broadcast, mpsc, oneshot};
use tokio::time::Instant;

use crate::bound::{Bound, BoundNode};
use crate::client::ClientStreams;
use crate::events::{EVENT_BUFFER, NodeEvent};
use crate::exit::ExitService;
use crate::handle::{Command, Liveness};
use crate::links::{LinkEvent, Links, spawn_quic_acceptor};
use crate::{
    Circuit, CircuitMessage, Error, ExitRequest, ExitServiceKind, Node, NodeHandle, unix_now,
};
use nyx_crypto::identity::IdentityKey;

/// Queue sizes between the tasks.
const COMMANDS: usize = 1024;
const INBOUND: usize = 4096;
const LINK_EVENTS: usize = 256;
const EXITS: usize = 1024;
/// Directory streams waiting for the owner, at most.
const DIRECTORY_STREAMS: usize = 64;
/// Messages (inbound cells, transport events) handled per wake-up before outputs are
/// flushed.
const BATCH: usize = 64;
/// Cells handed to the links before the driver, if more input waits, lets the link tasks
/// on its thread run: a burst of the node's own cells (a client's writes, an exit's stream
/// packets) leaves in pieces of this many, so the next hop starts on the first while this
/// node seals the rest, instead of getting the whole burst at once (the UDP transport
/// hands received cells over in chunks of 16 too).
const YIELD_AFTER_CELLS: usize = 16;

/// One of this node's built circuits: where its messages go, and when it was built.
struct OwnCircuit {
    tx: mpsc::Sender<CircuitMessage>,
    built_at: Timestamp,
    path: Vec<NodeId>,
}

struct Driver {
    overlay: Overlay,
    /// Signs the onion keys it rotates.
    identity: Arc<IdentityKey>,
    /// When the onion keys next need rotating (never for a client-only node, which has
    /// none).
    rotate_at: Option<Instant>,
    clock: CoarseClock,
    directory: Directory,
    /// Paths, attempts and blame for this node's circuit requests.
    policy: BuildPolicy,
    /// Whom to answer for each request the policy serves, and when it was made.
    requests: HashMap<BuildId, (oneshot::Sender<Result<Circuit, Error>>, Timestamp)>,
    /// Shutting down: failures no longer start new attempts.
    stopping: bool,
    links: Links,
    quic: Option<Arc<QuicEndpoint>>,
    udp: Option<mpsc::Sender<UdpCommand>>,
    inbound_tx: mpsc::Sender<Inbound>,
    link_events_tx: mpsc::Sender<LinkEvent>,
    commands_tx: mpsc::Sender<Command>,
    exits_tx: mpsc::Sender<ExitRequest>,
    circuits: HashMap<CircuitHandle, OwnCircuit>,
    /// When each live link came up.
    peers_since: HashMap<NodeId, Timestamp>,
    events: broadcast::Sender<NodeEvent>,
    /// Stream endpoints of the circuits this node is the exit of.
    exit_circuits: HashMap<ExitHandle, mpsc::Sender<CircuitMessage>>,
    exit_service: Option<Arc<ExitService>>,
    /// One-hop directory circuits and the addresses of relays outside the directory.
    direct: direct::Direct,
    settings: crate::NodeSettings,
    aux: Arc<std::sync::Mutex<Vec<tokio::task::JoinHandle<()>>>>,
    send_failures: u64,
    /// Cells handed to the links since the driver last looked whether to let the link
    /// tasks run ([`YIELD_AFTER_CELLS`]).
    cells_since_yield: usize,
    owner_drops: u64,
    /// QUIC links closed because another link to the same peer came up.
    quic_retired: u64,
}

pub(super) fn start(node: BoundNode, directory: Directory) -> Result<Node, Error> {
    let BoundNode {
        identity,
        onion_keys,
        settings,
        bound,
        addr,
        ..
    } = node;
    let me = identity.node_id();
    let relay = settings.role.is_relay();
    // One seed for path choices, another for circuit ids: neighbours see the ids, and
    // must learn nothing from them about the paths.
    let mut seed = [0u8; 32];
    getrandom::fill(&mut seed).map_err(Error::Randomness)?;
    let mut circ_id_seed = [0u8; 32];
    getrandom::fill(&mut circ_id_seed).map_err(Error::Randomness)?;
    let clock = CoarseClock::new();
    let overlay = Overlay::new(
        me,
        onion_keys,
        nyx_overlay::OverlayConfig {
            relay,
            ..settings.overlay.clone()
        },
        circ_id_seed,
        clock.now(),
    )?;
    let (commands_tx, commands_rx) = mpsc::channel(COMMANDS);
    let (inbound_tx, inbound_rx) = mpsc::channel(INBOUND);
    let (link_events_tx, link_events_rx) = mpsc::channel(LINK_EVENTS);
    let (exits_tx, exits_rx) = mpsc::channel(EXITS);
    let (directory_tx, directory_rx) = mpsc::channel(DIRECTORY_STREAMS);
    let aux = Arc::new(std::sync::Mutex::new(Vec::new()));
    let (events, _) = broadcast::channel(EVENT_BUFFER);
    let mut udp_events = None;
    let (quic, udp) = match bound {
        Bound::Quic(endpoint) => {
            // A client's endpoint accepts nothing: no task waits on it.
            if endpoint.accepts_links() {
                let task = spawn_quic_acceptor(endpoint.clone(), link_events_tx.clone());
                push_task(&aux, task);
            }
            (Some(endpoint), None)
        }
        Bound::Udp(transport) => {
            let (cmd_tx, cmd_rx) = mpsc::channel(4096);
            let (ev_tx, ev_rx) = mpsc::channel(INBOUND);
            let events = events.clone();
            let task = tokio::spawn(async move {
                if let Err(e) = transport.run(cmd_rx, ev_tx).await {
                    tracing::warn!(error = %e, "UDP transport stopped");
                    let _ = events.send(NodeEvent::Error {
                        message: format!("UDP transport stopped: {e}"),
                    });
                }
            });
            push_task(&aux, task);
            udp_events = Some(ev_rx);
            (None, Some(cmd_tx))
        }
    };
    // Its entries must be reachable from this socket's address families.
    let mut selector = PathSelector::new(me, settings.transport, settings.path.clone())
        .with_reach(nyx_overlay::path::Reach::of(addr));
    selector.restore_guards(&settings.guards);
    let policy = BuildPolicy::new(selector, settings.build_attempts, seed);
    if let Some((field, reason)) = settings.streams.problem() {
        return Err(nyx_overlay::Error::StreamConfig { field, reason }.into());
    }
    // Only a relay is ever the last hop of someone's circuit.
    let exit_service = (relay && settings.exit_service == ExitServiceKind::Streams).then(|| {
        Arc::new(ExitService {
            policy: std::sync::RwLock::new(Arc::new(settings.exit_policy.clone())),
            config: settings.streams.clone(),
            connect_timeout: settings.exit_connect_timeout,
            connections: Arc::new(tokio::sync::Semaphore::new(settings.exit_max_connections)),
            directory: directory_tx,
        })
    });
    let streams = ClientStreams::new(settings.streams.clone(), settings.stream_open_timeout);
    let (liveness, alive) = Liveness::new();
    let rotate_at = relay.then(|| rotation_deadline(overlay.onion_keys().next_rotation()));
    let driver = Driver {
        overlay,
        identity,
        rotate_at,
        clock,
        directory,
        policy,
        requests: HashMap::new(),
        stopping: false,
        links: Links::default(),
        quic,
        udp,
        inbound_tx,
        link_events_tx,
        commands_tx: commands_tx.clone(),
        exits_tx,
        circuits: HashMap::new(),
        peers_since: HashMap::new(),
        events: events.clone(),
        exit_circuits: HashMap::new(),
        exit_service,
        direct: direct::Direct::default(),
        settings,
        aux: aux.clone(),
        send_failures: 0,
        cells_since_yield: 0,
        owner_drops: 0,
        quic_retired: 0,
    };
    let task = tokio::spawn(driver.run(commands_rx, inbound_rx, link_events_rx, udp_events, alive));
    Ok(Node {
        handle: NodeHandle {
            id: me,
            commands: commands_tx,
            streams,
            events: events.downgrade(),
            liveness,
        },
        addr,
        exits: Some(exits_rx),
        directory: Some(directory_rx),
        task,
        aux,
    })
}

fn push_task(
    aux: &std::sync::Mutex<Vec<tokio::task::JoinHandle<()>>>,
    task: tokio::task::JoinHandle<()>,
) {
    if let Ok(mut tasks) = aux.lock() {
        // Finished tasks (closed links, dials) need not be kept.
        tasks.retain(|t| !t.is_finished());
        tasks.push(task);
    }
}

impl Driver {
    /// The time as of this wake-up (the clock is ticked once per wake-up, in `run`).
    fn now(&self) -> Timestamp {
        self.clock.now()
    }

    #[tracing::instrument(name = "node", skip_all)]
    async fn run(
        mut self,
        mut commands: mpsc::Receiver<Command>,
        mut inbound: mpsc::Receiver<Inbound>,
        mut link_events: mpsc::Receiver<LinkEvent>,
        mut udp_events: Option<mpsc::Receiver<UdpEvent>>,
        mut alive: oneshot::Receiver<()>,
    ) {
        // One timer for both the overlay's next deadline and the next key rotation, re-armed
        // when that moves rather than made anew each turn: a new timer is registered in and
        // removed from tokio's timer wheel, under its lock, on every command and batch.
        let timer = tokio::time::sleep_until(Instant::now());
        tokio::pin!(timer);
        let mut taken_commands = Vec::with_capacity(YIELD_AFTER_CELLS);
        let mut taken_inbound = Vec::with_capacity(BATCH);
        let mut taken_events = Vec::with_capacity(BATCH);
        loop {
            let overlay_due = Instant::from_std(self.clock.instant_of(self.overlay.poll_timeout()));
            let deadline = self.rotate_at.map_or(overlay_due, |r| overlay_due.min(r));
            if timer.deadline() != deadline {
                timer.as_mut().reset(deadline);
            }
            tokio::select! {
                // Every Node, NodeHandle and client stream is gone: nobody can use the node.
                _ = &mut alive => {
                    self.clock.tick();
                    self.shutdown(None).await;
                    return;
                }
                // Each queue is taken a batch at a time: `recv_many` hands its slots back to
                // the senders at once (a `try_recv` takes the channel's lock per message).
                // Commands up to one piece of cells (a command sends one cell or none,
                // mostly) before the outputs are flushed.
                n = commands.recv_many(&mut taken_commands, YIELD_AFTER_CELLS) => {
                    self.clock.tick();
                    // None waiting and none to come: cannot happen while the driver keeps a
                    // sender; stop if it does.
                    if n == 0 {
                        self.shutdown(None).await;
                        return;
                    }
                    for command in taken_commands.drain(..) {
                        if let Some(done) = self.command(command) {
                            self.shutdown(Some(done)).await;
                            return;
                        }
                    }
                }
                1.. = inbound.recv_many(&mut taken_inbound, BATCH) => {
                    self.clock.tick();
                    for message in taken_inbound.drain(..) {
                        self.inbound(message);
                    }
                }
                1.. = recv_udp(&mut udp_events, &mut taken_events) => {
                    self.clock.tick();
                    for event in taken_events.drain(..) {
                        self.udp_event(event);
                    }
                }
                Some(event) = link_events.recv() => {
                    self.clock.tick();
                    self.link_event(event);
                }
                () = &mut timer => {
                    let now = self.clock.tick();
                    if self.rotate_at.is_some_and(|r| Instant::now() >= r) {
                        self.rotate_onion_keys();
                    }
                    // Returns at once when the overlay's deadline has not come yet.
                    self.overlay.handle_timeout(now);
                }
            }
            self.flush();
            if self.cells_since_yield >= YIELD_AFTER_CELLS {
                self.cells_since_yield = 0;
                // Only mid-burst: with nothing waiting the driver parks next anyway (and the
                // link tasks run then), and a yield would only delay a lone cell's reply.
                let waiting = !commands.is_empty()
                    || !inbound.is_empty()
                    || udp_events.as_ref().is_some_and(|rx| !rx.is_empty());
                if waiting {
                    tokio::task::yield_now().await;
                }
            }
        }
    }

    /// Carry out everything the overlay and the build policy asked for, until they ask for
    /// nothing more (handling an event can start a new build attempt, which asks for more).
    fn flush(&mut self) {
        loop {
            let mut busy = false;
            while let Some(output) = self.overlay.poll_output() {
                busy = true;
                self.output(output);
            }
            while let Some(event) = self.overlay.poll_event() {
                busy = true;
                self.event(event);
            }
            while let Some(outcome) = self.policy.poll_outcome() {
                busy = true;
                self.build_outcome(outcome);
            }
            if !busy {
                return;
            }
        }
    }

    /// Stop: answer the requests still being built with [`Error::NodeStopped`] (no new
    /// attempt starts), DESTROY every circuit, tell every circuit's owner and stream endpoint,
    /// give the tasks a moment to write the DESTROYs and wake their streams, close the links,
    /// end the node's tasks, and answer `done` if someone waits.
    async fn shutdown(mut self, done: Option<oneshot::Sender<()>>) {
        self.stopping = true;
        self.requests.clear();
        let now = self.now();
        self.overlay.destroy_all(DestroyReason::Shutdown, now);
        self.flush();
        for (_, tx) in self.exit_circuits.drain() {
            let _ = tx.try_send(CircuitMessage::Destroyed {
                reason: DestroyReason::Shutdown,
                hop: None,
            });
        }
        for (circuit, own) in self.circuits.drain() {
            let _ = self.events.send(NodeEvent::CircuitClosed {
                circuit,
                reason: DestroyReason::Shutdown,
            });
            let _ = own.tx.try_send(CircuitMessage::Destroyed {
                reason: DestroyReason::Shutdown,
                hop: None,
            });
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        if let Some(endpoint) = &self.quic {
            endpoint.close();
        }
        self.abort_tasks();
        if let Some(done) = done {
            let _ = done.send(());
        }
    }

    /// End the link, transport and exit tasks (the socket closes with the last of them).
    fn abort_tasks(&self) {
        if let Ok(mut aux) = self.aux.lock() {
            for task in aux.drain(..) {
                task.abort();
            }
        }
    }
}

/// The timer for an onion-key rotation due at `at` (Unix seconds); none due: an hour from
/// now, to look again.
fn rotation_deadline(at: Option<u64>) -> Instant {
    let wait = at.map_or(3600, |at| at.saturating_sub(unix_now()));
    Instant::now() + std::time::Duration::from_secs(wait)
}

/// Messages waiting in a channel now.
fn depth<T>(tx: &mpsc::Sender<T>) -> usize {
    tx.max_capacity() - tx.capacity()
}

/// Up to [`BATCH`] of the UDP transport's events into `taken`; 0 once it has stopped.
async fn recv_udp(rx: &mut Option<mpsc::Receiver<UdpEvent>>, taken: &mut Vec<UdpEvent>) -> usize {
    match rx {
        Some(rx) => rx.recv_many(taken, BATCH).await,
        None => std::future::pending().await,
    }
}
