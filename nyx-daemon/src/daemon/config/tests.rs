use std::path::Path;
use std::time::Duration;

use super::*;

fn parse_str(text: &str) -> Result<DaemonConfig, Error> {
    DaemonConfig::parse(text, Path::new("<string>"))
}

#[test]
fn empty_file_gives_defaults() {
    let c = parse_str("").unwrap();
    assert_eq!(c, DaemonConfig::default());
    assert_eq!(c.transport, TransportKind::Quic);
    assert!(c.socks.enabled);
    assert!(
        !c.http_connect.enabled,
        "off by default, as Tor's HTTPTunnelPort"
    );
    assert_eq!(c.http_connect.listen, "127.0.0.1:9080".parse().unwrap());
    assert!(c.exit_policy().unwrap().is_reject_all());
}

#[test]
fn example_file_parses() {
    let text = include_str!("../../../nyx.example.toml");
    let c = parse_str(text).unwrap();
    assert_eq!(c.nickname, "my-relay");
}

/// docs/configuration.md's table names every key, and the example file shows each one (set,
/// or commented out with an example value) in its section.
#[test]
fn example_file_shows_every_documented_key() {
    let docs = include_str!("../../../../docs/configuration.md");
    let documented: Vec<&str> = docs
        .lines()
        .filter_map(|l| l.strip_prefix("| `")?.split('`').next())
        .collect();
    assert!(documented.len() > 40, "the key table moved: {documented:?}");
    let example = include_str!("../../../nyx.example.toml");
    let mut section = String::new();
    let mut shown = Vec::new();
    for line in example.lines() {
        let line = line.trim_start_matches('#').trim();
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            section = format!("{name}.");
        } else if let Some((key, _)) = line.split_once(" = ")
            && !key.contains(' ')
        {
            shown.push(format!("{section}{key}"));
        }
    }
    let missing: Vec<&&str> = documented
        .iter()
        .filter(|k| !shown.iter().any(|s| s == **k))
        .collect();
    assert!(missing.is_empty(), "not in nyx.example.toml: {missing:?}");
}

#[test]
fn full_file_parses() {
    let c = parse_str(
        r#"
        listen = ["127.0.0.2:4433"]
        transport = "udp"
        data_dir = "/var/lib/nyx"
        nickname = "relay_7"
        [control]
        socket = "/run/nyx/control.sock"
        [socks]
        listen = "127.0.0.1:19050"
        handshake_timeout = "2s"
        [directory]
        file = "/etc/nyx/directory.txt"
        [relay]
        exit_policy = ["accept 127.0.0.0/8:80-443", "reject *:*"]
        family = ["abababababababababababababababababababababababababababababababab",
                  "CDCDCDCDCDCDCDCDCDCDCDCDCDCDCDCDCDCDCDCDCDCDCDCDCDCDCDCDCDCDCDCD"]
        bandwidth = 5000
        [limits]
        max_circuits = 100
        link_cells = { per_second = 1000.0, burst = 100 }
        [log]
        level = "nyx_daemon=debug,info"
        format = "json"
        [telemetry]
        otlp_endpoint = "http://127.0.0.1:4317"
        export_interval = "2s 500ms"
        "#,
    )
    .unwrap();
    assert_eq!(c.transport, TransportKind::Udp);
    assert_eq!(c.socks.handshake_timeout, Duration::from_secs(2));
    assert_eq!(c.limits.max_circuits, 100);
    assert_eq!(
        c.telemetry.export_interval,
        Some(Duration::from_millis(2500))
    );
    let settings = c.node_settings();
    assert_eq!(settings.overlay.max_relay_circuits, 100);
    assert_eq!(settings.overlay.link_cells.burst(), 100);
    assert!(
        settings
            .exit_policy
            .allows(&"127.0.0.1:80".parse().unwrap())
    );
    assert!(
        !settings
            .exit_policy
            .allows(&"127.0.0.1:22".parse().unwrap())
    );
    assert_eq!(
        settings.family,
        [
            NodeId::from_bytes([0xab; 32]),
            NodeId::from_bytes([0xcd; 32])
        ]
    );
}

