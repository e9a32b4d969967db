//! The node's one driver task: it owns the [`Overlay`], the path selector and the links,
//! feeds the overlay what arrives (cells, control messages, link changes, commands, the
//! time) and carries out what it asks (send, dial, report).

use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;
use nyx_core::time::CoarseClock;
use nyx_core::{NodeId, Timestamp};
use nyx_overlay::circuit::{CircuitHandle, DestroyReason, Event, ExitHandle, Output, Overlay};
use nyx_overlay::directory::{Directory, ExitPolicy};
use nyx_overlay::path::PathSelector;
use nyx_overlay::{BuildId, BuildOutcome, BuildPolicy};
use nyx_transport::link::{Inbound, Message, UdpLink};
use nyx_transport::quic::QuicEndpoint;
use nyx_transport::udp::UdpCommand;
use nyx_transport::udp::UdpEvent;
use tokio::sync::{broadcast, mpsc, oneshot};
use tokio::time::Instant;

use crate::bound::{Bound, BoundNode};
use crate::client::ClientStreams;
use crate::events::{CircuitInfo, EVENT_BUFFER, NodeEvent, PeerInfo};
use crate::exit::ExitService;
use crate::handle::{Command, Liveness};
use crate::links::{
    LinkEvent, LinkRef, Links, spawn_quic_acceptor, spawn_quic_dial, spawn_quic_driver,
};
use crate::{
    Circuit, CircuitMessage, Error, ExitRequest, ExitServiceKind, Node, NodeHandle, NodeStats,
    unix_now,
};

/// Queue sizes between the tasks.
const COMMANDS: usize = 1024;
const INBOUND: usize = 4096;
const LINK_EVENTS: usize = 256;
const EXITS: usize = 1024;
/// Messages handled per wake-up before outputs are flushed.
const BATCH: usize = 64;

/// One of this node's built circuits: where its messages go, and when it was built.
struct OwnCircuit {
    tx: mpsc::Sender<CircuitMessage>,
    built_at: Timestamp,
    path: Vec<NodeId>,
}

