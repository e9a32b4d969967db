//! Loss accounting of a receiver: which sequence numbers arrived, counted only once they
//! are far enough behind the highest seen that reordering cannot change the verdict.

use super::{Receiver, SEQ_WINDOW, SETTLE_LAG};

impl Receiver {
    /// Count a sequence number. Loss is judged only for sequence numbers at least
    /// [`SETTLE_LAG`] behind the highest seen ("settled"), so a packet that is merely
    /// reordered is never reported as lost and then found.
    pub(super) fn count_seq(&mut self, seq: u32) {
        let word = |s: u32| ((s % SEQ_WINDOW) / 64) as usize;
        let mask = |s: u32| 1u64 << (s % 64);
        let Some(high) = self.highest_seq else {
            self.highest_seq = Some(seq);
            self.seen[word(seq)] |= mask(seq);
            self.settle_to(seq, seq);
            return;
        };
        if seq > high {
            self.settle_to(high, seq);
            // Clear the bits of the sequence numbers the window slides over.
            for x in (high + 1..=seq).rev().take(SEQ_WINDOW as usize) {
                self.seen[word(x)] &= !mask(x);
            }
            self.highest_seq = Some(seq);
        } else if seq < self.settled || self.seen[word(seq)] & mask(seq) != 0 {
            self.stats.duplicates += 1;
            return;
        }
        self.seen[word(seq)] |= mask(seq);
    }

    /// Settle every sequence number up to `highest + 1 − SETTLE_LAG`; `old_high` is the
    /// highest seen before `highest` arrived (numbers above it were not received).
    fn settle_to(&mut self, old_high: u32, highest: u32) {
        let cutoff = highest.saturating_add(1).saturating_sub(SETTLE_LAG);
        let word = |s: u32| ((s % SEQ_WINDOW) / 64) as usize;
        let mask = |s: u32| 1u64 << (s % 64);
        // Below the bitmap's reach nothing can have been recorded (only the first packet, or
        // a sender skipping ahead, leaves such a gap): lost, counted in one step, so a
        // forged huge sequence number costs O(1), not a loop over billions.
        let reach = old_high
            .saturating_add(1)
            .saturating_sub(SEQ_WINDOW)
            .min(cutoff);
        self.settle_lost(reach);
        // Within reach: one bit per sequence number, at most SEQ_WINDOW of them.
        let known_end = cutoff.min(old_high.saturating_add(1));
        while self.settled < known_end {
            let s = self.settled;
            if self.seen[word(s)] & mask(s) != 0 {
                self.received += 1;
                self.settled_lost = false;
            } else {
                if !self.settled_lost {
                    self.runs += 1;
                }
                self.settled_lost = true;
            }
            self.settled += 1;
        }
        // Above the old highest: never received.
        self.settle_lost(cutoff);
    }

    /// Settle everything below `to` (if not yet settled) as lost.
    fn settle_lost(&mut self, to: u32) {
        if self.settled < to {
            if !self.settled_lost {
                self.runs += 1;
            }
            self.settled_lost = true;
            self.settled = to;
        }
    }
}
