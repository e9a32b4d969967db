//! Unit tests of the sender: repair requests and their hold-offs, the flush delay, how
//! blocks coalesce, and the protection of a finished stream's tail.

use super::block::tail_repair;
use super::*;
use crate::packet::Request;
use crate::packet::{Feedback, NEEDED_ALL};

/// Blocks of up to 8 symbols of 16 bytes.
fn small_config() -> FecConfig {
    FecConfig {
        symbol_size: 16,
        max_block_symbols: 8,
        ..FecConfig::default()
    }
}

/// A sender of one 8-symbol block of 16-byte symbols, written at `now`.
fn one_block(now: Timestamp) -> Sender {
    let config = small_config();
    let mut tx = Sender::new(config, now).unwrap();
    tx.write(&[7u8; 128], now).unwrap();
    tx
}

/// Encoded feedback asking for `needed` symbols of block 0, and its length.
fn request(needed: u16) -> ([u8; 64], usize) {
    let fb = Feedback {
        next: 0,
        expected: 0,
        received: 0,
        runs: 0,
        requests: vec![Request { block: 0, needed }],
    };
    let mut bytes = [0u8; 64];
    let n = fb.write(&mut bytes).unwrap();
    (bytes, n)
}

#[test]
fn a_request_for_a_block_still_in_its_first_round_is_ignored() {
    let now = Timestamp::from_millis(100);
    let mut tx = one_block(now);
    let mut out = [0u8; 64];
    // Three of the eight source symbols leave; then an impatient request arrives.
    for _ in 0..3 {
        tx.poll_transmit(now, &mut out).unwrap().unwrap();
    }
    let (bytes, n) = request(NEEDED_ALL);
    tx.handle_feedback(&bytes[..n], now).unwrap();
    // The block goes on with its source symbols 3..8, in order.
    for esi in 3..8 {
        tx.poll_transmit(now, &mut out).unwrap().unwrap();
        let (h, _) = SymbolHeader::parse(&out[..SYMBOL_HEADER_LEN + 16], 16).unwrap();
        assert_eq!(h.esi, esi);
    }
    let stats = tx.stats();
    assert_eq!(stats.decided_blocks, 1, "up-front repair was chosen");
    assert_eq!(stats.second_round_blocks, 0);
    // Once the first round is out, a request is answered with fresh repair symbols.
    while tx.poll_transmit(now, &mut out).unwrap().is_some() {}
    let later = now.saturating_add(std::time::Duration::from_millis(1));
    tx.handle_feedback(&bytes[..n], later).unwrap();
    let m = tx.poll_transmit(later, &mut out).unwrap().unwrap();
    let (h, _) = SymbolHeader::parse(&out[..m], 16).unwrap();
    assert!(h.esi >= 8, "a repair symbol, not a resent source one");
    assert_eq!(tx.stats().second_round_blocks, 1);
}

#[test]
fn a_request_sooner_than_a_round_trip_after_the_last_symbol_is_ignored() {
    let t0 = Timestamp::from_millis(100);
    let mut tx = one_block(t0);
    tx.set_rtt(std::time::Duration::from_millis(300));
    let mut out = [0u8; 64];
    while tx.poll_transmit(t0, &mut out).unwrap().is_some() {}
    let (bytes, n) = request(3);
    // 100 ms after the last symbol left, the receiver cannot have had it: in flight.
    let early = t0.saturating_add(std::time::Duration::from_millis(100));
    tx.handle_feedback(&bytes[..n], early).unwrap();
    assert!(!tx.has_pending_symbols(), "{:?}", tx.stats());
    // A round trip later the report means loss: three are needed, more go out.
    let late = t0.saturating_add(std::time::Duration::from_millis(301));
    tx.handle_feedback(&bytes[..n], late).unwrap();
    assert!(tx.has_pending_symbols());
    let answered = tx.stats().requested_repair;
    assert!(answered >= 3, "{answered}");
    // While those wait to leave, the same report again asks for nothing more.
    let again = late.saturating_add(std::time::Duration::from_secs(1));
    tx.handle_feedback(&bytes[..n], again).unwrap();
    assert_eq!(tx.stats().requested_repair, answered);
}

