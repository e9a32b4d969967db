//! Arbitrary sequences of symbol packets into a receiver (the input is split into packets of
//! one symbol size), with the receiver's timer run after each: typed errors, never a panic,
//! and what is delivered never exceeds what the packets could describe. Blocks of up to
//! 1 024 symbols, so that large blocks wait for extra symbols as they do in streams.
#![no_main]

use libfuzzer_sys::fuzz_target;
use nyx_core::Timestamp;
use nyx_fec::packet::{SYMBOL_HEADER_LEN, SymbolHeader};
use nyx_fec::{FecConfig, Receiver};

const SYMBOL: u16 = 8;

fuzz_target!(|data: &[u8]| {
    let config = FecConfig {
        symbol_size: SYMBOL,
        max_block_symbols: 1024,
        max_blocks_in_flight: 4,
        ..FecConfig::default()
    };
    let mut rx = Receiver::new(config).expect("valid config");
    let len = SYMBOL_HEADER_LEN + usize::from(SYMBOL);
    let mut out = [0u8; 4096];
    for (i, chunk) in data.chunks(len).enumerate() {
        let _ = SymbolHeader::parse(chunk, SYMBOL);
        let now = Timestamp::from_nanos(i as u64 * 1_000_000);
        let _ = rx.handle_packet(chunk, now);
        rx.handle_timeout(now);
        let mut fb = [0u8; nyx_fec::packet::MAX_FEEDBACK_LEN];
        let _ = rx.poll_feedback(now, &mut fb).expect("buffer is large enough");
        let _ = rx.read(&mut out);
    }
    // At most 4 blocks of at most 56403 symbols can ever be delivered from 4 in the window
    // plus those already delivered; a cheap sanity bound on runaway delivery.
    assert!(rx.stats().bytes <= data.len() as u64 * 56403);
});
