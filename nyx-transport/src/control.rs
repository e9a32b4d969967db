//! The reliable, ordered control channel of a link, shared by both transports.
//!
//! Control messages form one byte stream per direction: each message is framed as
//! `len u16 ‖ message` and the frames are cut into numbered chunks that fit the link's
//! uniform datagram, so a control datagram (a CREATE of 1.2 KB, a 4-byte acknowledgement)
//! has the size of a cell datagram. Chunks are resent until acknowledged (cumulative
//! acknowledgements), delivered in order exactly once, and reassembled into messages. The UDP
//! transport carries the chunks inside its DATA payloads (`udp`), the QUIC transport in
//! DATAGRAM frames (`quic::control`); each says how its datagrams look.

use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

use nyx_core::Timestamp;

use crate::Error;

/// Longest control message carried (the overlay's largest is a CREATE, about 1.2 KB).
pub const MAX_CONTROL_LEN: usize = 16 * 1024;
/// Control chunks sent and not yet acknowledged, per link, at most.
pub const MAX_CONTROL_IN_FLIGHT: usize = 64;
/// Bytes of the frame header (`len u16`).
const FRAME_HEADER: usize = 2;
/// Control retransmission timeout: three round trips, at least this.
const MIN_CONTROL_RTO: Duration = Duration::from_millis(50);

/// Control retransmission timeout for a link with this round-trip time (200 ms while none
/// is known).
pub(crate) fn control_rto(rtt: Option<Duration>) -> Duration {
    rtt.map_or(Duration::from_millis(200), |r| r * 3)
        .max(MIN_CONTROL_RTO)
}

/// One direction's state of each end of the channel.
#[derive(Default)]
pub(crate) struct ControlState {
    next_seq: u32,
    /// Chunks sent and not yet acknowledged: sequence number, bytes, when last sent.
    unacked: VecDeque<(u32, Vec<u8>, Timestamp)>,
    /// The next chunk to deliver.
    expected: u32,
    /// Chunks that arrived ahead of `expected` (at most [`MAX_CONTROL_IN_FLIGHT`]).
    out_of_order: BTreeMap<u32, Vec<u8>>,
    /// Delivered bytes not yet a whole message.
    inbox: Vec<u8>,
}

/// A control stream the peer framed wrongly (an authenticated peer, so its bug).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct BadFrame;

impl ControlState {
    /// Frame `msg` and cut it into chunks of at most `chunk` bytes, each numbered and kept
    /// until acknowledged; the chunks to send. Refused whole if it is too large or would
    /// take the chunks in flight past [`MAX_CONTROL_IN_FLIGHT`].
    pub(crate) fn queue(
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
    pub(crate) fn receive(&mut self, seq: u32, chunk: &[u8]) -> Result<Vec<Vec<u8>>, BadFrame> {
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
    pub(crate) fn expected(&self) -> u32 {
        self.expected
    }

    /// The peer received everything before `next`.
    pub(crate) fn acked(&mut self, next: u32) {
        while self.unacked.front().is_some_and(|(seq, _, _)| {
            next.wrapping_sub(*seq).wrapping_sub(1) < MAX_CONTROL_IN_FLIGHT as u32
        }) {
            self.unacked.pop_front();
        }
    }

    /// The unacknowledged chunks last sent `rto` or more before `now`, marked as sent now:
    /// the chunks to send again.
    pub(crate) fn resend_due(&mut self, now: Timestamp, rto: Duration) -> Vec<(u32, Vec<u8>)> {
        let mut due = Vec::new();
        for (seq, chunk, sent) in &mut self.unacked {
            if now >= sent.saturating_add(rto) {
                *sent = now;
                due.push((*seq, chunk.clone()));
            }
        }
        due
    }

    /// When the next unacknowledged chunk is due to be sent again; `None` if none waits.
    pub(crate) fn next_resend(&self, rto: Duration) -> Option<Timestamp> {
        self.unacked
            .iter()
            .map(|(_, _, sent)| sent.saturating_add(rto))
            .min()
    }

    /// Chunks sent and not yet acknowledged.
    pub(crate) fn in_flight(&self) -> usize {
        self.unacked.len()
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

    #[test]
    fn unacknowledged_chunks_are_due_again_after_the_rto_only() {
        let rto = control_rto(Some(Duration::from_millis(20)));
        assert_eq!(rto, Duration::from_millis(60));
        let mut tx = ControlState::default();
        tx.queue(b"first", 100, Timestamp::from_millis(0)).unwrap();
        tx.queue(b"second", 100, Timestamp::from_millis(30))
            .unwrap();
        assert_eq!(tx.next_resend(rto), Some(Timestamp::from_millis(60)));
        assert!(tx.resend_due(Timestamp::from_millis(59), rto).is_empty());
        let due = tx.resend_due(Timestamp::from_millis(60), rto);
        assert_eq!(due, vec![(0, b"\0\x05first".to_vec())]);
        // Sent again at 60: the second chunk (sent at 30) is next, at 90.
        assert_eq!(tx.next_resend(rto), Some(Timestamp::from_millis(90)));
        tx.acked(1);
        assert_eq!(tx.in_flight(), 1);
        let due = tx.resend_due(Timestamp::from_millis(200), rto);
        assert_eq!(due, vec![(1, b"\0\x06second".to_vec())]);
        tx.acked(2);
        assert_eq!(tx.next_resend(rto), None);
        // No round trip known yet: 200 ms; never below 50 ms.
        assert_eq!(control_rto(None), Duration::from_millis(200));
        assert_eq!(
            control_rto(Some(Duration::from_millis(1))),
            Duration::from_millis(50)
        );
    }
}
