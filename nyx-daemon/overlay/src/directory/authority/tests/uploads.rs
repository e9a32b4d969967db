//! The bounds on what a stranger's uploads make an authority hold and probe: validity
//! horizon, relays never reachable, relays waiting for a first probe, relays per address,
//! and eviction from a full table.

use std::net::SocketAddr;
use std::sync::OnceLock;

use proptest::prelude::*;

use super::*;
use crate::directory::testnet::{self, TestnetNode};
use crate::directory::{Descriptor, DescriptorBuilder, ExitPolicy};

type Addrs = (Option<SocketAddr>, Option<SocketAddr>);

fn authority(tweak: impl Fn(&mut AuthorityConfig)) -> Authority {
    let mut config = AuthorityConfig::new(pinned(1));
    tweak(&mut config);
    Authority::new(Arc::new(authority_key(0)), config, START).unwrap()
}

fn addr(s: &str) -> Option<SocketAddr> {
    Some(s.parse().unwrap())
}

/// One relay per address pair, its descriptor signed at `START`.
fn relays_at(addrs: &[Addrs]) -> Vec<TestnetNode> {
    testnet::generate_with_addrs(addrs, &ExitPolicy::loopback_only(), START)
        .unwrap()
        .0
}

/// A descriptor of `node` published `later` seconds after `START`, at `addrs`.
fn resigned(node: &TestnetNode, later: u64, addrs: Addrs, valid_until: u64) -> Descriptor {
    let d = &node.descriptor;
    DescriptorBuilder {
        nickname: d.nickname().to_owned(),
        quic_addr: addrs.0,
        udp_addr: addrs.1,
        link_key: node.link_key.public().clone(),
        onion_certs: node.onion_keys.certs().to_vec(),
        exit_policy: d.exit_policy().clone(),
        family: d.family().to_vec(),
        bandwidth: d.bandwidth(),
        published: START + later,
        valid_until,
    }
    .sign(&node.identity)
    .unwrap()
}

