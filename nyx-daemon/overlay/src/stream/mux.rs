//! [`StreamMux`]: one end of a circuit's streams.

use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

use nyx_core::Timestamp;
use nyx_fec::packet::{MAX_FEEDBACK_LEN, SYMBOL_HEADER_LEN};

use super::cc::Vegas;
use super::pacer::Pacer;
use super::recovery::{AckState, SentPackets, Settled};
use super::state::{Stream, StreamSnapshot};
use super::wire::{self, CARRIER_HEADER_LEN, Control, Frame, MAX_TARGET_LEN, PACKET_HEADER_LEN};
use super::{ResetReason, Role, SYMBOL_SIZE, StreamConfig, StreamEvent, StreamId};
use crate::Error;
use crate::circuit::{MAX_BACKWARD_BODY, MAX_FORWARD_BODY};

mod jobs;
pub use jobs::{FecJob, FecJobDone};

/// With streams open and nothing heard from the peer for this long, ask it for an ACK (a
/// PING; again at this interval while the silence lasts).
pub const LIVENESS_PROBE: Duration = Duration::from_secs(5);
/// With streams open and nothing heard from the peer for this long, the circuit is dead
/// ([`StreamMux::is_dead`]).
pub const DEAD_AFTER: Duration = Duration::from_secs(60);

/// What a read found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadOutcome {
    /// This many bytes were copied.
    Data(usize),
    /// Nothing yet ([`StreamEvent::Readable`] follows when there is).
    Blocked,
    /// The peer finished: everything was read.
    Finished,
}

/// Counters of a mux (the circuit end), for reports and tests.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
#[non_exhaustive]
pub struct MuxStats {
    /// Packets sent (all kinds).
    pub packets_sent: u64,
    /// Of those, bare acknowledgements.
    pub ack_only_sent: u64,
    /// Packets received and parsed.
    pub packets_received: u64,
    /// Packets received twice (onion replay protection normally stops these first).
    pub duplicates: u64,
    /// Packets that did not parse, or broke the protocol (dropped whole).
    pub malformed: u64,
    /// In-flight packets declared lost.
    pub lost: u64,
    /// Control frames sent again after a loss.
    pub controls_resent: u64,
    /// Probe timeouts (nothing acknowledged for a while).
    pub probe_timeouts: u64,
    /// Streams opened (client) or accepted (exit).
    pub streams_opened: u64,
    /// Streams reset, by either side.
    pub streams_reset: u64,
    /// FEC symbol packets sent, over all streams (source, repair, probes).
    pub fec_packets: u64,
    /// Source symbols those carried data for: `fec_packets / fec_source_symbols` is the
    /// FEC overhead (1.0 = none).
    pub fec_source_symbols: u64,
    /// Repair symbols sent in answer to requests (second rounds).
    pub fec_requested_repair: u64,
    /// RaptorQ encoders built on the packet path, when a block's repair was due.
    pub fec_encoders_inline: u64,
    /// RaptorQ encoders built ahead by a [`FecJob`] and used.
    pub fec_encoders_prepared: u64,
    /// The congestion window now, in cells.
    pub window: u32,
    /// Cells in flight now.
    pub in_flight: u32,
    /// Congestion cuts so far.
    pub congestion_events: u64,
    /// Smoothed RTT.
    pub srtt: Duration,
    /// Smallest RTT seen (`Duration::MAX` before the first sample).
    pub min_rtt: Duration,
    /// FEC blocks sent and not yet acknowledged now, over all streams (a stream holds at
    /// most `max_blocks_in_flight`: when every sending stream is there, the FEC window and
    /// not the congestion window limits).
    pub blocks_in_flight: u32,
    /// Stream bytes the peer's flow control still lets this end send now, over the streams
    /// that have not finished sending (near zero: the reader's window limits).
    pub send_credit: u64,
}

impl MuxStats {
    /// Add another mux's counters (the window, RTTs and in-flight count: the larger).
    pub fn accumulate(&mut self, o: &MuxStats) {
        self.packets_sent += o.packets_sent;
        self.ack_only_sent += o.ack_only_sent;
        self.packets_received += o.packets_received;
        self.duplicates += o.duplicates;
        self.malformed += o.malformed;
        self.lost += o.lost;
        self.controls_resent += o.controls_resent;
        self.probe_timeouts += o.probe_timeouts;
        self.streams_opened += o.streams_opened;
        self.streams_reset += o.streams_reset;
        self.fec_packets += o.fec_packets;
        self.fec_source_symbols += o.fec_source_symbols;
        self.fec_requested_repair += o.fec_requested_repair;
        self.fec_encoders_inline += o.fec_encoders_inline;
        self.fec_encoders_prepared += o.fec_encoders_prepared;
        self.congestion_events += o.congestion_events;
        self.window = self.window.max(o.window);
        self.in_flight = self.in_flight.max(o.in_flight);
        self.blocks_in_flight += o.blocks_in_flight;
        self.send_credit += o.send_credit;
        self.srtt = self.srtt.max(o.srtt);
        self.min_rtt = if self.min_rtt.is_zero() {
            o.min_rtt
        } else {
            self.min_rtt.min(o.min_rtt)
        };
    }