/// `limits.max_links` bounds the link table of either transport.
#[test]
fn max_links_bounds_both_transports() {
    let c = parse_str("[limits]\nmax_links = 77\n").unwrap();
    let s = c.node_settings();
    assert_eq!((s.udp.max_peers, s.quic.max_links), (77, 77));
}

/// `limits.handshakes_per_prefix` reaches both transports' per-prefix handshake limiters
/// (the UDP engine's HELLOs, QUIC admission's Initials), rate and burst both (the burst was
/// once dropped, leaving it equal to the rate; QUIC once kept a fixed 10/s).
#[test]
fn handshake_rate_and_burst_reach_both_transports() {
    let c =
        parse_str("[limits]\nhandshakes_per_prefix = { per_second = 2.5, burst = 40 }\n").unwrap();
    let s = c.node_settings();
    for q in [s.udp.hello_per_source, s.quic.admission.per_source] {
        assert_eq!(q.burst(), 40);
        assert_eq!(q.interval(), Duration::from_millis(400));
    }
    let d = DaemonConfig::default().node_settings();
    for q in [d.udp.hello_per_source, d.quic.admission.per_source] {
        assert_eq!(
            (q.burst(), q.interval()),
            (10, Duration::from_millis(200)),
            "the documented default, 5/s, burst 10"
        );
    }
}

/// What a network simulator needs: plain socket I/O, an abstract control socket name or
/// none, and paths whose relays may share a subnet; all reach the node's settings.
#[test]
fn simulator_keys_reach_the_settings() {
    let c = parse_str(
        r#"
        socket_io = "plain"
        [control]
        socket = "@nyx-relay-7"
        [path]
        distinct_subnets = false
        "#,
    )
    .unwrap();
    let s = c.node_settings();
    assert_eq!(s.udp.socket, SocketMode::Plain);
    assert_eq!(s.quic.socket, SocketMode::Plain);
    assert!(!s.path.distinct_subnets);
    assert!(c.control.enabled);
    let d = DaemonConfig::default().node_settings();
    assert_eq!(
        (d.udp.socket, d.quic.socket),
        (SocketMode::Auto, SocketMode::Auto)
    );
    assert!(d.path.distinct_subnets, "on by default");
    let off = parse_str("[control]\nenabled = false\n").unwrap();
    assert!(!off.control.enabled);
    for (text, needle) in [
        ("socket_io = \"fast\"\n", "socket_io"),
        ("[control]\nsocket = \"@\"\n", "control.socket"),
        ("[path]\ndistinct_subnet = false\n", "distinct_subnet"),
    ] {
        let err = parse_str(text).unwrap_err().to_string();
        assert!(err.contains(needle), "{needle:?} not in {err}");
    }
}

#[test]
fn worker_threads_are_bounded() {
    assert_eq!(DaemonConfig::default().worker_threads, 0, "0: one per core");
    assert_eq!(parse_str("worker_threads = 2\n").unwrap().worker_threads, 2);
    let max = format!("worker_threads = {MAX_WORKER_THREADS}\n");
    assert_eq!(parse_str(&max).unwrap().worker_threads, MAX_WORKER_THREADS);
    let over = format!("worker_threads = {}\n", MAX_WORKER_THREADS + 1);
    let err = parse_str(&over).unwrap_err().to_string();
    assert!(err.contains("worker_threads"), "{err}");
    let err = parse_str("worker_threads = -1\n").unwrap_err().to_string();
    assert!(err.contains("worker_threads"), "{err}");
}