fn refusal(auth: &mut Authority, d: &Descriptor, now: u64) -> String {
    match post(auth, d, now) {
        DirResponse::Refused { reason } => reason,
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_descriptor_valid_for_more_than_seven_days_is_refused() {
    let nodes = relays(1, 1000);
    let node = &nodes[0];
    let addrs = (node.descriptor.quic_addr(), node.descriptor.udp_addr());
    let mut auth = authority(|_| {});
    let latest = START + MAX_DESCRIPTOR_VALIDITY;
    // Published 200 s ahead (within the clock skew allowed) and valid 7 days from then: a
    // valid descriptor, but held past 7 days from its upload.
    let far = resigned(node, 200, addrs, latest + 200);
    assert_eq!(
        auth.post_descriptor(far.as_bytes(), START),
        Err(AuthorityError::ValidityTooLong {
            valid_until: latest + 200,
            latest
        })
    );
    let reason = refusal(&mut auth, &far, START);
    assert!(reason.contains("at most 604800 s ahead"), "{reason}");
    assert_eq!(auth.relay_count(), 0);
    // Seven days exactly, or the same one a second later, is held.
    let week = resigned(node, 0, addrs, latest);
    assert_eq!(post(&mut auth, &week, START), DirResponse::Ok);
    assert_eq!(
        post(&mut auth, &resigned(node, 1, addrs, latest + 1), START + 1),
        DirResponse::Ok
    );
    assert_eq!(auth.relay_count(), 1);
}

#[test]
fn a_relay_never_reachable_is_forgotten_and_one_reachable_once_is_kept() {
    let nodes = relays(3, 1000);
    let [down, flaky, up] = [0, 1, 2].map(|i| nodes[i].descriptor.node_id());
    let mut net = Net::new(1, |_| {});
    net.reachable.insert(down, false);
    let all: Vec<&Descriptor> = nodes.iter().map(|n| &n.descriptor).collect();
    net.post(&all);
    assert_eq!(
        net.auths[0].relay_count(),
        2,
        "forgotten on its first failure"
    );
    // Reachable at its upload, down for the next scheduled probe (T1 + P/2): kept, not
    // listed from T1 + P.
    net.reachable.insert(flaky, false);
    net.run_until(T1 + P);
    assert_eq!(net.auths[0].relay_count(), 2);
    let probed = |net: &Net, id| net.probes.iter().filter(|(_, n)| *n == id).count();
    assert_eq!(
        [down, flaky, up].map(|id| probed(&net, id)),
        [1, 2, 2],
        "the forgotten relay is not probed again"
    );
    assert_eq!(ids(&net.verified(0)), [up]);
    // It may upload again (and is probed once per upload).
    net.reachable.insert(down, true);
    net.post(&[&nodes[0].descriptor]);
    assert_eq!(probed(&net, down), 2);
    assert_eq!(net.auths[0].relay_count(), 3);
}

#[test]
fn at_most_max_unprobed_new_relays_wait_for_their_first_probe() {
    let nodes = relays(4, 1000);
    let [a, b, c, d] = [0, 1, 2, 3].map(|i| &nodes[i].descriptor);
    let mut auth = authority(|c| c.max_unprobed = 2);
    assert_eq!(post(&mut auth, a, START), DirResponse::Ok);
    assert_eq!(post(&mut auth, b, START), DirResponse::Ok);
    assert_eq!(probes(&mut auth, START), [a.node_id(), b.node_id()]);
    assert_eq!(
        auth.post_descriptor(c.as_bytes(), START),
        Err(AuthorityError::Busy { waiting: 2 })
    );
    let reason = refusal(&mut auth, c, START);
    assert!(
        reason.contains("busy") && reason.contains("retry later"),
        "{reason}"
    );
    // A newer descriptor of a waiting relay is not a new relay.
    let a2 = resigned(&nodes[0], 1, (a.quic_addr(), a.udp_addr()), a.valid_until());
    assert_eq!(post(&mut auth, &a2, START + 1), DirResponse::Ok);
    // Results free places: a reachable (held), then b unreachable (forgotten).
    auth.probed(a.node_id(), a2.digest(), true, START + 1);
    assert_eq!(post(&mut auth, c, START + 1), DirResponse::Ok);
    assert_eq!(
        auth.post_descriptor(d.as_bytes(), START + 1),
        Err(AuthorityError::Busy { waiting: 2 })
    );
    auth.probed(b.node_id(), b.digest(), false, START + 1);
    assert_eq!(post(&mut auth, d, START + 1), DirResponse::Ok);
    assert_eq!(auth.relay_count(), 3, "a, c and d");
}

#[test]
fn at_most_two_relays_share_an_ip_address() {
    let nodes = relays_at(&[
        (addr("10.0.0.1:7000"), addr("10.0.0.1:7001")),
        (addr("10.0.0.1:7002"), None),
        (addr("10.0.0.2:7000"), addr("10.0.0.1:7003")),
        (None, addr("[::ffff:10.0.0.1]:7004")),
        (addr("10.0.0.3:7000"), None),
    ]);
    let d: Vec<&Descriptor> = nodes.iter().map(|n| &n.descriptor).collect();
    let until = d[0].valid_until();
    let full = |max| AuthorityError::TooManyAtAddress {
        address: "10.0.0.1".parse().unwrap(),
        max,
    };
    let mut auth = authority(|_| {});
    assert_eq!(post(&mut auth, d[0], START), DirResponse::Ok);
    assert_eq!(post(&mut auth, d[1], START), DirResponse::Ok);
    assert_eq!(auth.post_descriptor(d[2].as_bytes(), START), Err(full(2)));
    assert_eq!(
        auth.post_descriptor(d[3].as_bytes(), START),
        Err(full(2)),
        "IPv4-mapped"
    );
    let reason = refusal(&mut auth, d[2], START);
    assert!(
        reason.contains("already holding 2 relays at 10.0.0.1"),
        "{reason}"
    );
    // A newer descriptor of a relay held there is not counted twice; moving there is
    // refused like a new relay.
    let moved = (addr("10.0.0.1:7005"), None);
    assert_eq!(
        post(&mut auth, &resigned(&nodes[0], 1, moved, until), START),
        DirResponse::Ok
    );
    assert_eq!(post(&mut auth, d[4], START), DirResponse::Ok);
    let crowded = resigned(&nodes[4], 1, moved, until);
    assert_eq!(
        auth.post_descriptor(crowded.as_bytes(), START),
        Err(full(2))
    );
    // Moving away, or being forgotten, frees the place.
    let away = (addr("10.0.0.2:7001"), None);
    assert_eq!(
        post(&mut auth, &resigned(&nodes[0], 2, away, until), START),
        DirResponse::Ok
    );
    assert_eq!(post(&mut auth, d[2], START), DirResponse::Ok);
    probes(&mut auth, START);
    auth.probed(d[1].node_id(), d[1].digest(), false, START);
    assert_eq!(post(&mut auth, d[3], START), DirResponse::Ok);
    assert_eq!(auth.relay_count(), 4);
    // The limit is a setting.
    let mut three = authority(|c| c.max_relays_per_address = 3);
    for descriptor in &d[..3] {
        assert_eq!(post(&mut three, descriptor, START), DirResponse::Ok);
    }
    assert_eq!(three.post_descriptor(d[3].as_bytes(), START), Err(full(3)));
}

#[test]
fn a_full_table_evicts_the_relays_unreachable_at_their_last_probe() {
    let nodes = relays(5, 1000);
    let d: Vec<&Descriptor> = nodes.iter().map(|n| &n.descriptor).collect();
    let mut auth = authority(|c| c.max_descriptors = 3);
    for descriptor in &d[..3] {
        assert_eq!(post(&mut auth, descriptor, START), DirResponse::Ok);
    }
    probes(&mut auth, START);
    // 0 reachable; 1 reachable, then not; 2 not tested yet.
    auth.probed(d[0].node_id(), d[0].digest(), true, START);
    auth.probed(d[1].node_id(), d[1].digest(), true, START);
    auth.probed(d[1].node_id(), d[1].digest(), false, START + 1);
    assert_eq!(auth.relay_count(), 3);
    assert_eq!(post(&mut auth, d[3], START + 1), DirResponse::Ok);
    assert_eq!(auth.relay_count(), 2, "1 and 2 evicted for 3");
    auth.probed(d[3].node_id(), d[3].digest(), true, START + 1);
    assert_eq!(post(&mut auth, d[1], START + 1), DirResponse::Ok);
    auth.probed(d[1].node_id(), d[1].digest(), true, START + 1);
    assert_eq!(
        auth.post_descriptor(d[4].as_bytes(), START + 1),
        Err(AuthorityError::TooManyRelays { max: 3 })
    );
}

/// Six relays on three addresses, each with three descriptors: published at `START + v`,
/// on addresses that depend on `v`, valid for `v + 1` hours.
fn pool() -> &'static Vec<Vec<Descriptor>> {
    static POOL: OnceLock<Vec<Vec<Descriptor>>> = OnceLock::new();
    POOL.get_or_init(|| {
        let ip = |k: usize| format!("10.0.1.{}", k % 3 + 1);
        let nodes = relays_at(&[(addr("10.0.1.1:7000"), None); 6]);
        (0..6)
            .map(|i| {
                (0..3)
                    .map(|v| {
                        let quic = addr(&format!("{}:7000", ip(i + v)));
                        let udp = (v > 0)
                            .then(|| addr(&format!("{}:7001", ip(i * v))))
                            .flatten();
                        let until = START + 3600 * (v as u64 + 1);
                        resigned(&nodes[i], v as u64, (quic, udp), until)
                    })
                    .collect()
            })
            .collect()
    })
}

#[derive(Debug, Clone)]
enum Op {
    Post(usize, usize),
    Probed(usize, usize, bool),
    Wait(u64),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0..6usize, 0..3usize).prop_map(|(i, v)| Op::Post(i, v)),
        3 => (0..6usize, 0..3usize, any::<bool>()).prop_map(|(i, v, ok)| Op::Probed(i, v, ok)),
        1 => (0..2000u64).prop_map(Op::Wait),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    #[test]
    fn the_relay_table_stays_within_its_bounds(ops in prop::collection::vec(op(), 1..40)) {
        let mut auth = authority(|c| {
            c.max_descriptors = 4;
            c.max_unprobed = 2;
        });
        let mut now = START + 2;
        for op in ops {
            match op {
                Op::Post(i, v) => {
                    let _ = auth.post_descriptor(pool()[i][v].as_bytes(), now);
                }
                Op::Probed(i, v, ok) => {
                    let d = &pool()[i][v];
                    auth.probed(d.node_id(), d.digest(), ok, now);
                }
                Op::Wait(s) => now += s,
            }
            while auth.poll_action(now).is_some() {}
            auth.relays.check_invariants();
        }
    }
}

