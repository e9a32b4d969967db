//! The receiving side of a stream: collects symbols, delivers the stream's bytes in order as
//! soon as every earlier byte arrived, decodes a block that lost a source symbol once it has
//! enough symbols for a cheap decode or no more are coming, and reports loss and missing
//! symbols.

use std::collections::VecDeque;

use nyx_core::Timestamp;

use crate::controller::DECODE_MARGIN;
use crate::packet::{Feedback, MAX_REQUESTS, NEEDED_ALL, Request, SymbolHeader};
use crate::{Error, FecConfig};

mod block;
mod jobs;
mod settle;

use block::{Block, Job, Taken};
pub use jobs::{DecodeJob, DecodedBlock};

/// Sequence numbers remembered for duplicate detection.
const SEQ_WINDOW: u32 = 4096;
/// How long a block that could decode waits, with nothing of it arriving, for the extra
/// symbols a cheaper decode wants (`block::DECODE_EXTRA`) before it decodes
/// with what it has. It waits only while it is the newest block: a symbol of a later one
/// means the sender has moved on.
const DECODE_HOLD: std::time::Duration = std::time::Duration::from_millis(2);
/// How far behind the highest sequence number a packet may arrive and still count as
/// received rather than lost (reordering tolerance of the loss report).
pub const SETTLE_LAG: u32 = 256;

enum Slot {
    /// Known to exist (a later block arrived, at `since`) but nothing of it yet.
    Empty { since: Timestamp },
    /// Symbols arriving; the first slot's leading bytes may already be read.
    Collecting(Box<Block>),
    /// Every byte of the block, waiting for an earlier block to complete.
    Complete(Vec<u8>),
}

/// Counters of what a receiver saw.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReceiverStats {
    /// Symbol packets accepted (duplicates included).
    pub packets: u64,
    /// Packets that repeated a sequence number already seen.
    pub duplicates: u64,
    /// Packets for blocks already delivered.
    pub late: u64,
    /// Blocks complete: every source symbol arrived, or decoded.
    pub blocks: u64,
    /// Blocks that needed RaptorQ decoding (a source symbol was missing).
    pub decoded: u64,
    /// Stream bytes delivered to the reader.
    pub bytes: u64,
}

/// The receiving side of one stream direction. Sans-IO, like [`crate::Sender`].
pub struct Receiver {
    config: FecConfig,
    /// The first block not yet complete: `slots[0]`.
    next: u32,
    slots: VecDeque<Slot>,
    /// The highest block number a symbol arrived for.
    newest: Option<u32>,
    /// Complete blocks before `next` not yet read, and how far the first one has been read.
    ready: VecDeque<Vec<u8>>,
    ready_offset: usize,
    ready_len: usize,
    /// Bytes of `slots[0]`'s readable lead already read (only while `ready` is empty).
    lead_read: usize,
    /// Bytes the slots hold (symbols of blocks collecting, complete blocks waiting).
    stored: usize,
    highest_seq: Option<u32>,
    seen: Vec<u64>,
    /// Sequence numbers below this are settled: counted as received or lost for good.
    settled: u32,
    settled_lost: bool,
    received: u32,
    runs: u32,
    dirty: bool,
    last_feedback: Option<Timestamp>,
    stats: ReceiverStats,
    /// Decodes are handed out as jobs ([`Receiver::offload_decodes`]).
    offload: bool,
}

impl Receiver {
    /// A receiver with `config` (validated; `symbol_size` must match the sender's).
    pub fn new(config: FecConfig) -> Result<Self, Error> {
        config.validate()?;
        Ok(Receiver {
            config,
            next: 0,
            slots: VecDeque::new(),
            newest: None,
            ready: VecDeque::new(),
            ready_offset: 0,
            ready_len: 0,
            lead_read: 0,
            stored: 0,
            highest_seq: None,
            seen: vec![0; (SEQ_WINDOW / 64) as usize],
            settled: 0,
            settled_lost: false,
            received: 0,
            runs: 0,
            dirty: false,
            last_feedback: None,
            stats: ReceiverStats::default(),
            offload: false,
        })
    }

