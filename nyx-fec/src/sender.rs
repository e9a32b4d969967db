//! The sending side of a stream: cuts bytes into blocks, sends source and up-front repair
//! symbols, answers repair requests with fresh symbols, probes when feedback stops.

use std::collections::VecDeque;
use std::time::Duration;

use nyx_core::Timestamp;
use raptorq::SourceBlockEncoder;

use crate::controller::{LossEstimator, Redundancy};
use crate::packet::{MAX_ESI, MAX_SEQ, SYMBOL_HEADER_LEN, SymbolHeader};
use crate::{Error, FecConfig};

/// Counters of what a sender did (for reports and the simulation table).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SenderStats {
    /// Stream bytes accepted.
    pub bytes: u64,
    /// Blocks closed.
    pub blocks: u64,
    /// Source symbols those blocks hold.
    pub source_symbols: u64,
    /// Symbol packets sent (source, up-front repair, requested repair, probes).
    pub packets: u64,
    /// Blocks whose up-front repair was chosen (when their source symbols had gone out).
    pub decided_blocks: u64,
    /// Repair symbols sent up front with their blocks.
    pub upfront_repair: u64,
    /// Repair symbols sent in answer to requests or as probes.
    pub requested_repair: u64,
    /// Blocks that needed a second round (a repair request was answered).
    pub second_round_blocks: u64,
    /// Encoders built on the packet path, when repair was due ([`Sender::poll_transmit`]).
    pub encoders_inline: u64,
    /// Encoder jobs handed out ([`Sender::poll_prepare`]).
    pub encoder_jobs: u64,
    /// Encoders from jobs that a block took ([`Sender::handle_prepared`]).
    pub encoders_prepared: u64,
}

/// The sending side of one stream direction. Sans-IO: the caller passes `now`, moves packets
/// from [`poll_transmit`](Self::poll_transmit) to the network and feedback from the network to
/// [`handle_feedback`](Self::handle_feedback), and calls
/// [`handle_timeout`](Self::handle_timeout) at [`poll_timeout`](Self::poll_timeout).
pub struct Sender {
    config: FecConfig,
    open: Vec<u8>,
    open_since: Option<Timestamp>,
    flush_requested: bool,
    /// The writer asked for the open block to leave as soon as it can ([`Self::push`]).
    pushed: bool,
    /// The writer is done ([`Self::finish`]); the stream's tail is still to be protected.
    finishing: bool,
    blocks: VecDeque<SendBlock>,
    /// Bytes of data (padded) in `blocks`.
    blocks_bytes: usize,
    next_block: u32,
    next_seq: u32,
    estimator: LossEstimator,
    controller: Redundancy,
    last_progress: Timestamp,
    probe_backoff: u32,
    /// How long a symbol may take to reach the receiver and be reported missing, as the
    /// caller measures the path ([`set_rtt`](Self::set_rtt)); `None` until told.
    rtt: Option<Duration>,
    stats: SenderStats,
}

impl Sender {
    /// A sender with `config` (validated), starting at `now`.
    pub fn new(config: FecConfig, now: Timestamp) -> Result<Self, Error> {
        config.validate()?;
        let controller = Redundancy::new(config.target_second_round, config.max_redundancy);
        Ok(Sender {
            open: Vec::new(),
            config,
            open_since: None,
            flush_requested: false,
            pushed: false,
            finishing: false,
            blocks: VecDeque::new(),
            blocks_bytes: 0,
            next_block: 0,
            next_seq: 0,
            estimator: LossEstimator::default(),
            controller,
            last_progress: now,
            probe_backoff: 0,
            rtt: None,
            stats: SenderStats::default(),
        })
    }

    /// Accept as much of `data` as the window allows; returns how many bytes were taken.
    /// Full blocks are closed and queued at once. A sender that already holds
    /// `max_blocks_in_flight` unacknowledged blocks still fills its open block, which then
    /// closes as soon as feedback makes room: a writer held back by the window coalesces
    /// into large blocks instead of closing a small one at every acknowledgement. Only a
    /// full open block at the cap refuses data (0): wait for feedback.
    pub fn write(&mut self, data: &[u8], now: Timestamp) -> Result<usize, Error> {
        let block_bytes = self.config.block_bytes();
        let mut taken = 0;
        while taken < data.len() && self.can_write() {
            if self.open.is_empty() {
                self.open_since = Some(now);
            }
            let n = (block_bytes - self.open.len()).min(data.len() - taken);
            // Allocate what this write needs, not a whole block up front (a 512 KiB
            // allocation is fresh pages from the kernel for a stream that may send 100 bytes).
            self.open.reserve(n);
            self.open.extend_from_slice(&data[taken..taken + n]);
            taken += n;
            if self.open.len() == block_bytes {
                self.flush(now)?;
            }
        }
        self.stats.bytes += taken as u64;
        Ok(taken)
    }

