//! Unit tests of the circuit-hop handshake.

use super::*;
use crate::kem::SEED_LEN;
use crate::onion::{
    BACKWARD_PAYLOAD_OFFSET, CELL_LEN, ClientCircuit, FORWARD_PAYLOAD_OFFSET, Peeled,
};

const RELAY: NodeId = NodeId::from_bytes([0x11; 32]);

fn onion(byte: u8) -> OnionKey {
    OnionKey::new(HybridSecretKey::from_seed(&[byte; SEED_LEN]))
}

/// A deterministic client that has sent its CREATE.
fn client(key: &OnionKey) -> (HopInitiatorSent, Box<[u8; CREATE_LEN]>) {
    HopInitiator::new(RELAY, key.public().clone())
        .start_with(&[1; 32], &[2; 32], &[3; 32])
        .unwrap()
}

/// A one-hop circuit over the handshake's result.
fn circuit(hop: ClientHop) -> ClientCircuit {
    let mut circuit = ClientCircuit::new_with([0x33; 32]);
    circuit.push(hop).unwrap();
    circuit
}

/// A forward cell from the client to the relay and a backward cell the other way.
fn talk(client: &mut ClientCircuit, relay: &mut RelayHop, msg: &[u8]) -> (Vec<u8>, Vec<u8>) {
    let mut cell = vec![0u8; CELL_LEN];
    cell[FORWARD_PAYLOAD_OFFSET..][..msg.len()].copy_from_slice(msg);
    client.wrap(0, &mut cell).unwrap();
    let Peeled::Deliver(r) = relay.peel(&mut cell).unwrap() else {
        panic!("not delivered");
    };
    let there = cell[r][..msg.len()].to_vec();
    let mut cell = vec![0u8; CELL_LEN];
    cell[BACKWARD_PAYLOAD_OFFSET..][..msg.len()].copy_from_slice(msg);
    relay.seal_backward(&mut cell).unwrap();
    let got = client.unwrap(&mut cell).unwrap();
    (there, cell[got.payload][..msg.len()].to_vec())
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[test]
fn client_and_relay_end_with_matching_layer_keys() {
    let keys = [OnionKey::new(HybridSecretKey::generate().unwrap())];
    let (sent, create) = HopInitiator::new(RELAY, keys[0].public().clone())
        .start()
        .unwrap();
    let mut cache = ReplayCache::new(16);
    let (mut relay, created) = HopResponder::new(RELAY, &keys)
        .respond(&create[..], &mut cache)
        .unwrap();
    let mut client = circuit(sent.finish(&created).unwrap());
    let (there, back) = talk(&mut client, &mut relay, b"both ways");
    assert_eq!(
        (&there[..], &back[..]),
        (&b"both ways"[..], &b"both ways"[..])
    );
}

/// Our own vector: fixed keys and randomness give fixed messages and layer keys (shown by the
/// first cell the client wraps), so any change to the wire format or key schedule shows up
/// here. CREATE and CREATED recorded on 2026-11-21; the cell since onion layers replaced the
/// hop's datagram session (same day, session 2).
#[test]
fn fixed_vector() {
    let keys = [onion(9)];
    let (sent, create) = client(&keys[0]);
    let mut cache = ReplayCache::new(4);
    let (_, created) = HopResponder::new(RELAY, &keys)
        .respond_with(&create[..], &mut cache, &[4; 32])
        .unwrap();
    let mut client = circuit(sent.finish(&created).unwrap());
    let mut cell = vec![0u8; CELL_LEN];
    cell[FORWARD_PAYLOAD_OFFSET..][..3].copy_from_slice(b"nyx");
    client.wrap(0, &mut cell).unwrap();
    let got = (
        hex(&Sha256::digest(&create[..])),
        hex(&created),
        hex(&Sha256::digest(&cell)),
    );
    assert_eq!(
        got,
        (
            CREATE_SHA256.to_owned(),
            CREATED.to_owned(),
            CELL_SHA256.to_owned()
        )
    );
}

const CREATE_SHA256: &str = "a5871df7668778450d7142b55f48eab70d3998a88f9c75a80127b46ac544b830";
const CREATED: &str = "01ac01b2209e86354fb853237b5de0f4fab13c7fcbf433a61c019369617fecf10b9578c036297ce0868102e25858484283b92d0d163607865254a0dec4a288d17d";
const CELL_SHA256: &str = "84406b8eb6c3d7a80e426ea4ba035d3584506e139be1ea6b60572e2ce4b6ad7a";

#[test]
fn any_modified_create_never_yields_matching_keys() {
    let keys = [onion(5)];
    let (_, create) = client(&keys[0]);
    for bit in (0..CREATE_LEN * 8).step_by(7) {
        let mut bad = create.clone();
        bad[bit / 8] ^= 1 << (bit % 8);
        let (sent, _) = client(&keys[0]);
        let mut cache = ReplayCache::new(4);
        match HopResponder::new(RELAY, &keys).respond_with(&bad[..], &mut cache, &[4; 32]) {
            Err(_) => {} // refused outright (version, relay, key id, low-order point)
            Ok((_, created)) => {
                assert_eq!(
                    sent.finish(&created).unwrap_err(),
                    Error::HandshakeFailed,
                    "bit {bit}"
                );
            }
        }
    }
}

#[test]
fn any_modified_created_is_refused() {
    let keys = [onion(6)];
    let (_, create) = client(&keys[0]);
    let mut cache = ReplayCache::new(4);
    let (_, created) = HopResponder::new(RELAY, &keys)
        .respond_with(&create[..], &mut cache, &[4; 32])
        .unwrap();
    for bit in 0..CREATED_LEN * 8 {
        let mut bad = created;
        bad[bit / 8] ^= 1 << (bit % 8);
        let (sent, _) = client(&keys[0]);
        assert!(sent.finish(&bad).is_err(), "bit {bit}");
    }
    // A CREATED answering another client's CREATE is refused too.
    let (other, _) = HopInitiator::new(RELAY, keys[0].public().clone())
        .start()
        .unwrap();
    assert_eq!(other.finish(&created).unwrap_err(), Error::HandshakeFailed);
}

#[test]
fn replayed_create_is_refused_until_forgotten() {
    let keys = [onion(7)];
    let (_, a) = client(&keys[0]);
    let (_, b) = HopInitiator::new(RELAY, keys[0].public().clone())
        .start()
        .unwrap();
    let mut cache = ReplayCache::new(1);
    let respond = |msg: &[u8], cache: &mut ReplayCache| {
        HopResponder::new(RELAY, &keys)
            .respond(msg, cache)
            .map(|_| ())
    };
    assert_eq!(respond(&a[..], &mut cache), Ok(()));
    assert_eq!(respond(&a[..], &mut cache), Err(Error::ReplayedHandshake));
    assert_eq!(respond(&b[..], &mut cache), Ok(()));
    // The cache holds one message: `a` was forgotten (a bounded cache cannot remember all).
    assert_eq!(respond(&a[..], &mut cache), Ok(()));
}

#[test]
fn addressing_errors() {
    let current = onion(1);
    let next = onion(2);
    let keys = [current, next];
    // A client that already uses the next key during the rotation overlap is served.
    let (sent, create) = client(&keys[1]);
    let mut cache = ReplayCache::new(8);
    let (_, created) = HopResponder::new(RELAY, &keys)
        .respond(&create[..], &mut cache)
        .unwrap();
    assert!(sent.finish(&created).is_ok());

    let other_relay = NodeId::from_bytes([0x22; 32]);
    let err = |keys: &[OnionKey], relay: NodeId, msg: &[u8]| {
        HopResponder::new(relay, keys)
            .respond(msg, &mut ReplayCache::new(8))
            .err()
    };
    assert_eq!(
        err(&keys, other_relay, &create[..]),
        Some(Error::WrongRelay)
    );
    assert_eq!(
        err(&keys[..1], RELAY, &create[..]),
        Some(Error::UnknownOnionKey)
    );
    assert_eq!(
        err(&keys, RELAY, &create[..100]),
        Some(Error::BadLength {
            what: "CREATE",
            expected: CREATE_LEN,
            got: 100
        })
    );
    let mut v2 = create.clone();
    v2[0] = 2;
    assert_eq!(
        err(&keys, RELAY, &v2[..]),
        Some(Error::UnsupportedVersion { version: 2 })
    );
    let (sent, _) = client(&keys[0]);
    assert_eq!(
        sent.finish(&[1u8; 10]).unwrap_err(),
        Error::BadLength {
            what: "CREATED",
            expected: CREATED_LEN,
            got: 10
        }
    );
}

#[test]
fn replays_with_an_altered_x25519_top_bit_are_refused() {
    let keys = [onion(8)];
    let (_, create) = client(&keys[0]);
    let mut cache = ReplayCache::new(16);
    HopResponder::new(RELAY, &keys)
        .respond(&create[..], &mut cache)
        .unwrap();
    for byte in [72, CREATE_LEN - 1] {
        let mut altered = create.clone();
        altered[byte] ^= 0x80;
        let got = HopResponder::new(RELAY, &keys).respond(&altered[..], &mut cache);
        assert_eq!(got.err(), Some(Error::InvalidPublicKey), "byte {byte}");
    }
    // Another X with the same ML-KEM ciphertext is still a replay.
    let mut other_x = create.clone();
    other_x[41] ^= 1;
    let got = HopResponder::new(RELAY, &keys).respond(&other_x[..], &mut cache);
    assert_eq!(got.err(), Some(Error::ReplayedHandshake));
}

#[test]
fn low_order_ephemeral_keys_are_refused_on_both_sides() {
    let keys = [onion(10)];
    let (_, create) = client(&keys[0]);
    let mut zero_x = create.clone();
    zero_x[41..73].fill(0);
    let mut cache = ReplayCache::new(4);
    let got = HopResponder::new(RELAY, &keys).respond(&zero_x[..], &mut cache);
    assert_eq!(got.err(), Some(Error::InvalidPublicKey));
    // Not remembered: the genuine CREATE is still answered.
    let (sent, _) = client(&keys[0]);
    let (_, created) = HopResponder::new(RELAY, &keys)
        .respond_with(&create[..], &mut cache, &[4; 32])
        .unwrap();
    let mut zero_y = created;
    zero_y[1..33].fill(0);
    assert_eq!(sent.finish(&zero_y).unwrap_err(), Error::InvalidPublicKey);
}
