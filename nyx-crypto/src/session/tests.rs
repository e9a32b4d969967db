//! Unit tests of datagram sessions.

use super::*;
use proptest::prelude::*;

const T0: Timestamp = Timestamp::ZERO;

fn pair(policy: RekeyPolicy) -> (Session, Session) {
    let s = SessionSecret::from_bytes([0x42; 32]);
    (
        Session::new(&s, Role::Initiator, policy, T0),
        Session::new(&s, Role::Responder, policy, T0),
    )
}

/// Seal `payload` into a fresh buffer; returns the datagram.
fn seal(s: &mut Session, now: Timestamp, payload: &[u8]) -> Vec<u8> {
    let mut buf = vec![0u8; payload.len() + OVERHEAD];
    buf[HEADER_LEN..HEADER_LEN + payload.len()].copy_from_slice(payload);
    let n = s.seal(now, &mut buf, payload.len()).unwrap();
    assert_eq!(n, buf.len());
    buf
}

fn open(s: &mut Session, now: Timestamp, datagram: &[u8]) -> Result<Vec<u8>, Error> {
    let mut buf = datagram.to_vec();
    let range = s.open(now, &mut buf)?;
    Ok(buf[range].to_vec())
}

fn by_packets(n: u64) -> RekeyPolicy {
    RekeyPolicy {
        max_packets: n,
        ..RekeyPolicy::default()
    }
}

#[test]
fn round_trip_both_directions() {
    let (mut a, mut b) = pair(RekeyPolicy::default());
    for i in 0..100u32 {
        let msg = i.to_le_bytes().repeat(i as usize % 40);
        assert_eq!(open(&mut b, T0, &seal(&mut a, T0, &msg)).unwrap(), msg);
        assert_eq!(open(&mut a, T0, &seal(&mut b, T0, &msg)).unwrap(), msg);
    }
    let empty = seal(&mut a, T0, b"");
    assert_eq!(open(&mut b, T0, &empty).unwrap(), b"");
}

#[test]
fn ciphertext_hides_the_payload_and_differs_per_packet() {
    let (mut a, _) = pair(RekeyPolicy::default());
    let one = seal(&mut a, T0, &[0u8; 32]);
    let two = seal(&mut a, T0, &[0u8; 32]);
    assert_ne!(&one[HEADER_LEN..HEADER_LEN + 32], &[0u8; 32]);
    assert_ne!(one[HEADER_LEN..], two[HEADER_LEN..]);
}

#[test]
fn reflected_or_foreign_packets_are_refused() {
    let (mut a, mut b) = pair(RekeyPolicy::default());
    let d = seal(&mut a, T0, b"to bob");
    // Refused by the key, or already by the epoch byte: each direction offsets it by its own
    // key-derived byte, so a foreign one usually names an epoch the receiver does not hold.
    let refused = |r: Result<Vec<u8>, Error>| {
        matches!(
            r,
            Err(Error::AuthenticationFailed | Error::UnknownEpoch { .. })
        )
    };
    assert!(refused(open(&mut a, T0, &d)), "direction keys differ");
    let other = SessionSecret::from_bytes([0x43; 32]);
    let mut stranger = Session::new(&other, Role::Responder, RekeyPolicy::default(), T0);
    assert!(refused(open(&mut stranger, T0, &d)));
    // With the epoch byte it expects, the reflected packet still fails: the keys differ.
    let mut shifted = d.clone();
    shifted[0] = shifted[0]
        .wrapping_sub(a.send_offset)
        .wrapping_add(a.recv_offset);
    assert_eq!(open(&mut a, T0, &shifted), Err(Error::AuthenticationFailed));
    assert_eq!(a.recv_epoch(), 0, "refusals change nothing");
    assert!(open(&mut b, T0, &d).is_ok());
}

