//! Behaviour of the block codec and the repair loop, packet by packet.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::collections::HashSet;
use std::time::Duration;

use nyx_core::Timestamp;
use nyx_fec::packet::{MAX_FEEDBACK_LEN, MAX_SEQ, SYMBOL_HEADER_LEN, SymbolHeader};
use nyx_fec::{Error, FecConfig, Receiver, Sender};

const T0: Timestamp = Timestamp::ZERO;

fn config() -> FecConfig {
    FecConfig {
        symbol_size: 64,
        max_block_symbols: 16,
        max_blocks_in_flight: 4,
        ..FecConfig::default()
    }
}

fn ms(n: u64) -> Timestamp {
    T0.saturating_add(Duration::from_millis(n))
}

fn drain(tx: &mut Sender, now: Timestamp) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut buf = vec![0u8; SYMBOL_HEADER_LEN + 64];
    while let Some(n) = tx.poll_transmit(now, &mut buf).unwrap() {
        out.push(buf[..n].to_vec());
    }
    out
}

fn read_all(rx: &mut Receiver) -> Vec<u8> {
    let mut out = vec![0u8; rx.readable()];
    let n = rx.read(&mut out);
    out.truncate(n);
    out
}

fn feedback(rx: &mut Receiver, now: Timestamp) -> Option<Vec<u8>> {
    let mut buf = [0u8; MAX_FEEDBACK_LEN];
    rx.poll_feedback(now, &mut buf)
        .unwrap()
        .map(|n| buf[..n].to_vec())
}

#[test]
fn small_writes_wait_at_most_the_flush_delay() {
    let mut tx = Sender::new(config(), T0).unwrap();
    let mut rx = Receiver::new(config()).unwrap();
    assert_eq!(tx.write(b"ping", T0).unwrap(), 4);
    assert!(drain(&mut tx, T0).is_empty(), "held for the flush delay");
    let due = tx.poll_timeout().unwrap();
    assert_eq!(due, T0.saturating_add(config().flush_delay));
    tx.handle_timeout(due).unwrap();
    for p in drain(&mut tx, due) {
        rx.handle_packet(&p, due).unwrap();
    }
    assert_eq!(read_all(&mut rx), b"ping");
    // An explicit flush sends at once.
    tx.write(b"pong", due).unwrap();
    tx.flush(due).unwrap();
    for p in drain(&mut tx, due) {
        rx.handle_packet(&p, due).unwrap();
    }
    assert_eq!(read_all(&mut rx), b"pong");
}

#[test]
fn sequence_numbers_at_the_top_of_the_range_are_refused_or_counted_without_overflow() {
    let mut tx = Sender::new(config(), T0).unwrap();
    let mut rx = Receiver::new(config()).unwrap();
    let data: Vec<u8> = (0..2 * 16 * 64).map(|i| (i * 13) as u8).collect();
    assert_eq!(tx.write(&data, T0).unwrap(), data.len());
    tx.flush(T0).unwrap();
    let packets = drain(&mut tx, T0);
    // A peer's packet stamped u32::MAX (no sender makes one) is refused whole, before the
    // receiver counts it: its loss accounting would have to step past u32::MAX.
    let mut forged = packets[0].clone();
    forged[1..5].copy_from_slice(&u32::MAX.to_be_bytes());
    assert!(matches!(
        rx.handle_packet(&forged, T0),
        Err(Error::Invalid { field: "seq", .. })
    ));
    assert_eq!(rx.stats().packets, 0, "nothing of it was counted");
    // The highest legal number, then the genuine packets: counted, delivered, reported.
    let mut top = packets[0].clone();
    top[1..5].copy_from_slice(&MAX_SEQ.to_be_bytes());
    rx.handle_packet(&top, T0).unwrap();
    for p in &packets {
        rx.handle_packet(p, T0).unwrap();
    }
    assert_eq!(read_all(&mut rx), data);
    assert!(feedback(&mut rx, ms(20)).is_some());
}

#[test]
fn duplicates_reordering_and_late_symbols_are_tolerated() {
    let mut tx = Sender::new(config(), T0).unwrap();
    let mut rx = Receiver::new(config()).unwrap();
    let data: Vec<u8> = (0..3 * 16 * 64 - 5).map(|i| (i * 7) as u8).collect();
    assert_eq!(tx.write(&data, T0).unwrap(), data.len());
    tx.flush(T0).unwrap();
    let mut packets = drain(&mut tx, T0);
    packets.reverse();
    let copies: Vec<Vec<u8>> = packets.iter().step_by(3).cloned().collect();
    for p in packets.iter().chain(&copies) {
        rx.handle_packet(p, T0).unwrap();
    }
    assert_eq!(read_all(&mut rx), data);
    // Symbols of delivered blocks change nothing.
    for p in &packets {
        rx.handle_packet(p, T0).unwrap();
    }
    assert_eq!(rx.readable(), 0);
    assert!(rx.stats().duplicates > 0 && rx.stats().late > 0);
}

