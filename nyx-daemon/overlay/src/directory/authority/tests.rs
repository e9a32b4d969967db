//! Authorities in a simulated network (see `sim`): the consensus each publishes, what a
//! minority of stopped authorities changes, reachability and uptime flags, and each refusal
//! with its reason.

use nyx_core::NodeId;
use nyx_crypto::identity::IdentityKey;

use super::*;
use crate::directory::consensus::{
    ConsensusBody, ConsensusError, Flags, Period, UNMEASURED_WEIGHT_CAP, Vote, sign_body,
};

mod flow;
mod rounds;
mod sim;
mod uploads;

use sim::{Net, P, START, T1, authority_key, call, pinned, post, probes, relays};

fn period(t: u64) -> Period {
    Period {
        valid_after: t,
        fresh_until: t + P,
        valid_until: t + 3 * P,
    }
}

fn ids(c: &crate::directory::consensus::Consensus) -> Vec<NodeId> {
    c.relays().iter().map(|r| r.node_id).collect()
}

#[test]
fn three_authorities_publish_the_same_consensus_of_the_reachable_relays() {
    let nodes = relays(4, 1000);
    let mut net = Net::new(3, |_| {});
    net.reachable.insert(nodes[3].descriptor.node_id(), false);
    net.post(&nodes.iter().map(|n| &n.descriptor).collect::<Vec<_>>());
    net.run_until(T1);
    assert!(net.refused.is_empty(), "{:?}", net.refused);
    assert_eq!(net.published, vec![vec![T1]; 3]);
    let mut reachable: Vec<NodeId> = nodes[..3].iter().map(|n| n.descriptor.node_id()).collect();
    reachable.sort();
    let mut encodings = Vec::new();
    for i in 0..3 {
        let (unverified, descriptors) = net.served(i).unwrap();
        assert_eq!(
            unverified.signatures().len(),
            3,
            "late signatures were added"
        );
        let c = net.verified(i);
        assert_eq!(c.period(), period(T1));
        assert_eq!(ids(&c), reachable);
        // The descriptors it serves are those the consensus names, in its order.
        let named: Vec<(NodeId, [u8; 32])> =
            c.relays().iter().map(|r| (r.node_id, r.digest)).collect();
        let served: Vec<(NodeId, [u8; 32])> = descriptors
            .iter()
            .map(|d| (d.node_id(), d.digest()))
            .collect();
        assert_eq!(served, named);
        let (consensus, descriptors) = net.auths[i].consensus(net.now).unwrap();
        let frame = DirResponse::Consensus {
            consensus: consensus.to_vec(),
            descriptors: descriptors.to_vec(),
        }
        .encode();
        assert_eq!(frame.len() - 4, net.auths[i].published[0].response_len());
        encodings.push(consensus.to_vec());
    }
    assert!(
        encodings.windows(2).all(|w| w[0] == w[1]),
        "identical consensuses"
    );
}

#[test]
fn votes_lost_in_transit_are_fetched() {
    let nodes = relays(2, 1000);
    let mut net = Net::new(3, |_| {});
    net.lose_posted_votes = true;
    net.post(&[&nodes[0].descriptor, &nodes[1].descriptor]);
    net.run_until(T1);
    assert!(net.refused.is_empty(), "{:?}", net.refused);
    assert_eq!(net.published, vec![vec![T1]; 3]);
    for i in 0..3 {
        assert_eq!(net.served(i).unwrap().0.signatures().len(), 3);
        assert_eq!(net.verified(i).relays().len(), 2);
    }
}

#[test]
fn two_of_three_authorities_still_publish() {
    let nodes = relays(2, 1000);
    let mut net = Net::new(3, |_| {});
    net.up[2] = false;
    net.post(&[&nodes[0].descriptor, &nodes[1].descriptor]);
    net.run_until(T1);
    assert!(net.refused.is_empty(), "{:?}", net.refused);
    assert_eq!(net.published, [vec![T1], vec![T1], vec![]]);
    for i in 0..2 {
        let (unverified, _) = net.served(i).unwrap();
        assert_eq!(unverified.signatures().len(), 2);
        assert_eq!(net.verified(i).relays().len(), 2);
    }
    assert!(net.auths[2].consensus(net.now).is_none());
    // A late signature by the third is added if it verifies, refused if not.
    let (now, a2) = (net.now, authority_key(2));
    let body = net.auths[0].published[0].signed.body.clone();
    let (_, forged) = sign_body(&body, &authority_key(1));
    assert_eq!(
        net.auths[0].handle_signature(T1, body.digest(), a2.node_id(), &forged, now),
        Err(AuthorityError::BadSignature {
            signer: a2.node_id()
        })
    );
    let (_, late) = sign_body(&body, &a2);
    let request = DirRequest::PostSignature {
        valid_after: T1,
        body_digest: body.digest(),
        signer: a2.node_id(),
        signature: late,
    };
    assert_eq!(call(&mut net.auths[0], request, now), DirResponse::Ok);
    assert_eq!(net.served(0).unwrap().0.signatures().len(), 3);
}

#[test]
fn with_two_of_three_stopped_the_last_consensus_is_served_until_it_expires() {
    let nodes = relays(1, 1000);
    let mut net = Net::new(3, |_| {});
    net.post(&[&nodes[0].descriptor]);
    net.run_until(T1 + 1);
    net.up[1] = false;
    net.up[2] = false;
    for end in [T1 + P + 1, T1 + 2 * P + 1, T1 + 3 * P - 1] {
        net.run_until(end);
        assert_eq!(net.published[0], [T1], "one vote makes no consensus");
        assert_eq!(net.verified(0).period().valid_after, T1);
        let fresh = DirRequest::GetConsensus { newer_than: T1 };
        assert_eq!(
            call(&mut net.auths[0], fresh, end),
            DirResponse::NotModified
        );
    }
    assert!(net.auths[0].consensus(T1 + 3 * P).is_none(), "expired");
    net.run_until(T1 + 3 * P);
    assert!(
        net.served(0).is_none(),
        "an expired consensus is not served"
    );
    assert!(net.auths[0].consensus(net.now).is_none());
}

