//! An entry server's counters: [`EntryCounters`], a shared live handle, and [`EntryStats`],
//! a snapshot of it. Counts and reasons only: nothing that identifies a client.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use super::Protocol;
use crate::socks::Reply;
use crate::telemetry::ExtraMetric;

/// The server's counters at one moment. Every field counts clients (TCP connections).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct EntryStats {
    /// Connections accepted (including those closed for being over the limit).
    pub accepted: u64,
    /// Requests answered with success (a stream was opened).
    pub succeeded: u64,
    /// Requests answered with a failure, indexed by the SOCKS5 reply code of its reason
    /// (index 0 stays 0; see [`failed_with`](Self::failed_with)), whatever the protocol told
    /// the client: SOCKS4 clients hear 91 and HTTP clients a status for these reasons
    /// (docs/socks.md and docs/http-connect.md have the tables).
    pub failed: [u64; 9],
    /// Handshakes that ended on a protocol error (SOCKS: bad version, no acceptable method,
    /// unsupported command or address type, bad host name, port 0; HTTP: a bad request, a
    /// method other than CONNECT, a head too large). Those answered with a reply are also
    /// counted in `failed`.
    pub malformed: u64,
    /// Handshakes not completed within the timeout.
    pub timeouts: u64,
    /// Clients that closed (or broke) their connection during the handshake.
    pub aborted: u64,
    /// Connections closed at once because `max_connections` were being served.
    pub over_limit: u64,
    /// Clients being served now (in the handshake, connecting or relaying).
    pub active: u64,
}

impl EntryStats {
    /// Requests answered with `reply` (0 for [`Reply::Succeeded`]: see `succeeded`).
    pub fn failed_with(&self, reply: Reply) -> u64 {
        match reply {
            Reply::Succeeded => 0,
            r => self.failed[usize::from(r.code())],
        }
    }

    /// Requests answered with any failure.
    pub fn failed_total(&self) -> u64 {
        self.failed.iter().sum()
    }

