//! Votes, the consensus computation and the client's acceptance rules: each refusal with its
//! reason, what a minority of authorities cannot change, and the codec (round trips, and
//! arbitrary bytes never panic).

use proptest::prelude::*;

use nyx_crypto::identity::{IdentityKey, IdentityPublic, SIGNATURE_LEN};

use super::*;

const T0: u64 = 1_800_000_000;

fn authority(i: u8) -> IdentityKey {
    IdentityKey::from_seed(&[0xa0 + i; 32])
}

fn pinned(n: u8) -> Vec<IdentityPublic> {
    (0..n).map(|i| authority(i).public()).collect()
}

fn period() -> Period {
    Period {
        valid_after: T0,
        fresh_until: T0 + 3600,
        valid_until: T0 + 3 * 3600,
    }
}

fn relay(i: u8, weight: u32, flags: Flags) -> RelayStatus {
    RelayStatus {
        node_id: NodeId::from_bytes([i; 32]),
        digest: [i ^ 0x55; 32],
        flags,
        weight,
    }
}

fn vote(author: u8, relays: Vec<RelayStatus>) -> Vote {
    Vote {
        authority: authority(author).node_id(),
        body: ConsensusBody {
            period: period(),
            relays,
        },
    }
}

fn signed(body: &ConsensusBody, by: &[u8]) -> UnverifiedConsensus {
    let sigs = by.iter().map(|&i| sign_body(body, &authority(i))).collect();
    UnverifiedConsensus::new(body.clone(), sigs)
}

const RS: Flags = Flags(Flags::RUNNING.bits() | Flags::STABLE.bits());

#[test]
fn a_relay_needs_a_majority_of_votes_and_gets_the_median_weight() {
    let votes = vec![
        vote(0, vec![relay(1, 100, RS), relay(2, 50, RS)]),
        vote(1, vec![relay(1, 300, RS | Flags::GUARD), relay(3, 10, RS)]),
        // A lying authority: an enormous weight for relay 1, a relay nobody else lists.
        vote(
            2,
            vec![relay(1, u32::MAX, RS | Flags::GUARD), relay(4, 9, RS)],
        ),
    ];
    let body = compute(&votes, 3).unwrap();
    let ids: Vec<u8> = body
        .relays
        .iter()
        .map(|r| r.node_id.as_bytes()[0])
        .collect();
    assert_eq!(ids, [1], "only relay 1 is listed by a majority");
    let r = body.relays[0];
    assert_eq!(r.weight, 300, "the low median of 100, 300, MAX");
    assert!(r.flags.contains(Flags::GUARD), "2 of 3 set Guard");
    assert!(r.flags.contains(RS));
    assert_eq!(body.period, period());
}

#[test]
fn the_computation_is_the_same_whatever_the_order_of_the_votes() {
    let votes = vec![
        vote(0, vec![relay(1, 100, RS), relay(2, 50, RS)]),
        vote(1, vec![relay(1, 300, RS), relay(2, 70, RS | Flags::EXIT)]),
        vote(2, vec![relay(2, 60, RS | Flags::EXIT)]),
    ];
    let a = compute(&votes, 3).unwrap();
    let mut reversed = votes.clone();
    reversed.reverse();
    assert_eq!(compute(&reversed, 3).unwrap().encode(), a.encode());
}

#[test]
fn too_few_votes_make_no_consensus() {
    let votes = vec![vote(0, vec![relay(1, 1, RS)])];
    assert_eq!(
        compute(&votes, 3),
        Err(ConsensusError::NotEnoughVotes {
            votes: 1,
            needed: 2
        })
    );
    // The same authority twice is one vote.
    let twice = vec![
        vote(0, vec![relay(1, 1, RS)]),
        vote(0, vec![relay(1, 1, RS)]),
    ];
    assert!(matches!(
        compute(&twice, 3),
        Err(ConsensusError::NotEnoughVotes { votes: 1, .. })
    ));
    // A stray vote for another period does not decide the period, wherever it comes.
    let mut stray = vote(1, vec![relay(1, 1, RS)]);
    stray.body.period.valid_after -= 1;
    let mixed = vec![
        stray,
        vote(0, vec![relay(1, 1, RS)]),
        vote(2, vec![relay(1, 1, RS)]),
    ];
    assert_eq!(compute(&mixed, 3).unwrap().period, period());
    // Two of three authorities are enough.
    let two = vec![
        vote(0, vec![relay(1, 1, RS)]),
        vote(2, vec![relay(1, 1, RS)]),
    ];
    assert_eq!(compute(&two, 3).unwrap().relays.len(), 1);
}

#[test]
fn votes_are_signed_by_a_pinned_authority() {
    let v = vote(1, vec![relay(1, 5, RS)]);
    let bytes = v.sign(&authority(1));
    assert_eq!(Vote::decode(&bytes, &pinned(3)).unwrap(), v);
    // Not pinned.
    assert!(matches!(
        Vote::decode(&bytes, &pinned(1)),
        Err(ConsensusError::BadVoteSignature { .. })
    ));
    // Signed by another key than the one it names.
    let forged = v.sign(&authority(2));
    assert!(matches!(
        Vote::decode(&forged, &pinned(3)),
        Err(ConsensusError::BadVoteSignature { .. })
    ));
    // A changed byte.
    let mut flipped = bytes.clone();
    flipped[40] ^= 1;
    assert!(Vote::decode(&flipped, &pinned(3)).is_err());
}

