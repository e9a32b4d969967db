//! What the peer sends: a packet's frames applied to the streams, control messages, ACKs
//! that settle sent packets, and what follows from them (windows, resets, events).

use nyx_core::Timestamp;

use super::StreamMux;
use crate::Error;
use crate::stream::recovery::Settled;
use crate::stream::state::Stream;
use crate::stream::wire::{self, Control, Frame};
use crate::stream::{ResetReason, Role, StreamEvent, StreamId};

impl StreamMux {
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
                let Ok(mut s) = Stream::new(&self.config.fec, &self.rx_fec, self.windows(), now)
                else {
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
    pub(super) fn protocol_reset(&mut self, id: StreamId) {
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

    pub(super) fn settle(&mut self, settled: Settled, now: Timestamp) {
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

    /// Whether a lost control frame (or the second copy of an OPEN or OPENED) is still
    /// worth sending: an OPEN only until its OPENED arrived.
    pub(super) fn still_wanted(&self, c: &Control) -> bool {
        let s = self.streams.get(&c.stream());
        match c {
            Control::Reset { .. } => true,
            Control::Open { .. } => s.is_some_and(|s| s.reset.is_none() && !s.opened),
            Control::Opened { .. } | Control::Fin { .. } | Control::Done { .. } => {
                s.is_some_and(|s| s.reset.is_none())
            }
            Control::MaxData { max, .. } => {
                s.is_some_and(|s| s.reset.is_none() && s.advertised == *max)
            }
        }
    }

    /// What a stream's receiver may hold beyond twice its peer's remaining window: 32 extra
    /// symbols and one padded symbol per block in flight.
    fn held_slack(&self) -> u64 {
        u64::from(self.rx_fec.max_blocks_in_flight) * 33 * u64::from(self.rx_fec.symbol_size)
    }

    /// After input: raise readiness events, check flow control, forget finished streams.
    pub(super) fn after_input(&mut self) {
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
    pub(super) fn collect(&mut self, id: StreamId) {
        if self.streams.get(&id).is_some_and(Stream::finished)
            && let Some(s) = self.streams.remove(&id)
        {
            tracing::debug!(role = ?self.role, stream = id.0, reset = ?s.reset, "stream forgotten");
            self.done_fec.add(&s.tx.stats());
        }
    }

    pub(super) fn advertise_window(&mut self, id: StreamId) {
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
}
