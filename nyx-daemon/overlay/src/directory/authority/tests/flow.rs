//! One authority over several periods: uptime flags, the descriptor table, and what
//! GetConsensus and GetVote answer when.

use super::*;
use crate::directory::testnet::TestnetNode;
use crate::directory::{Descriptor, DescriptorBuilder, DescriptorError};

/// A descriptor of `node` like its own but published `later` seconds after it.
fn republished(node: &TestnetNode, later: u64) -> Descriptor {
    let d = &node.descriptor;
    DescriptorBuilder {
        nickname: d.nickname().to_owned(),
        quic_addr: d.quic_addr(),
        udp_addr: d.udp_addr(),
        link_key: node.link_key.public().clone(),
        onion_certs: node.onion_keys.certs().to_vec(),
        exit_policy: d.exit_policy().clone(),
        family: d.family().to_vec(),
        bandwidth: d.bandwidth(),
        published: d.published() + later,
        valid_until: d.valid_until(),
    }
    .sign(&node.identity)
    .unwrap()
}

#[test]
fn stable_and_guard_come_with_uptime_and_a_failed_probe_resets_them() {
    let nodes = relays(1, 1000);
    let id = nodes[0].descriptor.node_id();
    let mut net = Net::new(3, |c| {
        c.stable_after = P;
        c.guard_after = 3 * P;
    });
    net.post(&[&nodes[0].descriptor]);
    // Probed from START, a minute into the period before T1; votes come P/4 before each
    // period, so the uptime at the vote for T1 + kP is (k + 1)P - P/4 - 60.
    let mut flags = Vec::new();
    for k in 0..7 {
        let t = T1 + k * P;
        // Down for the probe of the period T1 + 4P only.
        net.reachable.insert(id, k != 4);
        net.run_until(t);
        flags.push(net.verified(0).relay(&id).map(|r| r.flags));
    }
    let (r, s, g) = (Flags::RUNNING, Flags::STABLE, Flags::GUARD);
    let exit = Flags::EXIT; // the loopback-only policy lets something out
    assert_eq!(
        flags,
        [
            Some(r | exit),
            Some(r | exit | s),
            Some(r | exit | s),
            Some(r | exit | s | g),
            None,
            Some(r | exit),
            Some(r | exit | s),
        ]
    );
}

#[test]
fn uploads_are_checked_bounded_and_replaced_by_newer_ones() {
    let nodes = relays(3, 1000);
    let short = {
        let spec = crate::directory::testnet::TestnetSpec {
            nodes: 1,
            validity: std::time::Duration::from_secs(60),
            ..Default::default()
        };
        crate::directory::testnet::generate(&spec, START).unwrap().0
    };
    let config = |max| {
        let mut c = AuthorityConfig::new(pinned(1));
        c.max_descriptors = max;
        c
    };
    let mut auth = Authority::new(Arc::new(authority_key(0)), config(2), START).unwrap();
    let (a, b, c) = (&nodes[0], &short[0], &nodes[2]);

    let expired = post(&mut auth, &b.descriptor, START + 60);
    let DirResponse::Refused { reason } = expired else {
        panic!("{expired:?}")
    };
    assert!(reason.contains("expired"), "{reason}");
    let mut garbage = a.descriptor.as_bytes().to_vec();
    garbage[40] ^= 1;
    assert_eq!(
        auth.post_descriptor(&garbage, START),
        Err(AuthorityError::Descriptor(DescriptorError::BadSignature))
    );

    assert_eq!(post(&mut auth, &a.descriptor, START), DirResponse::Ok);
    assert_eq!(post(&mut auth, &b.descriptor, START), DirResponse::Ok);
    assert_eq!(
        probes(&mut auth, START),
        [a.descriptor.node_id(), b.descriptor.node_id()]
    );
    // Both reachable: a full table of relays that passed their probe refuses a new one.
    auth.probed(a.descriptor.node_id(), a.descriptor.digest(), true, START);
    auth.probed(b.descriptor.node_id(), b.descriptor.digest(), true, START);
    assert_eq!(
        auth.post_descriptor(c.descriptor.as_bytes(), START),
        Err(AuthorityError::TooManyRelays { max: 2 })
    );
    // The same descriptor again changes nothing and asks for no probe.
    assert_eq!(post(&mut auth, &a.descriptor, START), DirResponse::Ok);
    assert!(probes(&mut auth, START).is_empty());

    // Once b expired its place is free.
    let later = START + 500;
    assert_eq!(post(&mut auth, &c.descriptor, later), DirResponse::Ok);
    assert_eq!(auth.relay_count(), 2);
    assert_eq!(probes(&mut auth, later), [c.descriptor.node_id()]);

    // A newer descriptor replaces the older and is probed; the older is refused after it.
    let newer = republished(a, 100);
    assert_eq!(post(&mut auth, &newer, later), DirResponse::Ok);
    assert_eq!(probes(&mut auth, later), [a.descriptor.node_id()]);
    assert!(matches!(
        auth.post_descriptor(a.descriptor.as_bytes(), later),
        Err(AuthorityError::NotNewer { published: START, held, .. }) if held == START + 100
    ));
    // A newer descriptor less than an eighth of a period after the last probe waits for
    // the scheduled probe.
    let c2 = republished(c, 1);
    assert_eq!(post(&mut auth, &c2, later + 10), DirResponse::Ok);
    assert!(probes(&mut auth, later + 10).is_empty());
    // A success reported for a replaced descriptor does not count (nor do the results of
    // the probes of the newer ones taken above, never reported).
    auth.probed(a.descriptor.node_id(), a.descriptor.digest(), true, later);
    auth.probed(c.descriptor.node_id(), c.descriptor.digest(), true, later);
    let mut net = Net::new(1, |_| {});
    net.auths[0] = auth;
    net.now = later + 10;
    net.run_until(T1);
    assert_eq!(
        net.probes,
        [(0, c2.node_id())],
        "only c2, at the scheduled probe"
    );
    let listed: Vec<(NodeId, [u8; 32])> = net
        .verified(0)
        .relays()
        .iter()
        .map(|r| (r.node_id, r.digest))
        .collect();
    // `a`'s newer descriptor keeps the address and link key of the one probed before, so
    // `a` stays listed with it; `c2`, probed at the step, is listed.
    let mut expected = vec![
        (a.descriptor.node_id(), newer.digest()),
        (c2.node_id(), c2.digest()),
    ];
    expected.sort();
    assert_eq!(listed, expected);
}

