//! One end of a circuit's streams, driven: a [`StreamMux`] shared (behind a mutex that is
//! never held across an await) between the task that moves its packets over the circuit
//! and the [`NyxStream`](crate::NyxStream)s that read and write it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::Waker;

use bytes::Bytes;
use nyx_core::time::CoarseClock;
use nyx_core::{NodeId, Timestamp};
use tokio::sync::{Notify, mpsc, oneshot};
use tokio::time::Instant;

mod jobs;

use crate::Error;
use crate::handle::Command;
use crate::{Circuit, CircuitMessage};
use jobs::run_job;
use nyx_overlay::circuit::{CellArena, DestroyReason, ExitHandle, MAX_BACKWARD_BODY};
use nyx_overlay::stream::{ResetReason, StreamEvent, StreamId, StreamMux};

/// Packets moved per wake-up before the task looks at its inputs again.
const BATCH: usize = 128;

/// How often a circuit end with streams logs its stream counters (at debug level).
const REPORT_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

/// Who to tell when a stream can move.
#[derive(Debug, Default)]
pub(super) struct Wakers {
    pub(super) read: Option<Waker>,
    pub(super) write: Option<Waker>,
}

/// What the task and the streams share.
pub(super) struct Shared {
    pub(super) mux: StreamMux,
    /// This endpoint's time line (its mux started at zero on it).
    clock: CoarseClock,
    pub(super) wakers: HashMap<StreamId, Wakers>,
    /// Clients waiting for OPENED.
    pub(super) opens: HashMap<StreamId, oneshot::Sender<Result<(), Error>>>,
    /// Exit: streams that asked for a target and wait for the exit service.
    pub(super) incoming: Vec<(StreamId, String)>,
    /// The circuit ended.
    pub(super) gone: Option<DestroyReason>,
    /// The circuit nears its end of life: no new streams.
    pub(super) expiring: bool,
}

impl Shared {
    pub(super) fn now(&self) -> Timestamp {
        self.clock.tick()
    }

    /// Act on what the mux reports: wake readers and writers, answer openers, collect new
    /// exit streams.
    fn dispatch(&mut self) {
        while let Some(event) = self.mux.poll_event() {
            match event {
                StreamEvent::Readable(id) => {
                    if let Some(w) = self.wakers.get_mut(&id).and_then(|w| w.read.take()) {
                        w.wake();
                    }
                }
                StreamEvent::Writable(id) => {
                    if let Some(w) = self.wakers.get_mut(&id).and_then(|w| w.write.take()) {
                        w.wake();
                    }
                }
                StreamEvent::Opened(id) => {
                    if let Some(tx) = self.opens.remove(&id) {
                        let _ = tx.send(Ok(()));
                    }
                }
                StreamEvent::Reset { stream, reason } => {
                    if let Some(w) = self.wakers.get_mut(&stream) {
                        for w in [w.read.take(), w.write.take()].into_iter().flatten() {
                            w.wake();
                        }
                    }
                    if let Some(tx) = self.opens.remove(&stream) {
                        let _ = tx.send(Err(Error::reset(reason)));
                    }
                }
                StreamEvent::Incoming { stream, target } => self.incoming.push((stream, target)),
            }
        }
    }
}

/// A handle on a driven circuit end (cheap to clone).
#[derive(Clone)]
pub(super) struct Endpoint {
    shared: Arc<Mutex<Shared>>,
    pub(super) notify: Arc<Notify>,
    /// The circuit's relays (client side; empty at an exit).
    pub(super) path: Arc<[NodeId]>,
}

impl std::fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Endpoint").finish_non_exhaustive()
    }
}

impl Endpoint {
    /// The endpoint of a circuit end whose streams `mux` carries. Its task ([`run`]) hands
    /// the mux's FEC work, decodes included, to other threads ([`run_job`]).
    pub(super) fn new(mut mux: StreamMux, path: Vec<NodeId>) -> Self {
        mux.offload_decodes();
        Endpoint {
            shared: Arc::new(Mutex::new(Shared {
                mux,
                clock: CoarseClock::new(),
                wakers: HashMap::new(),
                opens: HashMap::new(),
                incoming: Vec::new(),
                gone: None,
                expiring: false,
            })),
            notify: Arc::new(Notify::new()),
            path: path.into(),
        }
    }

    /// Whether two handles are on the same circuit.
    pub(super) fn same(&self, other: &Endpoint) -> bool {
        Arc::ptr_eq(&self.shared, &other.shared)
    }

    /// The shared state. A panic elsewhere while holding it does not make it unusable: the
    /// mux's state is consistent between calls.
    pub(super) fn lock(&self) -> MutexGuard<'_, Shared> {
        self.shared
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Reset a stream locally (the peer is told) and let the task send it.
    pub(super) fn reset(&self, id: StreamId, reason: ResetReason) {
        let _ = self.lock().mux.reset(id, reason);
        self.notify.notify_one();
    }

