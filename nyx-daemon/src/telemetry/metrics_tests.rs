use std::collections::HashMap;

use super::super::families::LABEL_VALUES;
use super::*;

/// A snapshot where every counter has a distinct, known value.
fn known() -> MetricsSnapshot {
    let mut s = MetricsSnapshot::new(NodeStats::default(), MuxStats::default(), Duration::ZERO);
    s.uptime = Duration::from_secs(90);
    let o = &mut s.node.overlay;
    o.cells_in = 1000;
    o.relayed_forward = 7;
    o.relayed_backward = 8;
    o.delivered = 9;
    o.dropped_malformed = 11;
    o.dropped_unknown_circuit = 12;
    o.dropped_unauthenticated = 13;
    o.dropped_replayed = 14;
    o.dropped_link_rate = 15;
    o.dropped_circuit_rate = 16;
    o.dropped_queue_full = 17;
    o.dropped_no_link = 18;
    o.protocol_errors = 19;
    o.bad_control = 20;
    o.creates_answered = 21;
    o.creates_refused = 22;
    o.creates_rate_limited = 23;
    o.circuits_built = 24;
    o.circuits_failed = 25;
    o.links_dead = 26;
    o.circuits_tampered = 29;
    o.extends_resent = 45;
    o.extends_repeated = 46;
    s.node.links = 4;
    s.node.relay_circuits = 3;
    s.node.own_circuits = 2;
    s.node.send_failures = 27;
    s.node.owner_drops = 28;
    let m = &mut s.streams;
    m.packets_sent = 100;
    m.ack_only_sent = 30;
    m.packets_received = 90;
    m.lost = 5;
    m.fec_packets = 125;
    m.fec_source_symbols = 100;
    m.window = 64;
    m.in_flight = 12;
    m.srtt = Duration::from_millis(50);
    m.min_rtt = Duration::MAX;
    s.node.udp = Some(nyx_transport::udp::UdpStats {
        handshakes_ok: 31,
        handshakes_failed: 32,
        cookies_sent: 33,
        rate_limited: 34,
        hellos_refused: 35,
        dropped_malformed: 36,
        dropped_auth: 37,
        dropped_no_buffer: 38,
        dropped_no_link: 39,
        links_evicted: 40,
        links_idle_closed: 41,
        links_unconfirmed_expired: 42,
        links_closed: 43,
        ..Default::default()
    });
    s.node.udp_socket = Some(nyx_transport::socket::SocketStats {
        receive_errors: 44,
        ..Default::default()
    });
    s
}

/// [`known`] as a QUIC node sees it: no UDP numbers, QUIC admission and link numbers.
fn known_quic() -> MetricsSnapshot {
    let mut s = known();
    (s.node.udp, s.node.udp_socket) = (None, None);
    let a = &mut s.node.quic_admission;
    (a.accepted, a.retries, a.refused_source_rate, a.refused_busy) = (51, 52, 53, 54);
    (s.node.quic_links.evicted, s.node.quic_links.refused) = (55, 56);
    s.node.quic_links_retired = 57;
    s
}

/// A parsed sample line: name, labels, value.
type Sample = (String, Vec<(String, String)>, f64);

/// `name{k="v",...} value`, or `None` when the line is not well-formed.
fn parse_sample(line: &str) -> Option<Sample> {
    let (series, value) = line.rsplit_once(' ')?;
    let value = match value {
        "+Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        v => v.parse().ok()?,
    };
    let (name, labels) = match series.split_once('{') {
        None => (series, Vec::new()),
        Some((name, rest)) => {
            let mut rest = rest.strip_suffix('}')?;
            let mut labels = Vec::new();
            while !rest.is_empty() {
                let (key, after) = rest.split_once("=\"")?;
                let mut v = String::new();
                let mut chars = after.char_indices();
                let end = loop {
                    match chars.next()? {
                        (i, '"') => break i,
                        (_, '\\') => v.push(chars.next()?.1),
                        (_, c) => v.push(c),
                    }
                };
                if !valid_name(key, false) {
                    return None;
                }
                labels.push((key.to_owned(), v));
                rest = &after[end + 1..];
                rest = rest.strip_prefix(',').unwrap_or(rest);
            }
            (name, labels)
        }
    };
    valid_name(name, true).then(|| (name.to_owned(), labels, value))
}

