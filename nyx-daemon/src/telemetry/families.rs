//! The table of metric families the daemon exports, shared by the Prometheus renderer and the
//! OpenTelemetry instruments so both report the same names, help and labels.
//!
//! Every label value here is a string literal: no family can carry an id, an address or
//! anything else per peer (docs/telemetry.md, "Privacy").

use super::metrics::{Label, MetricKind, MetricsSnapshot};
use super::transport_families::TRANSPORT_FAMILIES;

/// Where a family's samples go: labels and value.
pub(super) type Emit<'a> = &'a mut dyn FnMut(&'static [Label], f64);

/// One built-in metric family.
pub(super) struct FamilyDef {
    /// Prometheus name (counters end in `_total`).
    pub(super) name: &'static str,
    /// The `# HELP` text.
    pub(super) help: &'static str,
    /// Counter or gauge.
    pub(super) kind: MetricKind,
    /// Emits the family's samples from a snapshot.
    pub(super) samples: fn(&MetricsSnapshot, Emit<'_>),
}

/// Label keys and the only values each may take, over all built-in families (the tests hold
/// the output to it; docs/telemetry.md lists the same).
#[cfg(test)]
pub(super) const LABEL_VALUES: &[(&str, &[&str])] = &[
    ("direction", &["forward", "backward", "sent", "received"]),
    (
        "reason",
        &[
            "malformed",
            "unknown_circuit",
            "unauthenticated",
            "replayed",
            "link_rate",
            "circuit_rate",
            "queue_full",
            "no_link",
            "no_buffer",
            "evicted",
            "idle",
            "unconfirmed",
            "closed",
            "refused",
            "retired",
        ],
    ),
    ("limit", &["link_cells", "circuit_cells", "creates"]),
    (
        "outcome",
        &[
            "answered",
            "refused",
            "rate_limited",
            "built",
            "failed",
            "completed",
            "accepted",
            "retry",
            "source_rate",
            "busy",
        ],
    ),
    ("role", &["relayed", "own"]),
    ("side", &["owner", "relay"]),
];

fn n(v: u64) -> f64 {
    v as f64
}

fn secs(d: std::time::Duration) -> f64 {
    // `min_rtt` is `Duration::MAX` before the first sample: report 0 then.
    if d == std::time::Duration::MAX {
        0.0
    } else {
        d.as_secs_f64()
    }
}

use MetricKind::{Counter, Gauge};

/// The built-in families of the overlay and the streams, in output order ([`all`] adds
/// the transport's).
pub(super) const FAMILIES: &[FamilyDef] = &[
    FamilyDef {
        name: "nyx_uptime_seconds",
        help: "Seconds since the node started.",
        kind: Gauge,
        samples: |s, out| out(&[], s.uptime.as_secs_f64()),
    },
    FamilyDef {
        name: "nyx_cells_received_total",
        help: "Link cells received from peers.",
        kind: Counter,
        samples: |s, out| out(&[], n(s.node.overlay.cells_in)),
    },
    FamilyDef {
        name: "nyx_cells_relayed_total",
        help: "Cells relayed for other nodes' circuits, towards the exit (forward) or the client (backward).",
        kind: Counter,
        samples: |s, out| {
            let o = &s.node.overlay;
            out(&[("direction", "forward")], n(o.relayed_forward));
            out(&[("direction", "backward")], n(o.relayed_backward));
        },
    },
    FamilyDef {
        name: "nyx_cells_delivered_total",
        help: "Payloads delivered to this node, as exit or as circuit owner.",
        kind: Counter,
        samples: |s, out| out(&[], n(s.node.overlay.delivered)),
    },
    FamilyDef {
        name: "nyx_cells_dropped_total",
        help: "Cells dropped, by reason.",
        kind: Counter,
        samples: |s, out| {
            let o = &s.node.overlay;
            out(&[("reason", "malformed")], n(o.dropped_malformed));
            out(
                &[("reason", "unknown_circuit")],
                n(o.dropped_unknown_circuit),
            );
            out(
                &[("reason", "unauthenticated")],
                n(o.dropped_unauthenticated),
            );
            out(&[("reason", "replayed")], n(o.dropped_replayed));
            out(&[("reason", "link_rate")], n(o.dropped_link_rate));
            out(&[("reason", "circuit_rate")], n(o.dropped_circuit_rate));
            out(&[("reason", "queue_full")], n(o.dropped_queue_full));
            out(&[("reason", "no_link")], n(o.dropped_no_link));
        },
    },
    FamilyDef {
        name: "nyx_rate_limit_rejections_total",
        help: "Cells and circuit creations refused by a rate limit, by limit.",
        kind: Counter,
        samples: |s, out| {
            let o = &s.node.overlay;
            out(&[("limit", "link_cells")], n(o.dropped_link_rate));
            out(&[("limit", "circuit_cells")], n(o.dropped_circuit_rate));
            out(&[("limit", "creates")], n(o.creates_rate_limited));
        },
    },
    FamilyDef {
        name: "nyx_protocol_errors_total",
        help: "Authenticated cells whose relay message broke the protocol.",
        kind: Counter,
        samples: |s, out| out(&[], n(s.node.overlay.protocol_errors)),
    },
    FamilyDef {
        name: "nyx_bad_control_messages_total",
        help: "Link control messages that did not decode or did not fit the state.",
        kind: Counter,
        samples: |s, out| out(&[], n(s.node.overlay.bad_control)),
    },
    FamilyDef {
        name: "nyx_handshakes_total",
        help: "Circuit creation handshakes (CREATE) handled as a relay, by outcome.",
        kind: Counter,
        samples: |s, out| {
            let o = &s.node.overlay;
            out(&[("outcome", "answered")], n(o.creates_answered));
            out(&[("outcome", "refused")], n(o.creates_refused));
            out(&[("outcome", "rate_limited")], n(o.creates_rate_limited));
        },
    },
    FamilyDef {
        name: "nyx_circuits",
        help: "Circuits open now: relayed for others, or this node's own.",
        kind: Gauge,
        samples: |s, out| {
            out(&[("role", "relayed")], n(s.node.relay_circuits as u64));
            out(&[("role", "own")], n(s.node.own_circuits as u64));
        },
    },
    FamilyDef {
        name: "nyx_circuit_builds_total",
        help: "This node's circuit builds, by outcome.",
        kind: Counter,
        samples: |s, out| {
            let o = &s.node.overlay;
            out(&[("outcome", "built")], n(o.circuits_built));
            out(&[("outcome", "failed")], n(o.circuits_failed));
        },
    },
    FamilyDef {
        name: "nyx_extend_resends_total",
        help: "EXTENDs resent for want of an EXTENDED: sent as a circuit's owner, or received \
               again as the hop that extends.",
        kind: Counter,
        samples: |s, out| {
            let o = &s.node.overlay;
            out(&[("side", "owner")], n(o.extends_resent));
            out(&[("side", "relay")], n(o.extends_repeated));
        },
    },
    FamilyDef {
        name: "nyx_links",
        help: "Links to other nodes open now.",
        kind: Gauge,
        samples: |s, out| out(&[], n(s.node.links as u64)),
    },
    FamilyDef {
        name: "nyx_links_dead_total",
        help: "Links declared dead because probes went unanswered.",
        kind: Counter,
        samples: |s, out| out(&[], n(s.node.overlay.links_dead)),
    },
    FamilyDef {
        name: "nyx_circuits_tampered_total",
        help: "Circuits destroyed because a cell failed its onion-layer authentication.",
        kind: Counter,
        samples: |s, out| out(&[], n(s.node.overlay.circuits_tampered)),
    },
    FamilyDef {
        name: "nyx_send_failures_total",
        help: "Cells the transport refused (link queue full or link gone).",
        kind: Counter,
        samples: |s, out| out(&[], n(s.node.send_failures)),
    },
    FamilyDef {
        name: "nyx_owner_drops_total",
        help: "Payloads for this node's circuits dropped because the owner did not read them.",
        kind: Counter,
        samples: |s, out| out(&[], n(s.node.owner_drops)),
    },
    FamilyDef {
        name: "nyx_stream_packets_total",
        help: "Stream packets sent and received (parsed).",
        kind: Counter,
        samples: |s, out| {
            out(&[("direction", "sent")], n(s.streams.packets_sent));
            out(&[("direction", "received")], n(s.streams.packets_received));
        },
    },
    FamilyDef {
        name: "nyx_stream_acks_sent_total",
        help: "Stream packets sent that were bare acknowledgements.",
        kind: Counter,
        samples: |s, out| out(&[], n(s.streams.ack_only_sent)),
    },
    FamilyDef {
        name: "nyx_stream_packets_duplicate_total",
        help: "Stream packets received twice.",
        kind: Counter,
        samples: |s, out| out(&[], n(s.streams.duplicates)),
    },
    FamilyDef {
        name: "nyx_stream_packets_malformed_total",
        help: "Stream packets that did not parse or broke the protocol.",
        kind: Counter,
        samples: |s, out| out(&[], n(s.streams.malformed)),
    },
    FamilyDef {
        name: "nyx_stream_packets_lost_total",
        help: "Stream packets in flight declared lost.",
        kind: Counter,
        samples: |s, out| out(&[], n(s.streams.lost)),
    },
    FamilyDef {
        name: "nyx_stream_controls_resent_total",
        help: "Stream control frames sent again after a loss.",
        kind: Counter,
        samples: |s, out| out(&[], n(s.streams.controls_resent)),
    },
    FamilyDef {
        name: "nyx_stream_open_copies_total",
        help: "Second copies of OPEN and OPENED sent (one per stream and end).",
        kind: Counter,
        samples: |s, out| out(&[], n(s.streams.echoes_sent)),
    },
    FamilyDef {
        name: "nyx_stream_probe_timeouts_total",
        help: "Stream probe timeouts (nothing acknowledged for a while).",
        kind: Counter,
        samples: |s, out| out(&[], n(s.streams.probe_timeouts)),
    },
    FamilyDef {
        name: "nyx_streams_opened_total",
        help: "Streams opened (as client) or accepted (as exit).",
        kind: Counter,
        samples: |s, out| out(&[], n(s.streams.streams_opened)),
    },
    FamilyDef {
        name: "nyx_streams_reset_total",
        help: "Streams reset by either side.",
        kind: Counter,
        samples: |s, out| out(&[], n(s.streams.streams_reset)),
    },
    FamilyDef {
        name: "nyx_fec_packets_total",
        help: "FEC symbol packets sent (source, repair and probes).",
        kind: Counter,
        samples: |s, out| out(&[], n(s.streams.fec_packets)),
    },
    FamilyDef {
        name: "nyx_fec_source_symbols_total",
        help: "Source symbols the FEC packets carried data for.",
        kind: Counter,
        samples: |s, out| out(&[], n(s.streams.fec_source_symbols)),
    },
    FamilyDef {
        name: "nyx_fec_repair_requested_total",
        help: "FEC repair symbols sent in answer to repair requests.",
        kind: Counter,
        samples: |s, out| out(&[], n(s.streams.fec_requested_repair)),
    },
    FamilyDef {
        name: "nyx_fec_overhead_ratio",
        help: "FEC packets sent per source symbol since start (1 = no overhead; 0 before any data).",
        kind: Gauge,
        samples: |s, out| out(&[], s.streams.fec_overhead()),
    },
    FamilyDef {
        name: "nyx_stream_congestion_window_cells",
        help: "Congestion window of streams now, in cells (largest over circuits).",
        kind: Gauge,
        samples: |s, out| out(&[], f64::from(s.streams.window)),
    },
    FamilyDef {
        name: "nyx_stream_in_flight_cells",
        help: "Stream cells in flight now (largest over circuits).",
        kind: Gauge,
        samples: |s, out| out(&[], f64::from(s.streams.in_flight)),
    },
    FamilyDef {
        name: "nyx_stream_congestion_events_total",
        help: "Congestion window cuts.",
        kind: Counter,
        samples: |s, out| out(&[], n(s.streams.congestion_events)),
    },
    FamilyDef {
        name: "nyx_stream_srtt_seconds",
        help: "Smoothed stream round-trip time (largest over circuits).",
        kind: Gauge,
        samples: |s, out| out(&[], secs(s.streams.srtt)),
    },
    FamilyDef {
        name: "nyx_stream_min_rtt_seconds",
        help: "Smallest stream round-trip time seen (0 before the first sample).",
        kind: Gauge,
        samples: |s, out| out(&[], secs(s.streams.min_rtt)),
    },
];

/// Every built-in family, in output order: these, then the transport's.
pub(super) fn all() -> impl Iterator<Item = &'static FamilyDef> {
    FAMILIES.iter().chain(TRANSPORT_FAMILIES)
}

/// The built-in family called `name`.
pub(super) fn family(name: &str) -> Option<&'static FamilyDef> {
    all().find(|f| f.name == name)
}
