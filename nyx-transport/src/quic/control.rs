//! A QUIC link's control channel, sans-IO: control messages in DATAGRAM frames of the cell
//! size, made reliable by the shared chunking and acknowledgement logic (`crate::control`).
//!
//! The overlay's link cell begins with its circuit id, and circuit id 0 is never used, so a
//! datagram that begins with four zero bytes ([`CONTROL_MARK`]) belongs to the transport's
//! control channel and every other datagram is a cell ([`is_control`]); the link refuses to
//! send a cell that begins with the mark. A control datagram is
//!
//! ```text
//! 0  mark   4 zero bytes
//! 4  kind   u8     1 = chunk, 2 = acknowledgement
//! 5  chunk: seq u32 ‖ len u16 ‖ len bytes of the control byte stream
//!    ack:   next u32 (the next chunk the sender expects: everything before it arrived)
//! …  zero padding to `pad_to` bytes
//! ```
//!
//! With `pad_to` the cell length (`QuicConfig::pad_to`, 1156), chunks and acknowledgements
//! leave as datagrams of exactly a cell's size. [`QuicControl`] holds one link's channel:
//! messages and datagrams in, datagrams to send and the next resend deadline out, with the
//! time and the link's round-trip estimate passed in; `QuicLink` and its driver move the
//! datagrams.

use std::collections::VecDeque;
use std::time::Duration;

use bytes::Bytes;
use nyx_core::Timestamp;

use crate::Error;
use crate::control::{ControlState, control_rto};

/// The first four bytes of every control datagram: circuit id 0, which no cell carries.
pub const CONTROL_MARK: [u8; 4] = [0; 4];
/// Bytes before a chunk's data: mark, kind, `seq u32`, `len u16`.
pub const CHUNK_HEADER: usize = 4 + 1 + 4 + 2;

const KIND_CHUNK: u8 = 1;
const KIND_ACK: u8 = 2;

/// Whether `datagram` belongs to the control channel (it begins with [`CONTROL_MARK`]);
/// every other datagram is a cell.
pub fn is_control(datagram: &[u8]) -> bool {
    datagram.starts_with(&CONTROL_MARK)
}

/// One control datagram, decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ControlDatagram<'a> {
    /// Chunk `seq` of the peer's control byte stream.
    Chunk {
        /// Its sequence number.
        seq: u32,
        /// Its bytes.
        bytes: &'a [u8],
    },
    /// The peer received every chunk before `next`.
    Ack {
        /// The next chunk the peer expects.
        next: u32,
    },
}

impl<'a> ControlDatagram<'a> {
    /// Decode a datagram that [`is_control`]; bytes after the fields are padding and are
    /// ignored. Anything else is a [`Error::MalformedControl`].
    pub fn decode(datagram: &'a [u8]) -> Result<Self, Error> {
        let rest = datagram
            .strip_prefix(&CONTROL_MARK[..])
            .ok_or(malformed("no control mark"))?;
        let (&kind, rest) = rest.split_first().ok_or(malformed("no kind"))?;
        match kind {
            KIND_CHUNK => {
                let (seq, rest) = take_u32(rest)?;
                let (len, rest) = rest
                    .split_first_chunk::<2>()
                    .ok_or(malformed("truncated chunk header"))?;
                let bytes = rest
                    .get(..usize::from(u16::from_be_bytes(*len)))
                    .ok_or(malformed("chunk longer than its datagram"))?;
                Ok(ControlDatagram::Chunk { seq, bytes })
            }
            KIND_ACK => Ok(ControlDatagram::Ack {
                next: take_u32(rest)?.0,
            }),
            _ => Err(malformed("unknown kind")),
        }
    }

    /// The datagram, zero-padded to `pad_to` bytes (or as long as its fields if that is
    /// more). A chunk of more than 65 535 bytes is refused.
    pub fn encode(&self, pad_to: usize) -> Result<Bytes, Error> {
        let mut out = Vec::with_capacity(pad_to);
        out.extend_from_slice(&CONTROL_MARK);
        match *self {
            ControlDatagram::Chunk { seq, bytes } => {
                let len = u16::try_from(bytes.len()).map_err(|_| malformed("chunk too long"))?;
                out.push(KIND_CHUNK);
                out.extend_from_slice(&seq.to_be_bytes());
                out.extend_from_slice(&len.to_be_bytes());
                out.extend_from_slice(bytes);
            }
            ControlDatagram::Ack { next } => {
                out.push(KIND_ACK);
                out.extend_from_slice(&next.to_be_bytes());
            }
        }
        if out.len() < pad_to {
            out.resize(pad_to, 0);
        }
        Ok(Bytes::from(out))
    }
}

