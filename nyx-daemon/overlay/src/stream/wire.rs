//! The stream layer's wire format: one *packet* per circuit DATA payload, a packet number
//! followed by frames (docs/protocol.md, "Streams").
//!
//! ```text
//! packet  = pn u32 || frame*            (at most MAX_FORWARD_BODY / MAX_BACKWARD_BODY bytes)
//! ACK      0x01  largest u32 || delay u16 (10 µs units) || bitmap u64 (bit i: largest-1-i)
//! SYMBOL   0x02  stream u32 || len u16 || nyx-fec symbol packet
//! FEEDBACK 0x03  stream u32 || len u16 || nyx-fec feedback
//! OPEN     0x04  stream u32 || len u8 || target "host:port" (UTF-8)
//! OPENED   0x05  stream u32
//! FIN      0x06  stream u32 || final offset u64
//! RESET    0x07  stream u32 || reason u8
//! MAX_DATA 0x08  stream u32 || max offset u64
//! PING     0x09
//! DONE     0x0a  stream u32            (every byte up to the peer's FIN was read)
//! ACK_WIDE 0x0b  largest u32 || delay u16 || bitmap u64 x 8 (bit i of word w: largest-1-64w-i)
//! ```
//!
//! ACK and ACK_WIDE say the same thing over different spans: a packet with room for the
//! wide one (every ACK-only packet) carries it, a full data packet the short one.
//!
//! All integers are big-endian. Stream ids are never 0.

use std::time::Duration;

use super::{ResetReason, StreamId};

/// Bytes of the packet number that starts every packet.
pub const PACKET_HEADER_LEN: usize = 4;
/// Bytes of an ACK frame.
pub const ACK_LEN: usize = 15;
/// Bytes a SYMBOL or FEEDBACK frame adds in front of what it carries.
pub const CARRIER_HEADER_LEN: usize = 7;
/// Longest OPEN target.
pub const MAX_TARGET_LEN: usize = 255;
/// Packets below the largest a short ACK can describe.
pub const ACK_BITMAP_BITS: u32 = 64;
/// 64-bit words of an [`Ack`]'s bitmap (an ACK_WIDE frame carries them all, an ACK the
/// first).
pub const ACK_WORDS: usize = 8;
/// Packets below the largest an ACK_WIDE frame can describe.
pub const ACK_WIDE_BITS: u32 = 64 * ACK_WORDS as u32;
/// Bytes of an ACK_WIDE frame.
pub const ACK_WIDE_LEN: usize = 7 + 8 * ACK_WORDS;

const ACK: u8 = 0x01;
const SYMBOL: u8 = 0x02;
const FEEDBACK: u8 = 0x03;
const OPEN: u8 = 0x04;
const OPENED: u8 = 0x05;
const FIN: u8 = 0x06;
const RESET: u8 = 0x07;
const MAX_DATA: u8 = 0x08;
const PING: u8 = 0x09;
const DONE: u8 = 0x0a;
const ACK_WIDE: u8 = 0x0b;

/// An acknowledgement of received packets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ack {
    /// The largest packet number received.
    pub largest: u32,
    /// How long the receiver held the acknowledgement after `largest` arrived.
    pub delay: Duration,
    /// Bit `i` of word `w` set: packet `largest - 1 - 64 w - i` was received. A short ACK
    /// carries word 0 only (the others read as zero: not reported).
    pub bitmap: [u64; ACK_WORDS],
}

impl Ack {
    /// Whether this acknowledges packet `pn`.
    pub fn covers(&self, pn: u32) -> bool {
        if pn == self.largest {
            return true;
        }
        match self.largest.checked_sub(pn) {
            Some(d) if (1..=ACK_WIDE_BITS).contains(&d) => {
                let i = (d - 1) as usize;
                self.bitmap[i / 64] >> (i % 64) & 1 != 0
            }
            _ => false,
        }
    }
}

/// The frames that must arrive: resent in a new packet when their packet is lost. Each is
/// idempotent, so a spurious resend is harmless.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Control {
    /// Open a stream to `target` ("host:port", resolved at the exit).
    Open {
        /// The stream.
        stream: StreamId,
        /// Where to.
        target: String,
    },
    /// The exit connected the stream.
    Opened {
        /// The stream.
        stream: StreamId,
    },
    /// The sender wrote `offset` bytes in all and will write no more.
    Fin {
        /// The stream.
        stream: StreamId,
        /// Its final length.
        offset: u64,
    },
    /// The stream is abandoned in both directions.
    Reset {
        /// The stream.
        stream: StreamId,
        /// Why.
        reason: ResetReason,
    },
    /// The receiver read every byte up to the sender's FIN: the sender may forget its
    /// side (FEC feedback is not reliable; this is).
    Done {
        /// The stream.
        stream: StreamId,
    },
    /// The receiver accepts stream bytes up to `max`.
    MaxData {
        /// The stream.
        stream: StreamId,
        /// Highest offset allowed (exclusive).
        max: u64,
    },
}

