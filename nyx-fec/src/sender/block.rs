//! A sender's closed blocks: what each holds while it is in flight, how the open block is
//! cut into one, and the repair that protects a stream's tail.

use std::sync::Arc;

use nyx_core::Timestamp;
use raptorq::{ObjectTransmissionInformation, SourceBlockEncoder};

use super::Sender;
use crate::Error;

/// One closed block, from its first symbol to its acknowledgement.
pub(super) struct SendBlock {
    pub(super) number: u32,
    /// Stream data padded to K · symbol size (shared with an [`EncoderJob`] while one runs).
    pub(super) data: Arc<Vec<u8>>,
    pub(super) k: u16,
    pub(super) tail: u16,
    /// Built when repair symbols are due (or before, by an [`EncoderJob`]), dropped when
    /// they have been sent.
    pub(super) encoder: Option<SourceBlockEncoder>,
    /// An [`EncoderJob`] for it was handed out ([`Sender::poll_prepare`]).
    pub(super) preparing: bool,
    pub(super) next_esi: u32,
    pub(super) to_send: u32,
    /// When its latest symbol left.
    pub(super) last_sent: Timestamp,
    pub(super) holdoff_until: Timestamp,
    pub(super) second_round: bool,
    /// Up-front repair is chosen when the block's source symbols have gone out, with the
    /// loss estimate of that moment (not when the block was written, maybe long before).
    pub(super) repair_decided: bool,
    /// Whether the estimator had feedback when the repair was chosen (only such blocks teach
    /// the controller's trim).
    pub(super) informed: bool,
}

impl Sender {
    /// Add [`tail_repair`] fresh symbols to every unacknowledged block (the stream's last
    /// source symbol just left).
    pub(super) fn protect_tail(&mut self) {
        for b in &mut self.blocks {
            let extra = tail_repair(b.k);
            b.next_esi = b.next_esi.max(u32::from(b.k));
            b.to_send = b.to_send.saturating_add(extra);
            self.stats.upfront_repair += u64::from(extra);
        }
    }

    pub(super) fn has_room(&self) -> bool {
        self.blocks.len() < self.config.max_blocks_in_flight as usize
    }

    pub(super) fn close_if_flushed(&mut self, now: Timestamp) {
        if self.flush_requested && self.has_room() && !self.open.is_empty() {
            self.flush_requested = false;
            // Room was just checked, so closing cannot fail on the window.
            let _ = self.close_block(now);
        }
    }

    pub(super) fn close_block(&mut self, now: Timestamp) -> Result<(), Error> {
        if self.next_block == u32::MAX {
            return Err(Error::Exhausted {
                what: "block numbers",
            });
        }
        let t = usize::from(self.config.symbol_size);
        let len = self.open.len();
        let k = len.div_ceil(t);
        let tail = len - (k - 1) * t;
        let mut data = std::mem::replace(
            &mut self.open,
            Vec::with_capacity(self.config.block_bytes()),
        );
        data.resize(k * t, 0);
        self.blocks_bytes += data.len();
        // k <= max_block_symbols <= 56403 and 1 <= tail <= t fit u16.
        let (k, tail) = (k as u16, tail as u16);
        self.blocks.push_back(SendBlock {
            number: self.next_block,
            data: Arc::new(data),
            k,
            tail,
            encoder: None,
            preparing: false,
            next_esi: 0,
            to_send: u32::from(k),
            last_sent: now,
            holdoff_until: now,
            second_round: false,
            repair_decided: false,
            informed: false,
        });
        self.next_block += 1;
        self.open_since = None;
        self.flush_requested = false;
        self.pushed = false;
        self.stats.blocks += 1;
        self.stats.source_symbols += u64::from(k);
        Ok(())
    }
}

/// Repair symbols that protect a block at the end of a stream: one, and one more per 200
/// source symbols.
pub(crate) fn tail_repair(k: u16) -> u32 {
    1 + u32::from(k) / 200
}

/// The RaptorQ parameters of one block: one source block, no sub-blocks, byte alignment.
pub(crate) fn block_config(k: u16, symbol_size: u16) -> ObjectTransmissionInformation {
    ObjectTransmissionInformation::new(u64::from(k) * u64::from(symbol_size), symbol_size, 1, 1, 1)
}