/// Under Shadow, an exit whose circuit window held its symbols back closed a small
/// block at every flush deadline: blocks of 10 to 20 symbols, and the block window,
/// not the circuit's, capped what was in flight. A block that could not leave sooner
/// keeps filling instead.
#[test]
fn the_flush_delay_waits_while_earlier_symbols_are_queued() {
    let t0 = Timestamp::from_millis(100);
    let mut tx = one_block(t0);
    let delay = tx.config.flush_delay;
    // The first block is queued and unsent; a small write opens the next.
    tx.write(&[1u8; 20], t0).unwrap();
    assert_eq!(
        tx.poll_timeout(),
        None,
        "no flush deadline while symbols are queued"
    );
    let late = t0.saturating_add(delay * 3);
    tx.handle_timeout(late).unwrap();
    assert_eq!(
        tx.blocks_in_flight(),
        1,
        "still open: it would only wait in the queue"
    );
    tx.write(&[2u8; 60], late).unwrap();
    assert_eq!(tx.unflushed(), 80);
    // Once the queue is out, the overdue block closes at the next timeout.
    let mut out = [0u8; 64];
    while tx.poll_transmit(late, &mut out).unwrap().is_some() {}
    assert_eq!(tx.poll_timeout(), Some(t0.saturating_add(delay)));
    tx.handle_timeout(late).unwrap();
    assert_eq!((tx.blocks_in_flight(), tx.unflushed()), (2, 0));
}

/// A sender of 8-symbol blocks of 16-byte symbols with `window` blocks in flight at
/// most, two one-symbol blocks sent at `t0`.
fn two_small_blocks(window: u32, t0: Timestamp) -> Sender {
    let config = FecConfig {
        symbol_size: 16,
        max_block_symbols: 8,
        max_blocks_in_flight: window,
        ..FecConfig::default()
    };
    let mut tx = Sender::new(config, t0).unwrap();
    for _ in 0..2 {
        tx.write(&[1u8; 10], t0).unwrap();
        tx.flush(t0).unwrap();
    }
    let mut out = [0u8; 64];
    while tx.poll_transmit(t0, &mut out).unwrap().is_some() {}
    tx
}

#[test]
fn a_block_waits_for_its_share_of_what_is_in_flight() {
    let t0 = Timestamp::from_millis(100);
    // Two one-symbol blocks in flight: 32 bytes; a quarter of 4 blocks is one block,
    // so an early close needs 32 bytes.
    let mut tx = two_small_blocks(4, t0);
    let delay = tx.config.flush_delay;
    tx.write(&[2u8; 20], t0).unwrap();
    assert!(tx.coalescing());
    let late = t0.saturating_add(delay * 3);
    tx.handle_timeout(late).unwrap();
    assert_eq!((tx.blocks_in_flight(), tx.unflushed()), (2, 20));
    // With its share, the overdue block closes at the next timeout.
    tx.write(&[2u8; 20], late).unwrap();
    assert!(!tx.coalescing());
    assert_eq!(tx.poll_timeout(), Some(t0.saturating_add(delay)));
    tx.handle_timeout(late).unwrap();
    assert_eq!((tx.blocks_in_flight(), tx.unflushed()), (3, 0));
}

#[test]
fn a_push_waits_while_the_sender_coalesces_and_a_flush_does_not() {
    let t0 = Timestamp::from_millis(100);
    let mut tx = one_block(t0);
    // The first block's symbols are queued: a pushed block would only wait behind them.
    tx.write(&[1u8; 70], t0).unwrap();
    tx.push(t0).unwrap();
    assert_eq!((tx.blocks_in_flight(), tx.unflushed()), (1, 70));
    // Once they are out, it is due at once (not a flush delay later).
    let mut out = [0u8; 64];
    while tx.poll_transmit(t0, &mut out).unwrap().is_some() {}
    // (128 bytes in flight over a quarter of 8 blocks: 70 bytes are its share.)
    assert_eq!(tx.poll_timeout(), Some(t0));
    tx.handle_timeout(t0).unwrap();
    assert_eq!((tx.blocks_in_flight(), tx.unflushed()), (2, 0));
    // A flush closes at once whatever is queued.
    tx.write(&[2u8; 5], t0).unwrap();
    tx.flush(t0).unwrap();
    assert_eq!((tx.blocks_in_flight(), tx.unflushed()), (3, 0));
}

/// Drain `tx` at `now`: (block, esi) of every packet.
fn drain(tx: &mut Sender, now: Timestamp) -> Vec<(u32, u32)> {
    let mut out = [0u8; 64];
    let mut sent = Vec::new();
    while let Some(n) = tx.poll_transmit(now, &mut out).unwrap() {
        let (h, _) = SymbolHeader::parse(&out[..n], 16).unwrap();
        sent.push((h.block, h.esi));
    }
    sent
}