#[test]
fn get_consensus_and_get_vote_answer_by_period() {
    let nodes = relays(1, 1000);
    let mut net = Net::new(1, |_| {});
    assert_eq!(net.auths[0].next_deadline(), Some(T1 - P / 2));
    assert_eq!(net.auths[0].poll_action(START), None, "nothing due yet");
    net.post(&[&nodes[0].descriptor]);
    let get = |newer_than| DirRequest::GetConsensus { newer_than };
    assert_eq!(
        call(&mut net.auths[0], get(0), START),
        DirResponse::NotFound
    );
    net.run_until(T1 - 1);
    assert_eq!(net.published[0], [T1]);
    assert_eq!(
        call(&mut net.auths[0], get(0), T1 - 1),
        DirResponse::NotFound,
        "published, but not in force before T1"
    );
    net.run_until(T1);
    let first = net.served(0).unwrap().0;
    assert_eq!(first.body().period.valid_after, T1);
    assert!(matches!(
        call(&mut net.auths[0], get(T1 - 1), T1),
        DirResponse::Consensus { .. }
    ));
    assert_eq!(
        call(&mut net.auths[0], get(T1), T1),
        DirResponse::NotModified
    );
    assert_eq!(
        call(&mut net.auths[0], get(T1 + 5), T1),
        DirResponse::NotModified
    );

    net.run_until(T1 + P);
    let second = net.served(0).unwrap().0;
    assert_eq!(second.body().period.valid_after, T1 + P);
    let DirResponse::Consensus { consensus, .. } = call(&mut net.auths[0], get(T1), T1 + P) else {
        panic!("the next consensus");
    };
    assert_eq!(consensus, second.encode());
    // A client holding the first accepts the second (no rollback).
    let held = Some(T1);
    assert!(second.verify(&pinned(1), T1 + P, held).is_ok());

    // Own votes: the upcoming period's once made, nothing for others.
    let now = net.now;
    let vote = |valid_after| DirRequest::GetVote { valid_after };
    assert_eq!(
        call(&mut net.auths[0], vote(T1 + 2 * P), now),
        DirResponse::NotFound
    );
    net.run_until(T1 + 2 * P - P / 4);
    let DirResponse::Vote { vote: bytes } = call(&mut net.auths[0], vote(T1 + 2 * P), net.now)
    else {
        panic!("own vote");
    };
    let v = Vote::decode(&bytes, &pinned(1)).unwrap();
    assert_eq!(v.body.period, period(T1 + 2 * P));
    assert_eq!(
        call(&mut net.auths[0], vote(T1 + 3 * P), net.now),
        DirResponse::NotFound
    );
    assert_eq!(
        call(&mut net.auths[0], vote(T1), net.now),
        DirResponse::NotFound,
        "discarded"
    );
}

#[test]
fn an_authority_started_after_the_vote_time_waits_for_the_next_period() {
    let late = T1 - P / 4 + 1;
    let mut auth = Authority::new(
        Arc::new(authority_key(0)),
        AuthorityConfig::new(pinned(1)),
        late,
    )
    .unwrap();
    assert_eq!(auth.next_deadline(), Some(T1 + P / 2));
    assert_eq!(auth.poll_action(T1 - 1), None);
    assert_eq!(
        auth.handle_vote(&[0; 8], late),
        Err(AuthorityError::BadVote(ConsensusError::Decode(
            DescriptorError::Malformed {
                field: "vote",
                reason: "shorter than a signature".into()
            }
        )))
    );
    let cfg = AuthorityConfig::new(pinned(2)[1..].to_vec());
    assert!(matches!(
        Authority::new(Arc::new(authority_key(0)), cfg, late),
        Err(AuthorityError::Config { .. })
    ));
}