    /// Take one symbol packet. Errors leave the receiver as it was (a packet beyond the
    /// window, a malformed one, one that contradicts its block's earlier packets).
    pub fn handle_packet(&mut self, packet: &[u8], now: Timestamp) -> Result<(), Error> {
        let (h, symbol) = SymbolHeader::parse(packet, self.config.symbol_size)?;
        let window = self.config.max_blocks_in_flight;
        if h.block >= self.next && h.block - self.next >= window {
            return Err(Error::BlockOutOfWindow {
                block: h.block,
                next: self.next,
                window,
            });
        }
        if h.symbols > self.config.max_block_symbols {
            return Err(Error::BlockTooLarge {
                block: h.block,
                symbols: h.symbols,
                max: self.config.max_block_symbols,
            });
        }
        let symbol_size = self.config.symbol_size;
        if let Some(Slot::Collecting(b)) = h
            .block
            .checked_sub(self.next)
            .and_then(|i| self.slots.get(i as usize))
            && (b.k, b.len) != (h.symbols, h.block_len(symbol_size))
        {
            return Err(Error::BlockMismatch { block: h.block });
        }
        self.count_seq(h.seq);
        self.stats.packets += 1;
        self.dirty = true;
        let Some(idx) = h.block.checked_sub(self.next) else {
            self.stats.late += 1;
            return Ok(());
        };
        let idx = idx as usize;
        while self.slots.len() <= idx {
            self.slots.push_back(Slot::Empty { since: now });
        }
        let slot = &mut self.slots[idx];
        if let Slot::Empty { .. } = slot {
            let len = h.block_len(symbol_size);
            let block = Block::new(h.symbols, len, symbol_size, now, self.offload);
            *slot = Slot::Collecting(Box::new(block));
        }
        let Slot::Collecting(block) = slot else {
            return Ok(()); // already complete: a late repair symbol
        };
        // Memory bound per block: a sane sender never needs twice K symbols.
        if block.received > 2 * u32::from(block.k) + 32 {
            return Ok(());
        }
        let before = block.stored();
        let taken = block.take(h.esi, symbol, now);
        self.settle_block(idx, before, taken);
        // A block stops waiting for extra symbols once a later block has begun: the sender
        // has moved on (blocks go out in order), so what is held is all that comes.
        match self.newest {
            Some(newest) if h.block < newest => self.decode_waiting(h.block),
            Some(newest) if h.block == newest => {}
            _ => {
                self.newest = Some(h.block);
                for b in self.next..h.block {
                    self.decode_waiting(b);
                }
            }
        }
        Ok(())
    }

    /// Decode block `number` if it is waiting for extra symbols.
    fn decode_waiting(&mut self, number: u32) {
        let Some(idx) = number.checked_sub(self.next) else {
            return;
        };
        let Some(Slot::Collecting(block)) = self.slots.get_mut(idx as usize) else {
            return;
        };
        if block.waiting() {
            let before = block.stored();
            let taken = block.decode();
            self.settle_block(idx as usize, before, taken);
        }
    }

    /// Account for what a symbol or a decode did to the block in slot `idx`, which held
    /// `before` bytes; deliver it if it is complete.
    fn settle_block(&mut self, idx: usize, before: usize, taken: Taken) {
        let Some(Slot::Collecting(block)) = self.slots.get_mut(idx) else {
            return;
        };
        if taken == Taken::Complete {
            // The sender learns of it with the next report, even when no packet arrives to
            // prompt one (a block decoded by a job or the decode timer after the last report).
            self.dirty = true;
            self.stats.blocks += 1;
            self.stats.decoded += u64::from(block.decoded);
            let data = std::mem::take(&mut block.data);
            self.stored = self.stored - before + data.len();
            self.slots[idx] = Slot::Complete(data);
            self.deliver();
        } else {
            self.stored = self.stored - before + block.stored();
        }
    }

    /// Run what is due at `now`: a block that has waited 2 ms for extra symbols
    /// decodes with what it holds.
    pub fn handle_timeout(&mut self, now: Timestamp) {
        let due: Vec<u32> = self
            .slots
            .iter()
            .enumerate()
            .filter_map(|(i, slot)| match slot {
                Slot::Collecting(b)
                    if b.waiting() && now >= b.last_at.saturating_add(DECODE_HOLD) =>
                {
                    Some(self.next + i as u32)
                }
                _ => None,
            })
            .collect();
        for number in due {
            self.decode_waiting(number);
        }
    }

    /// Move the complete blocks at the front to the readable buffer.
    fn deliver(&mut self) {
        while let Some(Slot::Complete(_)) = self.slots.front() {
            if let Some(Slot::Complete(data)) = self.slots.pop_front() {
                self.stored -= data.len();
                // Bytes of its lead already read: only while `ready` is empty.
                let read = std::mem::take(&mut self.lead_read);
                if read > 0 {
                    self.ready_offset = read;
                }
                self.ready_len += data.len() - read;
                self.ready.push_back(data);
            }
            self.next += 1;
        }
    }

    /// The first slot's readable lead, and how much of it is unread.
    fn lead(&self) -> Option<(&Block, usize)> {
        match self.slots.front() {
            Some(Slot::Collecting(b)) => Some((b, b.readable_len() - self.lead_read)),
            _ => None,
        }
    }