/// Every line checked; returns the samples, and the TYPE of every family.
fn parse(text: &str) -> (Vec<Sample>, HashMap<String, String>) {
    let mut types = HashMap::new();
    let mut helps = HashMap::new();
    let mut samples = Vec::new();
    assert!(text.ends_with('\n'));
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, help) = rest.split_once(' ').unwrap();
            assert!(!help.is_empty(), "{line}");
            assert!(
                helps.insert(name.to_owned(), ()).is_none(),
                "HELP twice: {line}"
            );
        } else if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap();
            assert!(helps.contains_key(name), "TYPE before HELP: {line}");
            assert!(["counter", "gauge", "histogram"].contains(&kind), "{line}");
            assert!(
                types.insert(name.to_owned(), kind.to_owned()).is_none(),
                "{line}"
            );
        } else {
            let s = parse_sample(line).unwrap_or_else(|| panic!("malformed line {line:?}"));
            let family = ["_bucket", "_sum", "_count"]
                .iter()
                .find_map(|suffix| {
                    let base = s.0.strip_suffix(suffix)?;
                    (types.get(base)? == "histogram").then_some(base)
                })
                .unwrap_or(&s.0);
            assert!(types.contains_key(family), "sample before its TYPE: {line}");
            samples.push(s);
        }
    }
    (samples, types)
}

/// `text` has exactly this line.
fn assert_line(text: &str, line: &str) {
    assert!(
        text.lines().any(|l| l == line),
        "missing {line:?} in\n{text}"
    );
}

#[test]
fn known_numbers_render_as_exact_lines() {
    let text = render_prometheus(&known());
    for line in [
        "# HELP nyx_cells_relayed_total Cells relayed for other nodes' circuits, towards the exit (forward) or the client (backward).",
        "# TYPE nyx_cells_relayed_total counter",
        "nyx_cells_relayed_total{direction=\"forward\"} 7",
        "nyx_cells_relayed_total{direction=\"backward\"} 8",
        "nyx_cells_received_total 1000",
        "nyx_cells_dropped_total{reason=\"malformed\"} 11",
        "nyx_cells_dropped_total{reason=\"unknown_circuit\"} 12",
        "nyx_cells_dropped_total{reason=\"unauthenticated\"} 13",
        "nyx_cells_dropped_total{reason=\"replayed\"} 14",
        "nyx_cells_dropped_total{reason=\"link_rate\"} 15",
        "nyx_cells_dropped_total{reason=\"circuit_rate\"} 16",
        "nyx_cells_dropped_total{reason=\"queue_full\"} 17",
        "nyx_cells_dropped_total{reason=\"no_link\"} 18",
        "nyx_rate_limit_rejections_total{limit=\"link_cells\"} 15",
        "nyx_rate_limit_rejections_total{limit=\"creates\"} 23",
        "nyx_handshakes_total{outcome=\"answered\"} 21",
        "nyx_handshakes_total{outcome=\"refused\"} 22",
        "nyx_handshakes_total{outcome=\"rate_limited\"} 23",
        "# TYPE nyx_circuits gauge",
        "nyx_circuits{role=\"relayed\"} 3",
        "nyx_circuits{role=\"own\"} 2",
        "nyx_circuit_builds_total{outcome=\"built\"} 24",
        "nyx_circuit_builds_total{outcome=\"failed\"} 25",
        "nyx_links 4",
        "nyx_links_dead_total 26",
        "nyx_extend_resends_total{side=\"owner\"} 45",
        "nyx_extend_resends_total{side=\"relay\"} 46",
        "nyx_circuits_tampered_total 29",
        "nyx_send_failures_total 27",
        "nyx_owner_drops_total 28",
        "nyx_stream_packets_total{direction=\"sent\"} 100",
        "nyx_stream_packets_total{direction=\"received\"} 90",
        "nyx_stream_packets_lost_total 5",
        "# TYPE nyx_fec_overhead_ratio gauge",
        "nyx_fec_overhead_ratio 1.25",
        "nyx_stream_congestion_window_cells 64",
        "nyx_stream_in_flight_cells 12",
        "nyx_stream_srtt_seconds 0.05",
        "nyx_stream_min_rtt_seconds 0",
        "# TYPE nyx_uptime_seconds gauge",
        "nyx_uptime_seconds 90",
        "# TYPE nyx_udp_datagrams_dropped_total counter",
        "nyx_udp_datagrams_dropped_total{reason=\"malformed\"} 36",
        "nyx_udp_datagrams_dropped_total{reason=\"unauthenticated\"} 37",
        "nyx_udp_datagrams_dropped_total{reason=\"no_buffer\"} 38",
        "nyx_udp_datagrams_dropped_total{reason=\"no_link\"} 39",
        "nyx_udp_handshakes_total{outcome=\"completed\"} 31",
        "nyx_udp_handshakes_total{outcome=\"failed\"} 32",
        "nyx_udp_handshakes_total{outcome=\"rate_limited\"} 34",
        "nyx_udp_handshakes_total{outcome=\"refused\"} 35",
        "nyx_udp_cookie_challenges_total 33",
        "nyx_udp_links_closed_total{reason=\"evicted\"} 40",
        "nyx_udp_links_closed_total{reason=\"idle\"} 41",
        "nyx_udp_links_closed_total{reason=\"unconfirmed\"} 42",
        "nyx_udp_links_closed_total{reason=\"closed\"} 43",
        "nyx_udp_receive_errors_total 44",
    ] {
        assert_line(&text, line);
    }
    // Over UDP the QUIC families have no samples, and the other way round.
    assert!(!text.contains("\nnyx_quic_"), "{text}");
    let quic = render_prometheus(&known_quic());
    for line in [
        "nyx_quic_connection_attempts_total{outcome=\"accepted\"} 51",
        "nyx_quic_connection_attempts_total{outcome=\"retry\"} 52",
        "nyx_quic_connection_attempts_total{outcome=\"source_rate\"} 53",
        "nyx_quic_connection_attempts_total{outcome=\"busy\"} 54",
        "nyx_quic_links_closed_total{reason=\"evicted\"} 55",
        "nyx_quic_links_closed_total{reason=\"refused\"} 56",
        "nyx_quic_links_closed_total{reason=\"retired\"} 57",
    ] {
        assert_line(&quic, line);
    }
    assert!(!quic.contains("\nnyx_udp_"), "{quic}");
    assert!(quic.contains("# TYPE nyx_udp_cookie_challenges_total counter"));
}