#[test]
fn a_finished_stream_protects_every_block_in_flight_when_its_last_symbol_leaves() {
    let t0 = Timestamp::from_millis(100);
    // A flush (more may follow): the source symbols and the controller's up-front
    // repair (its prior loss estimate asks for some).
    let mut flushed = one_block(t0);
    flushed.write(&[4u8; 40], t0).unwrap();
    flushed.flush(t0).unwrap();
    let plain = drain(&mut flushed, t0);
    let upfront = flushed.stats().upfront_repair;
    assert!(plain.iter().filter(|&&(_, esi)| esi < 3).count() == 6);
    // The same stream finished: one more fresh repair symbol for each block in flight,
    // after the last source symbol, once.
    let mut tx = one_block(t0);
    tx.write(&[4u8; 40], t0).unwrap();
    tx.finish(t0).unwrap();
    let mut sent = drain(&mut tx, t0);
    let next_esi = |block| {
        1 + plain
            .iter()
            .filter(|s| s.0 == block)
            .map(|s| s.1)
            .max()
            .unwrap()
    };
    let tail = [(0, next_esi(0)), (1, next_esi(1))];
    let mut expected = [plain.clone(), tail.to_vec()].concat();
    sent.sort();
    expected.sort();
    assert_eq!(sent, expected);
    assert_eq!(tx.stats().upfront_repair, upfront + 2);
    assert!(drain(&mut tx, t0).is_empty());
    // Finishing after everything left protects what is in flight at once.
    flushed.finish(t0).unwrap();
    assert_eq!(drain(&mut flushed, t0), tail);
}

#[test]
fn tail_repair_grows_with_the_block() {
    assert_eq!(tail_repair(1), 1);
    assert_eq!(tail_repair(199), 1);
    assert_eq!(tail_repair(200), 2);
    assert_eq!(tail_repair(1000), 6);
}

#[test]
fn a_writer_held_by_the_block_window_fills_one_open_block() {
    let t0 = Timestamp::from_millis(100);
    let mut tx = two_small_blocks(2, t0);
    // Two small blocks fill the window; the writer still fills a whole third block.
    assert_eq!(tx.write(&[3u8; 1000], t0).unwrap(), 128);
    assert_eq!(tx.write(&[3u8; 1000], t0).unwrap(), 0);
    assert!(!tx.can_write());
    assert_eq!(
        tx.poll_timeout(),
        Some(t0.saturating_add(tx.config.probe_timeout))
    );
    // Feedback for the first block makes room: the full block closes at once.
    let fb = Feedback {
        next: 1,
        expected: 0,
        received: 0,
        runs: 0,
        requests: Vec::new(),
    };
    let mut bytes = [0u8; 64];
    let n = fb.write(&mut bytes).unwrap();
    tx.handle_feedback(&bytes[..n], t0).unwrap();
    assert_eq!((tx.blocks_in_flight(), tx.unflushed()), (2, 0));
    assert!(tx.has_pending_symbols());
}

#[test]
fn once_the_round_trip_is_known_the_probe_waits_for_it_and_no_longer() {
    let t0 = Timestamp::from_millis(100);
    let after = |tx: &Sender| tx.poll_timeout().map(|t| t.saturating_duration_since(t0));
    let interval = FecConfig::default().feedback_interval;
    // Unknown round trip: the fixed default.
    let tx = two_small_blocks(4, t0);
    assert_eq!(after(&tx), Some(tx.config.probe_timeout));
    // A short path: a round trip and the receiver's feedback interval, far sooner.
    let mut tx = two_small_blocks(4, t0);
    tx.set_rtt(Duration::from_millis(3));
    assert_eq!(after(&tx), Some(Duration::from_millis(3) + interval));
    // A long path: never while a report may still be on its way, though that is later
    // than the default.
    let rtt = Duration::from_millis(300);
    tx.set_rtt(rtt);
    assert_eq!(after(&tx), Some(rtt + interval));
    assert!(rtt + interval > tx.config.probe_timeout);
    // Each probe that finds silence doubles the wait.
    let due = tx.poll_timeout().unwrap();
    tx.handle_timeout(due).unwrap();
    let mut out = [0u8; 64];
    assert!(
        tx.poll_transmit(due, &mut out).unwrap().is_some(),
        "the probe"
    );
    assert_eq!(
        tx.poll_timeout().map(|t| t.saturating_duration_since(due)),
        Some((rtt + interval) * 2)
    );
}