#[test]
fn every_flipped_bit_is_refused_and_changes_nothing() {
    let (mut a, mut b) = pair(RekeyPolicy::default());
    let d = seal(&mut a, T0, b"a message of some length");
    for bit in 0..d.len() * 8 {
        let mut bad = d.clone();
        bad[bit / 8] ^= 1 << (bit % 8);
        assert!(
            open(&mut b, T0, &bad).is_err(),
            "bit {bit} flipped was accepted"
        );
    }
    assert_eq!(open(&mut b, T0, &d).unwrap(), b"a message of some length");
}

/// The packet number a datagram carries in clear.
fn pn_of(d: &[u8]) -> u64 {
    u64::from_be_bytes(d[1..9].try_into().unwrap())
}

#[test]
fn packet_numbers_start_at_unrelated_key_derived_points() {
    let (mut a, mut b) = pair(RekeyPolicy::default());
    let from_a = pn_of(&seal(&mut a, T0, b"x"));
    let from_b = pn_of(&seal(&mut b, T0, b"y"));
    // 62-bit starts, different per direction, and consecutive afterwards.
    assert!(from_a < 1 << 62 && from_b < 1 << 62);
    assert_ne!(from_a, from_b);
    assert!(
        from_a > 1 << 32 || from_b > 1 << 32,
        "not starting near zero"
    );
    assert_eq!(pn_of(&seal(&mut a, T0, b"z")), from_a + 1);
    let mut c = Session::new(
        &SessionSecret::from_bytes([9u8; 32]),
        Role::Initiator,
        RekeyPolicy::default(),
        T0,
    );
    assert_ne!(
        pn_of(&seal(&mut c, T0, b"x")),
        from_a,
        "another secret, another start"
    );
}

/// The epoch byte is offset by a key-derived byte per direction: sessions started at the
/// same moment show unrelated values (before, every session began at 0, so the byte told an
/// observer how many 120-second epochs a link had lived). The session still follows the
/// epochs through many steps and the wrap of the byte, in both directions.
#[test]
fn epoch_bytes_start_at_unrelated_key_derived_points_and_wrap() {
    let firsts: Vec<[u8; 2]> = (1..=8u8)
        .map(|k| {
            let secret = SessionSecret::from_bytes([k; 32]);
            let mut i = Session::new(&secret, Role::Initiator, RekeyPolicy::default(), T0);
            let mut r = Session::new(&secret, Role::Responder, RekeyPolicy::default(), T0);
            [seal(&mut i, T0, b"x")[0], seal(&mut r, T0, b"y")[0]]
        })
        .collect();
    let distinct: std::collections::HashSet<u8> = firsts.iter().flatten().copied().collect();
    assert!(distinct.len() >= 8, "16 epoch bytes, only {distinct:?}");
    assert!(
        firsts.iter().filter(|[i, r]| i != r).count() >= 6,
        "the directions have their own offsets: {firsts:?}"
    );

    // Every packet a new epoch: 500 epochs, almost twice around the byte.
    let (mut a, mut b) = pair(by_packets(1));
    let mut previous: Option<[u8; 2]> = None;
    for i in 0..500u32 {
        let msg = i.to_be_bytes();
        let to_b = seal(&mut a, T0, &msg);
        let to_a = seal(&mut b, T0, &msg);
        let bytes = [to_b[0], to_a[0]];
        if let Some([pb, pa]) = previous {
            // Stepping stays visible: the byte goes up by one per epoch, mod 256.
            assert_eq!(
                bytes,
                [pb.wrapping_add(1), pa.wrapping_add(1)],
                "packet {i}"
            );
        }
        previous = Some(bytes);
        assert_eq!(open(&mut b, T0, &to_b).unwrap(), msg, "packet {i} to b");
        assert_eq!(open(&mut a, T0, &to_a).unwrap(), msg, "packet {i} to a");
    }
    assert_eq!((a.send_epoch(), b.recv_epoch()), (499, 499));
    // Skipping epochs across a wrap (499 is 243 mod 256): 40 lost packets, then one that opens.
    for _ in 0..40 {
        let _lost = seal(&mut a, T0, b"lost");
    }
    assert_eq!(
        open(&mut b, T0, &seal(&mut a, T0, b"back")).unwrap(),
        b"back"
    );
    assert_eq!(b.recv_epoch(), 540);
}