impl Control {
    /// The stream the frame is about.
    pub fn stream(&self) -> StreamId {
        match self {
            Control::Open { stream, .. }
            | Control::Opened { stream }
            | Control::Done { stream }
            | Control::Fin { stream, .. }
            | Control::Reset { stream, .. }
            | Control::MaxData { stream, .. } => *stream,
        }
    }

    /// Encoded length.
    pub fn len(&self) -> usize {
        match self {
            Control::Open { target, .. } => 6 + target.len(),
            Control::Opened { .. } | Control::Done { .. } => 5,
            Control::Fin { .. } | Control::MaxData { .. } => 13,
            Control::Reset { .. } => 6,
        }
    }

    /// Never: every frame has a type byte (for clippy's `len` convention).
    pub fn is_empty(&self) -> bool {
        false
    }
}

/// One decoded frame, borrowing from the packet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame<'a> {
    /// Acknowledgement.
    Ack(Ack),
    /// A stream's FEC symbol packet.
    Symbol {
        /// The stream.
        stream: StreamId,
        /// The nyx-fec packet.
        packet: &'a [u8],
    },
    /// A stream's FEC feedback.
    Feedback {
        /// The stream.
        stream: StreamId,
        /// The nyx-fec feedback.
        feedback: &'a [u8],
    },
    /// A control frame (an OPEN's target is copied out of the packet).
    Control(Control),
    /// Asks for an acknowledgement; carries nothing.
    Ping,
}

/// A packet that does not parse.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum WireError {
    /// Shorter than its header or a frame.
    #[error("truncated {what}")]
    Truncated {
        /// Which part.
        what: &'static str,
    },
    /// An unknown frame type.
    #[error("unknown frame type {0:#04x}")]
    UnknownFrame(u8),
    /// Stream id 0.
    #[error("stream id 0")]
    ZeroStream,
    /// An OPEN target that is not UTF-8.
    #[error("OPEN target is not UTF-8")]
    BadTarget,
}

/// Write the packet number; returns the offset where frames start.
pub fn write_header(out: &mut [u8], pn: u32) -> usize {
    out[..4].copy_from_slice(&pn.to_be_bytes());
    PACKET_HEADER_LEN
}

/// Write `ack` at `at` as a short ACK (its first 64 packets below the largest); returns
/// the new offset.
pub fn write_ack(out: &mut [u8], at: usize, ack: &Ack) -> usize {
    write_ack_words(out, at, ack, ACK, 1)
}

/// Write `ack` at `at` as an ACK_WIDE frame (all [`ACK_WIDE_BITS`] packets below the
/// largest); returns the new offset.
pub fn write_ack_wide(out: &mut [u8], at: usize, ack: &Ack) -> usize {
    write_ack_words(out, at, ack, ACK_WIDE, ACK_WORDS)
}

fn write_ack_words(out: &mut [u8], at: usize, ack: &Ack, kind: u8, words: usize) -> usize {
    let units = u16::try_from(ack.delay.as_micros() / 10).unwrap_or(u16::MAX);
    out[at] = kind;
    out[at + 1..at + 5].copy_from_slice(&ack.largest.to_be_bytes());
    out[at + 5..at + 7].copy_from_slice(&units.to_be_bytes());
    let mut end = at + 7;
    for word in &ack.bitmap[..words] {
        out[end..end + 8].copy_from_slice(&word.to_be_bytes());
        end += 8;
    }
    end
}

/// Write a PING at `at`.
pub fn write_ping(out: &mut [u8], at: usize) -> usize {
    out[at] = PING;
    at + 1
}

/// Write the header of a SYMBOL (`feedback` false) or FEEDBACK frame whose body of `len`
/// bytes the caller writes right after; returns where the body starts.
pub fn write_carrier(
    out: &mut [u8],
    at: usize,
    feedback: bool,
    stream: StreamId,
    len: usize,
) -> usize {
    out[at] = if feedback { FEEDBACK } else { SYMBOL };
    out[at + 1..at + 5].copy_from_slice(&stream.0.to_be_bytes());
    // Bodies are bounded by the packet size (< 64 KiB).
    out[at + 5..at + 7].copy_from_slice(&(len as u16).to_be_bytes());
    at + CARRIER_HEADER_LEN
}

/// Write a control frame at `at` (the caller checked [`Control::len`] fits).
pub fn write_control(out: &mut [u8], at: usize, c: &Control) -> usize {
    let (kind, stream) = match c {
        Control::Open { stream, .. } => (OPEN, stream),
        Control::Opened { stream } => (OPENED, stream),
        Control::Done { stream } => (DONE, stream),
        Control::Fin { stream, .. } => (FIN, stream),
        Control::Reset { stream, .. } => (RESET, stream),
        Control::MaxData { stream, .. } => (MAX_DATA, stream),
    };
    out[at] = kind;
    out[at + 1..at + 5].copy_from_slice(&stream.0.to_be_bytes());
    let at = at + 5;
    match c {
        Control::Open { target, .. } => {
            let t = &target.as_bytes()[..target.len().min(MAX_TARGET_LEN)];
            out[at] = t.len() as u8;
            out[at + 1..at + 1 + t.len()].copy_from_slice(t);
            at + 1 + t.len()
        }
        Control::Opened { .. } | Control::Done { .. } => at,
        Control::Fin { offset: v, .. } | Control::MaxData { max: v, .. } => {
            out[at..at + 8].copy_from_slice(&v.to_be_bytes());
            at + 8
        }
        Control::Reset { reason, .. } => {
            out[at] = reason.code();
            at + 1
        }
    }
}

