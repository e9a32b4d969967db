//! Arbitrary datagrams into a session receiver, and a sealed datagram with arbitrary
//! corruption: never a panic, and nothing but the genuine datagram ever opens.
#![no_main]

use libfuzzer_sys::fuzz_target;
use nyx_core::Timestamp;
use nyx_crypto::session::{HEADER_LEN, OVERHEAD, RekeyPolicy, Role, Session, SessionSecret};

fuzz_target!(|data: &[u8]| {
    let secret = SessionSecret::from_bytes([7; 32]);
    let policy = RekeyPolicy {
        max_packets: 3,
        ..RekeyPolicy::default()
    };
    let mut rx = Session::new(&secret, Role::Responder, policy, Timestamp::ZERO);
    // Raw input as a datagram.
    let mut raw = data.to_vec();
    assert!(
        rx.open(Timestamp::ZERO, &mut raw).is_err(),
        "a forged datagram opened"
    );
    // A genuine datagram XORed with the input must open only if the input changed nothing.
    let mut tx = Session::new(&secret, Role::Initiator, policy, Timestamp::ZERO);
    let mut buf = [0u8; 64 + OVERHEAD];
    buf[HEADER_LEN..HEADER_LEN + 64].copy_from_slice(&[0x5a; 64]);
    let n = tx.seal(Timestamp::ZERO, &mut buf, 64).expect("seal");
    let mut changed = false;
    for (b, d) in buf[..n].iter_mut().zip(data) {
        *b ^= d;
        changed |= *d != 0;
    }
    let opened = rx.open(Timestamp::ZERO, &mut buf[..n]).is_ok();
    assert_eq!(opened, !changed);
});
