//! Decodes as jobs: a block that lost a source symbol takes milliseconds of RaptorQ to
//! decode (a 2 048-symbol block about 5 ms), and a receiver that decodes inline holds up
//! everything its caller does meanwhile, the acknowledgements of the packets behind it
//! included. With [`Receiver::offload_decodes`] the receiver hands the decode out instead
//! ([`Receiver::poll_decode`]), keeps taking symbols, and completes the block when the
//! outcome comes back ([`Receiver::handle_decoded`]). Where the job runs is the caller's
//! choice; the receiver stays sans-IO.

use raptorq::{EncodingPacket, SourceBlockDecoder};

use super::{Receiver, Slot};
use crate::sender::block_config;

/// One block's decode, to [`run`](Self::run) on any thread: copies of the symbols the
/// block held when it was handed out.
pub struct DecodeJob {
    block: u32,
    k: u16,
    symbol_size: u16,
    packets: Vec<EncodingPacket>,
}

impl DecodeJob {
    /// Decode (the CPU-heavy part).
    pub fn run(self) -> DecodedBlock {
        let config = block_config(self.k, self.symbol_size);
        let mut decoder =
            SourceBlockDecoder::new(0, &config, u64::from(self.k) * u64::from(self.symbol_size));
        DecodedBlock {
            block: self.block,
            data: decoder.decode(self.packets),
        }
    }

    /// The block it is for.
    pub fn block(&self) -> u32 {
        self.block
    }
}

impl std::fmt::Debug for DecodeJob {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DecodeJob")
            .field("block", &self.block)
            .field("k", &self.k)
            .field("symbols", &self.packets.len())
            .finish()
    }
}

/// A finished [`DecodeJob`], for [`Receiver::handle_decoded`].
pub struct DecodedBlock {
    block: u32,
    /// The block's bytes (padded to whole symbols), or `None`: RaptorQ needed more.
    data: Option<Vec<u8>>,
}

impl std::fmt::Debug for DecodedBlock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DecodedBlock")
            .field("block", &self.block)
            .field("decoded", &self.data.is_some())
            .finish()
    }
}

impl Receiver {
    /// From now on hand decodes out as jobs instead of running them inline: a block that
    /// could decode waits in [`poll_decode`](Self::poll_decode) until its outcome is given
    /// to [`handle_decoded`](Self::handle_decoded). A caller that turns this on must run
    /// every job it takes and hand back every outcome, or those blocks never complete.
    pub fn offload_decodes(&mut self) {
        self.offload = true;
        for slot in &mut self.slots {
            if let Slot::Collecting(b) = slot {
                b.offload = true;
            }
        }
    }

    /// The oldest block's decode that is ready to run, if any ([`offload_decodes`]);
    /// each is handed out once.
    ///
    /// [`offload_decodes`]: Self::offload_decodes
    pub fn poll_decode(&mut self) -> Option<DecodeJob> {
        if !self.offload {
            return None;
        }
        let symbol_size = self.config.symbol_size;
        let next = self.next;
        self.slots
            .iter_mut()
            .enumerate()
            .find_map(|(i, slot)| match slot {
                Slot::Collecting(b) => b.start_job().map(|packets| DecodeJob {
                    block: next + i as u32,
                    k: b.k,
                    symbol_size,
                    packets,
                }),
                _ => None,
            })
    }