#[test]
fn a_consensus_signed_by_a_majority_is_accepted_after_a_round_trip() {
    let body = compute(
        &[
            vote(0, vec![relay(1, 5, RS)]),
            vote(1, vec![relay(1, 7, RS)]),
        ],
        3,
    )
    .unwrap();
    let bytes = signed(&body, &[0, 2]).encode();
    let got = UnverifiedConsensus::decode(&bytes)
        .unwrap()
        .verify(&pinned(3), T0 + 10, None)
        .unwrap();
    assert_eq!(got.period(), period());
    assert_eq!(got.relays(), body.relays.as_slice());
    assert_eq!(got.relay(&NodeId::from_bytes([1; 32])).unwrap().weight, 5);
    assert!(got.relay(&NodeId::from_bytes([9; 32])).is_none());
    assert_eq!(got.encode(), bytes);
}

#[test]
fn forged_minority_expired_early_and_rolled_back_consensuses_are_refused() {
    let body = ConsensusBody {
        period: period(),
        relays: vec![relay(1, 5, RS)],
    };
    let keys = pinned(3);
    let check = |c: UnverifiedConsensus, now: u64, held: Option<u64>| c.verify(&keys, now, held);
    // One of three: a minority.
    assert_eq!(
        check(signed(&body, &[1]), T0, None),
        Err(ConsensusError::NotEnoughSignatures {
            valid: 1,
            needed: 2
        })
    );
    // One authority signing twice counts once.
    let mut twice = signed(&body, &[1]);
    twice.signatures.push(twice.signatures[0]);
    assert!(matches!(
        check(twice, T0, None),
        Err(ConsensusError::NotEnoughSignatures { valid: 1, .. })
    ));
    // Signatures by keys nobody pinned do not count.
    let outsiders: Vec<_> = [7u8, 8, 9]
        .iter()
        .map(|&i| sign_body(&body, &authority(i)))
        .collect();
    assert!(matches!(
        check(UnverifiedConsensus::new(body.clone(), outsiders), T0, None),
        Err(ConsensusError::NotEnoughSignatures { valid: 0, .. })
    ));
    // A body changed after signing: the signatures no longer verify.
    let mut forged = signed(&body, &[0, 1, 2]);
    forged.body_bytes[30] ^= 1;
    let forged = UnverifiedConsensus::decode(&forged.encode()).unwrap();
    assert!(matches!(
        check(forged, T0, None),
        Err(ConsensusError::NotEnoughSignatures { valid: 0, .. })
    ));
    let good = signed(&body, &[0, 1]);
    assert!(matches!(
        check(good.clone(), period().valid_until, None),
        Err(ConsensusError::Expired { .. })
    ));
    assert!(matches!(
        check(good.clone(), T0 - MAX_CLOCK_SKEW - 1, None),
        Err(ConsensusError::NotYetValid { .. })
    ));
    assert!(check(good.clone(), T0 - MAX_CLOCK_SKEW, None).is_ok());
    assert_eq!(
        check(good.clone(), T0, Some(T0 + 3600)),
        Err(ConsensusError::RolledBack {
            valid_after: T0,
            held: T0 + 3600
        })
    );
    assert!(
        check(good, T0, Some(T0)).is_ok(),
        "the same one again is fine"
    );
}

/// A consensus valid for longer than MAX_CONSENSUS_LIFETIME is refused, however well signed:
/// authorities' keys misused once cannot freeze clients on one relay list for long.
#[test]
fn a_consensus_valid_too_long_is_refused() {
    let keys = pinned(3);
    let body_lasting = |lifetime: u64| ConsensusBody {
        period: Period {
            valid_after: T0,
            fresh_until: T0 + 1,
            valid_until: T0 + lifetime,
        },
        relays: vec![relay(1, 5, RS)],
    };
    let longest = signed(&body_lasting(MAX_CONSENSUS_LIFETIME), &[0, 1, 2]);
    assert!(longest.verify(&keys, T0, None).is_ok());
    let too_long = signed(&body_lasting(MAX_CONSENSUS_LIFETIME + 1), &[0, 1, 2]);
    assert_eq!(
        too_long.verify(&keys, T0, None),
        Err(ConsensusError::TooLong {
            valid_after: T0,
            valid_until: T0 + MAX_CONSENSUS_LIFETIME + 1,
            max: MAX_CONSENSUS_LIFETIME
        })
    );
}

