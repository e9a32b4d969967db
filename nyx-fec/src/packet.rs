//! Wire formats: symbol packets (sender to receiver) and feedback (receiver to sender).
//! Integers are big-endian; docs/protocol.md ("Stream FEC") has the same tables.
//!
//! ```text
//! symbol packet (16 + symbol_size bytes)
//!   0   kind     u8 = 0x01
//!   1   seq      u32   per-stream packet sequence number (loss measurement)
//!   5   block    u32   stream-local block number, from 0
//!   9   esi      u24   RaptorQ encoding symbol id: < K source, >= K repair
//!   12  symbols  u16   K, source symbols in the block (1..=56403)
//!   14  tail     u16   bytes of stream data in the block's last source symbol (1..=size)
//!   16  symbol   symbol_size bytes
//!
//! feedback (18 + 6 n bytes, n <= 64)
//!   0   kind      u8 = 0x02
//!   1   next      u32   every block before this one was delivered
//!   5   expected  u32   seqs settled (all below highest − 255)  ┐ cumulative since the
//!   9   received  u32   settled seqs that were received         │ stream began, so lost
//!   13  runs      u32   runs of consecutive missing settled seqs┘ feedback loses nothing
//!   17  n         u8    repair requests that follow
//!   18  n × { block u32, needed u16 }   needed = 0xffff: nothing of that block arrived
//! ```

use crate::Error;
use crate::config::MAX_SOURCE_SYMBOLS;

/// Kind byte of a symbol packet.
pub const KIND_SYMBOL: u8 = 0x01;
/// Kind byte of a feedback message.
pub const KIND_FEEDBACK: u8 = 0x02;
/// Bytes before the symbol in a symbol packet.
pub const SYMBOL_HEADER_LEN: usize = 16;
/// Fixed part of a feedback message.
pub const FEEDBACK_HEADER_LEN: usize = 18;
/// Bytes per repair request in a feedback message.
pub const REQUEST_LEN: usize = 6;
/// Most repair requests one feedback message carries.
pub const MAX_REQUESTS: usize = 64;
/// Longest feedback message.
pub const MAX_FEEDBACK_LEN: usize = FEEDBACK_HEADER_LEN + MAX_REQUESTS * REQUEST_LEN;
/// Symbol ids are 24 bits (RFC 6330).
pub const MAX_ESI: u32 = (1 << 24) - 1;
/// The largest packet sequence number: a sender stops one short of `u32::MAX`, so a
/// receiver can count up to the next sequence number without overflow, and refuses
/// `u32::MAX` as malformed.
pub const MAX_SEQ: u32 = u32::MAX - 1;
/// `needed` value meaning "no symbol of this block has arrived".
pub const NEEDED_ALL: u16 = u16::MAX;

/// The header of a symbol packet; the symbol follows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SymbolHeader {
    /// Packet sequence number.
    pub seq: u32,
    /// Block number.
    pub block: u32,
    /// Encoding symbol id.
    pub esi: u32,
    /// Source symbols in the block.
    pub symbols: u16,
    /// Data bytes in the block's last source symbol.
    pub tail: u16,
}

impl SymbolHeader {
    /// Write the header into `out[..SYMBOL_HEADER_LEN]`.
    pub fn write(&self, out: &mut [u8]) -> Result<(), Error> {
        if out.len() < SYMBOL_HEADER_LEN {
            return Err(Error::BufferTooSmall {
                needed: SYMBOL_HEADER_LEN,
                capacity: out.len(),
            });
        }
        if self.esi > MAX_ESI {
            return Err(Error::Exhausted { what: "symbol ids" });
        }
        if self.seq > MAX_SEQ {
            return Err(Error::Exhausted {
                what: "packet sequence numbers",
            });
        }
        out[0] = KIND_SYMBOL;
        out[1..5].copy_from_slice(&self.seq.to_be_bytes());
        out[5..9].copy_from_slice(&self.block.to_be_bytes());
        out[9..12].copy_from_slice(&self.esi.to_be_bytes()[1..]);
        out[12..14].copy_from_slice(&self.symbols.to_be_bytes());
        out[14..16].copy_from_slice(&self.tail.to_be_bytes());
        Ok(())
    }

