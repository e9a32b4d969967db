//! The transport's families: what the UDP and QUIC transports dropped, refused, challenged
//! and evicted (the counters nyx-transport keeps and the node reports in
//! [`NodeStats`](nyx_node::NodeStats)). A node runs one transport: the UDP families have
//! samples only over UDP, the QUIC ones only over QUIC.

use super::families::FamilyDef;
use super::metrics::MetricKind::Counter;
use super::metrics::MetricsSnapshot;

fn n(v: u64) -> f64 {
    v as f64
}

/// Whether the node runs QUIC: it reports no UDP transport or socket.
fn quic(s: &MetricsSnapshot) -> bool {
    s.node.udp.is_none() && s.node.udp_socket.is_none()
}

/// The transport families, in output order (after [`FAMILIES`](super::families::FAMILIES)).
pub(super) const TRANSPORT_FAMILIES: &[FamilyDef] = &[
    FamilyDef {
        name: "nyx_udp_datagrams_dropped_total",
        help: "UDP datagrams dropped: garbage (unknown type, truncated, no session), failed authentication or replayed, no buffer free, or cells for an address without a link.",
        kind: Counter,
        samples: |s, out| {
            if let Some(u) = &s.node.udp {
                out(&[("reason", "malformed")], n(u.dropped_malformed));
                out(&[("reason", "unauthenticated")], n(u.dropped_auth));
                out(&[("reason", "no_buffer")], n(u.dropped_no_buffer));
                out(&[("reason", "no_link")], n(u.dropped_no_link));
            }
        },
    },
    FamilyDef {
        name: "nyx_udp_handshakes_total",
        help: "UDP link handshakes, by outcome: completed, failed (bad, replayed, wrong peer), rate limited per source, refused (a client accepts no links).",
        kind: Counter,
        samples: |s, out| {
            if let Some(u) = &s.node.udp {
                out(&[("outcome", "completed")], n(u.handshakes_ok));
                out(&[("outcome", "failed")], n(u.handshakes_failed));
                out(&[("outcome", "rate_limited")], n(u.rate_limited));
                out(&[("outcome", "refused")], n(u.hellos_refused));
            }
        },
    },
    FamilyDef {
        name: "nyx_udp_cookie_challenges_total",
        help: "COOKIE replies sent instead of doing a UDP handshake (the sender must prove its address).",
        kind: Counter,
        samples: |s, out| {
            if let Some(u) = &s.node.udp {
                out(&[], n(u.cookies_sent));
            }
        },
    },
    FamilyDef {
        name: "nyx_udp_links_closed_total",
        help: "UDP links taken out of the link table, by reason: evicted for a newcomer, idle, never confirmed, closed by either end.",
        kind: Counter,
        samples: |s, out| {
            if let Some(u) = &s.node.udp {
                out(&[("reason", "evicted")], n(u.links_evicted));
                out(&[("reason", "idle")], n(u.links_idle_closed));
                out(&[("reason", "unconfirmed")], n(u.links_unconfirmed_expired));
                out(&[("reason", "closed")], n(u.links_closed));
            }
        },
    },
    FamilyDef {
        name: "nyx_udp_receive_errors_total",
        help: "Receives on the UDP socket that failed with an error.",
        kind: Counter,
        samples: |s, out| {
            if let Some(socket) = &s.node.udp_socket {
                out(&[], n(socket.receive_errors));
            }
        },
    },
    FamilyDef {
        name: "nyx_quic_connection_attempts_total",
        help: "Incoming QUIC connection attempts, by outcome: accepted for a handshake, answered with a Retry (address validation), refused by the per-source limit, refused with too many handshakes in progress.",
        kind: Counter,
        samples: |s, out| {
            if quic(s) {
                let a = &s.node.quic_admission;
                out(&[("outcome", "accepted")], n(a.accepted));
                out(&[("outcome", "retry")], n(a.retries));
                out(&[("outcome", "source_rate")], n(a.refused_source_rate));
                out(&[("outcome", "busy")], n(a.refused_busy));
            }
        },
    },
    FamilyDef {
        name: "nyx_quic_links_closed_total",
        help: "QUIC links closed by the link table, by reason: evicted for a newcomer, refused (every link in use), retired (another link to the same peer came up).",
        kind: Counter,
        samples: |s, out| {
            if quic(s) {
                let l = &s.node.quic_links;
                out(&[("reason", "evicted")], n(l.evicted));
                out(&[("reason", "refused")], n(l.refused));
                out(&[("reason", "retired")], n(s.node.quic_links_retired));
            }
        },
    },
];