#[test]
fn relay_family_problems_name_the_key() {
    let hex = |b: u8| format!("\"{}\"", NodeId::from_bytes([b; 32]));
    let family = |entries: Vec<String>| format!("[relay]\nfamily = [{}]\n", entries.join(", "));
    for (text, needle) in [
        (
            family(vec![hex(1), "\"12ab\"".into()]),
            "relay.family: \"12ab\": invalid node id",
        ),
        (family(vec![hex(1), hex(2), hex(1)]), "is listed twice"),
        (
            family((0..33).map(hex).collect()),
            "relay.family: 33 node ids, at most 32",
        ),
        ("[relay]\nfamily = \"ab\"\n".into(), "family"),
    ] {
        let err = parse_str(&text).unwrap_err().to_string();
        assert!(err.contains(needle), "{needle:?} not in {err}");
    }
    let c = parse_str(&family((0..32).map(hex).collect())).unwrap();
    assert_eq!(c.node_settings().family.len(), 32);
    assert!(DaemonConfig::default().node_settings().family.is_empty());
}

#[test]
fn show_round_trips() {
    let mut c = DaemonConfig {
        nickname: "shown".into(),
        ..Default::default()
    };
    c.relay.exit_policy = vec!["accept *:443".into()];
    let again = parse_str(&c.to_toml()).unwrap();
    assert_eq!(again, c);
}

#[test]
fn misspelled_keys_are_named() {
    for (text, key) in [
        ("[limits]\nmax_circuts = 5\n", "max_circuts"),
        ("nicknme = \"x\"\n", "nicknme"),
        ("[socks]\nlisten_addr = \"127.0.0.1:1\"\n", "listen_addr"),
        ("[relay]\nexitpolicy = []\n", "exitpolicy"),
        ("[sock]\n", "sock"),
    ] {
        let err = parse_str(text).unwrap_err().to_string();
        assert!(err.contains(key) && err.contains("<string>"), "{err}");
    }
}

#[test]
fn wrong_types_are_named() {
    let err = parse_str("[limits]\nmax_circuits = \"many\"\n")
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("max_circuits") && err.contains("invalid type"),
        "{err}"
    );
    let err = parse_str("transport = \"tcp\"\n").unwrap_err().to_string();
    assert!(err.contains("transport") && err.contains("tcp"), "{err}");
    let err = parse_str("[socks]\nhandshake_timeout = \"soon\"\n")
        .unwrap_err()
        .to_string();
    assert!(err.contains("handshake_timeout"), "{err}");
}

#[test]
fn invalid_values_are_all_listed() {
    let err = parse_str(
        "listen = [\"0.0.0.0:9001\"]\nnickname = \"bad name\"\n[limits]\nmax_links = 0\n\
         [relay]\nenabled = true\nexit_policy = [\"allow *:*\"]\n[socks]\nmax_connections = 0\n\
         [http_connect]\nmax_connections = 0\nhandshake_timeout = \"1ms\"\n",
    )
    .unwrap_err()
    .to_string();
    for needle in [
        "listen: a relay on 0.0.0.0 must say where others reach it",
        "limits.max_links: must be at least 1",
        "nickname: \"bad name\" contains ' '",
        "relay.exit_policy:",
        "socks.max_connections: must be at least 1",
        "http_connect.max_connections: must be at least 1",
        "http_connect.handshake_timeout: 1ms is shorter than 10ms",
    ] {
        assert!(err.contains(needle), "{needle:?} not in {err}");
    }
}

#[test]
fn every_section_reports_its_problems_with_their_keys() {
    let long_socket = format!("/tmp/{}", "x".repeat(120));
    let err = parse_str(&format!(
        "listen = [\"127.0.0.2:9000\", \"127.0.0.2:9000\"]\ndata_dir = \"\"\n\
         [control]\nsocket = \"{long_socket}\"\n\
         [limits]\ncell_pool_bytes = 1000\nlink_cells = {{ per_second = 10.0, burst = 0 }}\n\
         [log]\nlevel = \"inf\"\n\
         [telemetry]\notlp_endpoint = \"127.0.0.1:4317\"\nservice_name = \" \"\n\
         export_interval = \"10ms\"\n"
    ))
    .unwrap_err();
    let Error::ConfigInvalid { problems, .. } = &err else {
        panic!("{err}");
    };
    let fields: Vec<&str> = problems.iter().map(|p| p.field.as_str()).collect();
    assert_eq!(
        fields,
        [
            "listen",
            "listen",
            "data_dir",
            "control.socket",
            "limits.cell_pool_bytes",
            "limits.link_cells",
            "log.level",
            "telemetry.otlp_endpoint",
            "telemetry.service_name",
            "telemetry.export_interval",
        ]
    );
    let text = err.to_string();
    assert!(text.contains("127.0.0.2:9000 is listed twice"), "{text}");
    assert!(text.contains("Unix sockets allow at most 107"), "{text}");
    assert!(text.contains("burst must be at least 1"), "{text}");
    assert!(text.contains("\"inf\" is not one of"), "{text}");
    let err = parse_str("[telemetry]\nexport_interval = \"2days\"\n")
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("telemetry.export_interval") && err.contains("longer than a day"),
        "{err}"
    );
}