    /// Parse a symbol packet for a stream with `symbol_size`; returns the header and the
    /// symbol.
    pub fn parse(packet: &[u8], symbol_size: u16) -> Result<(SymbolHeader, &[u8]), Error> {
        if packet.len() < SYMBOL_HEADER_LEN {
            return Err(Error::Truncated {
                what: "symbol packet",
                len: packet.len(),
                needed: SYMBOL_HEADER_LEN,
            });
        }
        if packet[0] != KIND_SYMBOL {
            return Err(Error::UnknownKind { kind: packet[0] });
        }
        let symbol = &packet[SYMBOL_HEADER_LEN..];
        if symbol.len() != usize::from(symbol_size) {
            return Err(Error::SymbolSize {
                expected: usize::from(symbol_size),
                got: symbol.len(),
            });
        }
        let header = SymbolHeader {
            seq: be32(&packet[1..5]),
            block: be32(&packet[5..9]),
            esi: u32::from_be_bytes([0, packet[9], packet[10], packet[11]]),
            symbols: u16::from_be_bytes([packet[12], packet[13]]),
            tail: u16::from_be_bytes([packet[14], packet[15]]),
        };
        if header.seq > MAX_SEQ {
            return Err(Error::Invalid {
                field: "seq",
                reason: "u32::MAX is never sent",
            });
        }
        if header.symbols == 0 || header.symbols > MAX_SOURCE_SYMBOLS {
            return Err(Error::Invalid {
                field: "symbols",
                reason: "must be within 1..=56403",
            });
        }
        if header.tail == 0 || header.tail > symbol_size {
            return Err(Error::Invalid {
                field: "tail",
                reason: "must be within 1..=symbol size",
            });
        }
        Ok((header, symbol))
    }

    /// Bytes of stream data in the block.
    pub fn block_len(&self, symbol_size: u16) -> usize {
        (usize::from(self.symbols) - 1) * usize::from(symbol_size) + usize::from(self.tail)
    }
}

/// A receiver's request for more symbols of one block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Request {
    /// The block.
    pub block: u32,
    /// How many more symbols it needs to decode, or [`NEEDED_ALL`].
    pub needed: u16,
}

/// What a receiver reports.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Feedback {
    /// Every block before this one was delivered (the sender may forget them).
    pub next: u32,
    /// Sequence numbers the receiver has settled (every one below its highest minus
    /// `SETTLE_LAG`, so reordering is not counted as loss).
    pub expected: u32,
    /// Settled sequence numbers that were received.
    pub received: u32,
    /// Runs of consecutive missing settled sequence numbers.
    pub runs: u32,
    /// Blocks that need more symbols (at most [`MAX_REQUESTS`]).
    pub requests: Vec<Request>,
}

impl Feedback {
    /// Bytes this message takes on the wire.
    pub fn encoded_len(&self) -> usize {
        FEEDBACK_HEADER_LEN + self.requests.len().min(MAX_REQUESTS) * REQUEST_LEN
    }

    /// Write the message into `out`; returns its length. Requests beyond [`MAX_REQUESTS`]
    /// are left out.
    pub fn write(&self, out: &mut [u8]) -> Result<usize, Error> {
        let len = self.encoded_len();
        if out.len() < len {
            return Err(Error::BufferTooSmall {
                needed: len,
                capacity: out.len(),
            });
        }
        out[0] = KIND_FEEDBACK;
        out[1..5].copy_from_slice(&self.next.to_be_bytes());
        out[5..9].copy_from_slice(&self.expected.to_be_bytes());
        out[9..13].copy_from_slice(&self.received.to_be_bytes());
        out[13..17].copy_from_slice(&self.runs.to_be_bytes());
        let n = self.requests.len().min(MAX_REQUESTS);
        out[17] = n as u8;
        for (i, r) in self.requests.iter().take(n).enumerate() {
            let at = FEEDBACK_HEADER_LEN + i * REQUEST_LEN;
            out[at..at + 4].copy_from_slice(&r.block.to_be_bytes());
            out[at + 4..at + 6].copy_from_slice(&r.needed.to_be_bytes());
        }
        Ok(len)
    }

    /// Parse a feedback message.
    pub fn parse(bytes: &[u8]) -> Result<Feedback, Error> {
        if bytes.len() < FEEDBACK_HEADER_LEN {
            return Err(Error::Truncated {
                what: "feedback",
                len: bytes.len(),
                needed: FEEDBACK_HEADER_LEN,
            });
        }
        if bytes[0] != KIND_FEEDBACK {
            return Err(Error::UnknownKind { kind: bytes[0] });
        }
        let n = usize::from(bytes[17]);
        if n > MAX_REQUESTS {
            return Err(Error::Invalid {
                field: "requests",
                reason: "more than 64",
            });
        }
        let needed = FEEDBACK_HEADER_LEN + n * REQUEST_LEN;
        if bytes.len() != needed {
            return Err(Error::Truncated {
                what: "feedback",
                len: bytes.len(),
                needed,
            });
        }
        let requests = (0..n)
            .map(|i| {
                let at = FEEDBACK_HEADER_LEN + i * REQUEST_LEN;
                Request {
                    block: be32(&bytes[at..at + 4]),
                    needed: u16::from_be_bytes([bytes[at + 4], bytes[at + 5]]),
                }
            })
            .collect();
        let (received, expected) = (be32(&bytes[9..13]), be32(&bytes[5..9]));
        if received > expected {
            return Err(Error::Invalid {
                field: "received",
                reason: "more than expected",
            });
        }
        Ok(Feedback {
            next: be32(&bytes[1..5]),
            expected,
            received,
            runs: be32(&bytes[13..17]),
            requests,
        })
    }
}

