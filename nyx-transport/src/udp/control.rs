//! The reliable, ordered control channel inside a UDP link's session.
//!
//! Control messages form one byte stream per direction: each message is framed as
//! `len u16 ‖ message` and the frames are cut into numbered chunks that fit the link's
//! uniform payload, so a control datagram (a CREATE of 1.2 KB, a 4-byte acknowledgement)
//! has the size of a cell datagram. Chunks are resent until acknowledged (cumulative
//! acknowledgements), delivered in order exactly once, and reassembled into messages.

use std::collections::{BTreeMap, VecDeque};

use nyx_core::Timestamp;

use super::MAX_CONTROL_IN_FLIGHT;
use crate::Error;

/// Longest control message carried (the overlay's largest is a CREATE, about 1.2 KB).
pub const MAX_CONTROL_LEN: usize = 16 * 1024;
/// Bytes of the frame header (`len u16`).
const FRAME_HEADER: usize = 2;

/// One direction's state of each end of the channel.
#[derive(Default)]
pub(super) struct ControlState {
    pub(super) next_seq: u32,
    /// Chunks sent and not yet acknowledged: sequence number, bytes, when last sent.
    pub(super) unacked: VecDeque<(u32, Vec<u8>, Timestamp)>,
    /// The next chunk to deliver.
    expected: u32,
    /// Chunks that arrived ahead of `expected` (at most [`MAX_CONTROL_IN_FLIGHT`]).
    out_of_order: BTreeMap<u32, Vec<u8>>,
    /// Delivered bytes not yet a whole message.
    inbox: Vec<u8>,
}

/// A control stream the peer framed wrongly (an authenticated peer, so its bug).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct BadFrame;

impl ControlState {
    /// Frame `msg` and cut it into chunks of at most `chunk` bytes, each numbered and kept
    /// until acknowledged; the chunks to send. Refused whole if it is too large or would
    /// take the chunks in flight past [`MAX_CONTROL_IN_FLIGHT`].
    pub(super) fn queue(
        &mut self,
        msg: &[u8],
        chunk: usize,
        now: Timestamp,
    ) -> Result<Vec<(u32, Vec<u8>)>, Error> {
        if msg.len() > MAX_CONTROL_LEN {
            return Err(Error::ControlTooLarge { len: msg.len() });
        }
        let chunk = chunk.max(1);
        let framed = FRAME_HEADER + msg.len();
        let needed = framed.div_ceil(chunk);
        if self.unacked.len() + needed > MAX_CONTROL_IN_FLIGHT {
            return Err(Error::Link {
                reason: "control channel full (peer not acknowledging)".to_string(),
            });
        }
        // Bounded by MAX_CONTROL_LEN above.
        let len =
            u16::try_from(msg.len()).map_err(|_| Error::ControlTooLarge { len: msg.len() })?;
        let mut frame = Vec::with_capacity(framed);
        frame.extend_from_slice(&len.to_be_bytes());
        frame.extend_from_slice(msg);
        let chunks: Vec<(u32, Vec<u8>)> = frame
            .chunks(chunk)
            .map(|c| {
                let seq = self.next_seq;
                self.next_seq = seq.wrapping_add(1);
                (seq, c.to_vec())
            })
            .collect();
        for (seq, c) in &chunks {
            self.unacked.push_back((*seq, c.clone(), now));
        }
        Ok(chunks)
    }

    /// Chunk `seq` arrived: the messages it completes, in order. A duplicate or a chunk too
    /// far ahead yields nothing.
    pub(super) fn receive(&mut self, seq: u32, chunk: &[u8]) -> Result<Vec<Vec<u8>>, BadFrame> {
        let ahead = seq.wrapping_sub(self.expected);
        if ahead != 0 {
            if (ahead as usize) < MAX_CONTROL_IN_FLIGHT {
                self.out_of_order.insert(seq, chunk.to_vec());
            } // else: a duplicate of a delivered chunk
            return Ok(Vec::new());
        }
        self.inbox.extend_from_slice(chunk);
        self.expected = self.expected.wrapping_add(1);
        while let Some(next) = self.out_of_order.remove(&self.expected) {
            self.inbox.extend_from_slice(&next);
            self.expected = self.expected.wrapping_add(1);
        }
        let mut messages = Vec::new();
        while let [a, b, ..] = self.inbox[..] {
            let len = usize::from(u16::from_be_bytes([a, b]));
            if len > MAX_CONTROL_LEN {
                self.inbox.clear();
                return Err(BadFrame);
            }
            if self.inbox.len() < FRAME_HEADER + len {
                break;
            }
            messages.push(self.inbox[FRAME_HEADER..FRAME_HEADER + len].to_vec());
            self.inbox.drain(..FRAME_HEADER + len);
        }
        Ok(messages)
    }

    /// The next chunk this end expects (what it acknowledges).
    pub(super) fn expected(&self) -> u32 {
        self.expected
    }

    /// The peer received everything before `next`.
    pub(super) fn acked(&mut self, next: u32) {
        while self.unacked.front().is_some_and(|(seq, _, _)| {
            next.wrapping_sub(*seq).wrapping_sub(1) < MAX_CONTROL_IN_FLIGHT as u32
        }) {
            self.unacked.pop_front();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Any messages, any chunk size, chunks delivered in any order and duplicated:
        /// the messages come out whole, once each, in order.
        #[test]
        fn messages_survive_chunking_reordering_and_duplicates(
            msgs in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..3000), 1..6),
            chunk in 1usize..1200,
            order in any::<u64>(),
        ) {
            let (mut tx, mut rx) = (ControlState::default(), ControlState::default());
            let mut sent = Vec::new();
            let mut wanted = Vec::new();
            for m in &msgs {
                match tx.queue(m, chunk, Timestamp::ZERO) {
                    Ok(chunks) => {
                        sent.extend(chunks);
                        wanted.push(m.clone());
                    }
                    // In flight full: acknowledge what was sent so far and go on.
                    Err(_) => break,
                }
            }
            // A cheap shuffle, with every chunk also delivered a second time.
            let n = sent.len();
            let mut deliveries: Vec<usize> = (0..n).chain(0..n).collect();
            let mut s = order | 1;
            for i in (1..deliveries.len()).rev() {
                s ^= s << 13; s ^= s >> 7; s ^= s << 17;
                deliveries.swap(i, (s % (i as u64 + 1)) as usize);
            }
            let mut got = Vec::new();
            for i in deliveries {
                let (seq, c) = &sent[i];
                got.extend(rx.receive(*seq, c).unwrap());
            }
            prop_assert_eq!(got, wanted);
            tx.acked(rx.expected());
            prop_assert!(tx.unacked.is_empty());
        }
    }

    #[test]
    fn a_message_is_refused_whole_when_the_window_is_full() {
        let mut tx = ControlState::default();
        let big = vec![7u8; 40 * 100];
        assert!(tx.queue(&big, 100, Timestamp::ZERO).is_ok()); // 41 chunks
        assert!(tx.queue(&big, 100, Timestamp::ZERO).is_err());
        assert_eq!(tx.unacked.len(), 41, "nothing of the refused one queued");
        assert!(
            tx.queue(&vec![0; MAX_CONTROL_LEN + 1], 1200, Timestamp::ZERO)
                .is_err()
        );
    }

    #[test]
    fn a_frame_longer_than_the_limit_is_refused() {
        let mut rx = ControlState::default();
        assert_eq!(rx.receive(0, &[0xff, 0xff, 1, 2]), Err(BadFrame));
    }
}
