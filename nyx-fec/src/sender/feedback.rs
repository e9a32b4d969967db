//! A sender's answer to its receiver's feedback: delivered blocks leave, the loss estimate
//! moves, and blocks reported incomplete get fresh repair symbols, but only for symbols
//! that had time to arrive.

use nyx_core::Timestamp;

use super::Sender;
use crate::Error;
use crate::controller::DECODE_MARGIN;
use crate::packet::{Feedback, NEEDED_ALL};

impl Sender {
    /// Take a feedback message: forget delivered blocks, update the loss estimate, queue
    /// fresh repair symbols for blocks that need them.
    pub fn handle_feedback(&mut self, bytes: &[u8], now: Timestamp) -> Result<(), Error> {
        let fb = Feedback::parse(bytes)?;
        self.on_feedback(&fb, now);
        Ok(())
    }

    fn on_feedback(&mut self, fb: &Feedback, now: Timestamp) {
        self.last_progress = now;
        self.probe_backoff = 0;
        while let Some(front) = self.blocks.front() {
            // Block numbers only grow; `next` beyond what was sent is a confused receiver.
            if front.number >= fb.next || fb.next > self.next_block {
                break;
            }
            if front.informed {
                self.controller.on_block(front.second_round);
            }
            if let Some(gone) = self.blocks.pop_front() {
                self.blocks_bytes -= gone.data.len();
            }
        }
        self.estimator.update(fb.expected, fb.received, fb.runs);
        let p = self.estimator.loss();
        let Some(first) = self.blocks.front().map(|b| b.number) else {
            self.close_if_flushed(now);
            return;
        };
        for r in &fb.requests {
            let Some(idx) = r.block.checked_sub(first) else {
                continue;
            };
            let Some(block) = self.blocks.get_mut(idx as usize) else {
                continue;
            };
            // A block still in its first round is not late, only slow to send (the window
            // or the pacing held it back): its own symbols are still coming. Answering would
            // jump past its unsent source symbols to repair ones and skip its up-front repair.
            // Nor is a block with symbols still queued here: what was asked for before is
            // on its way out.
            if now < block.holdoff_until || !block.repair_decided || block.to_send > 0 {
                continue;
            }
            // A request can only know of symbols that left a round trip before it arrived:
            // the receiver misses the later ones because they are in flight, not lost.
            if self
                .rtt
                .is_some_and(|rtt| now < block.last_sent.saturating_add(rtt))
            {
                continue;
            }
            let needed = if r.needed == NEEDED_ALL {
                u32::from(block.k) + DECODE_MARGIN
            } else {
                u32::from(r.needed).min(u32::from(block.k) + DECODE_MARGIN)
            };
            // Send enough that `needed` arrive despite the loss rate, plus one if lossy.
            let extra = u32::from(p > 0.001);
            let n = (f64::from(needed) / (1.0 - p)).ceil() as u32 + extra;
            // Fresh ids only: repairs continue after everything sent so far.
            block.next_esi = block.next_esi.max(u32::from(block.k));
            block.to_send = block.to_send.saturating_add(n);
            block.holdoff_until = now.saturating_add(self.config.repair_holdoff);
            self.stats.requested_repair += u64::from(n);
            if !block.second_round {
                block.second_round = true;
                self.stats.second_round_blocks += 1;
            }
        }
        self.close_if_flushed(now);
    }
}
