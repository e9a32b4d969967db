//! Arbitrary datagrams (the input cut by a length byte) into a UDP engine that has a live
//! link with a peer, from the peer's address and from a stranger's: never a panic, the
//! live link still carries a cell afterwards, and no datagram the fuzzer made is delivered as
//! a cell (it cannot forge the session's authentication).
#![no_main]

use std::sync::{Arc, OnceLock};

use libfuzzer_sys::fuzz_target;
use nyx_core::Timestamp;
use nyx_crypto::identity::IdentityKey;
use nyx_crypto::kem::HybridSecretKey;
use nyx_crypto::link::LinkKey;
use nyx_transport::udp::{UdpConfig, UdpEngine, UdpEvent};

struct Pair {
    a: UdpEngine,
    b: UdpEngine,
}

fn seed_keys() -> &'static (Arc<IdentityKey>, Arc<IdentityKey>) {
    static KEYS: OnceLock<(Arc<IdentityKey>, Arc<IdentityKey>)> = OnceLock::new();
    KEYS.get_or_init(|| (Arc::new(IdentityKey::from_seed(&[1; 32])), Arc::new(IdentityKey::from_seed(&[2; 32]))))
}

fn pair() -> Pair {
    let (ia, ib) = seed_keys().clone();
    let kb = HybridSecretKey::from_seed(&[2; 96]);
    let mut a = UdpEngine::new(UdpConfig::default(), ia, vec![LinkKey::new(HybridSecretKey::from_seed(&[1; 96]))], Timestamp::ZERO).expect("a");
    let mut b = UdpEngine::new(UdpConfig::default(), ib.clone(), vec![LinkKey::new(HybridSecretKey::from_seed(&[2; 96]))], Timestamp::ZERO).expect("b");
    let (addr_a, addr_b) = ("127.0.0.2:1".parse().expect("a"), "127.0.0.3:1".parse().expect("b"));
    a.connect(ib.node_id(), kb.public().clone(), addr_b, Timestamp::ZERO).expect("connect");
    for _ in 0..4 {
        while let Some((_, d)) = a.poll_transmit() {
            b.handle_datagram(addr_a, &d, Timestamp::ZERO);
        }
        while let Some((_, d)) = b.poll_transmit() {
            a.handle_datagram(addr_b, &d, Timestamp::ZERO);
        }
    }
    while a.poll_event().is_some() {}
    while b.poll_event().is_some() {}
    Pair { a, b }
}

fuzz_target!(|data: &[u8]| {
    let Pair { mut a, mut b } = pair();
    let (addr_a, stranger) = ("127.0.0.2:1".parse().expect("a"), "10.9.9.9:9".parse().expect("s"));
    let mut rest = data;
    while let Some((&len, tail)) = rest.split_first() {
        let len = usize::from(len) * 8;
        let (msg, after) = tail.split_at(len.min(tail.len()));
        rest = after;
        b.handle_datagram(addr_a, msg, Timestamp::ZERO);
        b.handle_datagram(stranger, msg, Timestamp::ZERO);
    }
    while let Some(event) = b.poll_event() {
        assert!(!matches!(event, UdpEvent::Cell { .. }), "a forged cell was delivered");
    }
    a.send_cell("127.0.0.3:1".parse().expect("b"), b"still alive", Timestamp::ZERO).expect("send");
    while let Some((_, d)) = a.poll_transmit() {
        b.handle_datagram(addr_a, &d, Timestamp::ZERO);
    }
    let mut delivered = false;
    while let Some(event) = b.poll_event() {
        delivered |= matches!(event, UdpEvent::Cell { ref data, .. } if &data[..] == b"still alive");
    }
    assert!(delivered, "the live link was disturbed");
});