    /// FEC symbol packets sent per source symbol (1.0 = no overhead; 0 before any data).
    pub fn fec_overhead(&self) -> f64 {
        if self.fec_source_symbols == 0 {
            return 0.0;
        }
        self.fec_packets as f64 / self.fec_source_symbols as f64
    }
}

/// One end of the streams of a circuit. Sans-IO: feed it the circuit's DATA payloads with
/// [`handle_packet`](Self::handle_packet), send what
/// [`poll_transmit`](Self::poll_transmit) writes, call
/// [`handle_timeout`](Self::handle_timeout) at [`poll_timeout`](Self::poll_timeout), and
/// react to [`poll_event`](Self::poll_event).
pub struct StreamMux {
    role: Role,
    config: StreamConfig,
    max_packet: usize,
    streams: BTreeMap<StreamId, Stream>,
    /// Client: the next id to open. Exit: one above the highest id seen.
    next_id: u32,
    rr: u32,
    controls: VecDeque<Control>,
    acks: AckState,
    sent: SentPackets,
    cc: Vegas,
    pacer: Pacer,
    /// The last poll held a symbol back for pacing: wake when the pacer allows one.
    paced: bool,
    /// The time of the latest input (a packet, a poll or a timeout): reads, which take no
    /// time of their own, are placed at it.
    now: Timestamp,
    ping: bool,
    pto_count: u32,
    /// When the latest packet from the peer arrived, and when this end last asked for proof
    /// of life (the circuit's liveness check).
    last_heard: Timestamp,
    last_probe: Timestamp,
    events: VecDeque<StreamEvent>,
    stats: MuxStats,
    /// FEC counters of streams already gone.
    done_fec: FecTotals,
    /// Reused list of stream ids (per-packet passes over the streams allocate nothing).
    scratch: Vec<StreamId>,
    /// The largest receive window a stream of this circuit grew to: where the next one
    /// starts (the streams of a circuit share its path).
    learned_window: u64,
    /// The loss rate and mean loss run a stream of this circuit measured last: where the
    /// next one's FEC starts.
    learned_loss: Option<(f64, f64)>,
}

impl StreamMux {
    /// The mux of one end of a circuit, starting at `now`.
    pub fn new(role: Role, mut config: StreamConfig, now: Timestamp) -> Result<Self, Error> {
        config.fec.symbol_size = SYMBOL_SIZE;
        if let Some((field, reason)) = config.problem() {
            return Err(Error::StreamConfig { field, reason });
        }
        let max_packet = match role {
            Role::Client => MAX_FORWARD_BODY,
            Role::Exit => MAX_BACKWARD_BODY,
        };
        let learned_window = config.stream_window;
        Ok(StreamMux {
            role,
            cc: Vegas::new(config.cc.clone(), now),
            pacer: Pacer::new(now),
            paced: false,
            now,
            config,
            max_packet,
            streams: BTreeMap::new(),
            next_id: 1,
            rr: 0,
            controls: VecDeque::new(),
            acks: AckState::default(),
            sent: SentPackets::default(),
            ping: false,
            pto_count: 0,
            last_heard: now,
            last_probe: now,
            events: VecDeque::new(),
            stats: MuxStats::default(),
            done_fec: FecTotals::default(),
            scratch: Vec::new(),
            learned_window,
            learned_loss: None,
        })
    }

    /// The largest packet this end sends (a circuit DATA payload in its direction).
    pub fn max_packet(&self) -> usize {
        self.max_packet
    }

    /// (Client) open a stream to `target` ("host:port", resolved by the exit).
    pub fn open(&mut self, target: &str, now: Timestamp) -> Result<StreamId, Error> {
        if self.role != Role::Client {
            return Err(Error::StreamState {
                reason: "only a circuit's client opens streams",
            });
        }
        if target.is_empty() || target.len() > MAX_TARGET_LEN {
            return Err(Error::BadTarget {
                target: target.to_string(),
                reason: "must be 1 to 255 bytes of host:port",
            });
        }
        if self.streams.len() >= self.config.max_streams {
            return Err(Error::TooManyStreams {
                max: self.config.max_streams,
            });
        }
        if self.next_id == u32::MAX {
            return Err(Error::TooManyStreams {
                max: u32::MAX as usize,
            });
        }
        let id = StreamId(self.next_id);
        self.next_id += 1;
        let mut stream = Stream::new(&self.config.fec, self.windows(), now)?;
        self.seed(&mut stream);
        self.streams.insert(id, stream);
        self.controls.push_back(Control::Open {
            stream: id,
            target: target.to_string(),
        });
        self.advertise_window(id);
        self.stats.streams_opened += 1;
        Ok(id)
    }