    /// Close the open block now, however small (interactive data). If the window is full the
    /// block closes as soon as there is room.
    pub fn flush(&mut self, now: Timestamp) -> Result<(), Error> {
        if self.open.is_empty() {
            return Ok(());
        }
        if self.blocks.len() < self.config.max_blocks_in_flight as usize {
            self.close_block(now)
        } else {
            self.flush_requested = true;
            Ok(())
        }
    }

    /// The writer is done: close the open block now, and when the stream's last source
    /// symbol leaves, add `1 + K/200` fresh repair symbols to every block still
    /// unacknowledged (K: the block's source symbols).
    /// Losses cluster at the end of a transfer, when the queue a window builds is at its
    /// longest, and a symbol lost there costs a round trip of repair with no later data to
    /// hide it behind: under Shadow at a 300 ms round trip, clean 10 MiB downloads spent
    /// that round trip in their tail while lossy ones, whose blocks carried repair
    /// already, did not. Like TCP's tail-loss probe it costs a few symbols per stream on a
    /// path that loses nothing.
    pub fn finish(&mut self, now: Timestamp) -> Result<(), Error> {
        self.finishing = true;
        self.flush(now)?;
        if self.open.is_empty() && !self.has_pending_symbols() {
            // Every symbol had left already: the tail is what is in flight now.
            self.finishing = false;
            self.protect_tail();
        }
        Ok(())
    }

    /// Write the next packet into `out` (at least [`SYMBOL_HEADER_LEN`] + symbol size bytes);
    /// returns its length, or `None` when nothing is waiting.
    pub fn poll_transmit(
        &mut self,
        now: Timestamp,
        out: &mut [u8],
    ) -> Result<Option<usize>, Error> {
        let t = usize::from(self.config.symbol_size);
        let len = SYMBOL_HEADER_LEN + t;
        if out.len() < len {
            return Err(Error::BufferTooSmall {
                needed: len,
                capacity: out.len(),
            });
        }
        let Some(block) = self.blocks.iter_mut().find(|b| b.to_send > 0) else {
            return Ok(None);
        };
        if self.next_seq > MAX_SEQ {
            return Err(Error::Exhausted {
                what: "packet sequence numbers",
            });
        }
        let esi = block.next_esi;
        if esi > MAX_ESI {
            return Err(Error::Exhausted { what: "symbol ids" });
        }
        let k = u32::from(block.k);
        let symbol = &mut out[SYMBOL_HEADER_LEN..len];
        // A one-symbol block is repaired by repeating its symbol: any one copy that arrives
        // recovers it, which no code does better, and it costs no encoder (tens of
        // microseconds per request or small response otherwise, on a 2-core relay host a
        // cost on the critical path of every other stream too).
        let wire_esi = if k == 1 { 0 } else { esi };
        if wire_esi < k {
            let at = wire_esi as usize * t;
            symbol.copy_from_slice(&block.data[at..at + t]);
        } else {
            if block.encoder.is_none() {
                self.stats.encoders_inline += 1;
            }
            let encoder = block.encoder.get_or_insert_with(|| {
                SourceBlockEncoder::new(
                    0,
                    &block_config(block.k, self.config.symbol_size),
                    block.data.as_slice(),
                )
            });
            let packets = encoder.repair_packets(esi - k, 1);
            let Some(packet) = packets.first() else {
                return Err(Error::Exhausted { what: "symbol ids" });
            };
            symbol.copy_from_slice(packet.data());
        }
        SymbolHeader {
            seq: self.next_seq,
            block: block.number,
            esi: wire_esi,
            symbols: block.k,
            tail: block.tail,
        }
        .write(out)?;
        block.next_esi += 1;
        block.to_send -= 1;
        block.last_sent = now;
        let mut tail = false;
        if block.to_send == 0 && !block.repair_decided {
            block.repair_decided = true;
            block.informed = self.estimator.has_data();
            let repair = self.controller.repair_symbols(
                block.k,
                self.estimator.loss(),
                self.estimator.dispersion(),
            );
            block.to_send = repair;
            self.stats.decided_blocks += 1;
            self.stats.upfront_repair += u64::from(repair);
            tail = self.finishing && self.open.is_empty() && block.number + 1 == self.next_block;
        }
        if block.to_send == 0 {
            // All of it is on the wire: from here, silence means loss. The encoder (RaptorQ's
            // intermediate symbols, about as large as the block) goes: a second round is rare
            // (the controller aims at 0.5%) and rebuilds it, so memory per block in flight is
            // the block's data alone.
            block.encoder = None;
            self.last_progress = now;
        }
        if tail {
            self.finishing = false;
            self.protect_tail();
        }
        self.next_seq += 1;
        self.stats.packets += 1;
        Ok(Some(len))
    }