#[test]
fn replays_and_too_old_packets_are_refused() {
    let (mut a, mut b) = pair(RekeyPolicy::default());
    let first = seal(&mut a, T0, b"first");
    let pn0 = pn_of(&first);
    assert!(open(&mut b, T0, &first).is_ok());
    assert_eq!(open(&mut b, T0, &first), Err(Error::Replayed { pn: pn0 }));
    for _ in 0..3000 {
        let d = seal(&mut a, T0, b"x");
        open(&mut b, T0, &d).unwrap();
    }
    assert_eq!(
        open(&mut b, T0, &first),
        Err(Error::TooOld {
            pn: pn0,
            highest: pn0 + 3000
        })
    );
}

#[test]
fn short_inputs_are_errors_not_panics() {
    let (mut a, mut b) = pair(RekeyPolicy::default());
    for len in 0..OVERHEAD {
        let mut buf = vec![0u8; len];
        assert_eq!(
            b.open(T0, &mut buf),
            Err(Error::Truncated { len, min: OVERHEAD })
        );
    }
    let mut small = [0u8; 30];
    assert_eq!(
        a.seal(T0, &mut small, 10),
        Err(Error::BufferTooSmall {
            needed: 35,
            capacity: 30
        })
    );
    assert_eq!(
        a.seal(T0, &mut small, usize::MAX),
        Err(Error::BufferTooSmall {
            needed: usize::MAX,
            capacity: 30
        })
    );
}

#[test]
fn rekeying_by_packet_count_is_followed_without_a_round_trip() {
    let (mut a, mut b) = pair(by_packets(10));
    for i in 0..35u8 {
        assert_eq!(open(&mut b, T0, &seal(&mut a, T0, &[i])).unwrap(), [i]);
    }
    assert_eq!((a.send_epoch(), b.recv_epoch()), (3, 3));
    // The other direction has its own budget and stays in epoch 0.
    assert_eq!((b.send_epoch(), a.recv_epoch()), (0, 0));
}

#[test]
fn rekeying_by_bytes_and_by_age() {
    let policy = RekeyPolicy {
        max_bytes: 100,
        max_age: Duration::from_secs(1),
        ..RekeyPolicy::default()
    };
    let (mut a, mut b) = pair(policy);
    for _ in 0..3 {
        open(&mut b, T0, &seal(&mut a, T0, &[0u8; 60])).unwrap();
    }
    assert_eq!(a.send_epoch(), 1, "120 bytes spent after two packets");
    let later = T0 + Duration::from_millis(1500);
    open(&mut b, later, &seal(&mut a, later, b"late")).unwrap();
    assert_eq!((a.send_epoch(), b.recv_epoch()), (2, 2));
}

#[test]
fn reordering_across_an_epoch_boundary_within_the_grace_period() {
    let (mut a, mut b) = pair(by_packets(4));
    let sealed: Vec<_> = (0..8u8).map(|i| seal(&mut a, T0, &[i])).collect(); // epochs 0 and 1
    for i in [4, 5, 6, 7] {
        open(&mut b, T0, &sealed[i]).unwrap();
    }
    assert_eq!(b.recv_epoch(), 1);
    // Epoch-0 stragglers are still accepted during the grace period...
    assert_eq!(
        open(&mut b, T0 + Duration::from_secs(4), &sealed[1]).unwrap(),
        [1]
    );
    // ...and refused once it is over: that key is gone.
    let after = T0 + Duration::from_secs(6);
    assert_eq!(
        open(&mut b, after, &sealed[2]),
        Err(Error::UnknownEpoch { epoch: 0 })
    );
}

