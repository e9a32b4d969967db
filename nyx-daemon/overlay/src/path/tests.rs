use std::collections::{BTreeMap, BTreeSet};

use nyx_crypto::identity::IdentityKey;
use nyx_crypto::kem::{HybridSecretKey, SEED_LEN};
use nyx_crypto::onion_cert::OnionKeyCert;
use rand::SeedableRng;
use rand::rngs::StdRng;

use super::*;
use crate::directory::{DescriptorBuilder, ExitPolicy};

mod family;
mod reach;

const T0: u64 = 1_800_000_000;
const DAY: u64 = 24 * 3600;

/// A relay with identity seed `seed` at `ip` (QUIC and UDP on port 9000).
fn relay(seed: u8, ip: &str, bandwidth: u32, policy: &ExitPolicy) -> Descriptor {
    relay_of_family(seed, ip, bandwidth, policy, &[])
}

/// [`relay`], declaring the relays of identity seeds `family` as its family.
fn relay_of_family(
    seed: u8,
    ip: &str,
    bandwidth: u32,
    policy: &ExitPolicy,
    family: &[u8],
) -> Descriptor {
    relay_at(seed, ip, bandwidth, policy, family, T0)
}

/// [`relay_of_family`] published at `at`, valid for 7 days (the longest clients accept).
fn relay_at(
    seed: u8,
    ip: &str,
    bandwidth: u32,
    policy: &ExitPolicy,
    family: &[u8],
    at: u64,
) -> Descriptor {
    let id = IdentityKey::from_seed(&[seed; 32]);
    let key = HybridSecretKey::from_seed(&[3; SEED_LEN]);
    let addr = Some(format!("{ip}:9000").parse().unwrap());
    DescriptorBuilder {
        nickname: format!("r{seed}"),
        quic_addr: addr,
        udp_addr: addr,
        link_key: key.public().clone(),
        onion_certs: vec![OnionKeyCert::sign(&id, key.public(), at - 10, at + 7 * DAY).unwrap()],
        exit_policy: policy.clone(),
        family: family.iter().map(|s| self::id(*s)).collect(),
        bandwidth,
        published: at,
        valid_until: at + 7 * DAY,
    }
    .sign(&id)
    .unwrap()
}

/// `n` accept-all relays with seeds 1..=n in distinct /16s, bandwidth 100.
fn dir(n: u8) -> Directory {
    dir_at(n, T0)
}

/// [`dir`] with descriptors published at `at` (the same relays, as they publish again).
fn dir_at(n: u8, at: u64) -> Directory {
    let accept = ExitPolicy::accept_all();
    Directory::from_descriptors(
        (1..=n)
            .map(|i| relay_at(i, &format!("10.{i}.0.1"), 100, &accept, &[], at))
            .collect(),
    )
    .unwrap()
}

fn id(seed: u8) -> NodeId {
    IdentityKey::from_seed(&[seed; 32]).node_id()
}

fn selector(hops: usize) -> PathSelector {
    let config = PathConfig {
        hops,
        ..PathConfig::default()
    };
    PathSelector::new(NodeId::from_bytes([0; 32]), TransportKind::Quic, config)
}

/// Over 5000 paths, relay `seed` is the exit in `share` of them (± 0.03).
fn assert_exit_shares(dir: &Directory, shares: &[(u8, f64)]) {
    let mut sel = selector(1);
    let mut rng = StdRng::seed_from_u64(1);
    let mut counts = BTreeMap::new();
    for _ in 0..5000 {
        let path = sel
            .select(dir, &ExitRequirement::Any, T0, &mut rng)
            .unwrap();
        *counts.entry(path.exit().unwrap()).or_insert(0u32) += 1;
    }
    for &(seed, share) in shares {
        let got = f64::from(counts[&id(seed)]) / 5000.0;
        assert!((got - share).abs() < 0.03, "relay {seed}: {got} vs {share}");
    }
}

#[test]
fn exits_are_weighted_by_bandwidth() {
    let policy = ExitPolicy::accept_all();
    let dir = Directory::from_descriptors(vec![
        relay(1, "10.1.0.1", 100, &policy),
        relay(2, "10.2.0.1", 300, &policy),
        relay(3, "10.3.0.1", 600, &policy),
    ])
    .unwrap();
    assert_exit_shares(&dir, &[(1, 0.1), (2, 0.3), (3, 0.6)]);
}

