//! Arbitrary datagrams (the input cut by a length byte) into a QUIC link's control channel
//! that holds unacknowledged chunks of its own, with time passing so that it resends: never a
//! panic; every datagram it sends has the cell length and decodes; every message it delivers
//! is within the limit; a datagram that decodes re-encodes to one that decodes the same.
#![no_main]

use std::time::Duration;

use libfuzzer_sys::fuzz_target;
use nyx_core::Timestamp;
use nyx_transport::quic::{ControlDatagram, MAX_CONTROL_LEN, QuicControl, is_control};

/// The default `QuicConfig::pad_to`: the overlay's link cell.
const PAD: usize = 1156;

fuzz_target!(|data: &[u8]| {
    let mut channel = QuicControl::new(PAD).expect("pad_to");
    channel.send(&[1u8; 3000], Timestamp::ZERO).expect("send");
    while channel.poll_transmit().is_some() {}
    let mut now = Timestamp::ZERO;
    let mut rest = data;
    while let Some((&len, tail)) = rest.split_first() {
        let (datagram, after) = tail.split_at((usize::from(len) * 8).min(tail.len()));
        rest = after;
        if let Ok(decoded) = ControlDatagram::decode(datagram) {
            assert!(is_control(datagram));
            let again = decoded.encode(PAD).expect("a decoded chunk fits its length field");
            assert_eq!(ControlDatagram::decode(&again).expect("re-encoded"), decoded);
        }
        if let Ok(messages) = channel.handle_datagram(datagram) {
            assert!(messages.iter().all(|m| m.len() <= MAX_CONTROL_LEN));
        }
        now = now.saturating_add(Duration::from_millis(100));
        channel.handle_timeout(now, Duration::from_millis(10));
        while let Some(out) = channel.poll_transmit() {
            assert_eq!(out.len(), PAD);
            assert!(ControlDatagram::decode(&out).is_ok());
        }
    }
});
