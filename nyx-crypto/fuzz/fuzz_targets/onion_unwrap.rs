//! Backward onion cells into a client: arbitrary bytes, and a genuine cell (sealed by the exit
//! of a 3-hop circuit, wrapped by the middle and the entry) XORed with the input. No panic; a
//! modified cell is never accepted (from the exit of a 3-hop circuit no slack reaches the
//! client, so every byte counts); the unmodified one is attributed to the exit, intact.
#![no_main]

use libfuzzer_sys::fuzz_target;
use nyx_crypto::onion::{
    BACKWARD_PAYLOAD_LEN, BACKWARD_PAYLOAD_OFFSET, CELL_LEN, ClientCircuit, ClientHop, RelayHop,
};
use nyx_crypto::session::SessionSecret;

fuzz_target!(|data: &[u8]| {
    let secrets: Vec<SessionSecret> = (1..=3u8).map(|i| SessionSecret::from_bytes([i; 32])).collect();
    let mut client = ClientCircuit::new_with([9; 32]);
    for s in &secrets {
        client.push(ClientHop::new(s)).expect("hop");
    }
    let mut relays: Vec<RelayHop> = secrets.iter().map(RelayHop::new).collect();

    let mut raw = data.to_vec();
    let _ = client.unwrap(&mut raw);

    let mut cell = vec![0u8; CELL_LEN];
    cell[BACKWARD_PAYLOAD_OFFSET..BACKWARD_PAYLOAD_OFFSET + BACKWARD_PAYLOAD_LEN].fill(0xa5);
    relays[2].seal_backward(&mut cell).expect("seal");
    relays[1].wrap_backward(&mut cell).expect("wrap");
    relays[0].wrap_backward(&mut cell).expect("wrap");
    let mut changed = false;
    for (b, d) in cell.iter_mut().zip(data) {
        *b ^= d;
        changed |= *d != 0;
    }
    match client.unwrap(&mut cell) {
        Ok(got) => {
            assert!(!changed, "a modified cell was accepted");
            assert_eq!(got.hop, 2);
            assert!(cell[got.payload].iter().all(|&b| b == 0xa5));
        }
        Err(_) => assert!(changed, "the genuine cell was refused"),
    }
});