#[test]
fn the_window_bounds_memory_on_both_sides() {
    let cfg = config();
    let mut tx = Sender::new(cfg.clone(), T0).unwrap();
    let mut rx = Receiver::new(cfg.clone()).unwrap();
    let big = vec![1u8; 10 * cfg.block_bytes()];
    let taken = tx.write(&big, T0).unwrap();
    // The cap's blocks, and one open block that waits for room.
    let cap = cfg.max_blocks_in_flight as usize;
    assert_eq!(taken, (cap + 1) * cfg.block_bytes());
    assert_eq!(tx.blocks_in_flight(), cap);
    assert_eq!(tx.write(&big, T0).unwrap(), 0, "backpressure at the cap");
    for p in drain(&mut tx, T0) {
        rx.handle_packet(&p, T0).unwrap();
    }
    let fb = feedback(&mut rx, ms(1)).unwrap();
    tx.handle_feedback(&fb, ms(1)).unwrap();
    assert_eq!(
        tx.blocks_in_flight(),
        1,
        "the waiting block closed once there was room"
    );
    assert_eq!(tx.unflushed(), 0);
    assert!(
        tx.write(&big, ms(1)).unwrap() > 0,
        "room again after the acknowledgement"
    );

    // A packet beyond the receiver's window is refused with a clear error.
    let mut packet = vec![0u8; SYMBOL_HEADER_LEN + 64];
    let block = rx.next_block() + cfg.max_blocks_in_flight;
    SymbolHeader {
        seq: 9999,
        block,
        esi: 0,
        symbols: 1,
        tail: 1,
    }
    .write(&mut packet)
    .unwrap();
    assert!(matches!(
        rx.handle_packet(&packet, ms(1)),
        Err(Error::BlockOutOfWindow { .. })
    ));
}

#[test]
fn a_block_cannot_change_shape() {
    let mut rx = Receiver::new(config()).unwrap();
    let mut packet = vec![0u8; SYMBOL_HEADER_LEN + 64];
    SymbolHeader {
        seq: 0,
        block: 0,
        esi: 0,
        symbols: 4,
        tail: 64,
    }
    .write(&mut packet)
    .unwrap();
    rx.handle_packet(&packet, T0).unwrap();
    SymbolHeader {
        seq: 1,
        block: 0,
        esi: 1,
        symbols: 5,
        tail: 64,
    }
    .write(&mut packet)
    .unwrap();
    assert_eq!(
        rx.handle_packet(&packet, T0),
        Err(Error::BlockMismatch { block: 0 })
    );
    SymbolHeader {
        seq: 2,
        block: 0,
        esi: 1,
        symbols: 4,
        tail: 3,
    }
    .write(&mut packet)
    .unwrap();
    assert_eq!(
        rx.handle_packet(&packet, T0),
        Err(Error::BlockMismatch { block: 0 })
    );
}

#[test]
fn a_block_larger_than_the_receiver_accepts_is_refused() {
    let mut rx = Receiver::new(config()).unwrap();
    let mut packet = vec![0u8; SYMBOL_HEADER_LEN + 64];
    SymbolHeader {
        seq: 0,
        block: 0,
        esi: 0,
        symbols: config().max_block_symbols + 1,
        tail: 64,
    }
    .write(&mut packet)
    .unwrap();
    assert_eq!(
        rx.handle_packet(&packet, T0),
        Err(Error::BlockTooLarge {
            block: 0,
            symbols: 17,
            max: 16
        })
    );
    assert_eq!(rx.held_bytes(), 0);
    assert_eq!(rx.stats().packets, 0, "nothing of it was taken");
}