#[test]
fn output_is_well_formed_with_help_and_type_for_every_family() {
    let (mut samples, types) = parse(&render_prometheus(&known()));
    let (quic, quic_types) = parse(&render_prometheus(&known_quic()));
    assert_eq!(quic_types, types);
    samples.extend(quic);
    assert_eq!(types.len(), all_families().count());
    for f in all_families() {
        assert_eq!(types.get(f.name).map(String::as_str), Some(f.kind.as_str()));
        assert!(
            samples.iter().any(|s| s.0 == f.name),
            "{} has no sample",
            f.name
        );
        assert_eq!(
            f.kind == MetricKind::Counter,
            f.name.ends_with("_total"),
            "{}",
            f.name
        );
    }
    // An empty snapshot renders the same families.
    let (_, empty) = parse(&render_prometheus(&MetricsSnapshot::default()));
    assert_eq!(empty, types);
}

/// The privacy rule: every label value comes from a fixed, documented set.
#[test]
fn label_values_come_only_from_the_fixed_sets() {
    let mut s = known();
    s.streams.min_rtt = Duration::from_millis(3);
    let (mut samples, _) = parse(&render_prometheus(&s));
    samples.extend(parse(&render_prometheus(&known_quic())).0);
    let allowed: HashMap<&str, &[&str]> = LABEL_VALUES.iter().copied().collect();
    let mut seen = 0;
    for (name, labels, _) in &samples {
        for (k, v) in labels {
            let values = allowed
                .get(k.as_str())
                .unwrap_or_else(|| panic!("{name}: label {k} is not a fixed one"));
            assert!(
                values.contains(&v.as_str()),
                "{name}: {k}={v:?} not allowed"
            );
            seen += 1;
        }
    }
    assert!(seen >= 20, "labelled samples were checked ({seen})");
}

#[test]
fn extra_metrics_form_families_and_bad_ones_are_left_out() {
    let s = MetricsSnapshot {
        extra: vec![
            ExtraMetric::counter("nyx_socks_connections_total", "SOCKS connections.", 5)
                .with_label("outcome", "accepted"),
            ExtraMetric::gauge("nyx_socks_active", "SOCKS connections open.", 2.0),
            ExtraMetric::counter("nyx_socks_connections_total", "ignored", 1)
                .with_label("outcome", "refu\"sed"),
            ExtraMetric::counter("nyx_bad_counter", "no _total suffix", 1),
            ExtraMetric::gauge("nyx-dash", "bad name", 1.0),
            ExtraMetric::gauge("nyx_links", "collides with a built-in", 1.0),
            ExtraMetric::gauge("nyx_bad_label", "label key", 1.0).with_label("0key", "x"),
            ExtraMetric::gauge("nyx_inf", "infinite", f64::INFINITY),
        ],
        ..MetricsSnapshot::default()
    };
    let text = render_prometheus(&s);
    let (samples, types) = parse(&text);
    let tail: Vec<&str> = text
        .lines()
        .skip_while(|l| !l.contains("nyx_socks_connections_total"))
        .collect();
    assert_eq!(
        tail,
        [
            "# HELP nyx_socks_connections_total SOCKS connections.",
            "# TYPE nyx_socks_connections_total counter",
            "nyx_socks_connections_total{outcome=\"accepted\"} 5",
            "nyx_socks_connections_total{outcome=\"refu\\\"sed\"} 1",
            "# HELP nyx_socks_active SOCKS connections open.",
            "# TYPE nyx_socks_active gauge",
            "nyx_socks_active 2",
            "# HELP nyx_inf infinite",
            "# TYPE nyx_inf gauge",
            "nyx_inf +Inf",
        ]
    );
    assert_eq!(types.len(), all_families().count() + 3);
    assert_eq!(samples.iter().filter(|s| s.0 == "nyx_links").count(), 1);
    assert!(
        samples
            .iter()
            .any(|s| s.1 == [("outcome".into(), "refu\"sed".into())])
    );
}