#[test]
fn the_sender_says_when_its_next_packet_builds_an_encoder() {
    let t0 = Timestamp::from_millis(100);
    let config = small_config();
    // A request: two source symbols, then the stream's tail repair.
    let mut tx = Sender::new(config.clone(), t0).unwrap();
    assert!(!tx.next_builds_encoder(), "nothing written");
    tx.write(&[9u8; 20], t0).unwrap();
    tx.finish(t0).unwrap();
    let mut out = [0u8; 64];
    for esi in 0..2 {
        assert!(!tx.next_builds_encoder(), "the source symbols go first");
        let n = tx.poll_transmit(t0, &mut out).unwrap().unwrap();
        assert_eq!(SymbolHeader::parse(&out[..n], 16).unwrap().0.esi, esi);
    }
    assert!(tx.next_builds_encoder(), "its repair needs an encoder");
    assert_eq!(tx.stats().encoders_inline, 0);
    let n = tx.poll_transmit(t0, &mut out).unwrap().unwrap();
    assert!(SymbolHeader::parse(&out[..n], 16).unwrap().0.esi >= 2);
    assert_eq!(tx.stats().encoders_inline, 1);
    // Further repair of the same block reuses it; once all is out nothing is due.
    while tx.has_pending_symbols() {
        assert!(!tx.next_builds_encoder());
        tx.poll_transmit(t0, &mut out).unwrap().unwrap();
    }
    assert!(!tx.next_builds_encoder());
    assert_eq!(tx.stats().encoders_inline, 1);

    // A block whose encoder came back from a job builds none inline.
    let config = FecConfig {
        symbol_size: 16,
        max_block_symbols: PREPARE_MIN_SYMBOLS,
        ..FecConfig::default()
    };
    let mut tx = Sender::new(config, t0).unwrap();
    tx.write(&[3u8; 16 * PREPARE_MIN_SYMBOLS as usize], t0)
        .unwrap();
    let job = tx
        .poll_prepare()
        .expect("the prior loss estimate plans repair");
    for _ in 0..PREPARE_MIN_SYMBOLS {
        tx.poll_transmit(t0, &mut out).unwrap().unwrap();
    }
    assert!(tx.has_pending_symbols(), "up-front repair is due");
    assert!(tx.next_builds_encoder(), "the job is not back");
    tx.handle_prepared(job.run());
    assert!(!tx.next_builds_encoder());
    tx.poll_transmit(t0, &mut out).unwrap().unwrap();
    assert_eq!(tx.stats().encoders_inline, 0);
}

#[test]
fn a_one_symbol_block_is_repaired_by_repeating_its_symbol() {
    let t0 = Timestamp::from_millis(100);
    let config = small_config();
    let mut tx = Sender::new(config.clone(), t0).unwrap();
    tx.write(b"GET / HTTP/1.0", t0).unwrap();
    tx.finish(t0).unwrap();
    let mut packets = Vec::new();
    let mut out = [0u8; 64];
    while let Some(n) = tx.poll_transmit(t0, &mut out).unwrap() {
        assert!(!tx.next_builds_encoder());
        packets.push(out[..n].to_vec());
    }
    assert!(
        packets.len() >= 2,
        "source and tail repair: {}",
        packets.len()
    );
    for p in &packets {
        let (h, body) = SymbolHeader::parse(p, 16).unwrap();
        assert_eq!((h.esi, h.symbols), (0, 1));
        assert_eq!(body, &packets[0][SYMBOL_HEADER_LEN..]);
    }
    assert_eq!(tx.stats().encoders_inline, 0);
    // The first copy lost: the receiver has the request from the second.
    let mut rx = crate::Receiver::new(config).unwrap();
    rx.handle_packet(&packets[1], t0).unwrap();
    let mut got = [0u8; 64];
    let n = rx.read(&mut got);
    assert_eq!(&got[..n], b"GET / HTTP/1.0");
    // A second round (the receiver asks again) repeats it too, without an encoder.
    let (bytes, n) = request(1);
    let later = t0.saturating_add(std::time::Duration::from_secs(1));
    tx.handle_feedback(&bytes[..n], later).unwrap();
    let mut again = 0;
    while let Some(n) = tx.poll_transmit(later, &mut out).unwrap() {
        assert_eq!(SymbolHeader::parse(&out[..n], 16).unwrap().0.esi, 0);
        again += 1;
    }
    assert!(again >= 1);
    assert_eq!(tx.stats().encoders_inline, 0);
}
