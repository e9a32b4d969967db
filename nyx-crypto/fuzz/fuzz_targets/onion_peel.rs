//! Forward onion cells into a relay: arbitrary bytes, and a genuine cell (wrapped by a client
//! for the middle of a 3-hop circuit, after the entry peeled it) XORed with the input. No
//! panic; a modified cell is never accepted; the unmodified one is delivered intact.
#![no_main]

use libfuzzer_sys::fuzz_target;
use nyx_crypto::onion::{
    CELL_LEN, ClientCircuit, ClientHop, FORWARD_PAYLOAD_LEN, FORWARD_PAYLOAD_OFFSET, Peeled,
    RelayHop,
};
use nyx_crypto::session::SessionSecret;

fuzz_target!(|data: &[u8]| {
    let secrets: Vec<SessionSecret> = (1..=3u8).map(|i| SessionSecret::from_bytes([i; 32])).collect();
    let mut client = ClientCircuit::new_with([9; 32]);
    for s in &secrets {
        client.push(ClientHop::new(s)).expect("hop");
    }
    let mut entry = RelayHop::new(&secrets[0]);
    let mut middle = RelayHop::new(&secrets[1]);

    let mut raw = data.to_vec();
    let _ = middle.peel(&mut raw);

    let mut cell = vec![0u8; CELL_LEN];
    cell[FORWARD_PAYLOAD_OFFSET..].fill(0x5a);
    client.wrap(1, &mut cell).expect("wrap");
    assert_eq!(entry.peel(&mut cell), Ok(Peeled::Forward));
    let mut changed = false;
    for (b, d) in cell.iter_mut().zip(data) {
        *b ^= d;
        changed |= *d != 0;
    }
    match middle.peel(&mut cell) {
        Ok(Peeled::Deliver(range)) => {
            assert!(!changed, "a modified cell was accepted");
            assert_eq!(range.len(), FORWARD_PAYLOAD_LEN);
            assert!(cell[range].iter().all(|&b| b == 0x5a));
        }
        Ok(Peeled::Forward) => panic!("a cell for the middle was forwarded"),
        Err(_) => assert!(changed, "the genuine cell was refused"),
    }
});
