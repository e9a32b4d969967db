//! A client builds a 3-hop circuit with the hybrid post-quantum hop handshake, sends a cell to
//! the exit and gets an answer back, all in memory (no sockets: nyx-crypto is sans-IO).
//!
//! ```sh
//! cargo run -p nyx-crypto --example three_hop_circuit
//! ```

use nyx_core::NodeId;
use nyx_crypto::Error;
use nyx_crypto::hop::{HopInitiator, HopResponder, OnionKey, ReplayCache};
use nyx_crypto::kem::HybridSecretKey;
use nyx_crypto::onion::{
    BACKWARD_PAYLOAD_OFFSET, CELL_LEN, ClientCircuit, FORWARD_PAYLOAD_OFFSET, Peeled, RelayHop,
};

/// What a relay holds: its id, its onion keys and the state of the circuit through it.
struct Relay {
    id: NodeId,
    onion: [OnionKey; 1],
    replay: ReplayCache,
    hop: Option<RelayHop>,
}

fn main() -> Result<(), Error> {
    let mut relays = Vec::new();
    for i in 1..=3u8 {
        relays.push(Relay {
            id: NodeId::from_bytes([i; 32]),
            onion: [OnionKey::new(HybridSecretKey::generate()?)],
            replay: ReplayCache::new(1024),
            hop: None,
        });
    }

    // Telescoping build: one handshake per hop. (In the network, CREATE for hops 2 and 3
    // travels inside cells through the hops already built; here it is handed over directly.)
    let mut circuit = ClientCircuit::new()?;
    for relay in &mut relays {
        let (sent, create) =
            HopInitiator::new(relay.id, relay.onion[0].public().clone()).start()?;
        let (hop, created) =
            HopResponder::new(relay.id, &relay.onion).respond(&create[..], &mut relay.replay)?;
        relay.hop = Some(hop);
        circuit.push(sent.finish(&created)?)?;
        println!("built hop {} ({} byte CREATE)", circuit.len(), create.len());
    }

    // Forward: wrap for the exit (hop 2), each relay peels its layer.
    let mut cell = vec![0u8; CELL_LEN];
    let request = b"GET / HTTP/1.0\r\n\r\n";
    cell[FORWARD_PAYLOAD_OFFSET..][..request.len()].copy_from_slice(request);
    circuit.wrap(2, &mut cell)?;
    for (i, relay) in relays.iter_mut().enumerate() {
        let hop = relay.hop.as_mut().expect("built above");
        match hop.peel(&mut cell)? {
            Peeled::Forward => println!("relay {i}: forward"),
            Peeled::Deliver(range) => {
                let got = &cell[range][..request.len()];
                println!("relay {i}: deliver {:?}", String::from_utf8_lossy(got));
            }
        }
    }

    // Backward: the exit seals an answer, the middle and the entry add their layers.
    let answer = b"HTTP/1.0 200 OK\r\n\r\nhello";
    let mut cell = vec![0u8; CELL_LEN];
    cell[BACKWARD_PAYLOAD_OFFSET..][..answer.len()].copy_from_slice(answer);
    relays[2]
        .hop
        .as_mut()
        .expect("built")
        .seal_backward(&mut cell)?;
    for relay in relays[..2].iter_mut().rev() {
        relay
            .hop
            .as_mut()
            .expect("built")
            .wrap_backward(&mut cell)?;
    }
    let got = circuit.unwrap(&mut cell)?;
    println!(
        "client: from hop {}: {:?}",
        got.hop,
        String::from_utf8_lossy(&cell[got.payload][..answer.len()])
    );
    Ok(())
}
