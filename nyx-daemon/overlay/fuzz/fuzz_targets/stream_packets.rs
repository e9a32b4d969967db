//! Arbitrary stream packets, split into several at 0xFF-prefixed boundaries, fed to both
//! ends of a circuit's streams (a client with two open streams, an exit that accepts every
//! stream), interleaved with transmits, reads and timers: typed errors, never a panic, and
//! the mux stays usable.
#![no_main]

use libfuzzer_sys::fuzz_target;
use nyx_core::Timestamp;
use nyx_overlay::stream::{Role, StreamConfig, StreamEvent, StreamId, StreamMux};

fuzz_target!(|data: &[u8]| {
    let mut now = Timestamp::ZERO;
    let Ok(mut client) = StreamMux::new(Role::Client, StreamConfig::default(), now) else {
        return;
    };
    let Ok(mut exit) = StreamMux::new(Role::Exit, StreamConfig::default(), now) else {
        return;
    };
    let _ = client.open("127.0.0.1:80", now);
    let _ = client.open("example.org:443", now);
    let mut out = [0u8; 1200];
    let mut buf = [0u8; 4096];
    for packet in data.split(|b| *b == 0xff) {
        now = now.saturating_add(std::time::Duration::from_millis(3));
        let _ = client.handle_packet(packet, now);
        let _ = exit.handle_packet(packet, now);
        while let Some(ev) = exit.poll_event() {
            if let StreamEvent::Incoming { stream, .. } = ev {
                let _ = exit.accept(stream);
                let _ = exit.write(stream, b"reply", now);
            }
        }
        while client.poll_event().is_some() {}
        for id in 1..4 {
            let _ = client.read(StreamId(id), &mut buf);
            let _ = exit.read(StreamId(id), &mut buf);
        }
        client.handle_timeout(now);
        exit.handle_timeout(now);
        while client.poll_transmit(now, &mut out).is_some() {}
        while exit.poll_transmit(now, &mut out).is_some() {}
    }
});
