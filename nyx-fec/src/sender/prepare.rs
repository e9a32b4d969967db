//! Building a block's RaptorQ encoder away from the packet path.
//!
//! A block that will carry repair symbols needs an encoder: RaptorQ solves for the block's
//! intermediate symbols, about 4-5 ms of CPU for a 2 048-symbol block here. Built when the
//! first repair symbol is due ([`Sender::poll_transmit`]), that time stops whatever drives
//! the sender: every circuit of a node's task waits, and the path's round trip jumps once a
//! block. The block's data is complete as soon as it closes, though, and its source symbols
//! take tens of milliseconds to leave. So the sender offers an [`EncoderJob`] for a block
//! it expects to protect ([`Sender::poll_prepare`]); a driver runs it on another thread and
//! hands the result back ([`Sender::handle_prepared`]). Nothing waits for a job: a block
//! whose repair is due before its job is back builds its encoder at once, as without jobs,
//! and the late result is dropped. A driver that never asks for jobs gets the inline build.

use std::sync::Arc;

use raptorq::SourceBlockEncoder;

use super::{Sender, block_config};

/// Blocks smaller than this build their encoder inline: a job's hand-off would cost more
/// than the build (about 1.3 µs per source symbol).
pub const PREPARE_MIN_SYMBOLS: u16 = 256;

/// Jobs are offered for at most this many of the oldest blocks still sending their source
/// symbols: an encoder is about as large as its block, and blocks further back would hold
/// one for longer than it takes to build.
const PREPARE_AHEAD: usize = 2;

/// Building one block's encoder: pure work, [`run`](Self::run) on any thread.
pub struct EncoderJob {
    block: u32,
    k: u16,
    symbol_size: u16,
    data: Arc<Vec<u8>>,
}

impl EncoderJob {
    /// Build the encoder (the CPU-heavy part).
    pub fn run(self) -> PreparedEncoder {
        let encoder = SourceBlockEncoder::new(
            0,
            &block_config(self.k, self.symbol_size),
            self.data.as_slice(),
        );
        PreparedEncoder {
            block: self.block,
            encoder,
        }
    }

    /// The block it is for.
    pub fn block(&self) -> u32 {
        self.block
    }
}

impl std::fmt::Debug for EncoderJob {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EncoderJob")
            .field("block", &self.block)
            .field("k", &self.k)
            .finish_non_exhaustive()
    }
}

/// A block's encoder, built by an [`EncoderJob`].
pub struct PreparedEncoder {
    block: u32,
    encoder: SourceBlockEncoder,
}

impl PreparedEncoder {
    /// The block it is for.
    pub fn block(&self) -> u32 {
        self.block
    }
}

impl std::fmt::Debug for PreparedEncoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PreparedEncoder")
            .field("block", &self.block)
            .finish_non_exhaustive()
    }
}

impl Sender {
    /// An encoder to build off the packet path, if a block wants one: one of the
    /// two oldest blocks still sending source symbols, of at least
    /// [`PREPARE_MIN_SYMBOLS`] symbols, for which the loss measured now plans up-front
    /// repair, with no encoder and no job out yet. Each block is offered once. Run it and
    /// give the result to [`handle_prepared`](Self::handle_prepared); a job dropped instead
    /// costs only the inline build it would have saved.
    pub fn poll_prepare(&mut self) -> Option<EncoderJob> {
        let (loss, d) = (self.estimator.loss(), self.estimator.dispersion());
        let symbol_size = self.config.symbol_size;
        let controller = &self.controller;
        let block = self
            .blocks
            .iter_mut()
            .filter(|b| !b.repair_decided && b.to_send > 0)
            .take(PREPARE_AHEAD)
            .find(|b| {
                !b.preparing
                    && b.encoder.is_none()
                    && b.k >= PREPARE_MIN_SYMBOLS
                    && controller.repair_symbols(b.k, loss, d) > 0
            })?;
        block.preparing = true;
        self.stats.encoder_jobs += 1;
        Some(EncoderJob {
            block: block.number,
            k: block.k,
            symbol_size,
            data: Arc::clone(&block.data),
        })
    }

    /// A job's encoder is back: the block keeps it for its repair symbols, unless it built
    /// one already, left, or sent its last symbol meanwhile (then it is dropped).
    pub fn handle_prepared(&mut self, prepared: PreparedEncoder) {
        let Some(block) = self.blocks.iter_mut().find(|b| b.number == prepared.block) else {
            return;
        };
        let wanted = block.encoder.is_none() && !(block.repair_decided && block.to_send == 0);
        if wanted {
            block.encoder = Some(prepared.encoder);
            self.stats.encoders_prepared += 1;
        }
    }
}
