//! The entry must be reachable over the local socket's address families: a node bound to
//! IPv4 never enters through an IPv6-only relay (nor the reverse), while the later hops,
//! which relays dial, may be of either family.

use std::net::SocketAddr;

use super::*;

/// Relays 1..=8: odd seeds on IPv4 (10.<i>.0.1), even seeds on IPv6 (2001:db8:<i>::1).
fn mixed_dir() -> Directory {
    let policy = ExitPolicy::accept_all();
    Directory::from_descriptors(
        (1..=8u8)
            .map(|i| {
                let ip = match i % 2 {
                    1 => format!("10.{i}.0.1"),
                    _ => format!("[2001:db8:{i}::1]"),
                };
                relay_at(i, &ip, 100, &policy, &[], T0)
            })
            .collect(),
    )
    .unwrap()
}

fn is_v6(dir: &Directory, id: NodeId) -> bool {
    dir.get(&id)
        .and_then(|d| d.addr(TransportKind::Quic))
        .is_some_and(|a| a.is_ipv6())
}

/// Entries of `n` paths of fresh selectors (new guards each time), and whether any later hop
/// was IPv6.
fn entries(reach: Reach, hops: usize, n: u64) -> (Vec<bool>, bool) {
    let dir = mixed_dir();
    let mut v6_later = false;
    let entries = (0..n)
        .map(|seed| {
            let mut sel = selector(hops).with_reach(reach);
            let mut rng = StdRng::seed_from_u64(seed);
            let path = sel
                .select(&dir, &ExitRequirement::Any, T0, &mut rng)
                .unwrap();
            v6_later |= path.hops[1..].iter().any(|h| is_v6(&dir, *h));
            is_v6(&dir, path.hops[0])
        })
        .collect();
    (entries, v6_later)
}

#[test]
fn an_ipv4_socket_enters_over_ipv4_and_later_hops_are_any() {
    let (v6_entries, v6_later) = entries(Reach::Ipv4Only, 3, 200);
    assert!(
        v6_entries.iter().all(|v6| !v6),
        "an IPv6 entry for an IPv4 socket"
    );
    assert!(v6_later, "later hops never IPv6: they were filtered too");
    let (v6_entries, _) = entries(Reach::Ipv4Only, 1, 200);
    assert!(v6_entries.iter().all(|v6| !v6), "a one-hop exit over IPv6");
}

#[test]
fn an_ipv6_socket_enters_over_ipv6_and_a_dual_stack_one_over_either() {
    let (v6_entries, _) = entries(Reach::Ipv6Only, 3, 200);
    assert!(
        v6_entries.iter().all(|v6| *v6),
        "an IPv4 entry for an IPv6 socket"
    );
    let (v6_entries, _) = entries(Reach::Any, 3, 200);
    assert!(v6_entries.iter().any(|v6| *v6) && v6_entries.iter().any(|v6| !v6));
}

#[test]
fn a_restored_guard_of_the_other_family_is_dropped() {
    let dir = mixed_dir();
    let v6_guard = SampledGuard {
        node: id(2),
        sampled_at: T0,
    };
    let mut sel = selector(3).with_reach(Reach::Ipv4Only);
    sel.restore_guards(&[v6_guard]);
    let mut rng = StdRng::seed_from_u64(1);
    let path = sel
        .select(&dir, &ExitRequirement::Any, T0, &mut rng)
        .unwrap();
    assert!(!is_v6(&dir, path.hops[0]));
    assert!(!sel.guards().contains(&id(2)));
}

#[test]
fn the_reach_of_a_socket_follows_its_address() {
    let of = |s: &str| Reach::of(s.parse::<SocketAddr>().unwrap());
    assert_eq!(of("0.0.0.0:0"), Reach::Ipv4Only);
    assert_eq!(of("192.0.2.1:9000"), Reach::Ipv4Only);
    assert_eq!(of("[::]:0"), Reach::Any);
    assert_eq!(of("[::ffff:192.0.2.1]:0"), Reach::Ipv4Only);
    assert_eq!(of("[2001:db8::1]:0"), Reach::Ipv6Only);
    assert!(Reach::Ipv4Only.reaches("[::ffff:10.0.0.1]:1".parse().unwrap()));
    assert!(!Reach::Ipv4Only.reaches("[2001:db8::1]:1".parse().unwrap()));
}
