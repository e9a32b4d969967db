//! Congestion control of one circuit: a window of cells in flight, set by the queueing
//! delay the circuit builds (in the spirit of TCP Vegas and Tor's proposal 324), with loss
//! counted as congestion only when the delay says a queue overflowed. Random loss is
//! FEC's job, not a reason to slow down (docs/protocol.md, "Congestion control").

use std::time::Duration;

use nyx_core::Timestamp;

/// How a circuit's window moves, in cells.
#[derive(Debug, Clone, PartialEq)]
pub struct CcConfig {
    /// Window at the start (default 128, about Tor's 124 of proposal 324). A circuit's
    /// first stream spends several round trips in slow start; at 32 the first 10 MiB under
    /// Shadow (20 / 50 ms links) took 6.3 / 3.5 MB/s, at 128 7.4 / 4.5, with later streams
    /// unchanged (docs/benchmarks.md, session 32).
    pub initial_window: u32,
    /// Never below this (default 8).
    pub min_window: u32,
    /// Never above this (default 8192 cells, 8 MiB: the bandwidth-delay product of
    /// 100 Mbit/s over a 670 ms round trip). It is not what keeps a relay's queue short: the
    /// delay thresholds below do that, and a relay drops what exceeds its per-circuit queue.
    /// At 1024 a circuit could not carry more than 3.4 MB/s at a 300 ms round trip.
    pub max_window: u32,
    /// Below this many cells queued on the path, grow (default 128).
    ///
    /// The four thresholds count what a circuit holds beyond the bare path, and every hop
    /// holds a batch (a GSO send, a wake-up's worth of cells) even when nothing queues, so
    /// they must exceed the batches of a path's hops. Batches are counted in packets, so
    /// alpha and delta are Tor's exit-circuit defaults counted in cells (proposal 324: 2
    /// and 6 output buffers of 62 cells, 124 and 372). Half of that (Tor's bytes in our
    /// 1 KiB cells) still read a loopback network's batches as a queue: the window held
    /// the exit at about 35 MB/s while the daemons used 1.3 of the machine's two cores,
    /// and the values here gave 36-43 MB/s clean and about a third more at 5% loss
    /// per link (docs/benchmarks.md). Before that, 12 / 24 / 16 / 64 held the window near
    /// 30 cells.
    pub alpha: u32,
    /// Above this many, shrink (default 192). Below Tor's 248, so that the standing queue
    /// (alpha..beta) stays below a relay's 256-cell circuit queue
    /// (`OverlayConfig::circuit_queue_cells`).
    pub beta: u32,
    /// Slow start ends once this many are queued (default 96). Below alpha: slow start's
    /// last doubling overshoots for a round trip before the queue shows, and that overshoot
    /// must still fit a 256-cell queue (with gamma at 192 it overflowed the stream
    /// simulation's 256-cell bottleneck on a clean path).
    pub gamma: u32,
    /// Above this many, cut the window by 30% at once (default 384).
    pub delta: u32,
    /// How long a minimum RTT stays the base (then the base is re-learned) (default 10 s).
    pub base_rtt_lifetime: Duration,
}

impl Default for CcConfig {
    fn default() -> Self {
        CcConfig {
            initial_window: 128,
            min_window: 8,
            max_window: 8192,
            alpha: 128,
            beta: 192,
            gamma: 96,
            delta: 384,
            base_rtt_lifetime: Duration::from_secs(10),
        }
    }
}

impl CcConfig {
    /// The first field that cannot work, with the reason.
    pub fn problem(&self) -> Option<(&'static str, &'static str)> {
        if self.min_window == 0 {
            return Some(("min_window", "must be at least 1"));
        }
        if self.max_window < self.min_window {
            return Some(("max_window", "must be at least min_window"));
        }
        if !(self.min_window..=self.max_window).contains(&self.initial_window) {
            return Some(("initial_window", "must be within min_window..=max_window"));
        }
        if !(self.alpha < self.beta && self.beta < self.delta) {
            return Some(("alpha", "must satisfy alpha < beta < delta"));
        }
        if self.base_rtt_lifetime.is_zero() {
            return Some(("base_rtt_lifetime", "must be positive"));
        }
        None
    }
}

/// The window controller. Sans-IO: fed acknowledgements, losses and RTT samples.
#[derive(Debug, Clone)]
pub struct Vegas {
    config: CcConfig,
    cwnd: u32,
    slow_start: bool,
    /// Packets to acknowledge before the round ends, and the round's smallest RTT.
    round_left: u32,
    round_rtt: Option<Duration>,
    round_samples: u32,
    round_lost: u32,
    /// Base RTT: the minimum of the current and the previous epoch.
    base_now: Option<Duration>,
    base_prev: Option<Duration>,
    epoch_start: Timestamp,
    /// Cells estimated queued on the path in the last round.
    queued: u32,
    /// Smoothed fraction of cells lost per round: the loss the path always has (FEC's
    /// business), against which a spike is judged.
    loss_avg: f64,
    round_acked: u32,
    congestion_events: u64,
}

