//! A second copy of the frames that open a stream. OPEN and OPENED are one frame each, in
//! one cell each, and everything the stream does waits for them; a lost one is found only
//! by a probe timeout (three round trips at a circuit's first stream, when the round trip
//! the build measured is the only sample) and then resent. So each is sent once more, in a
//! later packet, a quarter of the smoothed round trip after the first (at least 1 ms, so
//! that the two do not leave in one batch, at most 25 ms), unless the stream no longer
//! needs it. One cell per stream at each end buys a lost OPEN or OPENED back for that
//! quarter round trip.

use std::collections::VecDeque;
use std::time::Duration;

use nyx_core::Timestamp;

use super::StreamMux;
use crate::stream::wire::{self, Control};

/// The least and the most time between a frame and its copy.
const MIN_GAP: Duration = Duration::from_millis(1);
const MAX_GAP: Duration = Duration::from_millis(25);

/// Copies waiting for their time, oldest first.
#[derive(Debug, Default)]
pub(super) struct Echoes(VecDeque<(Timestamp, Control)>);

impl Echoes {
    /// When the oldest copy is due.
    pub(super) fn deadline(&self) -> Option<Timestamp> {
        self.0.front().map(|(at, _)| *at)
    }
}

impl StreamMux {
    /// A packet with `controls` left at `now`: schedule a copy of its OPEN and OPENED.
    pub(super) fn schedule_echoes(&mut self, now: Timestamp, controls: &[Control]) {
        for c in controls {
            if matches!(c, Control::Open { .. } | Control::Opened { .. }) {
                let gap = (self.sent.rtt().smoothed / 4).clamp(MIN_GAP, MAX_GAP);
                self.echoes
                    .0
                    .push_back((now.saturating_add(gap), c.clone()));
            }
        }
    }

    /// Add the copies due at `now` that fit and that their stream still needs.
    pub(super) fn write_echoes(
        &mut self,
        now: Timestamp,
        out: &mut [u8],
        mut at: usize,
        in_flight: &mut bool,
    ) -> usize {
        while let Some((due, c)) = self.echoes.0.front() {
            if *due > now {
                break;
            }
            // The rule for resends decides: an OPEN until its OPENED arrived, an OPENED
            // while its stream lives.
            if self.still_wanted(c) {
                if at + c.len() + wire::ACK_LEN > out.len() {
                    break;
                }
                at = wire::write_control(out, at, c);
                *in_flight = true;
                self.stats.echoes_sent += 1;
            }
            self.echoes.0.pop_front();
        }
        at
    }
}
