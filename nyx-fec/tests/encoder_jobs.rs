//! A block's encoder built off the packet path (`Sender::poll_prepare`): the repair symbols
//! are the same as those of an encoder built inline, a job that never comes back costs
//! only the inline build, a late one is dropped, and no job is offered where none helps.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use nyx_core::Timestamp;
use nyx_fec::packet::{SYMBOL_HEADER_LEN, SymbolHeader};
use nyx_fec::{FecConfig, PREPARE_MIN_SYMBOLS, Receiver, Sender};

const T: u16 = 64;
const K: usize = PREPARE_MIN_SYMBOLS as usize;
/// Source symbols lost from the front of block 0 (repair must fill them in).
const LOST: usize = 12;

fn config(k: usize) -> FecConfig {
    FecConfig {
        symbol_size: T,
        max_block_symbols: k as u16,
        max_blocks_in_flight: 4,
        ..FecConfig::default()
    }
}

fn data(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 31 + i / 5) as u8).collect()
}

/// A sender of `blocks` full blocks of `k` symbols, planning for 5% loss.
fn loaded(k: usize, blocks: usize, loss: f64) -> (Sender, Vec<u8>) {
    let now = Timestamp::ZERO;
    let mut tx = Sender::new(config(k), now).unwrap();
    tx.seed_loss(loss, 1.0);
    let bytes = data(blocks * k * usize::from(T));
    assert_eq!(tx.write(&bytes, now).unwrap(), bytes.len());
    tx.flush(now).unwrap();
    (tx, bytes)
}

/// Every packet the sender has, in order.
fn drain(tx: &mut Sender) -> Vec<Vec<u8>> {
    let mut buf = vec![0u8; SYMBOL_HEADER_LEN + usize::from(T)];
    let mut packets = Vec::new();
    while let Some(n) = tx.poll_transmit(Timestamp::ZERO, &mut buf).unwrap() {
        packets.push(buf[..n].to_vec());
    }
    packets
}

/// What a receiver reads when block 0's first `LOST` source symbols are lost.
fn delivered(k: usize, packets: &[Vec<u8>]) -> Vec<u8> {
    let mut rx = Receiver::new(config(k)).unwrap();
    for p in packets {
        let (h, _) = SymbolHeader::parse(p, T).unwrap();
        if h.block == 0 && (h.esi as usize) < LOST {
            continue;
        }
        rx.handle_packet(p, Timestamp::ZERO).unwrap();
    }
    rx.handle_timeout(Timestamp::ZERO.saturating_add(std::time::Duration::from_secs(1)));
    let mut out = vec![0u8; 1 << 20];
    let n = rx.read(&mut out);
    out.truncate(n);
    out
}

#[test]
fn a_prepared_encoder_sends_the_repair_an_inline_one_would() {
    let (mut inline, bytes) = loaded(K, 2, 0.05);
    let expected = drain(&mut inline);
    assert_eq!(inline.stats().encoders_inline, 2);

    let (mut tx, _) = loaded(K, 2, 0.05);
    let jobs: Vec<_> = std::iter::from_fn(|| tx.poll_prepare()).collect();
    assert_eq!(
        jobs.iter().map(|j| j.block()).collect::<Vec<_>>(),
        [0, 1],
        "one job for each of the two blocks, each offered once"
    );
    // Run on another thread, as a driver would.
    let prepared =
        std::thread::spawn(move || jobs.into_iter().map(|j| j.run()).collect::<Vec<_>>())
            .join()
            .unwrap();
    for p in prepared {
        tx.handle_prepared(p);
    }
    let packets = drain(&mut tx);
    let stats = tx.stats();
    assert_eq!((stats.encoders_inline, stats.encoders_prepared), (0, 2));
    assert_eq!(stats.encoder_jobs, 2);
    assert!(packets.len() > 2 * K, "up-front repair was planned");
    assert_eq!(packets, expected, "the same symbols, byte for byte");
    assert_eq!(delivered(K, &packets), bytes);
}

#[test]
fn a_job_that_never_returns_costs_only_the_inline_build() {
    let (mut tx, bytes) = loaded(K, 1, 0.05);
    let job = tx.poll_prepare().unwrap();
    drop(job);
    assert!(tx.poll_prepare().is_none(), "offered once");
    let packets = drain(&mut tx);
    assert_eq!(tx.stats().encoders_inline, 1);
    assert_eq!(delivered(K, &packets), bytes);
}

#[test]
fn a_late_encoder_is_dropped() {
    let (mut tx, bytes) = loaded(K, 1, 0.05);
    let job = tx.poll_prepare().unwrap();
    let mut packets = drain(&mut tx);
    // Every symbol left (the encoder was built inline); the job's result changes nothing.
    tx.handle_prepared(job.run());
    assert_eq!(tx.stats().encoders_prepared, 0);
    assert_eq!(tx.stats().encoders_inline, 1);
    packets.extend(drain(&mut tx));
    assert_eq!(delivered(K, &packets), bytes);
}

#[test]
fn no_job_where_none_helps() {
    // A path measured clean plans no repair: no encoder at all.
    let (mut clean, _) = loaded(K, 1, 0.0);
    assert!(clean.poll_prepare().is_none());
    drain(&mut clean);
    assert_eq!(clean.stats().encoders_inline, 0);
    // A small block builds inline: a hand-off would cost more than the build.
    let (mut small, _) = loaded(K - 1, 1, 0.05);
    assert!(small.poll_prepare().is_none());
    // Only the two oldest blocks that are still sending get one.
    let (mut many, _) = loaded(K, 4, 0.05);
    let blocks: Vec<u32> = std::iter::from_fn(|| many.poll_prepare())
        .map(|j| j.block())
        .collect();
    assert_eq!(blocks, [0, 1]);
}
