use super::*;

fn addr(s: &str) -> ExitTarget {
    ExitTarget::Addr(s.parse().unwrap())
}

fn host(name: &str, port: u16) -> ExitTarget {
    ExitTarget::Host {
        name: name.into(),
        port,
    }
}

#[test]
fn first_match_wins_and_no_match_rejects() {
    let p: ExitPolicy = "reject 10.0.0.0/8:*, accept *:80-443, accept [2001:db8::]/32:22"
        .parse()
        .unwrap();
    assert!(p.allows(&addr("1.2.3.4:80")));
    assert!(p.allows(&addr("1.2.3.4:443")));
    assert!(!p.allows(&addr("10.1.2.3:80")));
    assert!(!p.allows(&addr("1.2.3.4:444")));
    assert!(p.allows(&addr("[2001:db8::1]:22")));
    assert!(!p.allows(&addr("[2001:db9::1]:22")));
    assert!(!p.is_reject_all());
}

#[test]
fn ipv4_mapped_ipv6_is_matched_as_ipv4() {
    let p = ExitPolicy::loopback_only();
    assert!(p.allows(&addr("[::ffff:127.0.0.1]:80")));
    assert!(!p.allows(&addr("[::ffff:8.8.8.8]:53")));
    let p: ExitPolicy = "reject 127.0.0.0/8:*, accept *:*".parse().unwrap();
    assert!(!p.allows_resolved("[::ffff:127.0.0.1]:80".parse().unwrap()));
}

#[test]
fn host_names_might_be_allowed() {
    // A specific accept: the name might resolve there.
    let p: ExitPolicy = "accept 127.0.0.0/8:*, reject *:*".parse().unwrap();
    assert!(p.allows(&host("example.org", 80)));
    // A specific reject is skipped; the wildcard decides.
    let p: ExitPolicy = "reject 10.0.0.0/8:*, accept *:443, reject *:*"
        .parse()
        .unwrap();
    assert!(p.allows(&host("example.org", 443)));
    assert!(!p.allows(&host("example.org", 80)));
    // IP literals get the exact answer.
    assert!(!p.allows(&host("10.0.0.1", 443)));
    assert!(!ExitPolicy::reject_all().allows(&host("example.org", 443)));
    assert!(ExitPolicy::accept_all().allows(&host("example.org", 1)));
}

#[test]
fn reject_all_detection() {
    assert!(ExitPolicy::reject_all().is_reject_all());
    assert!(!ExitPolicy::accept_all().is_reject_all());
    let p: ExitPolicy = "reject *:*, accept *:80".parse().unwrap();
    assert!(p.is_reject_all());
    let p: ExitPolicy = "reject *:1-100, accept 1.2.3.4:80".parse().unwrap();
    assert!(p.is_reject_all());
    let p: ExitPolicy = "reject *:1-100, accept 1.2.3.4:80-101".parse().unwrap();
    assert!(!p.is_reject_all());
    assert!(!ExitPolicy::loopback_only().is_reject_all());
}

#[test]
fn text_round_trips_and_errors_are_clear() {
    for text in [
        "",
        "accept *:*",
        "accept 127.0.0.0/8:*, accept [::1]:*, reject *:*",
        "reject 1.2.3.4:80, accept [2001:db8::]/32:1000-2000, reject 0.0.0.0/0:5",
    ] {
        let p: ExitPolicy = text.parse().unwrap();
        assert_eq!(p.to_string(), text);
    }
    assert_eq!(
        "accept 127.0.0.0/8:1-65535"
            .parse::<ExitPolicy>()
            .unwrap()
            .to_string(),
        "accept 127.0.0.0/8:*"
    );
    assert_eq!(
        ExitPolicy::loopback_only().to_string().parse(),
        Ok(ExitPolicy::loopback_only())
    );
    for (bad, needle) in [
        ("allow *:*", "\"allow\""),
        ("accept *", "ADDR:PORTS"),
        ("accept 127.0.0.1/8:80", "beyond the /8"),
        ("accept 1.2.3.4/33:80", "prefix longer than 32"),
        ("accept 1.2.3:80", "IPv4"),
        ("accept [::g]:80", "IPv6"),
        ("accept *:0", "ports are 1-65535"),
        ("accept *:9-8", "must not be empty"),
        ("accept *:x", "expected a port"),
        ("accept *:*,", "rule 2"),
    ] {
        let err = bad.parse::<ExitPolicy>().unwrap_err().to_string();
        assert!(err.contains(needle), "{bad}: {err}");
    }
}

#[test]
fn targets_parse_or_say_why() {
    let ok = |s: &str| s.parse::<ExitTarget>().unwrap();
    assert_eq!(
        ok("127.0.0.1:80"),
        ExitTarget::Addr("127.0.0.1:80".parse().unwrap())
    );
    assert_eq!(
        ok("[::1]:443"),
        ExitTarget::Addr("[::1]:443".parse().unwrap())
    );
    assert_eq!(
        ok("Example.ORG:8080"),
        ExitTarget::Host {
            name: "example.org".into(),
            port: 8080
        }
    );
    for bad in [
        "",
        "example.org",
        "example.org:0",
        "a b:80",
        ":80",
        "x:99999",
        "1.2.3.4:0",
        "[::1:80",
    ] {
        assert!(bad.parse::<ExitTarget>().is_err(), "{bad}");
    }
}