#[test]
fn missing_file_is_a_clear_error() {
    let err = DaemonConfig::load(Path::new("/nonexistent/nyx.toml"))
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with("cannot read config file /nonexistent/nyx.toml"),
        "{err}"
    );
}

#[test]
fn diff_separates_live_and_restart_keys() {
    let old = DaemonConfig::default();
    let mut new = old.clone();
    new.log.level = "debug".into();
    new.relay.exit_policy = vec!["accept *:80".into()];
    new.relay.family = vec![NodeId::from_bytes([7; 32]).to_string()];
    new.limits.link_cells.burst = 5;
    new.socks.listen = "127.0.0.1:1".parse().unwrap();
    new.http_connect.enabled = true;
    new.transport = TransportKind::Udp;
    let d = old.diff(&new);
    assert_eq!(
        d.live,
        [
            "limits.link_cells",
            "log.level",
            "relay.exit_policy",
            "relay.family"
        ]
    );
    assert_eq!(
        d.restart,
        ["http_connect.enabled", "socks.listen", "transport"]
    );
    assert_eq!(old.diff(&old), ConfigDiff::default());
}

/// Every key of the file, changed on its own, is reported: the diff is derived from the
/// serialized form, so a key added later cannot count as unchanged.
#[test]
fn every_key_changed_alone_is_reported() {
    // Optional keys set, so that they are in the serialized form too.
    let mut base = DaemonConfig {
        data_dir: Some("/var/lib/nyx".into()),
        ..DaemonConfig::default()
    };
    base.listen = vec!["127.0.0.1:0".parse().unwrap()];
    base.relay.advertise = Some("127.0.0.1:9001".parse().unwrap());
    base.control.socket = Some("/run/nyx/control.sock".into());
    base.telemetry.otlp_endpoint = Some("http://127.0.0.1:4317".into());
    base.telemetry.prometheus_listen = Some("127.0.0.1:9100".parse().unwrap());
    let authority = nyx_crypto::identity::IdentityKey::from_seed(&[1; 32]).public();
    base.directory.authorities = vec![crate::daemon::trust::authority_hex(&authority)];
    base.relay.family = vec![NodeId::from_bytes([7; 32]).to_string()];
    let toml::Value::Table(table) = toml::Value::try_from(&base).unwrap() else {
        panic!("a table");
    };
    let mut checked = 0;
    for (section, value) in &table {
        let keys: Vec<(String, Vec<String>)> = match value {
            toml::Value::Table(t) => t
                .keys()
                .map(|k| (format!("{section}.{k}"), vec![section.clone(), k.clone()]))
                .collect(),
            _ => vec![(section.clone(), vec![section.clone()])],
        };
        for (dotted, path) in keys {
            let mut edited = toml::Value::Table(table.clone());
            let mut slot = &mut edited;
            for p in &path {
                slot = slot.get_mut(p).unwrap();
            }
            let Some(changed) = altered(slot) else {
                continue;
            };
            *slot = changed;
            let Ok(new) = edited.try_into::<DaemonConfig>() else {
                continue;
            };
            let d = base.diff(&new);
            let reported: Vec<&String> = d.live.iter().chain(&d.restart).collect();
            assert_eq!(reported, [&dotted], "changing {dotted}");
            checked += 1;
        }
    }
    // Every key of the file (top-level keys and the keys of each section).
    let keys = table
        .values()
        .map(|v| v.as_table().map_or(1, toml::Table::len))
        .sum::<usize>();
    assert_eq!(checked, keys, "{checked} of {keys} keys could be altered");
}