    /// A job's outcome: the block completes (and is delivered in order), or, if RaptorQ
    /// needed more symbols, decodes here from all it holds now. An outcome for a block that
    /// completed meanwhile (every source symbol arrived) or was delivered is ignored.
    pub fn handle_decoded(&mut self, done: DecodedBlock) {
        let Some(idx) = done.block.checked_sub(self.next) else {
            return;
        };
        let idx = idx as usize;
        let Some(Slot::Collecting(block)) = self.slots.get_mut(idx) else {
            return;
        };
        let before = block.stored();
        let taken = block.job_done(done.data);
        self.settle_block(idx, before, taken);
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

    use nyx_core::Timestamp;

    use super::*;
    use crate::packet::{SYMBOL_HEADER_LEN, SymbolHeader};
    use crate::{FecConfig, Sender};

    const T: u16 = 32;
    const K: usize = 64;

    /// One block of K symbols whose first source symbol is lost, fed to a receiver that
    /// hands decodes out, until it holds exactly K symbols: the receiver and the data.
    fn ready_block() -> (Receiver, Vec<u8>) {
        let config = FecConfig {
            symbol_size: T,
            max_block_symbols: K as u16,
            ..FecConfig::default()
        };
        let mut tx = Sender::new(config.clone(), Timestamp::ZERO).unwrap();
        let mut rx = Receiver::new(config).unwrap();
        rx.offload_decodes();
        let data: Vec<u8> = (0..K * usize::from(T)).map(|i| (i * 7) as u8).collect();
        tx.write(&data, Timestamp::ZERO).unwrap();
        tx.flush(Timestamp::ZERO).unwrap();
        let mut buf = vec![0u8; SYMBOL_HEADER_LEN + usize::from(T)];
        let mut held = 0;
        while let Some(n) = tx.poll_transmit(Timestamp::ZERO, &mut buf).unwrap() {
            let (h, _) = SymbolHeader::parse(&buf[..n], T).unwrap();
            if h.esi == 0 || held == K {
                continue;
            }
            rx.handle_packet(&buf[..n], Timestamp::ZERO).unwrap();
            held += 1;
        }
        assert_eq!(held, K, "the up-front repair covers the lost symbol");
        (rx, data)
    }

    #[test]
    fn a_job_that_needed_more_symbols_decodes_inline_with_what_the_block_holds() {
        let (mut rx, data) = ready_block();
        let job = rx.poll_decode().unwrap();
        assert_eq!(rx.readable(), 0);
        // As if RaptorQ had found the job's symbols dependent: the block decodes here.
        rx.handle_decoded(DecodedBlock {
            block: job.block(),
            data: None,
        });
        assert_eq!(rx.readable(), data.len());
        assert_eq!(rx.stats().decoded, 1);
    }

    #[test]
    fn a_block_its_job_completes_is_reported_and_not_asked_for_meanwhile() {
        use crate::packet::{Feedback, MAX_FEEDBACK_LEN};
        let (mut rx, _) = ready_block();
        let interval = FecConfig::default().feedback_interval;
        let mut fb = [0u8; MAX_FEEDBACK_LEN];
        let now = Timestamp::ZERO;
        assert!(rx.poll_feedback(now, &mut fb).unwrap().is_some());
        let job = rx.poll_decode().unwrap();
        // Quiet for a feedback interval while its decode runs: no repair asked for it.
        let later = now.saturating_add(interval * 2);
        let n = rx.poll_feedback(later, &mut fb).unwrap().unwrap();
        let report = Feedback::parse(&fb[..n]).unwrap();
        assert_eq!(report.next, 0);
        assert!(report.requests.is_empty(), "{report:?}");
        // The job completes the block with no packet arriving: a report is due, and says so.
        rx.handle_decoded(job.run());
        let due = rx.poll_timeout().expect("a report of the block");
        let n = rx.poll_feedback(due, &mut fb).unwrap().unwrap();
        assert_eq!(Feedback::parse(&fb[..n]).unwrap().next, 1);
    }

    #[test]
    fn an_outcome_nobody_asked_for_is_ignored() {
        let (mut rx, data) = ready_block();
        // No job was taken: an outcome is stale, whatever it says.
        rx.handle_decoded(DecodedBlock {
            block: 0,
            data: Some(vec![0; data.len()]),
        });
        rx.handle_decoded(DecodedBlock {
            block: 7,
            data: None,
        });
        assert_eq!(rx.readable(), 0);
        let job = rx.poll_decode().unwrap();
        rx.handle_decoded(job.run());
        let mut out = vec![0u8; data.len()];
        assert_eq!(rx.read(&mut out), data.len());
        assert_eq!(out, data);
    }
}