#[test]
fn epochs_lost_entirely_are_skipped_up_to_a_limit() {
    let (mut a, mut b) = pair(by_packets(1)); // every packet starts a new epoch
    let sealed: Vec<_> = (0..140u8).map(|i| seal(&mut a, T0, &[i])).collect();
    open(&mut b, T0, &sealed[0]).unwrap();
    assert_eq!(
        open(&mut b, T0, &sealed[10]).unwrap(),
        [10],
        "ten epochs ahead is followed"
    );
    assert_eq!(b.recv_epoch(), 10);
    assert_eq!(
        open(&mut b, T0, &sealed[74]).unwrap(),
        [74],
        "64 ahead is the limit"
    );
    assert_eq!(
        open(&mut b, T0, &sealed[139]),
        Err(Error::UnknownEpoch { epoch: 139 })
    );
    assert_eq!(b.recv_epoch(), 74, "a refused packet changes nothing");
}

/// A low-rate sender (idle longer than the key age between packets) starts a new epoch with
/// every packet; losing several in a row must not wedge the session.
#[test]
fn idle_sender_survives_consecutive_losses() {
    let policy = RekeyPolicy {
        max_age: Duration::from_secs(1),
        ..RekeyPolicy::default()
    };
    let (mut a, mut b) = pair(policy);
    let mut now = T0;
    open(&mut b, now, &seal(&mut a, now, b"first")).unwrap();
    for _ in 0..20 {
        now += Duration::from_secs(2);
        let _lost = seal(&mut a, now, b"lost");
    }
    now += Duration::from_secs(2);
    assert_eq!(
        open(&mut b, now, &seal(&mut a, now, b"after")).unwrap(),
        b"after"
    );
    assert_eq!(a.send_epoch(), 21);
}

#[test]
fn secrets_are_not_printed() {
    let s = SessionSecret::from_bytes([0x99; 32]);
    assert_eq!(format!("{s:?}"), "SessionSecret(<redacted>)");
    let (a, _) = pair(RekeyPolicy::default()); // built from 0x42 bytes
    let text = format!("{a:?}");
    assert!(!text.contains("4242") && !text.contains("raw"), "{text}");
}

proptest! {
    /// Under loss (never more than 3 in a row), duplication and reordering within 8 packets,
    /// with keys rotating every 16 packets: every packet delivered for the first time opens to
    /// its payload, every repeat is refused.
    #[test]
    fn lossy_reordering_duplicating_channel(
        n in 1usize..300,
        lost in proptest::collection::vec(any::<bool>(), 300),
        dup in proptest::collection::vec(0u8..8, 300),
        seed in any::<u64>(),
    ) {
        let (mut a, mut b) = pair(by_packets(16));
        let mut packets: Vec<(usize, Vec<u8>)> = (0..n)
            .map(|i| (i, seal(&mut a, T0, &(i as u32).to_be_bytes())))
            .collect();
        // Reorder within chunks of 8 with a seeded shuffle.
        let mut rng = seed | 1;
        for chunk in packets.chunks_mut(8) {
            for i in (1..chunk.len()).rev() {
                rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
                chunk.swap(i, (rng % (i as u64 + 1)) as usize);
            }
        }
        let mut run = 0;
        let mut delivered = std::collections::HashSet::new();
        for (k, (i, d)) in packets.iter().enumerate() {
            run = if lost[k] && run < 3 { run + 1 } else { 0 };
            if run > 0 { continue; }
            let copies = if dup[k] == 0 { 2 } else { 1 };
            for _ in 0..copies {
                let got = open(&mut b, T0, d);
                if delivered.insert(*i) {
                    prop_assert_eq!(got.unwrap(), (*i as u32).to_be_bytes());
                } else {
                    prop_assert_eq!(got, Err(Error::Replayed { pn: pn_of(d) }));
                }
            }
        }
    }
}