/// A consensus of `statuses` valid at `T0`, signed by one authority and verified.
fn signed_consensus(
    mut statuses: Vec<crate::directory::consensus::RelayStatus>,
) -> crate::directory::consensus::Consensus {
    use crate::directory::consensus::{ConsensusBody, Period, UnverifiedConsensus, sign_body};
    statuses.sort_by_key(|r| r.node_id);
    let body = ConsensusBody {
        period: Period {
            valid_after: T0 - 10,
            fresh_until: T0 + 3600,
            valid_until: T0 + 7200,
        },
        relays: statuses,
    };
    let authority = IdentityKey::from_seed(&[0xaa; 32]);
    UnverifiedConsensus::new(body.clone(), vec![sign_body(&body, &authority)])
        .verify(&[authority.public()], T0, None)
        .unwrap()
}

#[test]
fn a_directory_from_a_consensus_weights_by_the_consensus_not_by_the_claims() {
    use crate::directory::consensus::{Flags, RelayStatus};
    let policy = ExitPolicy::accept_all();
    // Relay 1 claims an enormous bandwidth; the authorities gave it the smallest weight.
    let claims = [(1, u32::MAX, 100), (2, 100, 300), (3, 100, 600)];
    let descriptors: Vec<Descriptor> = claims
        .iter()
        .map(|&(seed, claim, _)| relay(seed, &format!("10.{seed}.0.1"), claim, &policy))
        .collect();
    let mut statuses: Vec<RelayStatus> = descriptors
        .iter()
        .zip(claims)
        .map(|(d, (_, _, weight))| RelayStatus {
            node_id: d.node_id(),
            digest: d.digest(),
            flags: Flags::RUNNING,
            weight,
        })
        .collect();
    // Listed, but without the Running flag: left out.
    let down = relay(4, "10.4.0.1", 100, &policy);
    statuses.push(RelayStatus {
        node_id: down.node_id(),
        digest: down.digest(),
        flags: Flags::STABLE,
        weight: 500,
    });
    // Listed, but its descriptor is not among those given: reported missing.
    statuses.push(RelayStatus {
        node_id: id(5),
        digest: [5; 32],
        flags: Flags::RUNNING,
        weight: 500,
    });
    let consensus = signed_consensus(statuses);
    // A descriptor the consensus does not name (another digest for relay 2, and relay 6
    // nobody voted for) is ignored.
    let stale = relay(2, "10.2.0.2", 100, &policy);
    let unlisted = relay(6, "10.6.0.1", u32::MAX, &policy);
    let given = [stale, unlisted, down]
        .into_iter()
        .chain(descriptors.iter().cloned());
    let (dir, missing) = Directory::from_consensus(&consensus, given);
    assert_eq!(missing, [id(5)]);
    assert_eq!(dir.len(), 3);
    assert_eq!(dir.get(&id(2)), descriptors.get(1));
    assert!(!dir.contains(&id(4)) && !dir.contains(&id(6)));

    assert_exit_shares(&dir, &[(1, 0.1), (2, 0.3), (3, 0.6)]);
}

#[test]
fn the_exit_policy_is_respected_and_the_local_node_never_chosen() {
    let only_web: ExitPolicy = "accept *:443, reject *:*".parse().unwrap();
    let mut relays: Vec<_> = (1..=5)
        .map(|i| relay(i, &format!("10.{i}.0.1"), 100, &ExitPolicy::reject_all()))
        .collect();
    relays.push(relay(6, "10.6.0.1", 100, &only_web));
    relays.push(relay(7, "10.7.0.1", 100, &only_web));
    let dir = Directory::from_descriptors(relays).unwrap();
    let config = PathConfig::default();
    let mut sel = PathSelector::new(id(7), TransportKind::Udp, config);
    let mut rng = StdRng::seed_from_u64(2);
    let web = ExitRequirement::Target(ExitTarget::Addr("1.2.3.4:443".parse().unwrap()));
    for _ in 0..200 {
        let path = sel.select(&dir, &web, T0, &mut rng).unwrap();
        assert_eq!(path.hops.len(), 3);
        assert_eq!(path.exit(), Some(id(6)));
        assert!(!path.hops.contains(&id(7)));
        assert_eq!(path.hops.iter().collect::<BTreeSet<_>>().len(), 3);
    }
    let ssh = ExitRequirement::Target(ExitTarget::Host {
        name: "example.org".into(),
        port: 22,
    });
    assert_eq!(
        sel.select(&dir, &ssh, T0, &mut rng),
        Err(PathError::NoExit {
            target: "example.org:22".into()
        })
    );
}

