//! The overlay's clock: one coarse tick drives the slow timers (build timeouts, lifetimes,
//! relay idle and truncation limits, link probes); EXTEND resends, which follow round trips,
//! have their own deadline. The driver gets the earlier of the two.

use nyx_core::Timestamp;

use super::Overlay;

impl Overlay {
    /// When [`handle_timeout`](Self::handle_timeout) wants to run next.
    pub fn poll_timeout(&self) -> Timestamp {
        self.extend_due
            .map_or(self.next_tick, |due| due.min(self.next_tick))
    }

    /// Run the timers that are due at `now`.
    pub fn handle_timeout(&mut self, now: Timestamp) {
        if self.extend_due.is_some_and(|due| now >= due) {
            self.client_resends(now);
        }
        if now < self.next_tick {
            return;
        }
        self.next_tick = now + self.config.timer_granularity;
        self.client_timers(now);
        self.relay_timers(now);
        self.check_links(now);
        self.link_limiter.retain_recent(now);
        self.create_limiter.retain_recent(now);
    }
}
