use proptest::prelude::*;
use sha2::Digest;

use super::*;

/// A client circuit and the matching relays, keyed from fixed secrets.
fn circuit(hops: usize) -> (ClientCircuit, Vec<RelayHop>) {
    let mut client = ClientCircuit::new_with([0x77; 32]);
    let mut relays = Vec::new();
    for i in 0..hops {
        let secret = SessionSecret::from_bytes([i as u8 + 1; 32]);
        client.push(ClientHop::new(&secret)).unwrap();
        relays.push(RelayHop::new(&secret));
    }
    (client, relays)
}

fn payload(seed: u8) -> Vec<u8> {
    (0..FORWARD_PAYLOAD_LEN)
        .map(|i| (i as u8).wrapping_mul(31) ^ seed)
        .collect()
}

/// A forward cell carrying `payload(seed)` for hop `dest`, as the client sends it.
fn forward_cell(client: &mut ClientCircuit, dest: usize, seed: u8) -> Vec<u8> {
    let mut cell = vec![0u8; CELL_LEN];
    cell[FORWARD_PAYLOAD_OFFSET..].copy_from_slice(&payload(seed));
    client.wrap(dest, &mut cell).unwrap();
    cell
}

/// Carry a forward cell through the relays; returns the hop that took delivery, the payload,
/// and the cell as each hop received it.
fn carry_forward(relays: &mut [RelayHop], mut cell: Vec<u8>) -> (usize, Vec<u8>, Vec<Vec<u8>>) {
    let mut seen = Vec::new();
    for (i, relay) in relays.iter_mut().enumerate() {
        seen.push(cell.clone());
        match relay.peel(&mut cell).unwrap() {
            Peeled::Forward => continue,
            Peeled::Deliver(range) => return (i, cell[range].to_vec(), seen),
        }
    }
    panic!("nobody took delivery");
}

/// A backward cell from hop `origin` carrying `bytes`, through the relays before it; returns
/// the cell as the client receives it and as each link carried it (origin's side first).
fn backward_cell(relays: &mut [RelayHop], origin: usize, bytes: &[u8]) -> (Vec<u8>, Vec<Vec<u8>>) {
    let mut cell = vec![0u8; CELL_LEN];
    cell[BACKWARD_PAYLOAD_OFFSET..BACKWARD_PAYLOAD_OFFSET + bytes.len()].copy_from_slice(bytes);
    relays[origin].seal_backward(&mut cell).unwrap();
    let mut seen = vec![cell.clone()];
    for relay in relays[..origin].iter_mut().rev() {
        relay.wrap_backward(&mut cell).unwrap();
        seen.push(cell.clone());
    }
    (cell, seen)
}

#[test]
fn forward_reaches_each_hop_with_its_payload() {
    for hops in 1..=MAX_HOPS {
        let (mut client, mut relays) = circuit(hops);
        for dest in 0..hops {
            for round in 0..3u8 {
                let cell = forward_cell(&mut client, dest, round);
                let (got, bytes, _) = carry_forward(&mut relays, cell);
                assert_eq!(got, dest, "{hops} hops, dest {dest}");
                assert_eq!(bytes, payload(round));
            }
        }
    }
}

#[test]
fn backward_from_each_hop_is_attributed_to_it() {
    for hops in 1..=MAX_HOPS {
        let (mut client, mut relays) = circuit(hops);
        for origin in 0..hops {
            let bytes: Vec<u8> = (0..BACKWARD_PAYLOAD_LEN)
                .map(|i| (i * 7 + origin) as u8)
                .collect();
            let (mut cell, _) = backward_cell(&mut relays, origin, &bytes);
            let got = client.unwrap(&mut cell).unwrap();
            assert_eq!(got.hop, origin);
            assert_eq!(&cell[got.payload], &bytes[..]);
        }
    }
}

