//! The mux's clock: when it next needs [`StreamMux::handle_timeout`] (ACK delay, probe
//! timeout, pacing, a stream's FEC timers, the circuit's liveness), and what each deadline does.

use std::time::Duration;

use nyx_core::Timestamp;

use super::{DEAD_AFTER, LIVENESS_PROBE, StreamMux};

impl StreamMux {
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
        consider(self.echoes.deadline());
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
    pub(super) fn pacing(&self) -> (u32, Duration, bool) {
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
    pub(super) fn ack_delay(&self) -> Duration {
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
}
