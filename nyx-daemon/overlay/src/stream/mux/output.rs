//! What the mux sends: the next packet, with its ACK, control messages, FEC feedback and a
//! stream's symbol, as the circuit's window and pacer allow.

use nyx_core::Timestamp;
use nyx_fec::packet::{MAX_FEEDBACK_LEN, SYMBOL_HEADER_LEN};

use super::StreamMux;
use crate::stream::StreamId;
use crate::stream::wire::{self, CARRIER_HEADER_LEN, PACKET_HEADER_LEN};

impl StreamMux {
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
        at = self.write_echoes(now, out, at, &mut in_flight);
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
            // The wide form where it fits (an ACK-only packet always has room): it reports
            // 512 packets back, so even several lost ACKs in a row leave nothing the sender
            // must take for lost. A full data packet carries the short one.
            if let Some(ack) = self.acks.take(now) {
                at = if at + wire::ACK_WIDE_LEN <= out.len() {
                    wire::write_ack_wide(out, at, &ack)
                } else {
                    wire::write_ack(out, at, &ack)
                };
            }
        } else if !in_flight {
            return None;
        }
        if !in_flight {
            self.stats.ack_only_sent += 1;
        }
        self.schedule_echoes(now, &controls);
        self.sent.on_sent(now, in_flight, controls);
        self.stats.packets_sent += 1;
        Some(at)
    }

    /// Whether the next [`poll_transmit`](Self::poll_transmit) may first build a stream's
    /// RaptorQ encoder ([`Sender::next_builds_encoder`]): tens of microseconds for a small
    /// block, milliseconds for a large one. A driver that already holds packets from this
    /// turn sends them before it asks for more, so that a request's source symbol does not
    /// wait on the hop for its own tail repair's encoder.
    ///
    /// [`Sender::next_builds_encoder`]: nyx_fec::Sender::next_builds_encoder
    pub fn next_builds_encoder(&self) -> bool {
        self.streams
            .values()
            .any(|s| s.reset.is_none() && !s.peer_done && s.tx.next_builds_encoder())
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
        let need =
            CARRIER_HEADER_LEN + SYMBOL_HEADER_LEN + usize::from(self.config.fec.symbol_size);
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
}
