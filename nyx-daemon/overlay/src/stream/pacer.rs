//! Pacing: a circuit's symbols leave spread over the round trip, not in bursts of a window.
//!
//! Without it, every round of slow start and every burst of acknowledgements sends up to a
//! window at once. At a 300 ms round trip that is a thousand cells or more arriving together at
//! the slowest link of the path: its queue overflows (the stream simulation lost 30% of a
//! loss-free path's cells so), and the round's smallest RTT, taken by the burst's first
//! cell, shows no queue, so the window never learns. Paced at the window per smoothed RTT
//! (twice that in slow start, 1.25 times after, as Linux and QUIC stacks do), a window's
//! cells reach the bottleneck at the rate the window asks for.
//!
//! A token bucket: one token per symbol packet, refilled at the pacing rate, holding at
//! most [`MIN_BURST`] tokens or 5 ms of the rate, whichever is more. At loopback round
//! trips (a few ms) that is more than the window, so pacing changes nothing there, and a
//! timer that fires a millisecond late (tokio's granularity) costs no rate; bare
//! acknowledgements, control frames and feedback are never held.

use std::time::Duration;

use nyx_core::Timestamp;

/// Symbols that may always leave back to back.
pub(super) const MIN_BURST: f64 = 16.0;

/// How much of the rate the bucket holds, so that a timer's granularity (about 1 ms
/// outside simulations) does not cap the rate, and loopback round trips are not paced.
const BURST_TIME: Duration = Duration::from_millis(5);

/// The pacing state of one circuit end.
#[derive(Debug, Clone)]
pub(super) struct Pacer {
    tokens: f64,
    last: Timestamp,
}

impl Pacer {
    pub(super) fn new(now: Timestamp) -> Self {
        Pacer {
            tokens: MIN_BURST,
            last: now,
        }
    }

    /// Cells per second for a window of `cwnd` cells over `srtt`.
    fn rate(cwnd: u32, srtt: Duration, slow_start: bool) -> f64 {
        let gain = if slow_start { 2.0 } else { 1.25 };
        gain * f64::from(cwnd) / srtt.as_secs_f64().max(1e-6)
    }

    fn capacity(rate: f64) -> f64 {
        (rate * BURST_TIME.as_secs_f64()).max(MIN_BURST)
    }

    /// Whether a symbol may leave at `now`; refills the bucket first.
    pub(super) fn ready(&mut self, now: Timestamp, cwnd: u32, srtt: Duration, ss: bool) -> bool {
        let rate = Self::rate(cwnd, srtt, ss);
        let elapsed = now.saturating_duration_since(self.last).as_secs_f64();
        self.tokens = (self.tokens + elapsed * rate).min(Self::capacity(rate));
        self.last = now;
        // Within rounding of a whole token counts as one: `next` computes the wait that
        // far, and a wake-up that finds 0.999999 would sleep again for nothing.
        self.tokens >= 1.0 - 1e-6
    }

    /// A symbol left.
    pub(super) fn on_sent(&mut self) {
        self.tokens -= 1.0;
    }

    /// When the next symbol may leave (after [`ready`](Self::ready) said no).
    pub(super) fn next(&self, cwnd: u32, srtt: Duration, ss: bool) -> Timestamp {
        let rate = Self::rate(cwnd, srtt, ss);
        let wait = ((1.0 - self.tokens).max(0.0) / rate).clamp(1e-6, 1.0);
        self.last.saturating_add(Duration::from_secs_f64(wait))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Symbols sent in `span` by a sender that sends whenever the pacer lets it, waking
    /// when told.
    fn sent_within(cwnd: u32, srtt: Duration, ss: bool, span: Duration) -> u32 {
        let mut p = Pacer::new(Timestamp::ZERO);
        let end = Timestamp::ZERO.saturating_add(span);
        let mut now = Timestamp::ZERO;
        let mut sent = 0;
        while now < end {
            if p.ready(now, cwnd, srtt, ss) {
                p.on_sent();
                sent += 1;
            } else {
                now = p
                    .next(cwnd, srtt, ss)
                    .max(now.saturating_add(Duration::from_nanos(1)));
            }
        }
        sent
    }

    #[test]
    fn a_window_leaves_over_its_round_trip_not_at_once() {
        let rtt = Duration::from_millis(300);
        // 1024 cells over 300 ms at 1.25x: about 1280 in a round trip, 4.3 per ms; the
        // bucket holds 5 ms of that (21 cells) at first.
        let first_ms = sent_within(1024, rtt, false, Duration::from_millis(1));
        assert!(first_ms <= 21 + 5, "{first_ms}");
        let round = sent_within(1024, rtt, false, rtt);
        assert!((1270..=1320).contains(&round), "{round}");
        // Slow start paces at twice the window per round trip.
        let round = sent_within(64, rtt, true, rtt);
        assert!((125..=150).contains(&round), "{round}");
    }

    #[test]
    fn at_loopback_round_trips_the_bucket_holds_the_whole_window() {
        // 5 ms of a 100-cell window over 3 ms is 208 cells: more than the window, so a
        // window may leave at once, as without pacing.
        let mut p = Pacer::new(Timestamp::ZERO);
        let later = Timestamp::from_millis(10);
        let rtt = Duration::from_millis(3);
        for _ in 0..100 {
            assert!(p.ready(later, 100, rtt, false));
            p.on_sent();
        }
    }
}
