//! A sender's clock: the path's round trip as the caller measures it, when an open block
//! closes although not full, and the probe that asks a silent receiver for feedback.

use std::time::Duration;

use nyx_core::Timestamp;

use super::Sender;
use crate::Error;

impl Sender {
    /// The path's round trip as the caller measures it (a smoothed RTT with a margin for
    /// its variation). From then on a repair request for a block is answered only once
    /// the block's latest symbol left at least this long ago: a receiver that reports a
    /// block incomplete sooner is missing symbols still in flight, not lost ones, and
    /// answering it sends repair the block does not need (on a loss-free path with a
    /// 300 ms round trip, three packets for every source symbol). Until it is called,
    /// only `repair_holdoff` spaces the answers: right for round trips shorter than that.
    ///
    /// The round trip also times the probe (see [`FecConfig::probe_timeout`](crate::FecConfig::probe_timeout)): silence
    /// for this long plus the receiver's `feedback_interval` after the last symbol left
    /// means that everything since was lost, on a loopback path after about 15 ms and on a
    /// 300 ms one after about 350 ms, where the fixed `probe_timeout` would wait 200 ms in
    /// both (at 10% loss per link on a loopback testnet, 14 of 20 small responses came
    /// 100 ms or more late, in steps of about 200 ms).
    pub fn set_rtt(&mut self, rtt: Duration) {
        self.rtt = Some(rtt);
    }

    /// When the sender next needs [`handle_timeout`](Self::handle_timeout): the open block's
    /// flush deadline or the next probe.
    pub fn poll_timeout(&self) -> Option<Timestamp> {
        let flush = self.flush_deadline();
        let probe = self.probe_deadline();
        match (flush, probe) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// The writer has nothing more for now: the open block leaves as soon as it can, at
    /// once unless the sender [coalesces](Self::coalescing), and then as soon as it stops.
    /// Unlike [`flush`](Self::flush) (the end of a stream, an explicit flush) this keeps a
    /// bulk transfer's blocks large: a copy loop pushes every time its source is drained
    /// for a moment, and under Shadow that cut an exit's blocks to 16 symbols.
    pub fn push(&mut self, now: Timestamp) -> Result<(), Error> {
        if self.open.is_empty() {
            return Ok(());
        }
        if self.coalescing() {
            self.pushed = true;
            Ok(())
        } else {
            self.flush(now)
        }
    }

    /// When the open block is closed although not full: `flush_delay` after its first
    /// byte (at once once pushed), unless the sender [coalesces](Self::coalescing).
    fn flush_deadline(&self) -> Option<Timestamp> {
        if self.open.is_empty() || self.flush_requested || self.coalescing() {
            return None;
        }
        let delay = if self.pushed {
            Duration::ZERO
        } else {
            self.config.flush_delay
        };
        self.open_since.map(|t| t.saturating_add(delay))
    }

    /// Whether the open block keeps filling instead of closing at its flush deadline:
    /// while symbols of closed blocks still wait to be sent (the caller's window holds them
    /// back, so closing it would not send it any sooner), or while it holds less than its
    /// share of what is in flight: a quarter of the block window's worth of blocks
    /// carries everything in flight, so a bulk transfer keeps about that many blocks
    /// out and never meets the block cap before its blocks are full. Small blocks under a
    /// bulk transfer fill the block window with little data: under Shadow an exit's blocks
    /// came out at 10 to 50 symbols, and the block window, not the circuit's, capped what
    /// was in flight. A sparse writer has little in flight, so its blocks still close at
    /// the deadline. [`flush`](Self::flush) closes a block at once.
    pub fn coalescing(&self) -> bool {
        let quarter = (self.config.max_blocks_in_flight as usize / 4).max(1);
        self.has_pending_symbols() || self.open.len() < self.blocks_bytes / quarter
    }

    fn probe_deadline(&self) -> Option<Timestamp> {
        if self.blocks.is_empty() || self.blocks.iter().any(|b| b.to_send > 0) {
            return None;
        }
        Some(
            self.last_progress
                .saturating_add(self.probe_after() * (1 << self.probe_backoff)),
        )
    }

    /// How long silence (no feedback since the last symbol left or the last report) means
    /// loss: the round trip plus the receiver's feedback interval (a report is due at most
    /// that long after a packet reaches it) once the caller has told the round trip,
    /// `probe_timeout` before.
    fn probe_after(&self) -> Duration {
        self.rtt.map_or(self.config.probe_timeout, |rtt| {
            rtt.saturating_add(self.config.feedback_interval)
        })
    }

    /// Close an overdue open block; send a probe if feedback has stopped.
    pub fn handle_timeout(&mut self, now: Timestamp) -> Result<(), Error> {
        if self.flush_deadline().is_some_and(|at| now >= at) {
            self.flush(now)?;
        }
        if let Some(at) = self.probe_deadline()
            && now >= at
        {
            // One fresh repair symbol of the newest block tells the receiver it exists; its
            // feedback then asks for whatever is missing.
            if let Some(block) = self.blocks.back_mut() {
                block.next_esi = block.next_esi.max(u32::from(block.k));
                block.to_send = block.to_send.saturating_add(1);
                self.stats.requested_repair += 1;
            }
            self.probe_backoff = (self.probe_backoff + 1).min(3);
            self.last_progress = now;
        }
        Ok(())
    }
}