/// What a receiver holds for bytes not yet readable is counted: symbols past a gap (and
/// the gap), a complete block while it waits for an earlier one; a block's leading bytes
/// are readable at once and nothing once read.
#[test]
fn held_bytes_count_what_waits_for_delivery() {
    let (mut tx, mut rx, data) = two_blocks(|i| (i * 3) as u8);
    let (first, second) = source_symbols(&mut tx);
    // Block 0's first symbol is readable at once; its third waits for the second, and the
    // gap between them is held too.
    rx.handle_packet(&first[0], T0).unwrap();
    assert_eq!((rx.readable(), rx.held_bytes()), (64, 0));
    rx.handle_packet(&first[2], T0).unwrap();
    assert_eq!((rx.readable(), rx.held_bytes()), (64, 2 * 64));
    for p in &second[..3] {
        rx.handle_packet(p, T0).unwrap();
    }
    assert_eq!(rx.held_bytes(), 5 * 64);
    for p in &second[3..] {
        rx.handle_packet(p, T0).unwrap();
    }
    // Block 1 complete (16 * 64 - 10 bytes) waits for block 0.
    assert_eq!(rx.readable(), 64);
    assert_eq!(rx.held_bytes(), 2 * 64 + 16 * 64 - 10);
    rx.handle_packet(&first[1], T0).unwrap();
    assert_eq!((rx.readable(), rx.held_bytes()), (3 * 64, 16 * 64 - 10));
    for p in &first[3..] {
        rx.handle_packet(p, T0).unwrap();
    }
    assert_eq!(rx.held_bytes(), 0);
    assert_eq!(read_all(&mut rx), data);
}

/// A sender that wrote (and flushed) two blocks of `byte(i)` less 10 bytes, a receiver, and
/// the data.
fn two_blocks(byte: impl Fn(usize) -> u8) -> (Sender, Receiver, Vec<u8>) {
    let mut tx = Sender::new(config(), T0).unwrap();
    let rx = Receiver::new(config()).unwrap();
    let data: Vec<u8> = (0..2 * 16 * 64 - 10).map(byte).collect();
    tx.write(&data, T0).unwrap();
    tx.flush(T0).unwrap();
    (tx, rx, data)
}

/// The source symbols of blocks 0 and 1, in order (up-front repair left out).
fn source_symbols(tx: &mut Sender) -> (Vec<Vec<u8>>, Vec<Vec<u8>>) {
    let (mut first, mut second) = (Vec::new(), Vec::new());
    for p in drain(tx, T0) {
        let (h, _) = SymbolHeader::parse(&p, 64).unwrap();
        if h.esi < u32::from(h.symbols) {
            [&mut first, &mut second][h.block as usize].push(p);
        }
    }
    assert_eq!((first.len(), second.len()), (16, 16));
    (first, second)
}

/// A reader gets a block's bytes up to its first missing symbol without waiting for the
/// block, and the rest, in order, once repair decodes it; nothing is read twice.
#[test]
fn a_blocks_lead_is_readable_before_the_block_is_complete() {
    let (mut tx, mut rx, data) = two_blocks(|i| (i * 7 + 1) as u8);
    let mut packets = drain(&mut tx, T0);
    // Symbol 5 of block 0 is lost.
    packets.retain(|p| {
        let (h, _) = SymbolHeader::parse(p, 64).unwrap();
        (h.block, h.esi) != (0, 5)
    });
    let mut got = Vec::new();
    let mut buf = [0u8; 100];
    for p in &packets {
        let (h, _) = SymbolHeader::parse(p, 64).unwrap();
        rx.handle_packet(p, T0).unwrap();
        if (h.block, h.esi) == (0, 3) {
            // Four symbols in: all four readable, a part of them read now.
            assert_eq!(rx.readable(), 4 * 64);
            let n = rx.read(&mut buf);
            got.extend_from_slice(&buf[..n]);
        }
        if (h.block, h.esi) == (0, 15) {
            // The rest of the lead, up to the missing symbol.
            assert_eq!(rx.readable(), 5 * 64 - got.len());
        }
    }
    got.extend(read_all(&mut rx));
    assert_eq!(got, data);
    assert_eq!(rx.stats().decoded, 1, "only block 0 needed RaptorQ");
    assert_eq!(rx.stats().blocks, 2);
}

/// A repair symbol that arrives twice counts once: the block waits for K distinct symbols,
/// then decodes.
#[test]
fn a_repeated_repair_symbol_does_not_stand_in_for_a_missing_one() {
    let (mut tx, mut rx, data) = two_blocks(|i| (i * 11 + 2) as u8);
    let (first, second) = source_symbols(&mut tx);
    // Block 0 loses symbols 5 and 6; block 1 arrives whole.
    for (i, p) in first.iter().enumerate() {
        if i != 5 && i != 6 {
            rx.handle_packet(p, T0).unwrap();
        }
    }
    for p in &second {
        rx.handle_packet(p, T0).unwrap();
    }
    // The sender answers the report with fresh repair for block 0.
    let later = ms(1000);
    let fb = feedback(&mut rx, later).expect("a report");
    tx.handle_feedback(&fb, later).unwrap();
    let repair: Vec<Vec<u8>> = drain(&mut tx, later)
        .into_iter()
        .filter(|p| SymbolHeader::parse(p, 64).unwrap().0.block == 0)
        .collect();
    assert!(repair.len() >= 2, "{} repair symbols", repair.len());
    rx.handle_packet(&repair[0], later).unwrap();
    rx.handle_packet(&repair[0], later).unwrap();
    assert_eq!(
        rx.readable(),
        5 * 64,
        "15 distinct symbols: block 0 cannot decode"
    );
    rx.handle_packet(&repair[1], later).unwrap();
    assert_eq!(read_all(&mut rx), data);
    assert_eq!(rx.stats().decoded, 1);
}