#[test]
fn the_guard_is_kept_and_rotated_after_its_lifetime() {
    let dir = dir(10);
    let mut sel = selector(3);
    let mut rng = StdRng::seed_from_u64(3);
    let first = sel
        .select(&dir, &ExitRequirement::Any, T0, &mut rng)
        .unwrap();
    let guard = sel.guard().unwrap();
    assert_eq!(first.entry(), Some(guard));
    assert_eq!(sel.guards().len(), 3);
    for t in 0..100 {
        // Relays publish again every few days: the directory of each moment.
        let now = T0 + t * DAY / 2;
        let path = sel
            .select(&dir_at(10, now), &ExitRequirement::Any, now, &mut rng)
            .unwrap();
        assert_eq!(path.entry(), Some(guard));
        assert_ne!(path.exit(), Some(guard));
    }
    let later = T0 + 60 * DAY;
    let path = sel
        .select(&dir_at(10, later), &ExitRequirement::Any, later, &mut rng)
        .unwrap();
    assert_ne!(sel.guard(), Some(guard));
    assert_eq!(path.entry(), sel.guard());
    assert!(!sel.guards().contains(&guard));
}

#[test]
fn an_unreachable_guard_is_skipped_then_retried() {
    let dir = dir(6);
    let mut sel = selector(2);
    let mut rng = StdRng::seed_from_u64(4);
    sel.select(&dir, &ExitRequirement::Any, T0, &mut rng)
        .unwrap();
    let guards = sel.guards();
    sel.mark_unreachable(guards[0], T0 + 10);
    assert_eq!(sel.guard(), Some(guards[1]));
    for _ in 0..20 {
        let path = sel
            .select(&dir, &ExitRequirement::Any, T0 + 20, &mut rng)
            .unwrap();
        assert_eq!(path.entry(), Some(guards[1]));
        assert!(!path.hops.contains(&guards[0]));
    }
    // Still skipped one second before guard_retry (10 minutes) is over, used again after.
    let path = sel
        .select(&dir, &ExitRequirement::Any, T0 + 609, &mut rng)
        .unwrap();
    assert_eq!(path.entry(), Some(guards[1]));
    let path = sel
        .select(&dir, &ExitRequirement::Any, T0 + 610, &mut rng)
        .unwrap();
    assert_eq!(path.entry(), Some(guards[0]));
    assert_eq!(sel.guards(), guards);
}

#[test]
fn fallback_guards_are_bounded_then_no_guard() {
    let dir = dir(12);
    let mut sel = selector(2);
    let mut rng = StdRng::seed_from_u64(10);
    let mut t = T0;
    loop {
        let path = sel
            .select(&dir, &ExitRequirement::Any, t, &mut rng)
            .unwrap();
        // The first guard, then each new one as soon as every earlier one is unreachable.
        let guards = sel.guards();
        let expected = if t == T0 {
            guards.first()
        } else {
            guards.last()
        };
        assert_eq!(path.entry(), expected.copied());
        for g in sel.guards() {
            sel.mark_unreachable(g, t);
        }
        assert_eq!(sel.guard(), None);
        if sel.guards().len() == 8 {
            break;
        }
        t += 1;
    }
    assert_eq!(
        sel.select(&dir, &ExitRequirement::Any, t, &mut rng),
        Err(PathError::NoGuard)
    );
}

#[test]
fn a_guard_that_is_the_only_exit_makes_the_next_guard_the_entry() {
    let policy = ExitPolicy::accept_all();
    let none = ExitPolicy::reject_all();
    let dir = Directory::from_descriptors(vec![
        relay(1, "10.1.0.1", 1000, &policy),
        relay(2, "10.2.0.1", 10, &none),
        relay(3, "10.3.0.1", 10, &none),
    ])
    .unwrap();
    for seed in 0..20 {
        let mut sel = selector(2);
        let mut rng = StdRng::seed_from_u64(seed);
        let path = sel
            .select(&dir, &ExitRequirement::Any, T0, &mut rng)
            .unwrap();
        assert_eq!(path.exit(), Some(id(1)));
        assert_ne!(path.entry(), Some(id(1)));
    }
}