    /// Whether new streams may use this circuit.
    pub(super) fn usable(&self, max_streams: usize) -> bool {
        let s = self.lock();
        s.gone.is_none() && !s.expiring && s.mux.stream_count() < max_streams
    }
}

/// The circuit a task moves packets over.
pub(super) enum Port {
    /// This node's own circuit.
    Client(Circuit),
    /// A circuit this node is the exit of.
    Exit {
        exit: ExitHandle,
        commands: mpsc::Sender<Command>,
        messages: mpsc::Receiver<CircuitMessage>,
    },
}

impl Port {
    async fn send(&self, payload: Bytes) -> Result<(), Error> {
        let command = match self {
            Port::Client(c) => Command::Send {
                circuit: c.handle,
                payload,
            },
            Port::Exit { exit, .. } => Command::Reply {
                exit: *exit,
                payload,
            },
        };
        let commands = match self {
            Port::Client(c) => &c.commands,
            Port::Exit { commands, .. } => commands,
        };
        commands.send(command).await.map_err(|_| Error::NodeStopped)
    }

    /// Up to [`BATCH`] messages into `inbox`; 0 once the circuit's queue has closed.
    async fn recv_many(&mut self, inbox: &mut Vec<CircuitMessage>) -> usize {
        let messages = match self {
            Port::Client(c) => &mut c.messages,
            Port::Exit { messages, .. } => messages,
        };
        messages.recv_many(inbox, BATCH).await
    }
}

/// What the task does with streams an exit is asked to open.
pub(super) type OnIncoming = Box<dyn Fn(&Endpoint, StreamId, String) + Send + Sync>;

/// Move the endpoint's packets over `port` until the circuit ends (or, for a client, it
/// expired and carries no stream any more).
pub(super) async fn run(ep: Endpoint, mut port: Port, on_incoming: Option<OnIncoming>) {
    let mut buf = vec![0u8; MAX_BACKWARD_BODY];
    // Packets are carved from a reference-counted region: no allocation per packet.
    let mut arena = CellArena::new(MAX_BACKWARD_BODY);
    let mut out = Vec::with_capacity(BATCH);
    let mut jobs = Vec::new();
    // What the circuit delivered and the mux has not yet been handed.
    let mut inbox = Vec::with_capacity(BATCH);
    let exit = matches!(port, Port::Exit { .. });
    let mut report_at = Timestamp::ZERO;
    // One timer, re-armed when the mux's deadline moves rather than made anew each turn (a
    // new timer goes into and out of tokio's timer wheel, under its lock, per turn).
    let timer = tokio::time::sleep_until(Instant::now());
    tokio::pin!(timer);
    loop {
        // Packets were held back this turn because the next one builds an encoder.
        let mut held = false;
        let (deadline, finished) = {
            let mut s = ep.lock();
            let now = s.now();
            if now >= report_at && s.mux.stream_count() > 0 {
                report_at = now.saturating_add(REPORT_EVERY);
                if tracing::enabled!(tracing::Level::DEBUG) {
                    report(&s.mux, exit, now);
                }
            }
            while out.len() < BATCH {
                // What this turn wrote leaves before an encoder is built (a request's
                // source symbol waited ~100 µs for its tail repair's encoder): the
                // packets go to the driver, the task yields so that it sends them, and
                // the next turn builds the encoder.
                if !out.is_empty() && s.mux.next_builds_encoder() {
                    held = true;
                    break;
                }
                match s.mux.poll_transmit(now, &mut buf) {
                    Some(n) => out.push(arena.copy_of(&buf[..n]).freeze()),
                    None => break,
                }
            }
            while let Some(job) = s.mux.poll_job() {
                jobs.push(job);
            }
            s.dispatch();
            let incoming = std::mem::take(&mut s.incoming);
            let deadline = s
                .mux
                .poll_timeout()
                .map(|t| Instant::from_std(s.clock.instant_of(t)));
            let finished = s.expiring && s.mux.stream_count() == 0;
            let dead = s.mux.is_dead(now);
            drop(s);
            if dead {
                // The peer stopped answering pings: fail the streams and let the circuit go
                // (a client's is closed when its handle drops with the port).
                tracing::debug!("circuit end silent for too long; ending it");
                return end(&ep, DestroyReason::Timeout);
            }
            for (id, target) in incoming {
                match &on_incoming {
                    Some(f) => f(&ep, id, target),
                    None => ep.reset(id, ResetReason::Protocol),
                }
            }
            (deadline, finished)
        };
        for job in jobs.drain(..) {
            run_job(&ep, job);
        }
        let full = out.len() == BATCH;
        for payload in out.drain(..) {
            if port.send(payload).await.is_err() {
                return end(&ep, DestroyReason::Shutdown);
            }
        }
        if finished {
            return end(&ep, DestroyReason::Expired);
        }
        if full || held {
            tokio::task::yield_now().await;
            continue;
        }
        if let Some(at) = deadline
            && timer.deadline() != at
        {
            timer.as_mut().reset(at);
        }
        // Messages a turn left over (an urgent ACK went out first) are handled before the
        // task waits again.
        if !inbox.is_empty() {
            if let Err(reason) = take_messages(&ep, &mut inbox) {
                return end(&ep, reason);
            }
            continue;
        }
        tokio::select! {
            // A batch at once: `recv_many` hands the queue's slots back to the driver in
            // one step (a `try_recv` takes the channel's lock per message).
            n = port.recv_many(&mut inbox) => {
                if n == 0 {
                    return end(&ep, DestroyReason::Shutdown);
                }
                if let Err(reason) = take_messages(&ep, &mut inbox) {
                    return end(&ep, reason);
                }
            }
            () = ep.notify.notified() => {}
            () = &mut timer, if deadline.is_some() => {
                let mut s = ep.lock();
                let now = s.now();
                s.mux.handle_timeout(now);
            }
        }
    }
}

