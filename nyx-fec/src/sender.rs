//! The sending side of a stream: cuts bytes into blocks, sends source and up-front repair
//! symbols, answers repair requests with fresh symbols, probes when feedback stops.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use nyx_core::Timestamp;
use raptorq::{ObjectTransmissionInformation, SourceBlockEncoder};

use crate::controller::{DECODE_MARGIN, LossEstimator, Redundancy};
use crate::packet::{Feedback, MAX_ESI, NEEDED_ALL, SYMBOL_HEADER_LEN, SymbolHeader};
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
    /// Blocks acknowledged as delivered.
    pub acknowledged: u64,
    /// Encoders built on the packet path, when repair was due ([`Sender::poll_transmit`]).
    pub encoders_inline: u64,
    /// Encoder jobs handed out ([`Sender::poll_prepare`]).
    pub encoder_jobs: u64,
    /// Encoders from jobs that a block took ([`Sender::handle_prepared`]).
    pub encoders_prepared: u64,
}

struct SendBlock {
    number: u32,
    /// Stream data padded to K · symbol size (shared with an [`EncoderJob`] while one runs).
    data: Arc<Vec<u8>>,
    k: u16,
    tail: u16,
    /// Built when repair symbols are due (or before, by an [`EncoderJob`]), dropped when
    /// they have been sent.
    encoder: Option<SourceBlockEncoder>,
    /// An [`EncoderJob`] for it was handed out ([`Sender::poll_prepare`]).
    preparing: bool,
    next_esi: u32,
    to_send: u32,
    /// When its latest symbol left.
    last_sent: Timestamp,
    holdoff_until: Timestamp,
    second_round: bool,
    /// Up-front repair is chosen when the block's source symbols have gone out, with the
    /// loss estimate of that moment (not when the block was written, maybe long before).
    repair_decided: bool,
    /// Whether the estimator had feedback when the repair was chosen (only such blocks teach
    /// the controller's trim).
    informed: bool,
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
        if self.next_seq == u32::MAX {
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
        if esi < k {
            let at = esi as usize * t;
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
            esi,
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
                self.estimator.burst(),
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
            self.stats.acknowledged += 1;
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

    /// The path's round trip as the caller measures it (a smoothed RTT with a margin for
    /// its variation). From then on a repair request for a block is answered only once
    /// the block's latest symbol left at least this long ago: a receiver that reports a
    /// block incomplete sooner is missing symbols still in flight, not lost ones, and
    /// answering it sends repair the block does not need (on a loss-free path with a
    /// 300 ms round trip, three packets for every source symbol). Until it is called,
    /// only `repair_holdoff` spaces the answers: right for round trips shorter than that.
    ///
    /// The round trip also times the probe (see [`FecConfig::probe_timeout`]): silence
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

    /// What the sender did so far.
    pub fn stats(&self) -> SenderStats {
        self.stats
    }

    /// The loss rate the sender currently plans for.
    pub fn estimated_loss(&self) -> f64 {
        self.estimator.loss()
    }

    /// The path's loss rate and mean loss run as this stream measured them, once its
    /// receiver reported enough to count (100 packets); `None` while that is only the
    /// prior. What a later stream on the same path starts from ([`Self::seed_loss`]).
    pub fn measured_loss(&self) -> Option<(f64, f64)> {
        self.estimator
            .has_data()
            .then(|| (self.estimator.loss(), self.estimator.burst()))
    }

    /// Plan the first blocks for `loss` (with runs of `burst` losses) instead of the
    /// cautious 5% prior, before any feedback: what an earlier stream on the same path
    /// measured ([`Self::measured_loss`]). The first feedback takes over as it does from
    /// the prior. Under Shadow (300 ms round trips) a new stream's first round trip of
    /// blocks carried up-front repair for the prior's 5% on a loss-free path.
    pub fn seed_loss(&mut self, loss: f64, burst: f64) {
        self.estimator.seed(loss, burst);
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

    /// Whether [`write`](Self::write) would accept data now (the window has room, or the
    /// open block does).
    pub fn can_write(&self) -> bool {
        self.has_room() || self.open.len() < self.config.block_bytes()
    }

    /// Add [`tail_repair`] fresh symbols to every unacknowledged block (the stream's last
    /// source symbol just left).
    fn protect_tail(&mut self) {
        for b in &mut self.blocks {
            let extra = tail_repair(b.k);
            b.next_esi = b.next_esi.max(u32::from(b.k));
            b.to_send = b.to_send.saturating_add(extra);
            self.stats.upfront_repair += u64::from(extra);
        }
    }

    /// Whether everything written was acknowledged as delivered.
    pub fn is_idle(&self) -> bool {
        self.blocks.is_empty() && self.open.is_empty()
    }

    fn has_room(&self) -> bool {
        self.blocks.len() < self.config.max_blocks_in_flight as usize
    }

    fn close_if_flushed(&mut self, now: Timestamp) {
        if self.flush_requested && self.has_room() && !self.open.is_empty() {
            self.flush_requested = false;
            // Room was just checked, so closing cannot fail on the window.
            let _ = self.close_block(now);
        }
    }

    fn close_block(&mut self, now: Timestamp) -> Result<(), Error> {
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

/// The RaptorQ parameters of one block: one source block, no sub-blocks, byte alignment.
/// Repair symbols that protect a block at the end of a stream: one, and one more per 200
/// source symbols.
pub(crate) fn tail_repair(k: u16) -> u32 {
    1 + u32::from(k) / 200
}

pub(crate) fn block_config(k: u16, symbol_size: u16) -> ObjectTransmissionInformation {
    ObjectTransmissionInformation::new(u64::from(k) * u64::from(symbol_size), symbol_size, 1, 1, 1)
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

mod prepare;
#[cfg(test)]
mod tests;

pub use prepare::{EncoderJob, PREPARE_MIN_SYMBOLS, PreparedEncoder};