    /// What the sender did so far.
    pub fn stats(&self) -> SenderStats {
        self.stats
    }

    /// The loss rate the sender currently plans for.
    pub fn estimated_loss(&self) -> f64 {
        self.estimator.loss()
    }

    /// The mean length of a run of losses the receiver reported (1 for independent
    /// losses), and the dispersion of losses the sender currently plans for
    /// ([`LossEstimator::dispersion`]).
    ///
    /// [`LossEstimator::dispersion`]: crate::controller::LossEstimator::dispersion
    pub fn loss_shape(&self) -> (f64, f64) {
        (self.estimator.burst(), self.estimator.dispersion())
    }

    /// The path's loss rate and the dispersion of its losses as this stream measured them,
    /// once its receiver reported enough to count (100 packets); `None` while that is only
    /// the prior. What a later stream on the same path starts from ([`Self::seed_loss`]).
    pub fn measured_loss(&self) -> Option<(f64, f64)> {
        self.estimator
            .has_data()
            .then(|| (self.estimator.loss(), self.estimator.dispersion()))
    }

    /// Plan the first blocks for `loss` (with losses dispersed as `dispersion` says)
    /// instead of the cautious 5% prior, before any feedback: what an earlier stream on the
    /// same path measured ([`Self::measured_loss`]). The first feedback takes over the
    /// loss rate as it does from the prior; the dispersion stands until this stream has
    /// measured its own. Under Shadow (300 ms round trips) a new stream's first round trip
    /// of blocks carried up-front repair for the prior's 5% on a loss-free path.
    pub fn seed_loss(&mut self, loss: f64, dispersion: f64) {
        self.estimator.seed(loss, dispersion);
    }

    /// The controller's current trim on the loss rate (1 = the model as is).
    pub fn redundancy_trim(&self) -> f64 {
        self.controller.trim()
    }

    /// Blocks sent and not yet acknowledged.
    pub fn blocks_in_flight(&self) -> usize {
        self.blocks.len()
    }

    /// Bytes written into the open block, not yet closed for sending.
    pub fn unflushed(&self) -> usize {
        self.open.len()
    }

    /// Whether a closed block still has symbols waiting for
    /// [`poll_transmit`](Self::poll_transmit).
    pub fn has_pending_symbols(&self) -> bool {
        self.blocks.iter().any(|b| b.to_send > 0)
    }

    /// Whether the next [`poll_transmit`](Self::poll_transmit) builds a RaptorQ encoder
    /// before it writes: the block it serves is due a repair symbol and holds no encoder
    /// (none prepared, or its job is not back; one-symbol blocks never need one). That
    /// takes tens of microseconds for a small block and milliseconds for a large one, so a
    /// caller holding packets already written sends them first: a request's source symbols
    /// must not wait for the encoder of their own tail repair.
    pub fn next_builds_encoder(&self) -> bool {
        self.blocks
            .iter()
            .find(|b| b.to_send > 0)
            .is_some_and(|b| b.k > 1 && b.next_esi >= u32::from(b.k) && b.encoder.is_none())
    }

    /// Whether [`write`](Self::write) would accept data now (the window has room, or the
    /// open block does).
    pub fn can_write(&self) -> bool {
        self.has_room() || self.open.len() < self.config.block_bytes()
    }

    /// Whether everything written was acknowledged as delivered.
    pub fn is_idle(&self) -> bool {
        self.blocks.is_empty() && self.open.is_empty()
    }
}

impl std::fmt::Debug for Sender {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sender")
            .field("next_block", &self.next_block)
            .field("in_flight", &self.blocks.len())
            .field("stats", &self.stats)
            .field("estimator", &self.estimator)
            .field("controller", &self.controller)
            .finish_non_exhaustive()
    }
}

mod block;
mod feedback;
mod prepare;
#[cfg(test)]
mod tests;
mod timers;

use block::SendBlock;
pub(crate) use block::block_config;
pub use prepare::{EncoderJob, PREPARE_MIN_SYMBOLS, PreparedEncoder};
