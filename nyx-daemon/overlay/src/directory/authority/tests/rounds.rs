//! The timing of a round against drivers and strangers: votes a driver fetches
//! asynchronously, early signatures forged in another authority's name, and an authority
//! restarted shortly before a vote.

use super::*;
use crate::directory::consensus::compute;

#[test]
fn votes_fetched_asynchronously_count_even_when_the_driver_wakes_late() {
    let nodes = relays(1, 1000);
    // On time, with the shortest period; and woken after the signing time, so that the fetch
    // and the signing are both due when authority 0's driver drains its actions.
    for (period, late) in [(MIN_PERIOD, false), (P, true)] {
        let mut net = Net::new(3, |c| c.period = period);
        net.lose_posted_votes = true;
        net.async_fetch = Some(0);
        net.post(&[&nodes[0].descriptor]);
        let t1 = START.div_ceil(period) * period + if late { 0 } else { period };
        net.run_until(t1 - period / 4);
        assert!(
            net.auths[0].rounds.contains_key(&t1),
            "period {period}: voting for {t1}"
        );
        if late {
            net.now = t1 - period / 8 + 10;
        }
        net.run_until(t1);
        assert!(net.refused.is_empty(), "period {period}: {:?}", net.refused);
        assert_eq!(net.published, vec![vec![t1]; 3], "period {period}");
        for i in 0..3 {
            let (unverified, _) = net.served(i).unwrap();
            assert_eq!(unverified.signatures().len(), 3, "period {period}");
        }
        assert_eq!(net.verified(0).relays().len(), 1, "period {period}");
    }
}

#[test]
fn a_forged_early_signature_does_not_displace_the_real_one() {
    let nodes = relays(1, 1000);
    let mut net = Net::new(3, |_| {});
    net.post(&[&nodes[0].descriptor]);
    net.run_until(T1 - P / 4);
    // Authority 1 voted and then stopped: its only signature at authority 0 is the one
    // posted early below (say, relayed by someone), before authority 0 computed its body.
    net.up[1] = false;
    let now = net.now;
    let votes: Vec<Vote> = net.auths[0].rounds[&T1].votes.values().cloned().collect();
    let body = compute(&votes, 3).unwrap();
    let a1 = authority_key(1);
    let (_, real) = sign_body(&body, &a1);
    let (_, by_a2) = sign_body(&body, &authority_key(2));
    let early = |signature| DirRequest::PostSignature {
        valid_after: T1,
        body_digest: body.digest(),
        signer: a1.node_id(),
        signature,
    };
    let auth = &mut net.auths[0];
    for signature in [real, [1; 64], by_a2, [2; 64], real] {
        assert_eq!(call(auth, early(signature), now), DirResponse::Ok);
    }
    // Four distinct ones are held; a fifth is refused with the reason.
    assert_eq!(
        auth.handle_signature(T1, body.digest(), a1.node_id(), &[3; 64], now),
        Err(AuthorityError::TooManyEarlySignatures {
            signer: a1.node_id()
        })
    );
    let DirResponse::Refused { reason } = call(auth, early([3; 64]), now) else {
        panic!("a fifth early signature is refused");
    };
    assert!(reason.contains("unchecked signatures"), "{reason}");
    net.run_until(T1);
    assert_eq!(net.published[0], [T1]);
    let (unverified, _) = net.served(0).unwrap();
    let signers: Vec<NodeId> = unverified.signatures().iter().map(|(s, _)| *s).collect();
    assert!(signers.contains(&a1.node_id()), "the real one counted");
    assert_eq!(signers.len(), 3);
    assert_eq!(net.verified(0).relays().len(), 1);
}

#[test]
fn a_restarted_authority_first_votes_half_a_period_after_its_start() {
    let nodes = relays(1, 1000);
    // T1's vote is at T1 - P/4: half a period after T1 - 3P/4.
    for (start, first) in [(T1 - 3 * P / 4, T1), (T1 - 3 * P / 4 + 1, T1 + P)] {
        let mut net = Net::new(1, |_| {});
        let config = AuthorityConfig::new(pinned(1));
        net.auths[0] = Authority::new(Arc::new(authority_key(0)), config, start).unwrap();
        net.now = start;
        assert_eq!(net.auths[0].next_deadline(), Some(first - P / 2));
        net.post(&[&nodes[0].descriptor]);
        net.run_until(T1 - 1);
        let get = DirRequest::GetVote { valid_after: T1 };
        let vote = call(&mut net.auths[0], get, T1 - 1);
        assert_eq!(matches!(vote, DirResponse::Vote { .. }), first == T1);
        net.run_until(T1 + P);
        assert_eq!(net.published[0], [T1, T1 + P][usize::from(first != T1)..]);
    }
}
