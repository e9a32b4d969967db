//! One block being collected: its source symbols in place, so that the stream bytes before
//! the first missing one can be read at once, and the repair symbols kept aside until they
//! are needed to decode.

use nyx_core::Timestamp;
use raptorq::{EncodingPacket, PayloadId, SourceBlockDecoder};

use crate::sender::block_config;

/// Symbols beyond K a large block waits for before it decodes. With 16 more the `raptorq`
/// crate decodes a 2 048-symbol block in about three quarters of the time it takes at
/// exactly K (4.7 against 6.6 ms with 8% of the source symbols lost, docs/benchmarks.md).
/// The sender plans its up-front repair for a rare second round, so a block that is decoded
/// at all usually gets these symbols in its first round anyway: waiting costs no repair.
pub(super) const DECODE_EXTRA: u32 = 16;
/// The smallest block that waits for [`DECODE_EXTRA`]: a smaller one decodes quickly at K.
pub(super) const DECODE_EXTRA_MIN_K: u16 = 512;

/// Extra symbols a block of `k` source symbols waits for before it decodes.
fn decode_extra(k: u16) -> u32 {
    if k >= DECODE_EXTRA_MIN_K {
        DECODE_EXTRA
    } else {
        0
    }
}

/// A block's decode job (`Receiver::offload_decodes`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Job {
    /// None wanted, or the block decodes inline.
    None,
    /// It holds enough symbols; `Receiver::poll_decode` hands the job out.
    Ready,
    /// Handed out; `Receiver::handle_decoded` takes the outcome.
    Out,
}

/// What a symbol did to its block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Taken {
    /// Held (or a duplicate, ignored); the block is not complete yet.
    Held,
    /// The block is complete: every stream byte of it is in [`Block::data`].
    Complete,
}

/// A block of `k` source symbols of `t` bytes that carries `len` stream bytes.
///
/// Source symbol `i` is stored at `data[i * t..]` as it arrives, so on a path that loses
/// nothing no decoder ever runs and nothing is copied but the symbol itself; `prefix` counts
/// the source symbols present from the first on, whose bytes are readable before the rest
/// of the block arrives. Only when a source symbol is missing and enough symbols are there
/// does RaptorQ decode, from the source symbols held and the repair symbols kept aside: a
/// large block at K + [`decode_extra`] symbols, or at K once the receiver sees that no more
/// are coming (`waiting`, `decode`).
pub(super) struct Block {
    pub(super) k: u16,
    pub(super) len: usize,
    t: usize,
    /// Source symbols in place, up to the highest one seen (a gap below it zero-filled);
    /// after a decode, the whole block.
    pub(super) data: Vec<u8>,
    /// Bit `i`: source symbol `i` is in `data`.
    have: Vec<u64>,
    sources: u32,
    /// Source symbols `0..prefix` are all in `data`.
    prefix: u32,
    /// Repair symbols (ESI and bytes) not yet handed to a decoder.
    repair: Vec<(u32, Vec<u8>)>,
    /// Repair symbols received: `repair.len()` plus those a decoder took.
    repairs: u32,
    /// A decode that did not succeed yet keeps its state here, and takes every later symbol.
    decoder: Option<Box<SourceBlockDecoder>>,
    /// It took RaptorQ decoding to complete (a source symbol never arrived).
    pub(super) decoded: bool,
    /// Decodes run as jobs off the packet path (`Receiver::offload_decodes`).
    pub(super) offload: bool,
    /// Where its decode job stands (only with `offload`).
    pub(super) job: Job,
    /// Symbol packets received for the block (duplicates included).
    pub(super) received: u32,
    pub(super) last_at: Timestamp,
}

impl Block {
    pub(super) fn new(k: u16, len: usize, t: u16, now: Timestamp, offload: bool) -> Self {
        let t = usize::from(t);
        Block {
            k,
            len,
            t,
            // Reserved, not touched: pages are written as symbols arrive.
            data: Vec::with_capacity(usize::from(k) * t),
            have: vec![0; usize::from(k).div_ceil(64)],
            sources: 0,
            prefix: 0,
            repair: Vec::new(),
            repairs: 0,
            decoder: None,
            decoded: false,
            offload,
            job: Job::None,
            received: 0,
            last_at: now,
        }
    }

    /// Stream bytes of the block that can be read now: those of the leading source symbols.
    pub(super) fn readable_len(&self) -> usize {
        (self.prefix as usize * self.t).min(self.len)
    }

    /// Bytes the block holds: source symbols in place (and the gaps between them) and
    /// repair symbols. A decoder that failed keeps copies of the symbols it took too; that is
    /// at most the block again, and happens for about one block in a hundred.
    pub(super) fn stored(&self) -> usize {
        self.data.len() + self.repairs as usize * self.t
    }

