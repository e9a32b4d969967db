//! The server's counters: [`SocksCounters`], a shared live handle, and [`SocksStats`], a
//! snapshot of it. Counts and reply codes only: nothing that identifies a client.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use super::proto::Reply;

/// The server's counters at one moment. Every field counts clients (TCP connections).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct SocksStats {
    /// Connections accepted (including those closed for being over the limit).
    pub accepted: u64,
    /// Requests answered with success (a stream was opened).
    pub succeeded: u64,
    /// Requests answered with a failure, indexed by the reply code (index 0 stays 0); see
    /// [`failed_with`](Self::failed_with).
    pub failed: [u64; 9],
    /// Handshakes that ended on a protocol error (bad version, no acceptable method,
    /// unsupported command or address type, bad host name, port 0). Those answered with a
    /// reply are also counted in `failed`.
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

impl SocksStats {
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

    /// Requests answered with each failure, by a fixed name for its reply (the metrics'
    /// `reply` label): `general_failure`, `not_allowed`, `network_unreachable`,
    /// `host_unreachable`, `connection_refused`, `ttl_expired`, `command_not_supported`,
    /// `address_type_not_supported`.
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
}

/// A shared handle on a server's live counters (cheap to clone): read them with
/// [`snapshot`](Self::snapshot), from any task, while the server runs.
#[derive(Debug, Clone, Default)]
pub struct SocksCounters(Arc<Counters>);

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

impl SocksCounters {
    /// The counters now.
    pub fn snapshot(&self) -> SocksStats {
        let c = &*self.0;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        SocksStats {
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
pub(super) struct Active(SocksCounters);

impl Active {
    pub(super) fn new(counters: &SocksCounters) -> Self {
        counters.0.active.fetch_add(1, Ordering::Relaxed);
        Active(counters.clone())
    }
}

impl Drop for Active {
    fn drop(&mut self) {
        self.0.0.active.fetch_sub(1, Ordering::Relaxed);
    }
}