    /// (Exit) the stream's target is connected: tell the client.
    pub fn accept(&mut self, id: StreamId) -> Result<(), Error> {
        let stream = self.live_mut(id)?;
        if stream.opened {
            return Ok(());
        }
        stream.opened = true;
        self.controls.push_back(Control::Opened { stream: id });
        self.advertise_window(id);
        self.stats.streams_opened += 1;
        Ok(())
    }

    /// Hand up to `data.len()` bytes to the stream; returns how many were taken (0: the
    /// windows are full, [`StreamEvent::Writable`] follows).
    pub fn write(&mut self, id: StreamId, data: &[u8], now: Timestamp) -> Result<usize, Error> {
        let stream = self.live_mut(id)?;
        if stream.fin.is_some() {
            return Err(Error::StreamFinished);
        }
        let cap = usize::try_from(stream.send_capacity()).unwrap_or(usize::MAX);
        let n = if cap == 0 {
            0
        } else {
            stream.tx.write(&data[..data.len().min(cap)], now)?
        };
        stream.written += n as u64;
        if n < data.len() {
            stream.write_armed = true;
        }
        Ok(n)
    }

    /// Send what was written without waiting for more (interactive data): at once, or
    /// while the stream's earlier data fills the path, as soon as it can leave with a
    /// block of useful size ([`nyx_fec::Sender::push`]).
    pub fn flush(&mut self, id: StreamId, now: Timestamp) -> Result<(), Error> {
        self.live_mut(id)?.tx.push(now)?;
        Ok(())
    }

    /// No more writes: the peer reads to the end, then sees the stream finished.
    pub fn finish(&mut self, id: StreamId, now: Timestamp) -> Result<(), Error> {
        let stream = self.live_mut(id)?;
        if stream.fin.is_some() {
            return Ok(());
        }
        stream.tx.finish(now)?;
        stream.fin = Some(stream.written);
        let offset = stream.written;
        self.controls.push_back(Control::Fin { stream: id, offset });
        Ok(())
    }

    /// A new stream's window and how far it may grow. A stream starts with the window an
    /// earlier stream of the circuit grew to: at a 300 ms round trip growing from 2 MiB to
    /// 8 MiB takes most of a 10 MiB download, and every download on the circuit paid it
    /// again.
    fn windows(&self) -> (u64, u64) {
        (self.learned_window, self.config.max_stream_window)
    }

    /// A new stream's FEC plans for the loss an earlier stream of the circuit measured, not
    /// for the cautious prior: at a 300 ms round trip a stream's first round trip of blocks
    /// leaves before any report, and every download on a loss-free circuit sent the
    /// prior's repair with them. It also knows the circuit's round trip from the start, so
    /// that its probe for a response whose every packet was lost comes a round trip after
    /// it, not after the sender's fixed default (`FecConfig::probe_timeout`); the round
    /// trip is updated with every new sample (`settle`).
    fn seed(&self, stream: &mut Stream) {
        if let Some((loss, burst)) = self.learned_loss {
            stream.tx.seed_loss(loss, burst);
        }
        stream.tx.set_rtt(self.sent.rtt().repair_delay());
    }

    /// Copy readable bytes into `buf`.
    pub fn read(&mut self, id: StreamId, buf: &mut [u8]) -> Result<ReadOutcome, Error> {
        let stream = self.streams.get_mut(&id).ok_or(Error::NoSuchStream)?;
        if let Some(reason) = stream.reset {
            return Err(Error::StreamReset { reason });
        }
        if stream.recv_done() {
            if !stream.done_queued {
                stream.done_queued = true;
                self.controls.push_back(Control::Done { stream: id });
            }
            return Ok(ReadOutcome::Finished);
        }
        let n = stream.rx.read(buf);
        if n == 0 {
            stream.read_armed = true;
            return Ok(ReadOutcome::Blocked);
        }
        stream.consumed += n as u64;
        if let Some(max) = stream.window_update(self.now, self.sent.rtt().smoothed) {
            self.learned_window = self.learned_window.max(stream.window);
            self.controls
                .push_back(Control::MaxData { stream: id, max });
        }
        Ok(ReadOutcome::Data(n))
    }

    /// Abandon the stream in both directions, telling the peer why.
    pub fn reset(&mut self, id: StreamId, reason: ResetReason) -> Result<(), Error> {
        let stream = self.streams.get_mut(&id).ok_or(Error::NoSuchStream)?;
        if stream.reset.is_none() {
            tracing::debug!(role = ?self.role, stream = id.0, ?reason, "stream reset here");
            stream.reset = Some(reason);
            self.controls
                .push_back(Control::Reset { stream: id, reason });
            self.stats.streams_reset += 1;
        }
        self.collect(id);
        Ok(())
    }