/// Split a packet into its number and its frames.
pub fn parse_packet(packet: &[u8]) -> Result<(u32, Frames<'_>), WireError> {
    let Some((pn, rest)) = packet.split_first_chunk::<4>() else {
        return Err(WireError::Truncated {
            what: "packet header",
        });
    };
    Ok((u32::from_be_bytes(*pn), Frames { rest }))
}

/// The frames of a packet, in order.
#[derive(Debug, Clone)]
pub struct Frames<'a> {
    rest: &'a [u8],
}

impl<'a> Iterator for Frames<'a> {
    type Item = Result<Frame<'a>, WireError>;

    fn next(&mut self) -> Option<Self::Item> {
        let (&kind, body) = self.rest.split_first()?;
        let result = parse_frame(kind, body);
        match result {
            Ok((frame, rest)) => {
                self.rest = rest;
                Some(Ok(frame))
            }
            Err(e) => {
                self.rest = &[];
                Some(Err(e))
            }
        }
    }
}

fn take<'a>(b: &'a [u8], n: usize, what: &'static str) -> Result<(&'a [u8], &'a [u8]), WireError> {
    if b.len() < n {
        return Err(WireError::Truncated { what });
    }
    Ok(b.split_at(n))
}

fn be32(b: &[u8]) -> u32 {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}

fn be64(b: &[u8]) -> u64 {
    let mut x = [0u8; 8];
    x.copy_from_slice(&b[..8]);
    u64::from_be_bytes(x)
}

fn stream_id(b: &[u8]) -> Result<StreamId, WireError> {
    match be32(b) {
        0 => Err(WireError::ZeroStream),
        id => Ok(StreamId(id)),
    }
}

fn parse_frame(kind: u8, b: &[u8]) -> Result<(Frame<'_>, &[u8]), WireError> {
    match kind {
        ACK | ACK_WIDE => {
            let (len, what) = if kind == ACK {
                (ACK_LEN, "ACK")
            } else {
                (ACK_WIDE_LEN, "ACK_WIDE")
            };
            let (h, rest) = take(b, len - 1, what)?;
            let units = u16::from_be_bytes([h[4], h[5]]);
            let mut bitmap = [0u64; ACK_WORDS];
            for (word, bytes) in bitmap.iter_mut().zip(h[6..].chunks_exact(8)) {
                *word = be64(bytes);
            }
            let ack = Ack {
                largest: be32(h),
                delay: Duration::from_micros(u64::from(units) * 10),
                bitmap,
            };
            Ok((Frame::Ack(ack), rest))
        }
        SYMBOL | FEEDBACK => {
            let (h, rest) = take(b, CARRIER_HEADER_LEN - 1, "SYMBOL/FEEDBACK header")?;
            let stream = stream_id(h)?;
            let len = usize::from(u16::from_be_bytes([h[4], h[5]]));
            let (body, rest) = take(rest, len, "SYMBOL/FEEDBACK body")?;
            let frame = if kind == SYMBOL {
                Frame::Symbol {
                    stream,
                    packet: body,
                }
            } else {
                Frame::Feedback {
                    stream,
                    feedback: body,
                }
            };
            Ok((frame, rest))
        }
        OPEN => {
            let (h, rest) = take(b, 5, "OPEN")?;
            let stream = stream_id(h)?;
            let (t, rest) = take(rest, usize::from(h[4]), "OPEN target")?;
            let target = std::str::from_utf8(t).map_err(|_| WireError::BadTarget)?;
            let c = Control::Open {
                stream,
                target: target.to_string(),
            };
            Ok((Frame::Control(c), rest))
        }
        OPENED | DONE => {
            let (h, rest) = take(b, 4, "OPENED/DONE")?;
            let stream = stream_id(h)?;
            let c = if kind == OPENED {
                Control::Opened { stream }
            } else {
                Control::Done { stream }
            };
            Ok((Frame::Control(c), rest))
        }
        FIN | MAX_DATA => {
            let (h, rest) = take(b, 12, "FIN/MAX_DATA")?;
            let stream = stream_id(h)?;
            let v = be64(&h[4..]);
            let c = if kind == FIN {
                Control::Fin { stream, offset: v }
            } else {
                Control::MaxData { stream, max: v }
            };
            Ok((Frame::Control(c), rest))
        }
        RESET => {
            let (h, rest) = take(b, 5, "RESET")?;
            let c = Control::Reset {
                stream: stream_id(h)?,
                reason: ResetReason::from_code(h[4]),
            };
            Ok((Frame::Control(c), rest))
        }
        PING => Ok((Frame::Ping, b)),
        other => Err(WireError::UnknownFrame(other)),
    }
}

#[cfg(test)]
mod tests;