/// Chunk bytes per datagram for `pad_to`: refused unless a chunk header and at least one
/// byte fit and the chunk length fits its `u16` field.
pub(crate) fn chunk_len(pad_to: usize) -> Result<usize, Error> {
    match pad_to.checked_sub(CHUNK_HEADER) {
        Some(n) if n >= 1 && n <= usize::from(u16::MAX) => Ok(n),
        _ => Err(Error::TlsConfig {
            reason: format!(
                "pad_to {pad_to} out of range {}..={}",
                CHUNK_HEADER + 1,
                CHUNK_HEADER + usize::from(u16::MAX)
            ),
        }),
    }
}

/// One QUIC link's control channel (both directions), sans-IO.
///
/// [`send`](Self::send) queues a message, [`handle_datagram`](Self::handle_datagram) takes
/// a control datagram from the peer, [`handle_timeout`](Self::handle_timeout) resends
/// chunks unacknowledged for three round trips (at least 50 ms); after each, the datagrams
/// to send come from [`poll_transmit`](Self::poll_transmit). At most
/// [`MAX_CONTROL_IN_FLIGHT`](crate::quic::MAX_CONTROL_IN_FLIGHT) chunks are unacknowledged:
/// beyond that `send` refuses the message whole.
pub struct QuicControl {
    state: ControlState,
    pad_to: usize,
    chunk: usize,
    out: VecDeque<Bytes>,
}

impl QuicControl {
    /// A channel whose datagrams are `pad_to` bytes long (see
    /// [`QuicConfig::pad_to`](crate::quic::QuicConfig::pad_to)).
    pub fn new(pad_to: usize) -> Result<Self, Error> {
        Ok(QuicControl {
            state: ControlState::default(),
            chunk: chunk_len(pad_to)?,
            pad_to,
            out: VecDeque::new(),
        })
    }

    /// The length of every datagram this channel sends.
    pub fn pad_to(&self) -> usize {
        self.pad_to
    }

    /// Queue `msg`: its chunks go to [`poll_transmit`](Self::poll_transmit) and are kept
    /// until acknowledged.
    pub fn send(&mut self, msg: &[u8], now: Timestamp) -> Result<(), Error> {
        for (seq, bytes) in self.state.queue(msg, self.chunk, now)? {
            let chunk = ControlDatagram::Chunk { seq, bytes: &bytes };
            self.out.push_back(chunk.encode(self.pad_to)?);
        }
        Ok(())
    }

    /// A control datagram from the peer: the messages it completes, in order. Every chunk,
    /// new or repeated, is answered with an acknowledgement (to
    /// [`poll_transmit`](Self::poll_transmit)). A datagram that does not decode, or a chunk
    /// that completes a message framed longer than the limit, is an
    /// [`Error::MalformedControl`]; the channel carries on.
    pub fn handle_datagram(&mut self, datagram: &[u8]) -> Result<Vec<Vec<u8>>, Error> {
        match ControlDatagram::decode(datagram)? {
            ControlDatagram::Chunk { seq, bytes } => {
                let delivered = self.state.receive(seq, bytes);
                let ack = ControlDatagram::Ack {
                    next: self.state.expected(),
                };
                self.out.push_back(ack.encode(self.pad_to)?);
                delivered.map_err(|_| malformed("a message framed longer than the limit"))
            }
            ControlDatagram::Ack { next } => {
                self.state.acked(next);
                Ok(Vec::new())
            }
        }
    }

    /// Resend the chunks unacknowledged for the retransmission timeout of a link with round
    /// trip `rtt`.
    pub fn handle_timeout(&mut self, now: Timestamp, rtt: Duration) {
        for (seq, bytes) in self.state.resend_due(now, control_rto(Some(rtt))) {
            // Sent once already, so it encodes.
            let chunk = ControlDatagram::Chunk { seq, bytes: &bytes };
            self.out.extend(chunk.encode(self.pad_to).ok());
        }
    }

    /// When [`handle_timeout`](Self::handle_timeout) is next needed; `None` while every
    /// chunk is acknowledged.
    pub fn poll_timeout(&self, rtt: Duration) -> Option<Timestamp> {
        self.state.next_resend(control_rto(Some(rtt)))
    }

    /// The next datagram to send.
    pub fn poll_transmit(&mut self) -> Option<Bytes> {
        self.out.pop_front()
    }
}

impl std::fmt::Debug for QuicControl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QuicControl")
            .field("pad_to", &self.pad_to)
            .field("in_flight", &self.state.in_flight())
            .field("queued", &self.out.len())
            .finish_non_exhaustive()
    }
}

