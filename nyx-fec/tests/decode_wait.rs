//! When a large block that lost source symbols decodes: once 16 symbols beyond K arrived
//! (RaptorQ's decode is cheaper then), or with exactly K once no more are coming (a later
//! block began, or nothing of the block arrived for 2 ms); and, with decodes handed out as
//! jobs, only when its job's outcome comes back.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::time::Duration;

use nyx_core::Timestamp;
use nyx_fec::packet::{MAX_FEEDBACK_LEN, SYMBOL_HEADER_LEN, SymbolHeader};
use nyx_fec::{FecConfig, Receiver, Sender};

const T: u16 = 64;
/// A block of 512 source symbols: the smallest that waits for extra symbols.
const K: usize = 512;
/// Source symbols lost from the front of block 0.
const LOST: usize = 10;

fn config() -> FecConfig {
    FecConfig {
        symbol_size: T,
        max_block_symbols: K as u16,
        max_blocks_in_flight: 4,
        ..FecConfig::default()
    }
}

fn ms(n: u64) -> Timestamp {
    Timestamp::ZERO.saturating_add(Duration::from_millis(n))
}

/// `blocks` full blocks written and sent (with the up-front repair of the 5% prior), the
/// first `LOST` source symbols of block 0 dropped: the data and the packets, in order.
fn sent(blocks: usize) -> (Vec<u8>, Vec<Vec<u8>>) {
    let mut tx = Sender::new(config(), ms(0)).unwrap();
    let data: Vec<u8> = (0..blocks * K * usize::from(T))
        .map(|i| (i * 13 + i / 7) as u8)
        .collect();
    tx.write(&data, ms(0)).unwrap();
    tx.flush(ms(0)).unwrap();
    let mut buf = vec![0u8; SYMBOL_HEADER_LEN + usize::from(T)];
    let mut packets = Vec::new();
    while let Some(n) = tx.poll_transmit(ms(0), &mut buf).unwrap() {
        let (h, _) = SymbolHeader::parse(&buf[..n], T).unwrap();
        if h.block != 0 || h.esi as usize >= LOST {
            packets.push(buf[..n].to_vec());
        }
    }
    (data, packets)
}

fn block_of(packet: &[u8]) -> u32 {
    SymbolHeader::parse(packet, T).unwrap().0.block
}

/// Feed block 0's packets until it holds `held` symbols; returns the rest.
fn feed_block0(rx: &mut Receiver, packets: &[Vec<u8>], held: usize, now: Timestamp) -> usize {
    let block0: Vec<&Vec<u8>> = packets.iter().filter(|p| block_of(p) == 0).collect();
    assert!(
        block0.len() >= K + 16,
        "the prior's up-front repair leaves {} symbols",
        block0.len()
    );
    for p in &block0[..held] {
        rx.handle_packet(p, now).unwrap();
    }
    block0.len()
}

#[test]
fn a_large_block_decodes_once_sixteen_symbols_beyond_k_arrived() {
    let (data, packets) = sent(1);
    let mut rx = Receiver::new(config()).unwrap();
    // K symbols could decode, but the block waits; so it does at K + 15.
    feed_block0(&mut rx, &packets, K + 15, ms(1));
    assert_eq!(
        rx.readable(),
        0,
        "source symbol 0 is missing: nothing to read yet"
    );
    assert_eq!(rx.stats().decoded, 0);
    // The sixteenth extra symbol decodes it, without a timer.
    let block0: Vec<&Vec<u8>> = packets.iter().filter(|p| block_of(p) == 0).collect();
    rx.handle_packet(block0[K + 15], ms(1)).unwrap();
    assert_eq!(rx.readable(), data.len());
    assert_eq!(rx.stats().decoded, 1);
}

#[test]
fn a_block_with_exactly_k_decodes_once_nothing_more_arrived_for_2_ms() {
    let (data, packets) = sent(1);
    let mut rx = Receiver::new(config()).unwrap();
    feed_block0(&mut rx, &packets, K, ms(1));
    // A report is due at once; after it, the next thing due is the decode, 2 ms after the
    // block's last symbol.
    let mut fb = [0u8; MAX_FEEDBACK_LEN];
    assert!(rx.poll_feedback(ms(1), &mut fb).unwrap().is_some());
    assert_eq!(rx.poll_timeout(), Some(ms(3)));
    rx.handle_timeout(ms(2));
    assert_eq!(rx.readable(), 0, "1 ms of quiet: still waiting");
    rx.handle_timeout(ms(3));
    assert_eq!(rx.readable(), data.len());
    assert_eq!(rx.stats().decoded, 1);
    // Nothing left to wait for: only the next report.
    assert!(rx.poll_timeout().is_none_or(|t| t > ms(3)));
}