#[test]
fn hops_are_in_distinct_subnets_unless_disabled() {
    let policy = ExitPolicy::accept_all();
    let dir = Directory::from_descriptors(vec![
        relay(1, "10.1.0.1", 100, &policy),
        relay(2, "10.1.200.7", 100, &policy),
        relay(3, "10.2.0.1", 100, &policy),
        relay(4, "10.3.0.1", 100, &policy),
    ])
    .unwrap();
    let mut sel = selector(3);
    let mut rng = StdRng::seed_from_u64(5);
    for _ in 0..200 {
        let path = sel
            .select(&dir, &ExitRequirement::Any, T0, &mut rng)
            .unwrap();
        assert!(
            !(path.hops.contains(&id(1)) && path.hops.contains(&id(2))),
            "{path:?}"
        );
    }
    let same = Directory::from_descriptors(
        (1..=4)
            .map(|i| relay(i, &format!("10.9.0.{i}"), 100, &policy))
            .collect(),
    )
    .unwrap();
    // Loopback relays (a local test network) are exempt.
    let local = Directory::from_descriptors(
        (1..=4)
            .map(|i| relay(i, &format!("127.0.0.{i}"), 100, &policy))
            .collect(),
    )
    .unwrap();
    assert_eq!(
        selector(3)
            .select(&local, &ExitRequirement::Any, T0, &mut rng)
            .unwrap()
            .hops
            .len(),
        3
    );
    assert_eq!(
        selector(3).select(&same, &ExitRequirement::Any, T0, &mut rng),
        Err(PathError::NotEnoughRelays {
            needed: 3,
            usable: 4
        })
    );
    let mut loose = PathSelector::new(
        NodeId::from_bytes([0; 32]),
        TransportKind::Quic,
        PathConfig {
            distinct_subnets: false,
            ..PathConfig::default()
        },
    );
    assert_eq!(
        loose
            .select(&same, &ExitRequirement::Any, T0, &mut rng)
            .unwrap()
            .hops
            .len(),
        3
    );
}

#[test]
fn too_few_relays_bad_hops_and_unusable_descriptors_are_errors() {
    let mut rng = StdRng::seed_from_u64(6);
    assert_eq!(
        selector(3).select(&dir(2), &ExitRequirement::Any, T0, &mut rng),
        Err(PathError::NotEnoughRelays {
            needed: 3,
            usable: 2
        })
    );
    assert_eq!(
        selector(2).select(&dir(1), &ExitRequirement::Any, T0, &mut rng),
        Err(PathError::NotEnoughRelays {
            needed: 2,
            usable: 1
        })
    );
    assert_eq!(
        selector(1)
            .select(&dir(1), &ExitRequirement::Any, T0, &mut rng)
            .unwrap()
            .hops,
        [id(1)]
    );
    for hops in [0, 4] {
        assert_eq!(
            selector(hops).select(&dir(5), &ExitRequirement::Any, T0, &mut rng),
            Err(PathError::InvalidHops { hops })
        );
    }
    // Expired descriptors (and onion keys) are not used.
    assert!(matches!(
        selector(1).select(&dir(3), &ExitRequirement::Any, T0 + 100 * DAY, &mut rng),
        Err(PathError::NoExit { .. })
    ));
    assert_eq!(
        selector(1).select(&Directory::default(), &ExitRequirement::Any, T0, &mut rng),
        Err(PathError::NoExit {
            target: "any".into()
        })
    );
}

#[test]
fn unreachable_relays_are_avoided_for_relay_retry() {
    let dir = dir(4);
    let mut sel = selector(3);
    let mut rng = StdRng::seed_from_u64(8);
    sel.select(&dir, &ExitRequirement::Any, T0, &mut rng)
        .unwrap();
    let outsider = (1..=4).map(id).find(|n| !sel.guards().contains(n)).unwrap();
    sel.mark_unreachable(outsider, T0);
    for _ in 0..50 {
        let path = sel
            .select(&dir, &ExitRequirement::Any, T0 + 299, &mut rng)
            .unwrap();
        assert!(!path.hops.contains(&outsider));
    }
    let used = (0..50).any(|_| {
        let path = sel
            .select(&dir, &ExitRequirement::Any, T0 + 300, &mut rng)
            .unwrap();
        path.hops.contains(&outsider)
    });
    assert!(used);
}

#[test]
fn selection_is_deterministic_for_a_seed() {
    let dir = dir(12);
    let run = || {
        let mut sel = selector(3);
        let mut rng = StdRng::seed_from_u64(9);
        (0..20)
            .map(|i| {
                sel.select(&dir, &ExitRequirement::Any, T0 + i, &mut rng)
                    .unwrap()
            })
            .collect::<Vec<_>>()
    };
    assert_eq!(run(), run());
}