fn be32(b: &[u8]) -> u32 {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn header() -> impl Strategy<Value = SymbolHeader> {
        (
            0..=MAX_SEQ,
            any::<u32>(),
            0..=MAX_ESI,
            1..=MAX_SOURCE_SYMBOLS,
            1u16..=64,
        )
            .prop_map(|(seq, block, esi, symbols, tail)| SymbolHeader {
                seq,
                block,
                esi,
                symbols,
                tail,
            })
    }

    proptest! {
        #[test]
        fn symbol_packets_round_trip(h in header(), fill in any::<u8>()) {
            let mut packet = vec![fill; SYMBOL_HEADER_LEN + 64];
            h.write(&mut packet).unwrap();
            let (got, symbol) = SymbolHeader::parse(&packet, 64).unwrap();
            prop_assert_eq!(got, h);
            prop_assert!(symbol.iter().all(|&b| b == fill));
        }

        #[test]
        fn feedback_round_trips(
            next in any::<u32>(), received in any::<u32>(), extra in any::<u32>(), runs in any::<u32>(),
            requests in proptest::collection::vec((any::<u32>(), any::<u16>()), 0..=MAX_REQUESTS),
        ) {
            let fb = Feedback {
                next,
                expected: received.saturating_add(extra),
                received,
                runs,
                requests: requests.into_iter().map(|(block, needed)| Request { block, needed }).collect(),
            };
            let mut buf = [0u8; MAX_FEEDBACK_LEN];
            let n = fb.write(&mut buf).unwrap();
            prop_assert_eq!(n, fb.encoded_len());
            prop_assert_eq!(Feedback::parse(&buf[..n]).unwrap(), fb);
        }

        #[test]
        fn parsers_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..600), size in 1u16..600) {
            let _ = SymbolHeader::parse(&bytes, size);
            let _ = Feedback::parse(&bytes);
        }
    }

    #[test]
    fn malformed_messages_get_typed_errors() {
        let h = SymbolHeader {
            seq: 1,
            block: 2,
            esi: 3,
            symbols: 4,
            tail: 5,
        };
        let mut p = vec![0u8; SYMBOL_HEADER_LEN + 8];
        h.write(&mut p).unwrap();
        assert!(matches!(
            SymbolHeader::parse(&p[..10], 8),
            Err(Error::Truncated { .. })
        ));
        assert_eq!(
            SymbolHeader::parse(&p, 9),
            Err(Error::SymbolSize {
                expected: 9,
                got: 8
            })
        );
        let mut bad = p.clone();
        bad[0] = 7;
        assert_eq!(
            SymbolHeader::parse(&bad, 8),
            Err(Error::UnknownKind { kind: 7 })
        );
        let mut bad = p.clone();
        bad[12..14].fill(0);
        assert!(matches!(
            SymbolHeader::parse(&bad, 8),
            Err(Error::Invalid {
                field: "symbols",
                ..
            })
        ));
        let mut bad = p.clone();
        bad[14..16].copy_from_slice(&9u16.to_be_bytes());
        assert!(matches!(
            SymbolHeader::parse(&bad, 8),
            Err(Error::Invalid { field: "tail", .. })
        ));

        let fb = Feedback {
            next: 1,
            expected: 5,
            received: 4,
            runs: 1,
            requests: vec![Request {
                block: 1,
                needed: 2,
            }],
        };
        let mut buf = [0u8; MAX_FEEDBACK_LEN];
        let n = fb.write(&mut buf).unwrap();
        assert!(matches!(
            Feedback::parse(&buf[..n - 1]),
            Err(Error::Truncated { .. })
        ));
        let mut bad = buf;
        bad[17] = 65;
        assert!(matches!(
            Feedback::parse(&bad[..n]),
            Err(Error::Invalid {
                field: "requests",
                ..
            })
        ));
        let mut bad = buf;
        bad[9..13].copy_from_slice(&6u32.to_be_bytes());
        assert!(matches!(
            Feedback::parse(&bad[..n]),
            Err(Error::Invalid {
                field: "received",
                ..
            })
        ));
        assert!(matches!(
            SymbolHeader {
                esi: MAX_ESI + 1,
                ..h
            }
            .write(&mut p),
            Err(Error::Exhausted { .. })
        ));
        // u32::MAX as a sequence number: never written, refused when read (a receiver
        // counts up to the next one).
        assert!(matches!(
            SymbolHeader { seq: u32::MAX, ..h }.write(&mut p),
            Err(Error::Exhausted { .. })
        ));
        let mut bad = p.clone();
        bad[1..5].copy_from_slice(&u32::MAX.to_be_bytes());
        assert!(matches!(
            SymbolHeader::parse(&bad, 8),
            Err(Error::Invalid { field: "seq", .. })
        ));
        bad[1..5].copy_from_slice(&MAX_SEQ.to_be_bytes());
        assert_eq!(
            SymbolHeader::parse(&bad, 8).map(|(h, _)| h.seq),
            Ok(MAX_SEQ)
        );
    }
}