#[test]
fn cells_differ_bitwise_at_every_hop() {
    // The same payload twice, and each cell as every hop sees it: no two views share an
    // aligned 8-byte word, and about half the bits differ between any two of them.
    let (mut client, mut relays) = circuit(3);
    let mut views = Vec::new();
    for _ in 0..2 {
        let (_, _, seen) = carry_forward(&mut relays, forward_cell(&mut client, 2, 9));
        views.extend(seen);
    }
    let (mut back_relays, mut back_views) = (circuit(3).1, Vec::new());
    for _ in 0..2 {
        back_views.extend(backward_cell(&mut back_relays, 2, &[9u8; 64]).1);
    }
    for set in [&views, &back_views] {
        for a in 0..set.len() {
            for b in a + 1..set.len() {
                let (x, y) = (&set[a], &set[b]);
                let same_word = x.chunks(8).zip(y.chunks(8)).any(|(p, q)| p == q);
                assert!(!same_word, "views {a} and {b} share a word");
                let diff: u32 = x.iter().zip(y).map(|(p, q)| (p ^ q).count_ones()).sum();
                let bits = (CELL_LEN * 8) as u32;
                assert!(
                    diff > bits * 45 / 100 && diff < bits * 55 / 100,
                    "{diff} of {bits}"
                );
            }
        }
    }
}

#[test]
fn a_delivering_hop_cannot_tell_its_position() {
    // Whatever the destination's position, it sees the same layout: a payload of the same
    // length followed by bytes that look random (not zeros that would count the hops after it).
    for dest in 0..MAX_HOPS {
        let (mut client, mut relays) = circuit(MAX_HOPS);
        let mut cell = forward_cell(&mut client, dest, 1);
        for relay in &mut relays[..dest] {
            assert_eq!(relay.peel(&mut cell).unwrap(), Peeled::Forward);
        }
        let range = relays[dest].peel(&mut cell).map(|p| match p {
            Peeled::Deliver(r) => r,
            Peeled::Forward => panic!("forwarded"),
        });
        let range = range.unwrap();
        assert_eq!(
            range,
            DELIVERED_OFFSET..DELIVERED_OFFSET + FORWARD_PAYLOAD_LEN
        );
        let after = &cell[range.end..];
        let ones: u32 = after.iter().map(|b| b.count_ones()).sum();
        let bits = (after.len() * 8) as u32;
        assert!(
            ones > bits / 4 && ones < bits * 3 / 4,
            "dest {dest}: {ones} of {bits}"
        );
    }
}

#[test]
fn every_forward_bit_flip_is_caught_by_the_next_hop() {
    // A relay (or the link before it) flips one bit of a cell; the hop that receives it must
    // refuse it, and its state must not change: the unmodified cell is accepted afterwards.
    for at_hop in 0..MAX_HOPS {
        let (mut client, mut relays) = circuit(MAX_HOPS);
        let mut cell = forward_cell(&mut client, MAX_HOPS - 1, 3);
        for relay in &mut relays[..at_hop] {
            relay.peel(&mut cell).unwrap();
        }
        for bit in 0..CELL_LEN * 8 {
            let mut bad = cell.clone();
            bad[bit / 8] ^= 1 << (bit % 8);
            let got = relays[at_hop].peel(&mut bad);
            assert!(
                matches!(got, Err(Error::AuthenticationFailed | Error::TooOld { .. })),
                "hop {at_hop}, bit {bit}: {got:?}"
            );
        }
        assert!(relays[at_hop].peel(&mut cell).is_ok(), "hop {at_hop}");
    }
}