#[test]
fn a_relay_failing_its_probe_is_not_listed_and_a_huge_claim_buys_no_weight() {
    let nodes = relays(2, 1000);
    let greedy = relays(1, u32::MAX);
    let mut net = Net::new(3, |_| {});
    net.reachable.insert(nodes[1].descriptor.node_id(), false);
    net.post(&[
        &nodes[0].descriptor,
        &nodes[1].descriptor,
        &greedy[0].descriptor,
    ]);
    net.run_until(T1);
    let c = net.verified(0);
    assert!(
        c.relay(&nodes[1].descriptor.node_id()).is_none(),
        "unreachable"
    );
    let honest = c.relay(&nodes[0].descriptor.node_id()).unwrap();
    let big = c.relay(&greedy[0].descriptor.node_id()).unwrap();
    assert!(big.weight <= UNMEASURED_WEIGHT_CAP);
    assert_eq!(big.weight, honest.weight);
    // Every authority probed every relay.
    assert_eq!(net.probes.len(), 3 * 3);
}

#[test]
fn bad_votes_and_signatures_are_refused_with_their_reason() {
    let nodes = relays(1, 1000);
    let mut net = Net::new(3, |_| {});
    net.post(&[&nodes[0].descriptor]);
    net.run_until(T1 - P / 4);
    let now = net.now;
    let (a1, a2) = (authority_key(1), authority_key(2));
    let empty = |author: &IdentityKey, t: u64| Vote {
        authority: author.node_id(),
        body: ConsensusBody {
            period: period(t),
            relays: Vec::new(),
        },
    };
    let outsider = IdentityKey::from_seed(&[9; 32]);
    let auth = &mut net.auths[0];
    // A junk signature in authority 2's name before the body is computed is held, checked
    // then, and does not keep authority 2's real signature out.
    let junk = DirRequest::PostSignature {
        valid_after: T1,
        body_digest: [0; 32],
        signer: a2.node_id(),
        signature: [0; 64],
    };
    assert_eq!(call(auth, junk, now), DirResponse::Ok);
    assert!(matches!(
        auth.handle_vote(&empty(&outsider, T1).sign(&outsider), now),
        Err(AuthorityError::BadVote(
            ConsensusError::BadVoteSignature { .. }
        ))
    ));
    assert_eq!(
        auth.handle_vote(&empty(&a1, T1 + P).sign(&a1), now),
        Err(AuthorityError::WrongPeriod {
            valid_after: T1 + P,
            expected: T1
        })
    );
    let mut longer = empty(&a1, T1);
    longer.body.period.valid_until += P;
    assert!(matches!(
        auth.handle_vote(&longer.sign(&a1), now),
        Err(AuthorityError::WrongPeriod { .. })
    ));
    let DirResponse::Vote { vote: real } = call(
        &mut net.auths[1],
        DirRequest::GetVote { valid_after: T1 },
        now,
    ) else {
        panic!("authority 1 voted");
    };
    let auth = &mut net.auths[0];
    assert_eq!(
        auth.handle_vote(&real, now),
        Err(AuthorityError::DuplicateVote {
            authority: a1.node_id()
        })
    );
    let DirResponse::Refused { reason } =
        call(auth, DirRequest::PostVote { vote: real.clone() }, now)
    else {
        panic!("a duplicate is refused");
    };
    assert!(reason.contains("already holding a vote"), "{reason}");
    let own = auth.rounds[&T1].own_vote.clone().unwrap();
    assert_eq!(auth.handle_vote(&own, now), Err(AuthorityError::OwnVote));

    // After the consensus is computed: votes are too late; signatures must cover its body.
    net.run_until(T1 - P / 8);
    let now = net.now;
    let body = net.auths[0].published[0].signed.body.clone();
    let auth = &mut net.auths[0];
    assert_eq!(
        auth.handle_vote(&real, now),
        Err(AuthorityError::RoundClosed { valid_after: T1 })
    );
    let other = ConsensusBody {
        period: period(T1),
        relays: Vec::new(),
    };
    let (_, sig) = sign_body(&other, &a1);
    assert_eq!(
        auth.handle_signature(T1, other.digest(), a1.node_id(), &sig, now),
        Err(AuthorityError::WrongBody { valid_after: T1 })
    );
    let (_, by_a2) = sign_body(&body, &a2);
    assert_eq!(
        auth.handle_signature(T1, body.digest(), a1.node_id(), &by_a2, now),
        Err(AuthorityError::DuplicateSignature {
            signer: a1.node_id()
        }),
        "authority 1 signed already"
    );
    let (_, by_outsider) = sign_body(&body, &outsider);
    assert_eq!(
        auth.handle_signature(T1, body.digest(), outsider.node_id(), &by_outsider, now),
        Err(AuthorityError::UnknownSigner {
            signer: outsider.node_id()
        })
    );
    assert_eq!(
        auth.handle_signature(T1 + P, body.digest(), a1.node_id(), &by_a2, now),
        Err(AuthorityError::RoundClosed {
            valid_after: T1 + P
        })
    );
    assert_eq!(net.served(0), None, "published, but it applies from T1");
    net.run_until(T1);
    assert_eq!(net.served(0).unwrap().0.signatures().len(), 3);
}