    /// Copy stream bytes into `buf`, in order; returns how many (0 when none are ready).
    /// Bytes of a block are readable as soon as every byte before them arrived, without
    /// waiting for the rest of the block.
    pub fn read(&mut self, buf: &mut [u8]) -> usize {
        let mut n = 0;
        while n < buf.len() {
            let Some(front) = self.ready.front() else {
                break;
            };
            let take = (front.len() - self.ready_offset).min(buf.len() - n);
            buf[n..n + take].copy_from_slice(&front[self.ready_offset..self.ready_offset + take]);
            n += take;
            self.ready_offset += take;
            if self.ready_offset == front.len() {
                self.ready.pop_front();
                self.ready_offset = 0;
            }
        }
        self.ready_len -= n;
        if self.ready.is_empty()
            && let Some((block, unread)) = self.lead()
        {
            let take = unread.min(buf.len() - n);
            let from = self.lead_read;
            buf[n..n + take].copy_from_slice(&block.data[from..from + take]);
            n += take;
            self.lead_read += take;
        }
        self.stats.bytes += n as u64;
        n
    }

    /// Bytes held for blocks not yet readable: the symbols of blocks still collecting (at
    /// most 2K + 32 each, and the gaps between the source symbols that arrived) and complete
    /// blocks waiting for an earlier one. A sender within its flow-control window keeps this
    /// under about twice what it may still send; the caller enforces that bound (nyx-fec
    /// does not know the window).
    pub fn held_bytes(&self) -> usize {
        let lead = self.lead().map_or(0, |(b, _)| b.readable_len());
        self.stored - lead
    }

    /// Bytes ready to read.
    pub fn readable(&self) -> usize {
        self.ready_len + self.lead().map_or(0, |(_, unread)| unread)
    }

    /// A feedback message for the sender, written into `out`, if one is due at `now`: every
    /// `feedback_interval` while packets arrived or blocks are missing.
    pub fn poll_feedback(
        &mut self,
        now: Timestamp,
        out: &mut [u8],
    ) -> Result<Option<usize>, Error> {
        match self.feedback_due() {
            Some(at) if now >= at => {}
            _ => return Ok(None),
        }
        let fb = self.feedback(now);
        let n = fb.write(out)?;
        self.dirty = false;
        self.last_feedback = Some(now);
        Ok(Some(n))
    }

    /// The feedback the receiver would send now.
    pub fn feedback(&self, now: Timestamp) -> Feedback {
        let mut requests = Vec::new();
        // A block is asked for only once nothing of it arrived for a feedback interval: its
        // symbols may still be on the way (reordering), or the block not finished sending.
        let quiet = |t: &Timestamp| now >= t.saturating_add(self.config.feedback_interval);
        for (i, slot) in self.slots.iter().enumerate() {
            if requests.len() == MAX_REQUESTS {
                break;
            }
            let block = self.next + i as u32;
            let needed = match slot {
                Slot::Empty { since } if quiet(since) => NEEDED_ALL,
                Slot::Empty { .. } => continue,
                Slot::Collecting(b) => {
                    // Not quiet yet, or its decode is out as a job (it holds K symbols).
                    if !quiet(&b.last_at) || b.job != Job::None {
                        continue;
                    }
                    let want = u32::from(b.k) + DECODE_MARGIN;
                    want.saturating_sub(b.received)
                        .max(1)
                        .min(u32::from(NEEDED_ALL - 1)) as u16
                }
                Slot::Complete(_) => continue,
            };
            requests.push(Request { block, needed });
        }
        Feedback {
            next: self.next,
            expected: self.settled,
            received: self.received,
            runs: self.runs,
            requests,
        }
    }

    /// When [`Receiver::poll_feedback`] or [`Receiver::handle_timeout`] next has something
    /// to do.
    pub fn poll_timeout(&self) -> Option<Timestamp> {
        let decode = self
            .slots
            .iter()
            .filter_map(|slot| match slot {
                Slot::Collecting(b) if b.waiting() => Some(b.last_at.saturating_add(DECODE_HOLD)),
                _ => None,
            })
            .min();
        match (self.feedback_due(), decode) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// When feedback is next due, if there is anything to report.
    fn feedback_due(&self) -> Option<Timestamp> {
        let pending = self.slots.iter().any(|s| !matches!(s, Slot::Complete(_)));
        if !self.dirty && !pending {
            return None;
        }
        Some(match self.last_feedback {
            Some(t) => t.saturating_add(self.config.feedback_interval),
            None => Timestamp::ZERO,
        })
    }

    /// What the receiver saw so far.
    pub fn stats(&self) -> ReceiverStats {
        self.stats
    }

    /// The next block the receiver needs in order.
    pub fn next_block(&self) -> u32 {
        self.next
    }
}

impl std::fmt::Debug for Receiver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Receiver")
            .field("next", &self.next)
            .field("pending", &self.slots.len())
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}