#[test]
fn a_later_blocks_first_symbol_ends_the_wait() {
    let (data, packets) = sent(2);
    let mut rx = Receiver::new(config()).unwrap();
    feed_block0(&mut rx, &packets, K, ms(1));
    assert_eq!(rx.readable(), 0);
    // The sender has moved on to block 1: block 0 decodes with the K symbols it has.
    let first_of_1 = packets.iter().find(|p| block_of(p) == 1).unwrap();
    rx.handle_packet(first_of_1, ms(1)).unwrap();
    assert_eq!(rx.readable(), K * usize::from(T) + usize::from(T));
    let mut out = vec![0u8; rx.readable()];
    let n = rx.read(&mut out);
    assert_eq!(&out[..n], &data[..n]);
}

#[test]
fn a_small_block_decodes_at_k_without_waiting() {
    let config = FecConfig {
        max_block_symbols: 64,
        ..config()
    };
    let mut tx = Sender::new(config.clone(), ms(0)).unwrap();
    let mut rx = Receiver::new(config).unwrap();
    let data: Vec<u8> = (0..64 * usize::from(T)).map(|i| (i * 5) as u8).collect();
    tx.write(&data, ms(0)).unwrap();
    tx.flush(ms(0)).unwrap();
    let mut buf = vec![0u8; SYMBOL_HEADER_LEN + usize::from(T)];
    let mut held = 0;
    while let Some(n) = tx.poll_transmit(ms(0), &mut buf).unwrap() {
        let (h, _) = SymbolHeader::parse(&buf[..n], T).unwrap();
        if h.esi == 0 || held == 64 {
            continue;
        }
        rx.handle_packet(&buf[..n], ms(0)).unwrap();
        held += 1;
    }
    assert_eq!(held, 64, "the up-front repair covers the lost symbol");
    assert_eq!(rx.readable(), data.len(), "decoded at exactly K");
}

#[test]
fn with_decode_jobs_a_block_completes_when_its_job_comes_back() {
    let (data, packets) = sent(2);
    let mut rx = Receiver::new(config()).unwrap();
    rx.offload_decodes();
    assert!(rx.poll_decode().is_none(), "nothing to decode yet");
    let total = feed_block0(&mut rx, &packets, K + 16, ms(1));
    // Enough for the cheap decode: handed out once, not run here.
    let job = rx.poll_decode().expect("block 0's decode");
    assert_eq!(job.block(), 0);
    assert!(rx.poll_decode().is_none(), "a job is handed out once");
    assert_eq!(
        rx.readable(),
        0,
        "source symbol 0 is missing: nothing to read"
    );
    // The block keeps taking symbols, and neither they, a later block nor the decode
    // timer decode it here.
    let block0: Vec<&Vec<u8>> = packets.iter().filter(|p| block_of(p) == 0).collect();
    for p in &block0[K + 16..total] {
        rx.handle_packet(p, ms(2)).unwrap();
    }
    for p in packets.iter().filter(|p| block_of(p) == 1) {
        rx.handle_packet(p, ms(2)).unwrap();
    }
    rx.handle_timeout(ms(10));
    assert_eq!(rx.readable(), 0);
    assert_eq!(rx.stats().decoded, 0);
    // Block 1 lost nothing: complete, waiting behind block 0.
    assert!(rx.poll_decode().is_none());
    rx.handle_decoded(job.run());
    assert_eq!(rx.stats().decoded, 1);
    assert_eq!(rx.readable(), data.len(), "both blocks, in order");
    let mut out = vec![0u8; data.len()];
    assert_eq!(rx.read(&mut out), data.len());
    assert_eq!(out, data);
    // A second outcome for a block already delivered is ignored.
    let (_, again) = sent(1);
    let mut other = Receiver::new(config()).unwrap();
    other.offload_decodes();
    feed_block0(&mut other, &again, K + 16, ms(1));
    rx.handle_decoded(other.poll_decode().unwrap().run());
    assert_eq!(rx.readable(), 0);
}