#[test]
fn clearing_the_marks_makes_every_relay_usable_again() {
    let dir = dir(3);
    let mut sel = selector(3);
    let mut rng = StdRng::seed_from_u64(9);
    sel.select(&dir, &ExitRequirement::Any, T0, &mut rng)
        .unwrap();
    sel.mark_unreachable(id(2), T0);
    assert!(matches!(
        sel.select(&dir, &ExitRequirement::Any, T0 + 1, &mut rng),
        Err(PathError::NotEnoughRelays { .. } | PathError::NoGuard)
    ));
    assert_eq!(sel.clear_unreachable(), 1);
    assert_eq!(sel.clear_unreachable(), 0);
    let path = sel
        .select(&dir, &ExitRequirement::Any, T0 + 2, &mut rng)
        .unwrap();
    assert_eq!(path.hops.len(), 3);
}

#[test]
fn restored_guards_are_used_in_their_order_and_pruned_as_usual() {
    let dir = dir(6);
    let mut first = selector(3);
    let mut rng = StdRng::seed_from_u64(7);
    first
        .select(&dir, &ExitRequirement::Any, T0, &mut rng)
        .unwrap();
    let saved = first.sampled_guards();
    assert_eq!(saved.len(), 3);
    assert!(saved.iter().all(|g| g.sampled_at == T0));

    // A restarted node with the saved guards enters through the same first guard.
    let mut again = selector(3);
    again.restore_guards(&saved);
    assert_eq!(again.sampled_guards(), saved);
    for seed in 0..20 {
        let mut rng = StdRng::seed_from_u64(100 + seed);
        let path = again
            .select(&dir, &ExitRequirement::Any, T0 + 60, &mut rng)
            .unwrap();
        assert_eq!(path.entry(), Some(saved[0].node));
    }
    // Past their lifetime they are replaced at the next selection.
    let lifetime = PathConfig::default().guard_lifetime.as_secs();
    let mut late = selector(3);
    late.restore_guards(&saved);
    let mut rng = StdRng::seed_from_u64(9);
    late.select(
        &dir_at(6, T0 + lifetime),
        &ExitRequirement::Any,
        T0 + lifetime,
        &mut rng,
    )
    .unwrap();
    assert!(
        late.sampled_guards()
            .iter()
            .all(|g| g.sampled_at == T0 + lifetime)
    );
    // Never this node itself, never more than eight.
    let mut me = PathSelector::new(saved[0].node, TransportKind::Quic, PathConfig::default());
    me.restore_guards(&saved);
    assert_eq!(me.sampled_guards(), &saved[1..]);
    let many: Vec<SampledGuard> = (1..=12)
        .map(|i| SampledGuard {
            node: id(i),
            sampled_at: T0,
        })
        .collect();
    let mut capped = selector(3);
    capped.restore_guards(&many);
    assert_eq!(capped.sampled_guards().len(), 8);
}

/// With Guard flags in the consensus, guards are sampled among the flagged relays only; a
/// consensus without any (a young network) lets any relay be a guard.
#[test]
fn guards_come_from_relays_with_the_guard_flag_when_there_are_any() {
    use crate::directory::consensus::{Flags, RelayStatus};
    let policy = ExitPolicy::accept_all();
    let descriptors: Vec<Descriptor> = (1..=8)
        .map(|seed| relay(seed, &format!("10.{seed}.0.1"), 100, &policy))
        .collect();
    let directory_with = |guard_flags: &[NodeId]| {
        let statuses: Vec<RelayStatus> = descriptors
            .iter()
            .map(|d| RelayStatus {
                node_id: d.node_id(),
                digest: d.digest(),
                flags: match guard_flags.contains(&d.node_id()) {
                    true => Flags::RUNNING | Flags::STABLE | Flags::GUARD,
                    false => Flags::RUNNING,
                },
                weight: 100,
            })
            .collect();
        Directory::from_consensus(&signed_consensus(statuses), descriptors.iter().cloned()).0
    };
    let flagged = [id(2), id(5), id(7)];
    for seed in 0..20 {
        let dir = directory_with(&flagged);
        let mut sel = selector(3);
        let mut rng = StdRng::seed_from_u64(seed);
        sel.select(&dir, &ExitRequirement::Any, T0, &mut rng)
            .unwrap();
        let guards = sel.guards();
        assert_eq!(guards.len(), 3);
        assert!(guards.iter().all(|g| flagged.contains(g)), "{guards:?}");
    }
    // No Guard flag anywhere: any relay.
    let dir = directory_with(&[]);
    let seen: BTreeSet<NodeId> = (0..20)
        .flat_map(|seed| {
            let mut sel = selector(3);
            let mut rng = StdRng::seed_from_u64(seed);
            sel.select(&dir, &ExitRequirement::Any, T0, &mut rng)
                .unwrap();
            sel.guards()
        })
        .collect();
    assert!(seen.len() > 3, "{} relays were ever guards", seen.len());
}