#[test]
fn every_backward_bit_flip_is_caught_by_the_client() {
    // A cell from the exit, one bit flipped on one link; the relays after that link add their
    // layers as usual. The client must refuse it, except for a flip in the slack that the
    // next relay drops: that leaves nothing to detect, and the client gets the original payload.
    let bytes = vec![0x42u8; BACKWARD_PAYLOAD_LEN];
    for link in 0..MAX_HOPS {
        // link 0: exit -> middle, 1: middle -> entry, 2: entry -> client
        let (_, mut relays) = circuit(MAX_HOPS);
        let (_, seen) = backward_cell(&mut relays, MAX_HOPS - 1, &bytes);
        let after = MAX_HOPS - 1 - link; // relays between the flip and the client
        for bit in 0..CELL_LEN * 8 {
            let mut cell = seen[link].clone();
            cell[bit / 8] ^= 1 << (bit % 8);
            for relay in relays[..after].iter_mut().rev() {
                relay.wrap_backward(&mut cell).unwrap();
            }
            // A fresh client each time: the slack case would otherwise be a replay.
            let got = circuit(MAX_HOPS).0.unwrap(&mut cell);
            if bit / 8 >= CELL_LEN - BACKWARD_LAYER_LEN * after {
                let d = got.expect("a flip in dropped slack changes nothing");
                assert_eq!(&cell[d.payload], &bytes[..]);
            } else {
                assert_eq!(
                    got,
                    Err(Error::AuthenticationFailed),
                    "link {link}, bit {bit}"
                );
            }
        }
    }
}

#[test]
fn replays_are_refused_per_hop() {
    let (mut client, mut relays) = circuit(3);
    // Forward: the entry replays a cell to the middle.
    let mut cell = forward_cell(&mut client, 2, 5);
    relays[0].peel(&mut cell).unwrap();
    let copy = cell.clone();
    relays[1].peel(&mut cell).unwrap();
    let mut again = copy.clone();
    assert!(matches!(
        relays[1].peel(&mut again),
        Err(Error::Replayed { .. })
    ));
    // Backward: the middle replays an exit cell; the entry wraps it afresh, the client refuses.
    let mut exit_cell = vec![0u8; CELL_LEN];
    relays[2].seal_backward(&mut exit_cell).unwrap();
    for round in 0..2 {
        let mut c = exit_cell.clone();
        relays[1].wrap_backward(&mut c).unwrap();
        relays[0].wrap_backward(&mut c).unwrap();
        let got = client.unwrap(&mut c);
        if round == 0 {
            assert_eq!(got.unwrap().hop, 2);
        } else {
            assert!(matches!(got, Err(Error::Replayed { .. })), "{got:?}");
        }
    }
}

#[test]
fn loss_and_reordering_are_tolerated() {
    let (mut client, mut relays) = circuit(3);
    let cells: Vec<Vec<u8>> = (0..200u8)
        .map(|i| forward_cell(&mut client, 2, i))
        .collect();
    // Deliver every third cell lost, the rest in a scrambled order (within the window).
    let mut order: Vec<usize> = (0..cells.len()).filter(|i| i % 3 != 0).collect();
    order.reverse();
    order.swap(3, 90);
    for i in order {
        let (_, bytes, _) = carry_forward(&mut relays, cells[i].clone());
        assert_eq!(bytes, payload(i as u8));
    }
}

#[test]
fn cells_for_another_circuit_or_hop_are_refused() {
    let (mut client, _) = circuit(3);
    let mut stranger = RelayHop::new(&SessionSecret::from_bytes([99; 32]));
    let mut cell = forward_cell(&mut client, 0, 1);
    assert_eq!(stranger.peel(&mut cell), Err(Error::AuthenticationFailed));
    // A cell for the middle cannot be peeled by the exit's key.
    let (mut client, mut relays) = circuit(3);
    let mut cell = forward_cell(&mut client, 1, 1);
    relays[0].peel(&mut cell).unwrap();
    assert_eq!(relays[2].peel(&mut cell), Err(Error::AuthenticationFailed));
}