/// Hand the mux what `inbox` holds, in order, under one lock and one clock read, and leave
/// there what follows a packet that makes an ACK urgent: the ACK goes out before the peer's
/// packets outrun it. `Err` when the circuit ended.
fn take_messages(ep: &Endpoint, inbox: &mut Vec<CircuitMessage>) -> Result<(), DestroyReason> {
    let mut s = ep.lock();
    let now = s.now();
    let mut taken = 0;
    for message in inbox.iter() {
        taken += 1;
        match message {
            CircuitMessage::Data(packet) => {
                // A malformed packet is counted by the mux and dropped.
                let _ = s.mux.handle_packet(packet, now);
                if s.mux.ack_urgent() {
                    break;
                }
            }
            CircuitMessage::Expiring => s.expiring = true,
            CircuitMessage::Destroyed { reason, .. } => return Err(*reason),
        }
    }
    inbox.drain(..taken);
    Ok(())
}

/// Log a circuit end's stream counters: what tells a window limit from loss, repair or
/// queueing when a transfer is slow. Counters only, nothing about the circuit's path.
fn report(mux: &StreamMux, exit: bool, now: Timestamp) {
    let s = mux.stats();
    tracing::debug!(
        at_ms = now.as_nanos() / 1_000_000,
        end = if exit { "exit" } else { "client" },
        streams = mux.stream_count(),
        window = s.window,
        in_flight = s.in_flight,
        blocks_in_flight = s.blocks_in_flight,
        send_credit = s.send_credit,
        srtt_ms = s.srtt.as_secs_f64() * 1e3,
        min_rtt_ms = s.min_rtt.as_secs_f64() * 1e3,
        sent = s.packets_sent,
        received = s.packets_received,
        lost = s.lost,
        probe_timeouts = s.probe_timeouts,
        congestion_events = s.congestion_events,
        fec_packets = s.fec_packets,
        fec_source = s.fec_source_symbols,
        fec_blocks = s.fec_blocks,
        fec_requested = s.fec_requested_repair,
        encoders_inline = s.fec_encoders_inline,
        encoders_prepared = s.fec_encoders_prepared,
        controls_resent = s.controls_resent,
        echoes_sent = s.echoes_sent,
        "stream counters"
    );
    for st in mux.stream_snapshots() {
        tracing::debug!(
            stream = st.id.0,
            opened = st.opened,
            written = st.written,
            peer_max = st.peer_max,
            fin = ?st.fin,
            blocks_in_flight = st.blocks_in_flight,
            unflushed = st.unflushed,
            consumed = st.consumed,
            readable = st.readable,
            blocks_decoded = st.blocks_decoded,
            advertised = st.advertised,
            peer_fin = ?st.peer_fin,
            done = ?st.done,
            reset = ?st.reset,
            released = st.released,
            armed = ?st.armed,
            fec_plan = ?st.fec_plan,
            fec_repair = ?st.fec_repair,
            "stream state"
        );
    }
}

/// The circuit is gone: every stream fails, everyone waiting is told.
fn end(ep: &Endpoint, reason: DestroyReason) {
    let mut s = ep.lock();
    if s.gone.is_none() {
        s.gone = Some(reason);
    }
    s.mux.abandon();
    s.dispatch();
    for (_, w) in s.wakers.drain() {
        for w in [w.read, w.write].into_iter().flatten() {
            w.wake();
        }
    }
    for (_, tx) in s.opens.drain() {
        let _ = tx.send(Err(Error::reset(ResetReason::CircuitLost)));
    }
}