/// A relay that rotates its onion keys just after the scheduled probe (its new descriptor
/// waits for the next one) stays in the vote: same addresses and link key keep its
/// reachability. A descriptor at another address does not, until it is probed.
#[test]
fn new_onion_keys_keep_a_relay_listed_and_a_new_address_does_not() {
    for moved in [false, true] {
        let nodes = relays(1, 1000);
        let node = &nodes[0];
        let mut net = Net::new(1, |_| {});
        net.post(&[&node.descriptor]);
        // Just after the probe step of the period starting at T2 (the one of T1 had nothing
        // to do: the upload was probed within the period before).
        let t2 = T1 + P;
        net.run_until(t2 - P / 2 + 10);
        assert_eq!(net.probes.len(), 2, "probed at upload and at the step");
        let addrs = match moved {
            false => (node.descriptor.quic_addr(), node.descriptor.udp_addr()),
            true => (addr("10.9.9.9:7100"), None),
        };
        let again = resigned(node, t2 - P / 2 + 10 - START, addrs, START + 86_400);
        let now = net.now;
        assert_eq!(post(&mut net.auths[0], &again, now), DirResponse::Ok);
        net.run_until(t2);
        assert_eq!(
            net.probes.len(),
            2,
            "the new descriptor waits for the next step"
        );
        let listed = ids(&net.verified(0));
        match moved {
            false => assert_eq!(listed, [node.descriptor.node_id()], "rotated keys"),
            true => assert!(listed.is_empty(), "moved: not listed before its probe"),
        }
    }
}
