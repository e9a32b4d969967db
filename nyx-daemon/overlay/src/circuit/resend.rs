//! When an owner resends an unanswered EXTEND. Cells are datagrams, so an EXTEND fragment or
//! the EXTENDED answering it can be lost; without a resend the build would wait out the
//! whole build timeout. The first wait follows the round trips this build has measured, and
//! each resend doubles it (a relay that is slow rather than lost sees a few duplicates, which
//! it ignores or answers from its cache; see `relay.rs`).

use std::time::Duration;

use nyx_core::Timestamp;

/// The resend schedule of one EXTEND.
#[derive(Debug, Clone)]
pub(super) struct ExtendResend {
    /// When the EXTEND was first sent.
    first_sent: Timestamp,
    /// When to resend next if no EXTENDED has come.
    due: Timestamp,
    /// The current wait between sends.
    wait: Duration,
    /// Resends so far.
    resent: u32,
}

impl ExtendResend {
    /// The schedule of the EXTEND for hop `hop` (its index in the path: 1 for the middle of a
    /// three-hop path) sent at `now`. `previous` is how long the step before it took (CREATE
    /// to CREATED, or the last EXTEND to its EXTENDED) when it was answered without a resend;
    /// that step crossed `hop` links there and back, this one crosses `hop + 1`. The wait is
    /// twice that scaled estimate, and never below `floor`.
    pub(super) fn new(
        hop: usize,
        previous: Option<Duration>,
        floor: Duration,
        now: Timestamp,
    ) -> Self {
        let estimate = previous.map_or(Duration::ZERO, |d| {
            let hop = u32::try_from(hop.max(1)).unwrap_or(u32::MAX);
            d.saturating_mul(hop.saturating_add(1)) / hop
        });
        let wait = estimate.saturating_mul(2).max(floor);
        ExtendResend {
            first_sent: now,
            due: now + wait,
            wait,
            resent: 0,
        }
    }

    /// When the next resend is due.
    pub(super) fn due(&self) -> Timestamp {
        self.due
    }

    /// Whether to resend at `now`; if so, the next wait is twice this one (at most `cap`).
    pub(super) fn poll(&mut self, now: Timestamp, cap: Duration) -> bool {
        if now < self.due {
            return false;
        }
        self.resent += 1;
        self.wait = self.wait.saturating_mul(2).min(cap);
        self.due = now + self.wait;
        true
    }

    /// How long the step took when it is answered at `now`, if that time is a clean sample:
    /// an answer after a resend may answer either send (Karn's rule), so it gives none.
    pub(super) fn sample(&self, now: Timestamp) -> Option<Duration> {
        (self.resent == 0).then(|| now.saturating_duration_since(self.first_sent))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FLOOR: Duration = Duration::from_millis(50);
    const CAP: Duration = Duration::from_secs(10);

    fn at(ms: u64) -> Timestamp {
        Timestamp::ZERO + Duration::from_millis(ms)
    }

    #[test]
    fn the_first_wait_scales_the_last_step_by_the_links_it_crosses() {
        // CREATE took 80 ms (one link there and back); EXTEND to hop 1 crosses two: 160 ms
        // expected, 320 ms waited.
        let r = ExtendResend::new(1, Some(Duration::from_millis(80)), FLOOR, at(0));
        assert_eq!(r.due(), at(320));
        // EXTEND to hop 2 after 160 ms for hop 1: 240 expected, 480 waited.
        let r = ExtendResend::new(2, Some(Duration::from_millis(160)), FLOOR, at(1000));
        assert_eq!(r.due(), at(1480));
    }

    #[test]
    fn fast_or_unknown_steps_wait_the_floor() {
        let r = ExtendResend::new(1, Some(Duration::from_millis(1)), FLOOR, at(0));
        assert_eq!(r.due(), at(50));
        let r = ExtendResend::new(2, None, FLOOR, at(0));
        assert_eq!(r.due(), at(50));
    }

    #[test]
    fn resends_back_off_to_the_cap() {
        let mut r = ExtendResend::new(1, None, FLOOR, at(0));
        assert!(!r.poll(at(49), CAP));
        assert!(r.poll(at(50), CAP));
        assert_eq!(r.due(), at(150));
        assert!(!r.poll(at(149), CAP));
        assert!(r.poll(at(150), CAP));
        assert_eq!(r.due(), at(350));
        let mut last = at(350);
        for _ in 0..20 {
            assert!(r.poll(r.due(), CAP));
            assert!(r.due().saturating_duration_since(last) <= CAP);
            last = r.due();
        }
        assert!(r.poll(last, CAP));
        assert_eq!(r.due(), last + CAP);
    }

    #[test]
    fn only_unresent_steps_are_sampled() {
        let mut r = ExtendResend::new(1, None, FLOOR, at(10));
        assert_eq!(r.sample(at(30)), Some(Duration::from_millis(20)));
        assert!(r.poll(at(60), CAP));
        assert_eq!(r.sample(at(70)), None);
    }
}
