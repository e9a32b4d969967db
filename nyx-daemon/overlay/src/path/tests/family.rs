//! Declared families in path selection: two relays that each declare the other never share a
//! path (guard, middle or exit); a declaration the other relay does not return changes nothing.

use proptest::prelude::*;

use super::*;

/// Relays with seeds `1..=n` at 10.<i>.0.1 (distinct /16s), accept-all, bandwidth 100;
/// relay `i` declares the seeds in `families[i - 1]`.
fn family_dir(families: &[&[u8]]) -> Directory {
    let policy = ExitPolicy::accept_all();
    Directory::from_descriptors(
        (1..)
            .zip(families)
            .map(|(i, f)| relay_of_family(i, &format!("10.{i}.0.1"), 100, &policy, f))
            .collect(),
    )
    .unwrap()
}

fn paths(dir: &Directory, hops: usize, seed: u64, n: usize) -> Vec<Result<Path, PathError>> {
    let mut sel = selector(hops);
    let mut rng = StdRng::seed_from_u64(seed);
    (0..n)
        .map(|_| sel.select(dir, &ExitRequirement::Any, T0, &mut rng))
        .collect()
}

#[test]
fn mutual_family_members_never_share_a_path_but_are_each_used() {
    let dir = family_dir(&[&[2], &[1], &[], &[], &[]]);
    assert!(same_family(
        dir.get(&id(1)).unwrap(),
        dir.get(&id(2)).unwrap()
    ));
    let mut seen = BTreeSet::new();
    for seed in 0..30 {
        for path in paths(&dir, 3, seed, 10) {
            let path = path.unwrap();
            assert!(
                !(path.hops.contains(&id(1)) && path.hops.contains(&id(2))),
                "{path:?}"
            );
            seen.extend(path.hops);
        }
    }
    assert!(seen.contains(&id(1)) && seen.contains(&id(2)), "{seen:?}");
}

#[test]
fn a_family_can_leave_too_few_relays_for_a_path() {
    let dir = family_dir(&[&[2], &[1], &[]]);
    for path in paths(&dir, 3, 1, 5) {
        assert_eq!(
            path,
            Err(PathError::NotEnoughRelays {
                needed: 3,
                usable: 3
            })
        );
    }
    for path in paths(&dir, 2, 1, 50) {
        let hops: BTreeSet<NodeId> = path.unwrap().hops.into_iter().collect();
        assert_ne!(hops, BTreeSet::from([id(1), id(2)]));
    }
}

#[test]
fn a_one_sided_claim_excludes_nobody() {
    // Relay 1 claims 2 and 3, 2 claims 3, 3 claims nobody: no pair declares each other.
    let dir = family_dir(&[&[2, 3], &[3], &[]]);
    let (one, two) = (dir.get(&id(1)).unwrap(), dir.get(&id(2)).unwrap());
    assert!(one.declares(&id(2)) && !same_family(one, two) && !same_family(two, one));
    for path in paths(&dir, 3, 2, 20) {
        let hops: BTreeSet<NodeId> = path.unwrap().hops.into_iter().collect();
        assert_eq!(hops, BTreeSet::from([id(1), id(2), id(3)]));
    }
}

#[test]
fn a_guard_of_the_only_exits_family_makes_the_next_guard_the_entry() {
    let none = ExitPolicy::reject_all();
    let dir = Directory::from_descriptors(vec![
        relay_of_family(1, "10.1.0.1", 100, &ExitPolicy::accept_all(), &[2]),
        relay_of_family(2, "10.2.0.1", 1000, &none, &[1]),
        relay(3, "10.3.0.1", 10, &none),
    ])
    .unwrap();
    let mut first_guard_was_the_family = 0;
    for seed in 0..20 {
        let mut sel = selector(2);
        let mut rng = StdRng::seed_from_u64(seed);
        let path = sel
            .select(&dir, &ExitRequirement::Any, T0, &mut rng)
            .unwrap();
        assert_eq!(path.hops, [id(3), id(1)]);
        if sel.guards().first() == Some(&id(2)) {
            first_guard_was_the_family += 1;
        }
    }
    // Relay 2 has most of the bandwidth, so it is usually the first guard sampled.
    assert!(
        first_guard_was_the_family > 10,
        "{first_guard_was_the_family}"
    );
}

/// `n` relays with random family declarations (`declares[i]` bit `j`: relay `i + 1` declares
/// relay `j + 1`) in random /16s among four, so the subnet rule is at work too.
fn random_dir(subnets: &[u8], declares: &[u16]) -> Directory {
    let policy = ExitPolicy::accept_all();
    Directory::from_descriptors(
        (1..)
            .zip(subnets.iter().zip(declares))
            .map(|(i, (net, bits))| {
                let family: Vec<u8> = (1..=16u8)
                    .filter(|j| *j != i && bits & (1 << (j - 1)) != 0)
                    .collect();
                relay_of_family(i, &format!("10.{net}.0.{i}"), 100, &policy, &family)
            })
            .collect(),
    )
    .unwrap()
}

fn relays() -> impl Strategy<Value = (Vec<u8>, Vec<u16>)> {
    (3usize..=9).prop_flat_map(|n| {
        (
            proptest::collection::vec(1u8..=4, n),
            proptest::collection::vec(any::<u16>(), n),
        )
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn no_path_holds_two_relays_that_declare_each_other(
        (subnets, declares) in relays(),
        hops in 2usize..=3,
        seed in any::<u64>(),
    ) {
        let dir = random_dir(&subnets, &declares);
        for path in paths(&dir, hops, seed, 8) {
            let Ok(path) = path else { continue };
            prop_assert_eq!(path.hops.len(), hops);
            for (k, a) in path.hops.iter().enumerate() {
                for b in &path.hops[k + 1..] {
                    let (da, db) = (dir.get(a).unwrap(), dir.get(b).unwrap());
                    prop_assert!(a != b && !same_family(da, db), "{:?}", path);
                    prop_assert!(!same_subnet(da, db), "{:?}", path);
                }
            }
        }
    }

    /// With every mutual pair broken (the higher seed's declaration dropped), selection is
    /// exactly what it is with no declarations at all: one-sided claims exclude nobody.
    #[test]
    fn one_sided_declarations_change_no_selection(
        (subnets, mut declares) in relays(),
        hops in 2usize..=3,
        seed in any::<u64>(),
    ) {
        for i in 0..declares.len() {
            for j in 0..i {
                if declares[i] & (1 << j) != 0 && declares[j] & (1 << i) != 0 {
                    declares[i] &= !(1 << j);
                }
            }
        }
        let claimed = random_dir(&subnets, &declares);
        let plain = random_dir(&subnets, &vec![0; declares.len()]);
        prop_assert_eq!(paths(&claimed, hops, seed, 8), paths(&plain, hops, seed, 8));
    }
}