/// Drop every packet the filter rejects, run the feedback loop until delivery; returns
/// every (block, esi) sent.
fn lossy_transfer(
    data: &[u8],
    mut keep: impl FnMut(u64, u64, &SymbolHeader) -> bool,
) -> Vec<(u32, u32)> {
    let cfg = config();
    let mut tx = Sender::new(cfg.clone(), T0).unwrap();
    let mut rx = Receiver::new(cfg.clone()).unwrap();
    let mut sent = Vec::new();
    let mut written = 0;
    let mut got = Vec::new();
    let mut count = 0u64;
    for step in 0..20_000u64 {
        let now = ms(step);
        if written < data.len() {
            written += tx.write(&data[written..], now).unwrap();
            if written == data.len() {
                tx.flush(now).unwrap();
            }
        }
        if tx.poll_timeout().is_some_and(|t| t <= now) {
            tx.handle_timeout(now).unwrap();
        }
        for p in drain(&mut tx, now) {
            let (h, _) = SymbolHeader::parse(&p, cfg.symbol_size).unwrap();
            sent.push((h.block, h.esi));
            count += 1;
            if keep(step, count, &h) {
                rx.handle_packet(&p, now).unwrap();
            }
        }
        if let Some(fb) = feedback(&mut rx, now) {
            tx.handle_feedback(&fb, now).unwrap();
        }
        got.extend(read_all(&mut rx));
        if got.len() == data.len() && tx.is_idle() {
            assert_eq!(got, data);
            return sent;
        }
    }
    panic!("not delivered: {} of {} bytes", got.len(), data.len());
}

#[test]
fn repairs_are_fresh_symbols_never_resent_ones() {
    let data: Vec<u8> = (0..5 * 16 * 64).map(|i| (i % 251) as u8).collect();
    // Heavy loss: keep one packet in three.
    let sent = lossy_transfer(&data, |_, n, _| n % 3 == 0);
    let unique: HashSet<_> = sent.iter().collect();
    assert_eq!(unique.len(), sent.len(), "a symbol id was sent twice");
    assert!(
        sent.iter().any(|&(_, esi)| esi >= 16),
        "repair symbols were needed"
    );
}

#[test]
fn a_block_whose_every_packet_is_lost_is_found_by_a_probe() {
    let data: Vec<u8> = (0..2 * 16 * 64).map(|i| (i % 13) as u8).collect();
    // Both blocks' first rounds go out at step 0 and every packet of block 1 among them is
    // lost, so the receiver does not know the block exists until the sender's probe (due
    // after `probe_timeout`, 200 ms).
    let mut first_kept_at = None;
    let sent = lossy_transfer(&data, |step, _, h| {
        let keep = !(h.block == 1 && step == 0);
        if keep && h.block == 1 && first_kept_at.is_none() {
            first_kept_at = Some(step);
        }
        keep
    });
    assert!(first_kept_at.unwrap() >= 200, "{first_kept_at:?}");
    let block1 = sent.iter().filter(|(b, _)| *b == 1).count();
    assert!(block1 > 2 * 16, "first round, probe and repairs: {block1}");
}

#[test]
fn a_huge_sequence_number_costs_no_more_than_a_small_one() {
    // Found by the `symbol_packet` fuzz target: a first packet with seq near 2^32 made the
    // receiver settle four billion sequence numbers one by one. Now a gap beyond the bitmap
    // is settled in one step.
    let mut rx = Receiver::new(config()).unwrap();
    let mut packet = vec![0u8; SYMBOL_HEADER_LEN + 64];
    for (i, seq) in [u32::MAX - 1, 3, u32::MAX - 300, 1 << 31]
        .into_iter()
        .enumerate()
    {
        SymbolHeader {
            seq,
            block: 0,
            esi: i as u32,
            symbols: 8,
            tail: 64,
        }
        .write(&mut packet)
        .unwrap();
        rx.handle_packet(&packet, T0).unwrap();
    }
    let fb = rx.feedback(T0);
    assert!(fb.received <= fb.expected);
    // Everything at least 256 below the highest (u32::MAX - 1) is settled as lost: the later
    // packets that far back arrived after it was settled and count as too old. The old code
    // would still be looping here.
    assert_eq!(fb.expected, u32::MAX - 256);
    assert_eq!(fb.received, 0);
    assert_eq!(rx.stats().duplicates, 3);
}