#[test]
fn malformed_bytes_are_refused_with_their_reason() {
    let body = ConsensusBody {
        period: period(),
        relays: vec![relay(2, 5, RS), relay(1, 5, RS)],
    };
    let bytes = UnverifiedConsensus::new(body, Vec::new()).encode();
    assert!(matches!(
        UnverifiedConsensus::decode(&bytes),
        Err(ConsensusError::Unsorted { .. })
    ));
    let backwards = ConsensusBody {
        period: Period {
            valid_after: T0,
            fresh_until: T0,
            valid_until: T0 + 1,
        },
        relays: Vec::new(),
    };
    let bytes = UnverifiedConsensus::new(backwards, Vec::new()).encode();
    assert!(matches!(
        UnverifiedConsensus::decode(&bytes),
        Err(ConsensusError::BadPeriod { .. })
    ));
    let good = signed(
        &ConsensusBody {
            period: period(),
            relays: vec![relay(1, 1, RS)],
        },
        &[0],
    )
    .encode();
    let mut trailing = good.clone();
    trailing.push(0);
    assert!(matches!(
        UnverifiedConsensus::decode(&trailing),
        Err(ConsensusError::Decode(DescriptorError::TrailingBytes {
            count: 1
        }))
    ));
    for cut in 0..good.len() {
        assert!(
            UnverifiedConsensus::decode(&good[..cut]).is_err(),
            "{cut} bytes"
        );
    }
    // A count larger than the bytes present is refused before anything is allocated.
    let mut huge = good.clone();
    huge[4 + 25..4 + 29].copy_from_slice(&u32::MAX.to_be_bytes());
    assert!(UnverifiedConsensus::decode(&huge).is_err());
}

#[test]
fn uptime_flags_add_only_stable_and_guard() {
    let spec = crate::directory::testnet::TestnetSpec {
        nodes: 1,
        exit_policy: crate::directory::ExitPolicy::reject_all(),
        bandwidth: 5000,
        ..Default::default()
    };
    let (nodes, _) = crate::directory::testnet::generate(&spec, T0).unwrap();
    let d = &nodes[0].descriptor;
    assert_eq!(vote_status(d).flags, Flags::RUNNING);
    let s = vote_status_with_uptime(d, Flags(Flags::ALL));
    assert_eq!(
        s.flags,
        Flags::RUNNING | Flags::STABLE | Flags::GUARD,
        "Exit comes from the policy alone"
    );
    assert_eq!((s.digest, s.weight), (d.digest(), UNMEASURED_WEIGHT_CAP));
}

fn arb_body() -> impl Strategy<Value = ConsensusBody> {
    (
        any::<u32>(),
        1u32..100_000,
        0u32..100_000,
        proptest::collection::btree_map(
            any::<[u8; 32]>(),
            (any::<[u8; 32]>(), 0u8..16, any::<u32>()),
            0..20,
        ),
    )
        .prop_map(|(start, fresh, extra, relays)| ConsensusBody {
            period: Period {
                valid_after: u64::from(start),
                fresh_until: u64::from(start) + u64::from(fresh),
                valid_until: u64::from(start) + u64::from(fresh) + u64::from(extra),
            },
            relays: relays
                .into_iter()
                .map(|(id, (digest, bits, weight))| RelayStatus {
                    node_id: NodeId::from_bytes(id),
                    digest,
                    flags: Flags(bits),
                    weight,
                })
                .collect(),
        })
}

proptest! {
    #[test]
    fn bodies_round_trip(body in arb_body(), signers in proptest::collection::vec(any::<([u8; 32], [u8; 32], [u8; 32])>(), 0..4)) {
        let sigs: Vec<(NodeId, [u8; SIGNATURE_LEN])> = signers
            .iter()
            .map(|(id, a, b)| {
                let mut sig = [0u8; SIGNATURE_LEN];
                sig[..32].copy_from_slice(a);
                sig[32..].copy_from_slice(b);
                (NodeId::from_bytes(*id), sig)
            })
            .collect();
        let c = UnverifiedConsensus::new(body.clone(), sigs);
        let back = UnverifiedConsensus::decode(&c.encode()).unwrap();
        prop_assert_eq!(&back, &c);
        prop_assert_eq!(back.body, body);
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..600)) {
        let _ = UnverifiedConsensus::decode(&bytes);
        let _ = Vote::decode(&bytes, &pinned(2));
    }

    #[test]
    fn a_minority_cannot_move_a_weight_outside_the_honest_range(
        honest in proptest::collection::vec(1u32..1_000_000, 3..6),
        liars in proptest::collection::vec(any::<u32>(), 0..3),
    ) {
        prop_assume!(liars.len() < honest.len());
        let mut votes = Vec::new();
        for (i, w) in honest.iter().enumerate() {
            votes.push(vote(i as u8, vec![relay(1, *w, RS)]));
        }
        for (j, w) in liars.iter().enumerate() {
            votes.push(vote((honest.len() + j) as u8, vec![relay(1, *w, RS)]));
        }
        let body = compute(&votes, votes.len()).unwrap();
        let weight = body.relays[0].weight;
        let (lo, hi) = (*honest.iter().min().unwrap(), *honest.iter().max().unwrap());
        prop_assert!(lo <= weight && weight <= hi, "{} outside {}..={}", weight, lo, hi);
    }
}