    /// The application let go of the stream: it is forgotten once finished. A stream whose
    /// incoming data was not read to the end is reset ([`ResetReason::Cancelled`]); one
    /// whose outgoing side was not finished is finished first.
    pub fn release(&mut self, id: StreamId, now: Timestamp) {
        let Some(stream) = self.streams.get_mut(&id) else {
            return;
        };
        stream.released = true;
        if stream.reset.is_none() && !stream.recv_done() {
            let _ = self.reset(id, ResetReason::Cancelled);
            return;
        }
        if stream.reset.is_none() && !stream.done_queued {
            // Read to its end without a read that saw the end: the peer still needs DONE
            // to let go of its side.
            stream.done_queued = true;
            self.controls.push_back(Control::Done { stream: id });
        }
        let _ = self.finish(id, now);
        self.collect(id);
    }

    /// The circuit is gone: every stream is reset with [`ResetReason::CircuitLost`].
    pub fn abandon(&mut self) {
        let ids: Vec<StreamId> = self.streams.keys().copied().collect();
        for id in ids {
            if let Some(s) = self.streams.get_mut(&id)
                && s.reset.is_none()
            {
                s.reset = Some(ResetReason::CircuitLost);
                self.events.push_back(StreamEvent::Reset {
                    stream: id,
                    reason: ResetReason::CircuitLost,
                });
            }
            self.collect(id);
        }
        self.controls.clear();
        self.sent.abandon();
    }

    /// Whether control frames wait to be sent (a read may have opened the window).
    pub fn has_queued_controls(&self) -> bool {
        !self.controls.is_empty()
    }

    /// Streams held now.
    pub fn stream_count(&self) -> usize {
        self.streams.len()
    }