#[test]
fn addressing_and_length_errors_are_typed() {
    let (mut client, mut relays) = circuit(2);
    let mut cell = vec![0u8; CELL_LEN];
    assert_eq!(
        client.wrap(2, &mut cell),
        Err(Error::NoSuchHop { hop: 2, hops: 2 })
    );
    let mut short = vec![0u8; CELL_LEN - 1];
    for r in [
        client.wrap(0, &mut short).map(|_| ()),
        client.unwrap(&mut short).map(|_| ()),
        relays[0].peel(&mut short).map(|_| ()),
        relays[0].wrap_backward(&mut short),
        relays[0].seal_backward(&mut short),
    ] {
        assert!(
            matches!(
                r,
                Err(Error::BadLength {
                    expected: CELL_LEN,
                    ..
                })
            ),
            "{r:?}"
        );
    }
    let (mut full, _) = circuit(3);
    assert_eq!(
        full.push(ClientHop::new(&SessionSecret::from_bytes([0; 32]))),
        Err(Error::TooManyHops { max: MAX_HOPS })
    );
    assert_eq!(
        ClientCircuit::new_with([0; 32]).unwrap(&mut cell),
        Err(Error::AuthenticationFailed)
    );
}

#[test]
fn unknown_command_is_a_typed_error() {
    // Only the client can make a cell authenticate, so build one by hand with command 7.
    let secret = SessionSecret::from_bytes([5; 32]);
    let keys = LayerKeys::derive(&secret);
    let mut relay = RelayHop::new(&secret);
    let mut cell = vec![0u8; CELL_LEN];
    let pn = keys.forward_start;
    cell[..8].copy_from_slice(&pn.to_be_bytes());
    cell[HEADER_LEN] = 7;
    let tag = {
        let (head, body) = cell.split_at_mut(HEADER_LEN);
        aead::seal_in_place(&keys.forward, &nonce(pn), &head[..8], body).unwrap()
    };
    cell[TAG_RANGE].copy_from_slice(&tag);
    assert_eq!(
        relay.peel(&mut cell),
        Err(Error::UnknownCellCommand { command: 7 })
    );
}

#[test]
fn debug_shows_no_keys() {
    let (client, relays) = circuit(1);
    let shown = format!("{client:?} {:?}", relays[0]);
    assert!(
        !shown.contains("forward:") && !shown.contains("backward:"),
        "{shown}"
    );
}

/// Pinned: fixed secrets, pad key and payload give these cells. A change to the cell format or
/// the key schedule changes the hashes; update them only with docs/protocol.md.
#[test]
fn pinned_cells() {
    let (mut client, mut relays) = circuit(3);
    let fwd = forward_cell(&mut client, 2, 0);
    let to_middle = forward_cell(&mut client, 1, 0);
    let (back, _) = backward_cell(&mut relays, 2, &[0xab; 16]);
    let hash = |b: &[u8]| hex(&sha2::Sha256::digest(b)[..16]);
    assert_eq!(hash(&fwd), "b82aff1a0cde11bda0f451de1ded95d9");
    assert_eq!(hash(&to_middle), "10adaacf4fa48176048ffe37d7c22500");
    assert_eq!(hash(&back), "7301129695a80e641eb53a73f1c5a4c7");
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn round_trip_any_payload(hops in 1usize..=3, dest_seed in any::<usize>(), data in proptest::collection::vec(any::<u8>(), FORWARD_PAYLOAD_LEN)) {
        let dest = dest_seed % hops;
        let (mut client, mut relays) = circuit(hops);
        let mut cell = vec![0u8; CELL_LEN];
        cell[FORWARD_PAYLOAD_OFFSET..].copy_from_slice(&data);
        client.wrap(dest, &mut cell).unwrap();
        let mut delivered = None;
        for (i, relay) in relays.iter_mut().enumerate() {
            if let Peeled::Deliver(r) = relay.peel(&mut cell).unwrap() {
                delivered = Some((i, cell[r].to_vec()));
                break;
            }
        }
        prop_assert_eq!(delivered, Some((dest, data)));
    }

    #[test]
    fn arbitrary_cells_are_refused_without_panicking(data in proptest::collection::vec(any::<u8>(), 0..CELL_LEN + 8)) {
        let (mut client, mut relays) = circuit(3);
        let mut a = data.clone();
        prop_assert!(relays[0].peel(&mut a).is_err());
        let mut b = data;
        prop_assert!(client.unwrap(&mut b).is_err());
    }
}