struct Driver {
    overlay: Overlay,
    clock: CoarseClock,
    directory: Directory,
    /// Paths, attempts and blame for this node's circuit requests.
    policy: BuildPolicy,
    /// Whom to answer for each request the policy serves.
    requests: HashMap<BuildId, oneshot::Sender<Result<Circuit, Error>>>,
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
    settings: crate::NodeSettings,
    aux: Arc<std::sync::Mutex<Vec<tokio::task::JoinHandle<()>>>>,
    send_failures: u64,
    owner_drops: u64,
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
    let mut seed = [0u8; 32];
    getrandom::fill(&mut seed).map_err(Error::Randomness)?;
    let clock = CoarseClock::new();
    let overlay = Overlay::new(
        me,
        onion_keys,
        settings.overlay.clone(),
        u64::from_le_bytes([
            seed[0], seed[1], seed[2], seed[3], seed[4], seed[5], seed[6], seed[7],
        ]),
        clock.now(),
    )?;
    let (commands_tx, commands_rx) = mpsc::channel(COMMANDS);
    let (inbound_tx, inbound_rx) = mpsc::channel(INBOUND);
    let (link_events_tx, link_events_rx) = mpsc::channel(LINK_EVENTS);
    let (exits_tx, exits_rx) = mpsc::channel(EXITS);
    let aux = Arc::new(std::sync::Mutex::new(Vec::new()));
    let (events, _) = broadcast::channel(EVENT_BUFFER);
    let mut udp_events = None;
    let (quic, udp) = match bound {
        Bound::Quic(endpoint) => {
            let endpoint = Arc::new(endpoint);
            let task = spawn_quic_acceptor(endpoint.clone(), link_events_tx.clone());
            push_task(&aux, task);
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
    let selector = PathSelector::new(me, settings.transport, settings.path.clone());
    let policy = BuildPolicy::new(selector, settings.build_attempts, seed);
    if let Some((field, reason)) = settings.streams.problem() {
        return Err(nyx_overlay::Error::StreamConfig { field, reason }.into());
    }
    let exit_service = (settings.exit_service == ExitServiceKind::Streams).then(|| {
        Arc::new(ExitService {
            policy: std::sync::RwLock::new(Arc::new(settings.exit_policy.clone())),
            config: settings.streams.clone(),
            connect_timeout: settings.exit_connect_timeout,
            connections: Arc::new(tokio::sync::Semaphore::new(settings.exit_max_connections)),
        })
    });
    let streams = ClientStreams::new(settings.streams.clone(), settings.stream_open_timeout);
    let (liveness, alive) = Liveness::new();
    let driver = Driver {
        overlay,
        clock,
        directory,
        policy,
        requests: HashMap::new(),
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
        settings,
        aux: aux.clone(),
        send_failures: 0,
        owner_drops: 0,
    };
    let task = tokio::spawn(driver.run(commands_rx, inbound_rx, link_events_rx, udp_events, alive));
    Ok(Node {
        handle: NodeHandle {
            id: me,
            commands: commands_tx,
            streams,
            events,
            liveness,
        },
        addr,
        exits: Some(exits_rx),
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
        loop {
            let deadline = Instant::from_std(self.clock.instant_of(self.overlay.poll_timeout()));
            tokio::select! {
                // Every Node, NodeHandle and client stream is gone: nobody can use the node.
                _ = &mut alive => {
                    self.clock.tick();
                    self.shutdown(None).await;
                    return;
                }
                command = commands.recv() => {
                    self.clock.tick();
                    let Some(command) = command else { break };
                    if let Some(done) = self.command(command) {
                        self.shutdown(Some(done)).await;
                        return;
                    }
                }
                Some(first) = inbound.recv() => {
                    self.clock.tick();
                    self.inbound(first);
                    for _ in 1..BATCH {
                        match inbound.try_recv() {
                            Ok(next) => self.inbound(next),
                            Err(_) => break,
                        }
                    }
                }
                Some(event) = recv_udp(&mut udp_events) => {
                    self.clock.tick();
                    self.udp_event(event);
                    if let Some(rx) = udp_events.as_mut() {
                        for _ in 1..BATCH {
                            match rx.try_recv() {
                                Ok(next) => self.udp_event(next),
                                Err(_) => break,
                            }
                        }
                    }
                }
                Some(event) = link_events.recv() => {
                    self.clock.tick();
                    self.link_event(event);
                }
                () = tokio::time::sleep_until(deadline) => {
                    let now = self.clock.tick();
                    self.overlay.handle_timeout(now);
                }
            }
            self.flush();
        }
        self.abort_tasks();
    }

    fn inbound(&mut self, inbound: Inbound) {
        let now = self.now();
        match inbound.message {
            Message::Cell(cell) => self.overlay.handle_cell(inbound.peer, &cell, now),
            Message::Control(msg) => self.overlay.handle_control(inbound.peer, &msg, now),
        }
    }

    fn udp_event(&mut self, event: UdpEvent) {
        let now = self.now();
        match event {
            UdpEvent::Connected { peer, addr } => {
                self.links.udp_dials.remove(&addr);
                if let Some(tx) = &self.udp {
                    let link = UdpLink::new(peer, addr, tx.clone());
                    self.links.live.insert(peer, LinkRef::Udp(link));
                }
                self.peer_up(peer);
                self.overlay.link_up(peer, now);
            }
            UdpEvent::Cell { peer, data } => self.overlay.handle_cell(peer, &data, now),
            UdpEvent::Control { peer, data } => self.overlay.handle_control(peer, &data, now),
            UdpEvent::Failed { addr, reason } => {
                tracing::debug!(%reason, "UDP dial failed");
                if let Some(peer) = self.links.udp_dials.remove(&addr) {
                    self.overlay.connect_failed(peer, now);
                }
            }
        }
    }

    fn link_event(&mut self, event: LinkEvent) {
        let now = self.now();
        match event {
            LinkEvent::QuicUp(link) => {
                let peer = link.peer();
                let task = spawn_quic_driver(
                    link.clone(),
                    self.inbound_tx.clone(),
                    self.link_events_tx.clone(),
                );
                push_task(&self.aux, task);
                self.links.live.insert(peer, LinkRef::Quic(link));
                self.peer_up(peer);
                self.overlay.link_up(peer, now);
            }
            LinkEvent::QuicClosed(link) => {
                let peer = link.peer();
                let current = matches!(self.links.live.get(&peer), Some(LinkRef::Quic(l)) if Arc::ptr_eq(l, &link));
                if current {
                    self.links.live.remove(&peer);
                    self.peer_down(peer);
                    self.overlay.link_down(peer, now);
                }
            }
            LinkEvent::DialFailed(peer) => self.overlay.connect_failed(peer, now),
        }
    }

    /// Execute a command; `Some` asks the loop to shut down.
    fn command(&mut self, command: Command) -> Option<oneshot::Sender<()>> {
        let now = self.now();
        match command {
            Command::Build { req, reply } => {
                let id =
                    self.policy
                        .request(req, &mut self.overlay, &self.directory, now, unix_now());
                self.requests.insert(id, reply);
            }
            Command::Send { circuit, payload } => {
                if self.overlay.send(circuit, &payload).is_err() {
                    self.send_failures += 1;
                }
            }
            Command::Close { circuit } => {
                self.close_own(circuit);
            }
            Command::CloseCircuit { circuit, reply } => {
                let _ = reply.send(self.close_own(circuit));
            }
            Command::Circuits(reply) => {
                let mut list: Vec<CircuitInfo> = self
                    .circuits
                    .iter()
                    .map(|(handle, c)| CircuitInfo {
                        circuit: *handle,
                        path: c.path.clone(),
                        age: now.saturating_duration_since(c.built_at),
                    })
                    .collect();
                list.sort_by_key(|c| std::cmp::Reverse(c.age));
                let _ = reply.send(list);
            }
            Command::Peers(reply) => {
                let mut list: Vec<PeerInfo> = self
                    .links
                    .live
                    .keys()
                    .map(|peer| PeerInfo {
                        peer: *peer,
                        age: self
                            .peers_since
                            .get(peer)
                            .map(|since| now.saturating_duration_since(*since))
                            .unwrap_or_default(),
                        in_directory: self.directory.contains(peer),
                    })
                    .collect();
                list.sort_by_key(|p| p.peer);
                let _ = reply.send(list);
            }
            Command::SetDirectory(directory) => {
                let relays = directory.len();
                self.directory = directory;
                tracing::info!(relays, "directory replaced");
                let _ = self.events.send(NodeEvent::DirectoryChanged { relays });
            }
            Command::SetExitPolicy(policy) => {
                if let Some(service) = &self.exit_service {
                    service.set_policy(policy.clone());
                }
                self.settings.exit_policy = policy;
            }
            Command::SetLimits { limits, reply } => {
                let _ = reply.send(self.overlay.set_limits(&limits).map_err(Error::from));
            }
            Command::Reply { exit, payload } => {
                if self.overlay.send_backward(exit, &payload, now).is_err() {
                    self.send_failures += 1;
                }
            }
            Command::Stats(reply) => {
                let _ = reply.send(NodeStats {
                    overlay: self.overlay.stats(),
                    links: self.links.live.len(),
                    relay_circuits: self.overlay.relay_circuits(),
                    own_circuits: self.overlay.own_circuits(),
                    send_failures: self.send_failures,
                    owner_drops: self.owner_drops,
                    inbound_queue: depth(&self.inbound_tx),
                    command_queue: depth(&self.commands_tx),
                    udp_send_queue: self.udp.as_ref().map_or(0, depth),
                });
            }
            Command::CircuitIds(reply) => {
                let _ = reply.send(self.overlay.link_circuit_ids());
            }
            Command::Shutdown(done) => return Some(done),
        }
        None
    }

    /// Close one of this node's circuits; false if it has none by that handle.
    fn close_own(&mut self, circuit: CircuitHandle) -> bool {
        let known = self.circuits.remove(&circuit).is_some();
        let _ = self.overlay.close(circuit, self.now());
        if known {
            let _ = self.events.send(NodeEvent::CircuitClosed {
                circuit,
                reason: DestroyReason::Requested,
            });
        }
        known
    }

    fn peer_up(&mut self, peer: NodeId) {
        let now = self.now();
        self.peers_since.insert(peer, now);
        let _ = self.events.send(NodeEvent::PeerUp { peer });
    }

    fn peer_down(&mut self, peer: NodeId) {
        if self.peers_since.remove(&peer).is_some() {
            let _ = self.events.send(NodeEvent::PeerDown { peer });
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

    fn output(&mut self, output: Output) {
        match output {
            Output::Cell { to, cell } => {
                if !self.links.live.get(&to).is_some_and(|l| l.send_cell(cell)) {
                    self.send_failures += 1;
                }
            }
            Output::Control { to, msg } => {
                if !self
                    .links
                    .live
                    .get(&to)
                    .is_some_and(|l| l.send_control(msg))
                {
                    self.send_failures += 1;
                }
            }
            Output::Connect { peer } => self.dial(peer),
            Output::Disconnect { peer } => {
                if let Some(link) = self.links.live.remove(&peer) {
                    link.close();
                    self.peer_down(peer);
                }
            }
        }
    }

    fn dial(&mut self, peer: NodeId) {
        let now = self.now();
        let transport = self.settings.transport;
        let Some(desc) = self.directory.get(&peer) else {
            tracing::debug!("asked to reach a relay not in the directory");
            return self.overlay.connect_failed(peer, now);
        };
        let Some(addr) = desc.addr(transport) else {
            return self.overlay.connect_failed(peer, now);
        };
        if let Some(endpoint) = &self.quic {
            let task = spawn_quic_dial(endpoint.clone(), peer, addr, self.link_events_tx.clone());
            push_task(&self.aux, task);
        } else if let Some(udp) = &self.udp {
            let key = Box::new(desc.link_key().clone());
            self.links.udp_dials.insert(addr, peer);
            if udp
                .try_send(UdpCommand::Connect { peer, key, addr })
                .is_err()
            {
                self.links.udp_dials.remove(&addr);
                self.overlay.connect_failed(peer, now);
            }
        }
    }

    fn event(&mut self, event: Event) {
        let now = self.now();
        self.policy
            .handle_event(&event, &mut self.overlay, &self.directory, now, unix_now());
        match event {
            Event::Destroyed {
                circuit,
                reason,
                hop,
                ..
            } => {
                if let Some(own) = self.circuits.remove(&circuit) {
                    let _ = own.tx.try_send(CircuitMessage::Destroyed { reason, hop });
                    let _ = self
                        .events
                        .send(NodeEvent::CircuitClosed { circuit, reason });
                }
            }
            Event::Expiring { circuit } => {
                if let Some(own) = self.circuits.get(&circuit) {
                    let _ = own.tx.try_send(CircuitMessage::Expiring);
                }
            }
            Event::Data { circuit, payload } => self.deliver_to_owner(circuit, payload),
            Event::ExitData { exit, payload } => self.deliver_to_exit(exit, payload),
            Event::ExitClosed { exit, reason } => {
                if let Some(tx) = self.exit_circuits.remove(&exit) {
                    let _ = tx.try_send(CircuitMessage::Destroyed { reason, hop: None });
                }
            }
            // The build policy took these in above.
            Event::Built { .. } | Event::Failed { .. } => {}
        }
    }

    /// Answer a circuit request (or report an attempt that failed).
    fn build_outcome(&mut self, outcome: BuildOutcome) {
        match outcome {
            BuildOutcome::Built { id, circuit, .. } => {
                let Some(reply) = self.requests.remove(&id) else {
                    return;
                };
                let handle = self.own_circuit(circuit);
                if let Err(Ok(unwanted)) = reply.send(Ok(handle)) {
                    drop(unwanted); // the requester left: closing it tears it down
                }
            }
            BuildOutcome::Retrying {
                attempt, reason, ..
            } => {
                let _ = self
                    .events
                    .send(NodeEvent::CircuitFailed { attempt, reason });
            }
            BuildOutcome::Failed { id, error } => {
                if let nyx_overlay::Error::BuildFailed { attempts, reason } = &error {
                    let _ = self.events.send(NodeEvent::CircuitFailed {
                        attempt: *attempts,
                        reason: *reason,
                    });
                }
                if let Some(reply) = self.requests.remove(&id) {
                    let _ = reply.send(Err(error.into()));
                }
            }
            _ => {}
        }
    }

    /// Start keeping a circuit just built for a request; the handle goes to the requester.
    fn own_circuit(&mut self, circuit: CircuitHandle) -> Circuit {
        let (tx, rx) = mpsc::channel(self.settings.circuit_queue);
        let path = self.overlay.path(circuit).unwrap_or_default();
        self.circuits.insert(
            circuit,
            OwnCircuit {
                tx,
                built_at: self.now(),
                path: path.clone(),
            },
        );
        let _ = self.events.send(NodeEvent::CircuitBuilt {
            circuit,
            path: path.clone(),
        });
        let exit_policy = path
            .last()
            .and_then(|exit| self.directory.get(exit))
            .map(|d| d.exit_policy().clone())
            .unwrap_or_else(ExitPolicy::reject_all);
        Circuit {
            handle: circuit,
            path,
            exit_policy,
            commands: self.commands_tx.clone(),
            messages: rx,
            closed: false,
        }
    }

    /// A payload for a circuit this node exits: to its stream endpoint (started on the
    /// first payload), or raw to whoever took the exit requests.
    fn deliver_to_exit(&mut self, exit: ExitHandle, payload: Bytes) {
        let Some(service) = &self.exit_service else {
            if self
                .exits_tx
                .try_send(ExitRequest { exit, payload })
                .is_err()
            {
                self.owner_drops += 1;
            }
            return;
        };
        if !self.exit_circuits.contains_key(&exit) {
            let started =
                service.spawn_circuit(exit, self.commands_tx.clone(), self.settings.circuit_queue);
            match started {
                Some((tx, task)) => {
                    push_task(&self.aux, task);
                    self.exit_circuits.insert(exit, tx);
                }
                None => {
                    self.owner_drops += 1;
                    return;
                }
            }
        }
        match self.exit_circuits.get(&exit) {
            Some(tx) if tx.try_send(CircuitMessage::Data(payload)).is_ok() => {}
            _ => self.owner_drops += 1,
        }
    }

    fn deliver_to_owner(&mut self, circuit: CircuitHandle, payload: Bytes) {
        match self.circuits.get(&circuit) {
            Some(own) if own.tx.try_send(CircuitMessage::Data(payload)).is_ok() => {}
            _ => self.owner_drops += 1,
        }
    }

    /// Stop: DESTROY every circuit, close the links, tell every circuit's owner, end every
    /// task of the node, and answer `done` if someone waits. Requests still being built are
    /// answered with [`Error::NodeStopped`] when their reply channels drop with `self`.
    async fn shutdown(mut self, done: Option<oneshot::Sender<()>>) {
        let now = self.now();
        self.overlay.destroy_all(DestroyReason::Shutdown, now);
        self.flush();
        // Give the link tasks a moment to write the DESTROYs, then close.
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        if let Some(endpoint) = &self.quic {
            endpoint.close();
        }
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

/// Messages waiting in a channel now.
fn depth<T>(tx: &mpsc::Sender<T>) -> usize {
    tx.max_capacity() - tx.capacity()
}

async fn recv_udp(rx: &mut Option<mpsc::Receiver<UdpEvent>>) -> Option<UdpEvent> {
    match rx {
        Some(rx) => rx.recv().await,
        None => std::future::pending().await,
    }
}