    /// Where each stream stands (for debug reports: counts and flags, never data).
    pub fn stream_snapshots(&self) -> impl Iterator<Item = StreamSnapshot> + '_ {
        self.streams.iter().map(|(id, s)| s.snapshot(*id))
    }

    #[cfg(test)]
    pub(crate) fn debug_streams(&self) -> String {
        self.streams
            .iter()
            .map(|(id, s)| {
                format!(
                    "{id}: fin {:?} done {}/{} peer_done {} idle {} recv_done {} released {} reset {:?} tx {:?} rx {:?}\n",
                    s.fin, s.done_queued, s.done_acked, s.peer_done, s.tx.is_idle(), s.recv_done(), s.released, s.reset, s.tx, s.rx.stats()
                )
            })
            .collect()
    }

    /// The next thing that happened.
    pub fn poll_event(&mut self) -> Option<StreamEvent> {
        self.events.pop_front()
    }

    /// Counters.
    pub fn stats(&self) -> MuxStats {
        let mut s = self.stats;
        let mut fec = self.done_fec;
        for stream in self.streams.values() {
            fec.add(&stream.tx.stats());
            s.blocks_in_flight += stream.tx.blocks_in_flight() as u32;
            if stream.fin.is_none() {
                s.send_credit += stream.peer_max.saturating_sub(stream.written);
            }
        }
        s.fec_packets = fec.packets;
        s.fec_source_symbols = fec.source_symbols;
        s.fec_requested_repair = fec.requested_repair;
        s.fec_encoders_inline = fec.encoders_inline;
        s.fec_encoders_prepared = fec.encoders_prepared;
        s.window = self.cc.window();
        s.in_flight = self.sent.in_flight();
        s.congestion_events = self.cc.congestion_events();
        let rtt = self.sent.rtt();
        s.srtt = rtt.smoothed;
        s.min_rtt = rtt.min;
        s
    }

    /// Whether an ACK must leave before more packets are handled. An ACK reports the
    /// packets up to 64 below its largest; packets that arrive after the last ACK beyond
    /// that width would never be reported, and the peer would declare them lost (on
    /// loopback, batches of 128 packets made it declare 18% of a loss-free transfer lost).
    /// A driver that handles packets in batches calls [`poll_transmit`](Self::poll_transmit)
    /// as soon as this is true.
    pub fn ack_urgent(&self) -> bool {
        self.acks.unreported() >= wire::ACK_BITMAP_BITS / 2
    }

    /// Take one packet from the peer (a circuit DATA payload). A packet that does not parse
    /// is dropped whole and counted; nothing in it is applied.
    pub fn handle_packet(&mut self, packet: &[u8], now: Timestamp) -> Result<(), Error> {
        self.now = self.now.max(now);
        let (pn, frames) = wire::parse_packet(packet).map_err(|e| self.malformed(e))?;
        let mut eliciting = false;
        for frame in frames.clone() {
            match frame {
                Err(e) => return Err(self.malformed(e)),
                Ok(Frame::Ack(_)) => {}
                Ok(_) => eliciting = true,
            }
        }
        self.stats.packets_received += 1;
        self.last_heard = self.last_heard.max(now);
        if !self.acks.on_packet(pn, eliciting, now) {
            self.stats.duplicates += 1;
        }
        for frame in frames.flatten() {
            self.apply(frame, now);
        }
        self.after_input();
        Ok(())
    }

    fn malformed(&mut self, e: wire::WireError) -> Error {
        self.stats.malformed += 1;
        Error::StreamWire(e)
    }

    fn apply(&mut self, frame: Frame<'_>, now: Timestamp) {
        match frame {
            Frame::Ack(ack) => {
                if let Some(settled) = self.sent.on_ack(&ack, now) {
                    self.pto_count = 0;
                    self.settle(settled, now);
                }
            }
            Frame::Ping => {}
            Frame::Symbol { stream, packet } => {
                let slack = self.held_slack();
                if let Some(s) = self.streams.get_mut(&stream)
                    && s.reset.is_none()
                    && (s.rx.handle_packet(packet, now).is_err() || s.overran(slack))
                {
                    // A symbol that contradicts its block or lies outside the window, or a
                    // peer that makes this side hold more than its flow-control window
                    // allows: the peer's FEC is broken or hostile; the stream cannot be
                    // trusted.
                    self.protocol_reset(stream);
                }
            }
            Frame::Feedback { stream, feedback } => {
                let Some(s) = self.streams.get_mut(&stream) else {
                    return;
                };
                if s.reset.is_none() && s.tx.handle_feedback(feedback, now).is_err() {
                    self.protocol_reset(stream);
                    return;
                }
                if let Some(measured) = s.tx.measured_loss() {
                    self.learned_loss = Some(measured);
                }
            }
            Frame::Control(c) => self.apply_control(c, now),
        }
    }

    fn apply_control(&mut self, c: Control, now: Timestamp) {
        let id = c.stream();
        match c {
            Control::Open { stream, target } => {
                // Ids only grow: an OPEN at or below the highest seen is a resend.
                if self.role != Role::Exit || stream.0 < self.next_id {
                    return;
                }
                self.next_id = stream.0.saturating_add(1);
                if self.streams.len() >= self.config.max_streams {
                    self.controls.push_back(Control::Reset {
                        stream,
                        reason: ResetReason::ResourceLimit,
                    });
                    self.stats.streams_reset += 1;
                    return;
                }
                let Ok(mut s) = Stream::new(&self.config.fec, self.windows(), now) else {
                    return;
                };
                self.seed(&mut s);
                self.streams.insert(stream, s);
                self.events
                    .push_back(StreamEvent::Incoming { stream, target });
            }
            Control::Opened { .. } => {
                if self.role == Role::Client
                    && let Some(s) = self.streams.get_mut(&id)
                    && !s.opened
                {
                    s.opened = true;
                    self.events.push_back(StreamEvent::Opened(id));
                }
            }
            Control::Fin { offset, .. } => {
                if let Some(s) = self.streams.get_mut(&id) {
                    match s.peer_fin {
                        None => s.peer_fin = Some(offset),
                        Some(f) if f == offset => {}
                        Some(_) => return self.protocol_reset(id),
                    }
                    if s.consumed > offset {
                        self.protocol_reset(id);
                    }
                }
            }
            Control::Reset { reason, .. } => {
                if let Some(s) = self.streams.get_mut(&id)
                    && s.reset.is_none()
                {
                    s.reset = Some(reason);
                    self.stats.streams_reset += 1;
                    tracing::debug!(role = ?self.role, stream = id.0, ?reason, "stream reset by the peer");
                    self.events
                        .push_back(StreamEvent::Reset { stream: id, reason });
                    self.collect(id);
                }
            }
            Control::MaxData { max, .. } => {
                if let Some(s) = self.streams.get_mut(&id) {
                    s.peer_max = s.peer_max.max(max);
                }
            }
            Control::Done { .. } => {
                // Only after our FIN: every byte we wrote was read.
                if let Some(s) = self.streams.get_mut(&id)
                    && s.fin.is_some()
                {
                    s.peer_done = true;
                    self.collect(id);
                }
            }
        }
    }

    /// The peer broke the stream protocol: reset it locally and tell the peer.
    fn protocol_reset(&mut self, id: StreamId) {
        if let Some(s) = self.streams.get_mut(&id)
            && s.reset.is_none()
        {
            s.reset = Some(ResetReason::Protocol);
            self.stats.streams_reset += 1;
            tracing::debug!(role = ?self.role, stream = id.0, "stream broke the protocol; reset");
            self.controls.push_back(Control::Reset {
                stream: id,
                reason: ResetReason::Protocol,
            });
            self.events.push_back(StreamEvent::Reset {
                stream: id,
                reason: ResetReason::Protocol,
            });
        }
    }

    fn settle(&mut self, settled: Settled, now: Timestamp) {
        self.stats.lost += u64::from(settled.lost);
        self.cc
            .on_settled(settled.acked, settled.lost, settled.rtt, now);
        if settled.rtt.is_some() {
            // Every stream's FEC judges reports, and times its probe, by the round trip
            // as measured now.
            let rtt = self.sent.rtt().repair_delay();
            for s in self.streams.values_mut() {
                s.tx.set_rtt(rtt);
            }
        }
        for c in settled.acked_controls {
            if let Control::Done { stream } = c
                && let Some(s) = self.streams.get_mut(&stream)
            {
                s.done_acked = true;
                self.collect(stream);
            }
        }
        for c in settled.lost_controls {
            if self.still_wanted(&c) {
                self.stats.controls_resent += 1;
                self.controls.push_back(c);
            }
        }
    }

    /// Whether a lost control frame is still worth sending.
    fn still_wanted(&self, c: &Control) -> bool {
        let s = self.streams.get(&c.stream());
        match c {
            Control::Reset { .. } => true,
            Control::Open { .. }
            | Control::Opened { .. }
            | Control::Fin { .. }
            | Control::Done { .. } => s.is_some_and(|s| s.reset.is_none()),
            Control::MaxData { max, .. } => {
                s.is_some_and(|s| s.reset.is_none() && s.advertised == *max)
            }
        }
    }

    /// What a stream's receiver may hold beyond twice its peer's remaining window: 32 extra
    /// symbols and one padded symbol per block in flight.
    fn held_slack(&self) -> u64 {
        u64::from(self.config.fec.max_blocks_in_flight) * 33 * u64::from(SYMBOL_SIZE)
    }

    /// After input: raise readiness events, check flow control, forget finished streams.
    fn after_input(&mut self) {
        let held_slack = self.held_slack();
        // A reused list: no allocation per packet.
        let mut ids = std::mem::take(&mut self.scratch);
        ids.clear();
        ids.extend(
            self.streams
                .iter()
                .filter(|(_, s)| {
                    s.read_armed || s.write_armed || s.released || s.peer_fin.is_some()
                })
                .map(|(id, _)| *id),
        );
        for &id in &ids {
            let Some(s) = self.streams.get_mut(&id) else {
                continue;
            };
            if s.reset.is_none() && s.overran(held_slack) {
                self.protocol_reset(id);
                continue;
            }
            if s.read_armed && (s.rx.readable() > 0 || s.recv_done() || s.reset.is_some()) {
                s.read_armed = false;
                self.events.push_back(StreamEvent::Readable(id));
            }
            if s.write_armed && (s.send_capacity() > 0 || s.reset.is_some()) {
                s.write_armed = false;
                self.events.push_back(StreamEvent::Writable(id));
            }
            self.collect(id);
        }
        self.scratch = ids;
    }

    /// Forget the stream if it is finished (its FEC counters are kept).
    fn collect(&mut self, id: StreamId) {
        if self.streams.get(&id).is_some_and(Stream::finished)
            && let Some(s) = self.streams.remove(&id)
        {
            tracing::debug!(role = ?self.role, stream = id.0, reset = ?s.reset, "stream forgotten");
            self.done_fec.add(&s.tx.stats());
        }
    }

    fn advertise_window(&mut self, id: StreamId) {
        if let Some(s) = self.streams.get_mut(&id)
            && s.window > s.advertised
        {
            s.advertised = s.window;
            self.controls.push_back(Control::MaxData {
                stream: id,
                max: s.window,
            });
        }
    }

    /// Write the next packet into `out` (at least [`max_packet`](Self::max_packet) bytes
    /// are used if given); `None` when nothing is due.
    pub fn poll_transmit(&mut self, now: Timestamp, out: &mut [u8]) -> Option<usize> {
        self.now = self.now.max(now);
        let pn = self.sent.next_pn()?;
        let end = out.len().min(self.max_packet);
        let out = &mut out[..end];
        if out.len() < PACKET_HEADER_LEN + wire::ACK_LEN {
            return None;
        }
        let mut at = wire::write_header(out, pn);
        let mut in_flight = false;
        let mut controls = Vec::new();
        // Control frames first (they unblock streams), then feedback, then one symbol.
        while let Some(c) = self.controls.front() {
            if at + c.len() + wire::ACK_LEN > out.len() {
                break;
            }
            at = wire::write_control(out, at, c);
            if let Some(c) = self.controls.pop_front() {
                controls.push(c);
            }
            in_flight = true;
        }
        at = self.write_feedback(now, out, at, &mut in_flight);
        let open = self.sent.in_flight() < self.cc.window();
        let (cwnd, srtt, ss) = self.pacing();
        let paced = open && !self.pacer.ready(now, cwnd, srtt, ss);
        if (open && !paced) || (!in_flight && self.ping) {
            let before = at;
            at = self.write_symbol(now, out, at, &mut in_flight);
            if at != before {
                self.pacer.on_sent();
            }
        }
        self.paced = paced;
        if self.ping && !in_flight {
            at = wire::write_ping(out, at);
            in_flight = true;
        }
        self.ping = false;
        // Every packet that is itself acknowledged repeats the latest ACK: no lost ACK is
        // ever resent, and a peer whose window is full waits for exactly that ACK.
        let ack_now = (in_flight && self.acks.has_received())
            || (self.acks.has_pending()
                && self.acks.due(now, self.config.ack_every, self.ack_delay()));
        if ack_now && at + wire::ACK_LEN <= out.len() {
            if let Some(ack) = self.acks.take(now) {
                at = wire::write_ack(out, at, &ack);
            }
        } else if !in_flight {
            return None;
        }
        if !in_flight {
            self.stats.ack_only_sent += 1;
        }
        self.sent.on_sent(now, in_flight, controls);
        self.stats.packets_sent += 1;
        Some(at)
    }

    /// Add every stream's due FEC feedback that fits.
    fn write_feedback(
        &mut self,
        now: Timestamp,
        out: &mut [u8],
        mut at: usize,
        in_flight: &mut bool,
    ) -> usize {
        for (id, s) in self.streams.iter_mut() {
            if at + CARRIER_HEADER_LEN + MAX_FEEDBACK_LEN + wire::ACK_LEN > out.len() {
                break;
            }
            if s.reset.is_some() || s.done_acked || s.rx.poll_timeout().is_none_or(|t| now < t) {
                continue;
            }
            let body = at + CARRIER_HEADER_LEN;
            let limit = body + MAX_FEEDBACK_LEN;
            if let Ok(Some(n)) = s.rx.poll_feedback(now, &mut out[body..limit]) {
                wire::write_carrier(out, at, true, *id, n);
                at = body + n;
                *in_flight = true;
            }
        }
        at
    }

    /// Add one FEC symbol, from the next stream in turn that has one.
    fn write_symbol(
        &mut self,
        now: Timestamp,
        out: &mut [u8],
        at: usize,
        in_flight: &mut bool,
    ) -> usize {
        let need = CARRIER_HEADER_LEN + SYMBOL_HEADER_LEN + usize::from(SYMBOL_SIZE);
        if at + need + wire::ACK_LEN > out.len() {
            return at;
        }
        // Round robin from the stream after the last one served, in a reused list.
        let mut ids = std::mem::take(&mut self.scratch);
        ids.clear();
        ids.extend(
            self.streams
                .range(StreamId(self.rr)..)
                .chain(self.streams.range(..StreamId(self.rr)))
                .map(|(id, _)| *id),
        );
        let mut written = at;
        for &id in &ids {
            let Some(s) = self.streams.get_mut(&id) else {
                continue;
            };
            if s.reset.is_some() || s.peer_done {
                continue;
            }
            if s.maybe_close_block(now).is_err() {
                continue;
            }
            let body = at + CARRIER_HEADER_LEN;
            match s
                .tx
                .poll_transmit(now, &mut out[body..body + need - CARRIER_HEADER_LEN])
            {
                Ok(Some(n)) => {
                    wire::write_carrier(out, at, false, id, n);
                    self.rr = id.0.wrapping_add(1);
                    *in_flight = true;
                    written = body + n;
                    break;
                }
                Ok(None) => {}
                Err(_) => self.protocol_reset(id),
            }
        }
        self.scratch = ids;
        written
    }

    /// The circuit's round trip as its build measured it
    /// ([`Overlay::circuit_rtt`](crate::circuit::Overlay::circuit_rtt)): the estimate until
    /// the first sample, instead of a 50 ms guess. A lost OPEN on a fresh circuit is then
    /// resent after a probe timeout of that round trip, not of the guess (about 160 ms:
    /// over QUIC at 5% loss per link, compare.sh measured such an open's first byte at
    /// 156 ms).
    pub fn seed_rtt(&mut self, rtt: Duration) {
        self.sent.seed_rtt(rtt);
    }

    /// When [`handle_timeout`](Self::handle_timeout) is next needed.
    pub fn poll_timeout(&self) -> Option<Timestamp> {
        let mut t: Option<Timestamp> = None;
        let mut consider = |x: Option<Timestamp>| {
            if let Some(x) = x {
                t = Some(t.map_or(x, |t| t.min(x)));
            }
        };
        consider(self.acks.deadline(self.ack_delay()));
        if self.paced {
            let (cwnd, srtt, ss) = self.pacing();
            consider(Some(self.pacer.next(cwnd, srtt, ss)));
        }
        consider(self.sent.loss_deadline());
        consider(self.pto_deadline());
        if self.in_use() {
            consider(Some(self.next_liveness_probe()));
            // Once passed, the death deadline is the owner's to act on, not a timer.
            let dead_at = self.last_heard.saturating_add(DEAD_AFTER);
            if dead_at > self.now {
                consider(Some(dead_at));
            }
        }
        for s in self.streams.values() {
            if s.reset.is_none() && !s.peer_done {
                consider(s.tx.poll_timeout());
            }
            if s.reset.is_none() && !s.done_acked {
                consider(s.rx.poll_timeout());
            }
        }
        t
    }

    /// What the pacer paces by: the window, the smoothed RTT, slow start.
    fn pacing(&self) -> (u32, Duration, bool) {
        let rtt = self.sent.rtt().smoothed;
        (self.cc.window(), rtt, self.cc.in_slow_start())
    }

    /// Whether a stream is open (not reset): then the peer must show it is alive.
    fn in_use(&self) -> bool {
        self.streams.values().any(|s| s.reset.is_none())
    }

    /// When to ask a silent peer for an ACK next.
    fn next_liveness_probe(&self) -> Timestamp {
        self.last_heard
            .max(self.last_probe)
            .saturating_add(LIVENESS_PROBE)
    }

    /// Whether the peer has been silent for [`DEAD_AFTER`] while streams are open, despite
    /// the pings sent every [`LIVENESS_PROBE`]: the circuit is dead (a DESTROY that never
    /// arrived, a relay gone) and its owner should end it, which fails its streams instead
    /// of leaving their readers waiting for good.
    pub fn is_dead(&self, now: Timestamp) -> bool {
        self.in_use() && now >= self.last_heard.saturating_add(DEAD_AFTER)
    }

    /// How long this end holds an ACK (`Rtt::ack_delay`).
    fn ack_delay(&self) -> Duration {
        self.sent.rtt().ack_delay(self.config.max_ack_delay)
    }

    fn pto_deadline(&self) -> Option<Timestamp> {
        if self.sent.in_flight() == 0 {
            return None;
        }
        let rtt = self.sent.rtt();
        let pto = rtt.smoothed
            + (rtt.var * 4).max(Duration::from_millis(1))
            + rtt.ack_delay(self.config.max_ack_delay);
        let backoff = 1u32 << self.pto_count.min(6);
        self.sent
            .last_in_flight_sent()
            .map(|t| t.saturating_add(pto * backoff))
    }

    /// Run the timers due at `now` (loss, probe, FEC flush and probes).
    pub fn handle_timeout(&mut self, now: Timestamp) {
        self.now = self.now.max(now);
        if self.sent.loss_deadline().is_some_and(|t| now >= t) {
            let settled = self.sent.on_loss_timer(now);
            self.settle(settled, now);
        }
        if self.in_use() && now >= self.next_liveness_probe() {
            // Silence while streams are open: ask the peer for an ACK. An idle stream is
            // normal (a quiet SSH session); a silent peer is not.
            self.ping = true;
            self.last_probe = now;
        }
        if self.pto_deadline().is_some_and(|t| now >= t) {
            self.stats.probe_timeouts += 1;
            self.pto_count += 1;
            tracing::debug!(
                role = ?self.role,
                in_flight = self.sent.in_flight(),
                window = self.cc.window(),
                unacked = self
                    .sent
                    .next_pn()
                    .unwrap_or(u32::MAX)
                    .wrapping_sub(self.sent.largest_acked().map_or(0, |l| l.wrapping_add(1))),
                heard_ms_ago = now.saturating_duration_since(self.last_heard).as_secs_f64() * 1e3,
                srtt_ms = self.sent.rtt().smoothed.as_secs_f64() * 1e3,
                rttvar_ms = self.sent.rtt().var.as_secs_f64() * 1e3,
                pto_count = self.pto_count,
                "probe timeout"
            );
            self.ping = true;
            if self.pto_count >= 3 {
                self.cc.on_timeout();
            }
        }
        let mut broken = Vec::new();
        for (id, s) in self.streams.iter_mut() {
            if s.reset.is_some() {
                continue;
            }
            s.rx.handle_timeout(now);
            if !s.peer_done && s.tx.handle_timeout(now).is_err() {
                broken.push(*id);
            }
        }
        for id in broken {
            self.protocol_reset(id);
        }
        self.after_input();
    }

    fn live_mut(&mut self, id: StreamId) -> Result<&mut Stream, Error> {
        let stream = self.streams.get_mut(&id).ok_or(Error::NoSuchStream)?;
        if let Some(reason) = stream.reset {
            return Err(Error::StreamReset { reason });
        }
        Ok(stream)
    }
}

/// FEC counters summed over streams.
#[derive(Debug, Clone, Copy, Default)]
struct FecTotals {
    packets: u64,
    source_symbols: u64,
    requested_repair: u64,
    encoders_inline: u64,
    encoders_prepared: u64,
}

impl FecTotals {
    fn add(&mut self, t: &nyx_fec::SenderStats) {
        self.packets += t.packets;
        self.source_symbols += t.source_symbols;
        self.requested_repair += t.requested_repair;
        self.encoders_inline += t.encoders_inline;
        self.encoders_prepared += t.encoders_prepared;
    }
}

impl std::fmt::Debug for StreamMux {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StreamMux")
            .field("role", &self.role)
            .field("streams", &self.streams.len())
            .field("window", &self.cc.window())
            .finish_non_exhaustive()
    }
}