/// Another value of the same shape, if one is easy to make.
fn altered(v: &toml::Value) -> Option<toml::Value> {
    use toml::Value as V;
    Some(match v {
        V::Integer(i) => V::Integer(i + 1),
        V::Float(f) => V::Float(f * 2.0 + 1.0),
        V::Boolean(b) => V::Boolean(!b),
        V::String(s) if s.parse::<std::net::SocketAddr>().is_ok() => {
            V::String("127.0.0.9:9".to_owned())
        }
        // A duration ("10s", "1day"): ten times longer and then some.
        V::String(s) if s.starts_with(|c: char| c.is_ascii_digit()) => V::String(format!("1{s}")),
        V::String(s) if s.starts_with("http://") => V::String(format!("{s}0")),
        V::String(s) if s == "quic" => V::String("udp".to_owned()),
        V::String(s) if s == "text" => V::String("json".to_owned()),
        V::String(s) if s == "auto" => V::String("plain".to_owned()),
        V::String(s) if s == "seconds" => V::String("micros".to_owned()),
        V::String(s) => V::String(format!("{s}x")),
        V::Array(a) if !a.is_empty() => {
            let mut a = a.clone();
            a.push(a[0].clone());
            V::Array(a)
        }
        V::Table(t) => {
            let mut t = t.clone();
            let (k, first) = t.iter().next().map(|(k, v)| (k.clone(), v.clone()))?;
            t.insert(k, altered(&first)?);
            V::Table(t)
        }
        _ => return None,
    })
}

#[test]
fn otlp_over_https_is_refused_at_start() {
    let err = parse_str("[telemetry]\notlp_endpoint = \"https://collector:4317\"\n")
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("telemetry.otlp_endpoint") && err.contains("https is not supported"),
        "{err}"
    );
    assert!(parse_str("[telemetry]\notlp_endpoint = \"http://127.0.0.1:4317\"\n").is_ok());
}

/// A relay publishes where others reach it: an unspecified listen address needs
/// `relay.advertise`, which itself must be specific; a client may bind anywhere; an
/// authority must be a relay.
#[test]
fn relays_say_where_they_are_reached() {
    assert!(parse_str("listen = [\"0.0.0.0:0\"]\n").is_ok(), "a client");
    let err = parse_str("listen = [\"[::]:9001\"]\n[relay]\nenabled = true\n")
        .unwrap_err()
        .to_string();
    assert!(err.contains("listen: a relay on :: must say"), "{err}");
    let ok = parse_str(
        "listen = [\"[::]:9001\"]\n[relay]\nenabled = true\nadvertise = \"[2001:db8::7]:0\"\n",
    )
    .unwrap();
    let settings = ok.node_settings();
    assert_eq!(settings.role, nyx_node::NodeRole::Relay);
    assert_eq!(settings.advertise, Some("[2001:db8::7]:0".parse().unwrap()));
    let err = parse_str("[relay]\nenabled = true\nadvertise = \"0.0.0.0:9001\"\n")
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("relay.advertise: 0.0.0.0 reaches nobody"),
        "{err}"
    );
    let key = nyx_crypto::identity::IdentityKey::from_seed(&[1; 32]).public();
    let err = parse_str(&format!(
        "[directory]\nauthorities = [\"{}\"]\n[authority]\nenabled = true\n",
        crate::daemon::trust::authority_hex(&key)
    ))
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("authority.enabled: an authority is reached"),
        "{err}"
    );
    // The defaults: a client on any IPv4 interface; a relay on loopback.
    let client = DaemonConfig::default().node_settings();
    assert_eq!(client.role, nyx_node::NodeRole::Client);
    assert_eq!(client.listen, "0.0.0.0:0".parse().unwrap());
    let relay = parse_str("[relay]\nenabled = true\n")
        .unwrap()
        .node_settings();
    assert_eq!(relay.listen, "127.0.0.1:0".parse().unwrap());
}