fn take_u32(bytes: &[u8]) -> Result<(u32, &[u8]), Error> {
    let (n, rest) = bytes
        .split_first_chunk::<4>()
        .ok_or(malformed("truncated field"))?;
    Ok((u32::from_be_bytes(*n), rest))
}

fn malformed(reason: &'static str) -> Error {
    Error::MalformedControl { reason }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::control::{MAX_CONTROL_IN_FLIGHT, MAX_CONTROL_LEN};
    use proptest::prelude::*;

    const PAD: usize = 1156;
    const RTT: Duration = Duration::from_millis(10);

    fn datagram() -> impl Strategy<Value = (u8, u32, Vec<u8>)> {
        (
            1u8..=2,
            any::<u32>(),
            proptest::collection::vec(any::<u8>(), 0..1500),
        )
    }

    proptest! {
        /// Any chunk or acknowledgement round-trips through its padded datagram, which has
        /// exactly `pad_to` bytes when its fields fit.
        #[test]
        fn any_control_datagram_round_trips(
            (kind, n, bytes) in datagram(),
            pad_to in 0usize..1400,
        ) {
            let sent = match kind {
                1 => ControlDatagram::Chunk { seq: n, bytes: &bytes },
                _ => ControlDatagram::Ack { next: n },
            };
            let wire = sent.encode(pad_to).unwrap();
            let fields = match sent {
                ControlDatagram::Chunk { bytes, .. } => CHUNK_HEADER + bytes.len(),
                ControlDatagram::Ack { .. } => 9,
            };
            prop_assert_eq!(wire.len(), fields.max(pad_to));
            prop_assert!(is_control(&wire));
            prop_assert_eq!(ControlDatagram::decode(&wire).unwrap(), sent);
        }

        /// Any bytes, with or without the control mark in front, decode to a datagram or a
        /// clear error, and a channel takes them without panicking.
        #[test]
        fn any_bytes_decode_to_a_value_or_an_error(
            tail in proptest::collection::vec(any::<u8>(), 0..1300),
            marked in any::<bool>(),
        ) {
            let mut bytes = if marked { CONTROL_MARK.to_vec() } else { Vec::new() };
            bytes.extend_from_slice(&tail);
            match ControlDatagram::decode(&bytes) {
                Ok(d) => prop_assert!(is_control(&bytes), "{d:?}"),
                Err(e) => prop_assert!(matches!(e, Error::MalformedControl { .. }), "{e}"),
            }
            let mut channel = QuicControl::new(PAD).unwrap();
            let _ = channel.handle_datagram(&bytes);
            while let Some(d) = channel.poll_transmit() {
                prop_assert_eq!(d.len(), PAD);
            }
        }

        /// Two channels over a seeded network that loses, duplicates and reorders
        /// datagrams: every message arrives whole, once, in order, every chunk ends up
        /// acknowledged, and every datagram either way has the cell length.
        #[test]
        fn messages_survive_loss_duplication_and_reordering(
            msgs in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..3000), 1..12),
            loss in 0.0f64..0.5,
            seed in any::<u64>(),
        ) {
            let (mut a, mut b) = (QuicControl::new(PAD).unwrap(), QuicControl::new(PAD).unwrap());
            let mut net = Net { rng: seed | 1, loss };
            let mut to_send: Vec<Vec<u8>> = msgs.iter().rev().cloned().collect();
            let mut got = Vec::new();
            let mut now = Timestamp::ZERO;
            while got.len() < msgs.len() || a.poll_timeout(RTT).is_some() {
                prop_assert!(now < Timestamp::from_millis(600_000), "stuck: {} of {}", got.len(), msgs.len());
                // Queue what the window takes.
                while let Some(m) = to_send.last() {
                    if a.send(m, now).is_err() {
                        break;
                    }
                    to_send.pop();
                }
                a.handle_timeout(now, RTT);
                b.handle_timeout(now, RTT);
                got.extend(net.flight(&mut a, &mut b));
                prop_assert!(net.flight(&mut b, &mut a).is_empty());
                now = now.saturating_add(Duration::from_millis(10));
            }
            prop_assert_eq!(got, msgs);
        }
    }

    /// A seeded network: each datagram lost with probability `loss`, duplicated with 5%, and
    /// every flight shuffled.
    struct Net {
        rng: u64,
        loss: f64,
    }

    impl Net {
        fn unit(&mut self) -> f64 {
            self.rng ^= self.rng << 13;
            self.rng ^= self.rng >> 7;
            self.rng ^= self.rng << 17;
            (self.rng >> 11) as f64 / (1u64 << 53) as f64
        }

        /// Move what `from` has to send to `to`; the messages `to` delivers.
        fn flight(&mut self, from: &mut QuicControl, to: &mut QuicControl) -> Vec<Vec<u8>> {
            let mut flight = Vec::new();
            while let Some(d) = from.poll_transmit() {
                assert_eq!(d.len(), PAD);
                if self.unit() >= self.loss {
                    flight.push(d.clone());
                }
                if self.unit() < 0.05 {
                    flight.push(d);
                }
            }
            for i in (1..flight.len()).rev() {
                let j = (self.unit() * (i + 1) as f64) as usize % (i + 1);
                flight.swap(i, j);
            }
            flight
                .iter()
                .flat_map(|d| to.handle_datagram(d).unwrap())
                .collect()
        }
    }

    #[test]
    fn a_peer_that_stops_acknowledging_fills_the_window_and_sends_are_refused() {
        let mut a = QuicControl::new(PAD).unwrap();
        // One chunk each: the window's worth.
        let msgs: Vec<Vec<u8>> = (0..MAX_CONTROL_IN_FLIGHT as u32)
            .map(|i| i.to_be_bytes().to_vec())
            .collect();
        for m in &msgs {
            a.send(m, Timestamp::ZERO).unwrap();
        }
        let sent: Vec<Bytes> = std::iter::from_fn(|| a.poll_transmit()).collect();
        assert_eq!(sent.len(), MAX_CONTROL_IN_FLIGHT);
        let refused = a.send(b"ping", Timestamp::ZERO).unwrap_err();
        assert!(matches!(refused, Error::Link { .. }), "{refused}");
        assert!(
            a.poll_transmit().is_none(),
            "nothing of the refused message left"
        );
        // Resent at the timeout, all of them, and not before.
        let rto = Timestamp::ZERO.saturating_add(Duration::from_millis(50));
        assert_eq!(a.poll_timeout(RTT), Some(rto));
        a.handle_timeout(Timestamp::from_millis(49), RTT);
        assert!(a.poll_transmit().is_none());
        a.handle_timeout(rto, RTT);
        assert_eq!(
            std::iter::from_fn(|| a.poll_transmit()).count(),
            MAX_CONTROL_IN_FLIGHT
        );
        // The peer's acknowledgement of all of it opens the window again.
        let mut b = QuicControl::new(PAD).unwrap();
        let mut delivered = Vec::new();
        for d in &sent {
            delivered.extend(b.handle_datagram(d).unwrap());
        }
        assert_eq!(delivered, msgs);
        let last_ack = std::iter::from_fn(|| b.poll_transmit()).last().unwrap();
        assert!(a.handle_datagram(&last_ack).unwrap().is_empty());
        assert_eq!(a.poll_timeout(RTT), None);
        a.send(b"ping", rto).unwrap();
        assert!(a.send(&vec![0; MAX_CONTROL_LEN + 1], rto).is_err());
    }

    #[test]
    fn malformed_datagrams_are_errors_and_a_bad_frame_is_still_acknowledged() {
        let mut b = QuicControl::new(PAD).unwrap();
        for bad in [
            &[0u8, 0, 0, 0][..],
            &[0, 0, 0, 0, 9],
            &[0, 0, 0, 0, 2, 1],
            &[0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 5, 1],
        ] {
            assert!(matches!(
                b.handle_datagram(bad),
                Err(Error::MalformedControl { .. })
            ));
        }
        assert!(b.poll_transmit().is_none(), "nothing to acknowledge");
        // A chunk whose frame claims 65 535 bytes (over the 16 KiB limit).
        let chunk = ControlDatagram::Chunk {
            seq: 0,
            bytes: &[0xff, 0xff, 1],
        };
        let err = b.handle_datagram(&chunk.encode(PAD).unwrap()).unwrap_err();
        assert!(matches!(err, Error::MalformedControl { .. }), "{err}");
        let ack = b.poll_transmit().unwrap();
        assert_eq!(
            ControlDatagram::decode(&ack).unwrap(),
            ControlDatagram::Ack { next: 1 }
        );
        assert_eq!(ack.len(), PAD);
    }

    #[test]
    fn pad_to_must_hold_a_chunk_header_and_a_byte() {
        assert!(QuicControl::new(CHUNK_HEADER).is_err());
        assert!(QuicControl::new(CHUNK_HEADER + 1).is_ok());
        assert!(QuicControl::new(CHUNK_HEADER + 65_536).is_err());
        assert!(!is_control(&[0, 0, 0]) && !is_control(&[0, 0, 0, 1]) && is_control(&[0; 4]));
    }
}