    /// Requests answered with each failure, by a fixed name for its reason (the metrics'
    /// `reply` label, named for the SOCKS5 reply): `general_failure`, `not_allowed`,
    /// `network_unreachable`, `host_unreachable`, `connection_refused`, `ttl_expired`,
    /// `command_not_supported`, `address_type_not_supported`.
    pub fn failures(&self) -> impl Iterator<Item = (&'static str, u64)> + '_ {
        Reply::ALL.into_iter().filter_map(|reply| {
            let name = match reply {
                Reply::Succeeded => return None,
                Reply::GeneralFailure => "general_failure",
                Reply::NotAllowed => "not_allowed",
                Reply::NetworkUnreachable => "network_unreachable",
                Reply::HostUnreachable => "host_unreachable",
                Reply::ConnectionRefused => "connection_refused",
                Reply::TtlExpired => "ttl_expired",
                Reply::CommandNotSupported => "command_not_supported",
                Reply::AddressTypeNotSupported => "address_type_not_supported",
            };
            Some((name, self.failed_with(reply)))
        })
    }

    /// Append these counters to `extra` as the metrics of `protocol`'s entry:
    /// `nyx_socks_*` or `nyx_http_connect_*` (docs/telemetry.md lists them); the failed
    /// requests by reason, under a `reply` label.
    pub(crate) fn push_metrics(&self, protocol: Protocol, extra: &mut Vec<ExtraMetric>) {
        let names = match protocol {
            Protocol::Socks => &SOCKS_METRICS,
            Protocol::HttpConnect => &HTTP_CONNECT_METRICS,
        };
        let values = [
            self.accepted,
            self.succeeded,
            self.malformed,
            self.timeouts,
            self.aborted,
            self.over_limit,
        ];
        for ((name, help), value) in names.counters.into_iter().zip(values) {
            extra.push(ExtraMetric::counter(name, help, value));
        }
        let (name, help) = names.failed;
        for (reply, value) in self.failures() {
            extra.push(ExtraMetric::counter(name, help, value).with_label("reply", reply));
        }
        let (name, help) = names.active;
        extra.push(ExtraMetric::gauge(name, help, self.active as f64));
    }
}

/// An entry's metric names and help texts: six counters (accepted, succeeded, malformed,
/// handshake timeouts, handshakes the client left, over the limit), the failures by reason
/// and the active gauge.
struct MetricNames {
    counters: [(&'static str, &'static str); 6],
    failed: (&'static str, &'static str),
    active: (&'static str, &'static str),
}

const SOCKS_METRICS: MetricNames = MetricNames {
    counters: [
        ("nyx_socks_connections_total", "SOCKS connections accepted."),
        (
            "nyx_socks_succeeded_total",
            "SOCKS requests that opened a stream.",
        ),
        (
            "nyx_socks_malformed_total",
            "SOCKS clients that broke the protocol.",
        ),
        (
            "nyx_socks_handshake_timeouts_total",
            "SOCKS clients that did not finish their handshake in time.",
        ),
        (
            "nyx_socks_handshakes_aborted_total",
            "SOCKS clients that closed their connection before the handshake ended.",
        ),
        (
            "nyx_socks_over_limit_total",
            "SOCKS connections closed at once: too many open.",
        ),
    ],
    failed: (
        "nyx_socks_failed_total",
        "SOCKS requests answered with a failure, by reason.",
    ),
    active: ("nyx_socks_active", "SOCKS connections open now."),
};

const HTTP_CONNECT_METRICS: MetricNames = MetricNames {
    counters: [
        (
            "nyx_http_connect_connections_total",
            "HTTP CONNECT connections accepted.",
        ),
        (
            "nyx_http_connect_succeeded_total",
            "HTTP CONNECT requests that opened a stream.",
        ),
        (
            "nyx_http_connect_malformed_total",
            "HTTP CONNECT clients that broke the protocol.",
        ),
        (
            "nyx_http_connect_handshake_timeouts_total",
            "HTTP CONNECT clients that did not send their request in time.",
        ),
        (
            "nyx_http_connect_handshakes_aborted_total",
            "HTTP CONNECT clients that closed their connection before the answer.",
        ),
        (
            "nyx_http_connect_over_limit_total",
            "HTTP CONNECT connections closed at once: too many open.",
        ),
    ],
    failed: (
        "nyx_http_connect_failed_total",
        "HTTP CONNECT requests answered with a failure, by reason (named for SOCKS5's replies).",
    ),
    active: (
        "nyx_http_connect_active",
        "HTTP CONNECT connections open now.",
    ),
};

/// A shared handle on a server's live counters (cheap to clone): read them with
/// [`snapshot`](Self::snapshot), from any task, while the server runs.
#[derive(Debug, Clone, Default)]
pub struct EntryCounters(Arc<Counters>);

#[derive(Debug, Default)]
struct Counters {
    accepted: AtomicU64,
    succeeded: AtomicU64,
    failed: [AtomicU64; 9],
    malformed: AtomicU64,
    timeouts: AtomicU64,
    aborted: AtomicU64,
    over_limit: AtomicU64,
    active: AtomicU64,
}

impl EntryCounters {
    /// The counters now.
    pub fn snapshot(&self) -> EntryStats {
        let c = &*self.0;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        EntryStats {
            accepted: get(&c.accepted),
            succeeded: get(&c.succeeded),
            failed: std::array::from_fn(|i| get(&c.failed[i])),
            malformed: get(&c.malformed),
            timeouts: get(&c.timeouts),
            aborted: get(&c.aborted),
            over_limit: get(&c.over_limit),
            active: get(&c.active),
        }
    }

    /// Count one `event`.
    pub(super) fn count(&self, event: Event) {
        let c = &*self.0;
        let counter = match event {
            Event::Accepted => &c.accepted,
            Event::Replied(Reply::Succeeded) => &c.succeeded,
            Event::Replied(r) => &c.failed[usize::from(r.code())],
            Event::Malformed => &c.malformed,
            Event::Timeout => &c.timeouts,
            Event::Aborted => &c.aborted,
            Event::OverLimit => &c.over_limit,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }
}

/// What the server counts.
#[derive(Debug, Clone, Copy)]
pub(super) enum Event {
    Accepted,
    Replied(Reply),
    Malformed,
    Timeout,
    Aborted,
    OverLimit,
}

/// Counts a client as active for as long as it lives.
pub(super) struct Active(EntryCounters);

impl Active {
    pub(super) fn new(counters: &EntryCounters) -> Self {
        counters.0.active.fetch_add(1, Ordering::Relaxed);
        Active(counters.clone())
    }
}

impl Drop for Active {
    fn drop(&mut self) {
        self.0.0.active.fetch_sub(1, Ordering::Relaxed);
    }
}
