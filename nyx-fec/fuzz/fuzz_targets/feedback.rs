//! Arbitrary feedback messages into a sender with blocks in flight: typed errors, never a
//! panic, and the sender's packets stay well-formed (they parse, with fresh symbol ids).
#![no_main]

use std::collections::HashSet;

use libfuzzer_sys::fuzz_target;
use nyx_core::Timestamp;
use nyx_fec::packet::{SYMBOL_HEADER_LEN, SymbolHeader};
use nyx_fec::{FecConfig, Sender};

const SYMBOL: u16 = 8;

fuzz_target!(|data: &[u8]| {
    let config = FecConfig {
        symbol_size: SYMBOL,
        max_block_symbols: 4,
        max_blocks_in_flight: 4,
        ..FecConfig::default()
    };
    let mut tx = Sender::new(config, Timestamp::ZERO).expect("valid config");
    tx.write(&[7u8; 100], Timestamp::ZERO).expect("write");
    tx.flush(Timestamp::ZERO).expect("flush");
    let mut buf = [0u8; SYMBOL_HEADER_LEN + SYMBOL as usize];
    let mut seen = HashSet::new();
    let mut drain = |tx: &mut Sender, now: Timestamp| {
        // Bounded: a feedback can ask for at most 64 blocks × 0xffff symbols.
        for _ in 0..10_000 {
            match tx.poll_transmit(now, &mut buf) {
                Ok(Some(n)) => {
                    let (h, _) = SymbolHeader::parse(&buf[..n], SYMBOL).expect("own packet parses");
                    assert!(seen.insert((h.block, h.esi)), "symbol id sent twice");
                }
                Ok(None) | Err(_) => break,
            }
        }
    };
    drain(&mut tx, Timestamp::ZERO);
    // The input is a sequence of (length byte, message).
    let mut rest = data;
    let mut i = 0u64;
    while let Some((&len, tail)) = rest.split_first() {
        let len = usize::from(len).min(tail.len());
        let (msg, after) = tail.split_at(len);
        rest = after;
        i += 1;
        let now = Timestamp::from_nanos(i * 100_000_000);
        let _ = tx.handle_feedback(msg, now);
        let _ = tx.handle_timeout(now);
        drain(&mut tx, now);
    }
});