    /// Take symbol `esi` (exactly `t` bytes).
    pub(super) fn take(&mut self, esi: u32, symbol: &[u8], now: Timestamp) -> Taken {
        self.received += 1;
        self.last_at = now;
        let k = u32::from(self.k);
        if esi < k {
            let i = esi as usize;
            let (word, bit) = (i / 64, 1u64 << (i % 64));
            if self.have[word] & bit != 0 {
                return Taken::Held;
            }
            self.have[word] |= bit;
            self.sources += 1;
            let at = i * self.t;
            if at >= self.data.len() {
                // In order, or past a gap (which is zero-filled).
                self.data.resize(at, 0);
                self.data.extend_from_slice(symbol);
            } else {
                self.data[at..at + self.t].copy_from_slice(symbol);
            }
            while self.prefix < k && has(&self.have, self.prefix) {
                self.prefix += 1;
            }
            if self.sources == k {
                self.data.truncate(self.len);
                self.decoder = None;
                self.repair = Vec::new();
                return Taken::Complete;
            }
        } else {
            // A repeated repair symbol is not looked for (a scan per symbol would cost
            // K² on a block a peer floods): it counts once more towards starting a decode,
            // which RaptorQ, keeping one symbol per ESI, answers with `None` until it has K
            // distinct ones. The memory it takes is within the cap on `received`.
            self.repairs += 1;
            if self.decoder.is_none() {
                self.repair.push((esi, symbol.to_vec()));
            }
        }
        if let Some(decoder) = self.decoder.as_mut() {
            // A decode that needed more has every earlier symbol: it takes this one too.
            let decoded = decoder.decode(std::iter::once(packet(esi, symbol.to_vec())));
            return self.finish(decoded);
        }
        if self.held() >= u32::from(self.k) + decode_extra(self.k) {
            return self.decode();
        }
        Taken::Held
    }

    /// Source and repair symbols held: at K or more RaptorQ can try to decode.
    fn held(&self) -> u32 {
        self.sources + self.repairs
    }

    /// The block could decode now but waits for [`decode_extra`] more symbols, which make
    /// the decode cheaper; [`Block::decode`] ends the wait.
    pub(super) fn waiting(&self) -> bool {
        self.decoder.is_none() && self.job == Job::None && self.held() >= u32::from(self.k)
    }

    /// Decode from the symbols held, if there are K of them; a decoder that needs more keeps
    /// its state and takes every later symbol. With `offload` the block only becomes
    /// [`Job::Ready`]: the receiver hands the decode out as a job (`Receiver::poll_decode`).
    pub(super) fn decode(&mut self) -> Taken {
        if self.offload && self.decoder.is_none() {
            if self.job == Job::None && self.held() >= u32::from(self.k) {
                self.job = Job::Ready;
            }
            return Taken::Held;
        }
        self.decode_inline()
    }

    /// A ready block's decode as a job: copies of every symbol it holds (the block keeps
    /// its own, so its leading bytes stay readable and a failed job can be retried).
    pub(super) fn start_job(&mut self) -> Option<Vec<EncodingPacket>> {
        if self.job != Job::Ready {
            return None;
        }
        self.job = Job::Out;
        let repairs = self.repair.iter().map(|(e, s)| packet(*e, s.clone()));
        Some(self.source_packets().chain(repairs).collect())
    }

    /// Copies of the source symbols held, as RaptorQ takes them (owned).
    fn source_packets(&self) -> impl Iterator<Item = EncodingPacket> + '_ {
        let t = self.t;
        (0..u32::from(self.k))
            .filter(|&i| has(&self.have, i))
            .map(move |i| packet(i, self.data[i as usize * t..(i as usize + 1) * t].to_vec()))
    }

    /// Its job's outcome: the block's bytes, or `None` when RaptorQ needed more symbols;
    /// then it decodes here from everything it holds now (symbols kept arriving meanwhile),
    /// as a block without jobs does. An outcome for no job out is stale and ignored.
    pub(super) fn job_done(&mut self, decoded: Option<Vec<u8>>) -> Taken {
        if self.job != Job::Out {
            return Taken::Held;
        }
        self.job = Job::None;
        match decoded {
            Some(data) => self.finish(Some(data)),
            None => self.decode_inline(),
        }
    }

    fn decode_inline(&mut self) -> Taken {
        let decoded = if self.decoder.is_none() && self.held() >= u32::from(self.k) {
            let config = block_config(self.k, self.t as u16);
            let mut decoder = Box::new(SourceBlockDecoder::new(
                0,
                &config,
                u64::from(self.k) * self.t as u64,
            ));
            let repairs = std::mem::take(&mut self.repair)
                .into_iter()
                .map(|(e, s)| packet(e, s));
            let decoded = decoder.decode(self.source_packets().chain(repairs));
            if decoded.is_none() {
                self.decoder = Some(decoder);
            }
            decoded
        } else {
            None
        };
        self.finish(decoded)
    }

    /// Take a decoder's outcome.
    fn finish(&mut self, decoded: Option<Vec<u8>>) -> Taken {
        match decoded {
            Some(mut data) => {
                data.truncate(self.len);
                self.data = data;
                self.prefix = u32::from(self.k);
                self.decoder = None;
                self.decoded = true;
                Taken::Complete
            }
            None => Taken::Held,
        }
    }
}

/// Whether bit `i` of `have` is set.
fn has(have: &[u64], i: u32) -> bool {
    have[i as usize / 64] & (1 << (i % 64)) != 0
}

fn packet(esi: u32, symbol: Vec<u8>) -> EncodingPacket {
    EncodingPacket::new(PayloadId::new(0, esi), symbol)
}