impl Vegas {
    /// A controller starting at `now`.
    pub fn new(config: CcConfig, now: Timestamp) -> Self {
        Vegas {
            cwnd: config.initial_window,
            round_left: config.initial_window,
            config,
            slow_start: true,
            round_rtt: None,
            round_samples: 0,
            round_lost: 0,
            base_now: None,
            base_prev: None,
            epoch_start: now,
            queued: 0,
            loss_avg: 0.0,
            round_acked: 0,
            congestion_events: 0,
        }
    }

    /// The window, in cells.
    pub fn window(&self) -> u32 {
        self.cwnd
    }

    /// Cells the last round showed queued on the path.
    pub fn queued(&self) -> u32 {
        self.queued
    }

    /// Whether the window is still doubling.
    pub fn in_slow_start(&self) -> bool {
        self.slow_start
    }

    /// Rounds that ended in a cut (heavy queueing, or loss with queueing).
    pub fn congestion_events(&self) -> u64 {
        self.congestion_events
    }

    /// The base RTT currently used.
    pub fn base_rtt(&self) -> Option<Duration> {
        match (self.base_now, self.base_prev) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// `acked` in-flight packets were acknowledged and `lost` declared lost; `rtt` is the
    /// sample that came with them, if any.
    pub fn on_settled(&mut self, acked: u32, lost: u32, rtt: Option<Duration>, now: Timestamp) {
        if let Some(sample) = rtt {
            self.sample(sample, now);
        }
        self.round_lost += lost;
        self.round_acked += acked;
        self.round_left = self.round_left.saturating_sub(acked + lost);
        if self.round_left == 0 {
            self.end_round();
        }
    }

    /// Nothing was acknowledged for a probe timeout: the path may have changed or be
    /// overloaded; restart cautiously.
    pub fn on_timeout(&mut self) {
        self.cwnd = (self.cwnd / 2).max(self.config.min_window);
        self.slow_start = false;
        self.new_round();
        self.round_lost = 0;
        self.congestion_events += 1;
    }

    fn new_round(&mut self) {
        self.round_left = self.cwnd;
        self.round_rtt = None;
        self.round_samples = 0;
    }

    /// Cells in the network beyond what the bare path holds, had the whole window seen
    /// `rtt`: cwnd · (rtt − base) / rtt.
    fn queued_at(&self, rtt: Duration, base: Duration) -> u32 {
        let rtt_ns = rtt.as_nanos().max(1);
        let extra = rtt.saturating_sub(base).as_nanos();
        (u128::from(self.cwnd) * extra / rtt_ns).min(u128::from(u32::MAX)) as u32
    }

    /// Slow start ends within a round as soon as the round's samples show the queue, not
    /// only at its end: at a long round trip a doubled window keeps sending faster than the
    /// bottleneck drains until the round's end would tell, a round trip later. (What it
    /// cannot stop is the overshoot already sent: the stream simulation at 300 ms with a
    /// 256-cell bottleneck buffer still lost 2% of a 4 MiB transfer.) The round's smallest
    /// RTT over at least this many samples is used, so that one late acknowledgement does
    /// not end it.
    fn slow_start_check(&mut self) {
        const MIN_SAMPLES: u32 = 8;
        if !self.slow_start || self.round_samples < MIN_SAMPLES {
            return;
        }
        let (Some(rtt), Some(base)) = (self.round_rtt, self.base_rtt()) else {
            return;
        };
        let queued = self.queued_at(rtt, base);
        if queued > self.config.gamma {
            self.queued = queued;
            self.slow_start = false;
            self.cwnd = self
                .cwnd
                .saturating_sub(queued - self.config.gamma)
                .max(self.config.min_window);
            self.new_round();
        }
    }

    fn sample(&mut self, rtt: Duration, now: Timestamp) {
        if now
            >= self
                .epoch_start
                .saturating_add(self.config.base_rtt_lifetime)
        {
            self.base_prev = self.base_now.take();
            self.epoch_start = now;
        }
        self.base_now = Some(self.base_now.map_or(rtt, |b| b.min(rtt)));
        self.round_rtt = Some(self.round_rtt.map_or(rtt, |r| r.min(rtt)));
        self.round_samples += 1;
        self.slow_start_check();
    }

    fn end_round(&mut self) {
        let c = &self.config;
        let lost = std::mem::take(&mut self.round_lost);
        let acked = std::mem::take(&mut self.round_acked);
        let rate = f64::from(lost) / f64::from((lost + acked).max(1));
        // Loss is congestion only as a spike above the path's usual loss while a queue
        // stands: a queue that overflows drops many cells at once; random loss does not move.
        let spike = lost > 0 && rate > 2.0 * self.loss_avg + 0.01;
        self.loss_avg += (rate - self.loss_avg) / 8.0;
        let (Some(rtt), Some(base)) = (self.round_rtt, self.base_rtt()) else {
            // No sample this round (every ACK lost?): hold the window.
            self.new_round();
            return;
        };
        let queued = self.queued_at(rtt, base);
        self.queued = queued;
        let step = (self.cwnd / 16).max(2);
        if spike && queued > c.beta {
            // A queue that overflowed (loss while queueing).
            self.cwnd = (self.cwnd * 7 / 10).max(c.min_window);
            self.slow_start = false;
            self.congestion_events += 1;
        } else if queued > c.delta {
            // Far too much queueing: give back the cells queued beyond beta, at most 30%.
            // A 30% cut regardless undershot the path: under Shadow at a 300 ms round trip
            // a window of 4 188 cells over a path of 3 168 fell to 2 931, and growing back
            // by a sixteenth per round took longer than a 10 MiB download.
            let excess = queued - c.beta;
            self.cwnd = self
                .cwnd
                .saturating_sub(excess)
                .max(self.cwnd * 7 / 10)
                .max(c.min_window);
            self.slow_start = false;
            self.congestion_events += 1;
        } else if self.slow_start {
            if queued > c.gamma {
                self.slow_start = false;
                self.cwnd = self.cwnd.saturating_sub(queued - c.gamma).max(c.min_window);
            } else {
                self.cwnd = (self.cwnd * 2).min(c.max_window);
            }
        } else if queued < c.alpha {
            self.cwnd = (self.cwnd + step).min(c.max_window);
        } else if queued > c.beta {
            self.cwnd = self.cwnd.saturating_sub(step).max(c.min_window);
        }
        self.new_round();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A path with a bare RTT and a bottleneck draining `rate` cells per ms: the RTT grows
    /// with the standing queue (window beyond the bandwidth-delay product).
    fn run(v: &mut Vegas, base_ms: f64, rate: f64, loss_each_round: u32, rounds: u32) {
        let mut now = Timestamp::ZERO;
        for _ in 0..rounds {
            let bdp = base_ms * rate;
            let queue = (f64::from(v.window()) - bdp).max(0.0);
            let rtt = Duration::from_secs_f64((base_ms + queue / rate) / 1000.0);
            now = now.saturating_add(rtt);
            let w = v.window();
            v.on_settled(
                w - loss_each_round.min(w),
                loss_each_round.min(w),
                Some(rtt),
                now,
            );
        }
    }

    /// Cells per ms of the 1 ms test path: its bandwidth-delay product, 400 cells, is
    /// larger than the standing queue the thresholds allow, as a real path's is.
    const RATE: f64 = 400.0;

    /// The round-trip time at which a window of `w` cells over the 1 ms path of [`run`]
    /// shows `queued` cells standing in queues.
    fn rtt_for_queue(w: u32, queued: u32) -> Duration {
        assert!(w > queued, "a window of {w} cannot queue {queued}");
        Duration::from_secs_f64(1e-3 * f64::from(w) / f64::from(w - queued))
    }

    /// A queue above beta (loss with it is a spike) but below delta (no cut without loss).
    fn between_beta_and_delta() -> u32 {
        let c = CcConfig::default();
        (c.beta + c.delta) / 2
    }

    #[test]
    fn the_window_settles_near_the_path_capacity() {
        let mut v = Vegas::new(CcConfig::default(), Timestamp::ZERO);
        // 1 ms path at RATE cells/ms: RATE cells fill it.
        run(&mut v, 1.0, RATE, 0, 200);
        assert!(!v.in_slow_start());
        let (w, c, bdp) = (v.window(), CcConfig::default(), RATE as u32);
        assert!(
            (bdp + c.alpha - 10..=bdp + c.beta + 10).contains(&w),
            "window {w}, queue {}",
            v.queued()
        );
    }

    #[test]
    fn random_loss_without_queueing_does_not_shrink_the_window() {
        let mut clean = Vegas::new(CcConfig::default(), Timestamp::ZERO);
        let mut lossy = Vegas::new(CcConfig::default(), Timestamp::ZERO);
        run(&mut clean, 1.0, RATE, 0, 200);
        // 20% of every round lost, but only where the path is not queueing.
        let mut now = Timestamp::ZERO;
        for _ in 0..200 {
            let w = lossy.window();
            let queue = (f64::from(w) - RATE).max(0.0);
            let rtt = Duration::from_secs_f64((1.0 + queue / RATE) / 1000.0);
            now = now.saturating_add(rtt);
            let lost = if queue < 1.0 { w / 5 } else { 0 };
            lossy.on_settled(w - lost, lost, Some(rtt), now);
        }
        assert!(
            lossy.window() + 16 >= clean.window(),
            "lossy {} clean {}",
            lossy.window(),
            clean.window()
        );
    }

    #[test]
    fn loss_with_a_queue_cuts_the_window() {
        let mut v = Vegas::new(CcConfig::default(), Timestamp::ZERO);
        run(&mut v, 1.0, RATE, 0, 100);
        let before = v.window();
        let events = v.congestion_events();
        // Push the queue up (base RTT unchanged) and lose cells: an overflowing queue.
        let w = v.window();
        let rtt = rtt_for_queue(w, between_beta_and_delta());
        v.on_settled(w - w / 20, w / 20, Some(rtt), Timestamp::from_secs(1));
        assert!(
            v.window() <= before * 7 / 10 + 1,
            "{} -> {}",
            before,
            v.window()
        );
        assert_eq!(v.congestion_events(), events + 1);
    }

    #[test]
    fn steady_loss_with_a_standing_queue_is_not_a_spike() {
        let mut v = Vegas::new(CcConfig::default(), Timestamp::ZERO);
        run(&mut v, 1.0, RATE, 0, 100);
        // The same 10% lost every round while a queue between beta and delta stands: after
        // the first round or two the loss is the path's normal, not congestion.
        let rtt = rtt_for_queue(v.window(), between_beta_and_delta());
        let mut now = Timestamp::from_secs(1);
        let mut cuts = Vec::new();
        for _ in 0..30 {
            let before = v.congestion_events();
            let w = v.window();
            now = now.saturating_add(rtt);
            v.on_settled(w - w / 10, w / 10, Some(rtt), now);
            cuts.push(v.congestion_events() - before);
        }
        let late: u64 = cuts[5..].iter().sum();
        assert_eq!(late, 0, "cuts per round: {cuts:?}");
    }

    #[test]
    fn the_window_stays_within_bounds() {
        let config = CcConfig {
            max_window: 64,
            ..CcConfig::default()
        };
        let mut v = Vegas::new(config, Timestamp::ZERO);
        run(&mut v, 10.0, 1000.0, 0, 50);
        assert_eq!(v.window(), 64);
        for _ in 0..20 {
            v.on_timeout();
        }
        assert_eq!(v.window(), 8);
    }

    /// A controller whose loss-free rounds at the bare RTT `base` doubled its window to
    /// 1 024 cells, and the time then.
    fn slow_started_to_1024(base: Duration) -> (Vegas, Timestamp) {
        let mut v = Vegas::new(CcConfig::default(), Timestamp::ZERO);
        let mut now = Timestamp::ZERO;
        while v.window() < 1024 {
            now = now.saturating_add(base);
            let w = v.window();
            v.on_settled(w, 0, Some(base), now);
        }
        assert!(v.in_slow_start());
        (v, now)
    }

    #[test]
    fn slow_start_ends_within_the_round_that_shows_the_queue() {
        let base = Duration::from_millis(300);
        let (mut v, mut now) = slow_started_to_1024(base);
        // The next round's acknowledgements show 200 cells queued (1024 · 60 / 360 ms).
        let queued = base + Duration::from_millis(60);
        for i in 0..8 {
            now = now.saturating_add(Duration::from_millis(1));
            v.on_settled(1, 0, Some(queued), now);
            assert_eq!(v.in_slow_start(), i < 7, "after {} samples", i + 1);
        }
        // Left with the window less the excess over gamma, long before the round's end.
        let c = CcConfig::default();
        assert_eq!(v.window(), 1024 - (v.queued() - c.gamma));
        assert!(v.queued() > c.gamma);
    }

    #[test]
    fn heavy_queueing_without_loss_gives_back_the_excess_not_a_third() {
        let (mut v, mut now) = slow_started_to_1024(Duration::from_millis(1));
        let w = v.window();
        let c = CcConfig::default();
        let heavy = c.delta + 100;
        let rtt = rtt_for_queue(w, heavy);
        now = now.saturating_add(rtt);
        v.on_settled(w, 0, Some(rtt), now);
        assert!((heavy - 5..=heavy).contains(&v.queued()), "{}", v.queued());
        assert_eq!(v.window(), w - (v.queued() - c.beta));
        assert!(v.window() > w * 7 / 10);
        assert_eq!(v.congestion_events(), 1);
        assert!(!v.in_slow_start());
    }

    #[test]
    fn bad_configs_are_named() {
        assert!(CcConfig::default().problem().is_none());
        let bad = CcConfig {
            beta: 5,
            ..CcConfig::default()
        };
        assert_eq!(bad.problem().map(|p| p.0), Some("alpha"));
        let bad = CcConfig {
            initial_window: 9000,
            ..CcConfig::default()
        };
        assert_eq!(bad.problem().map(|p| p.0), Some("initial_window"));
    }
}
