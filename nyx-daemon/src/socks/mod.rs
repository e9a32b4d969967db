//! # SOCKS5 entry
//!
//! What it is for: letting unmodified applications use the network. A [`SocksServer`]
//! listens on a local TCP port; each client speaks SOCKS5 (RFC 1928, with RFC 1929
//! username/password), asks to CONNECT to a target, and gets a [`NyxStream`] to it through a
//! 3-hop circuit of the node ([`NodeHandle::connect_isolated`]), after which bytes are
//! relayed both ways with half-close preserved. For example
//! `curl --socks5-hostname 127.0.0.1:9050 http://example.org/` lets the exit resolve the name.
//!
//! * Only CONNECT is supported (BIND and UDP ASSOCIATE get reply 0x07); targets are IPv4,
//!   IPv6 or a host name the exit resolves.
//! * Isolation: the username/password pair selects the [`IsolationGroup`] (streams of
//!   different pairs never share a circuit; see [`isolation_group`]), and every client
//!   without credentials shares one group. Any credentials are accepted: they are a label,
//!   not a secret check.
//! * Failures are answered with the reply code of [`reply_for_error`] (the table is in
//!   `docs/socks.md`).
//! * Limits: a handshake must complete within [`SocksConfig::handshake_timeout`], at most
//!   [`SocksConfig::max_connections`] clients are served at once (more are closed at once).
//! * Privacy: nothing here logs a target, an address, a credential or a payload; logs and
//!   [`SocksStats`] hold only counts and reasons.
//!
//! [`proto`] is the sans-IO codec (also what the fuzz target feeds); the server is the only
//! part that does IO.
//!
//! [`NyxStream`]: nyx_node::NyxStream
//! [`NodeHandle::connect_isolated`]: nyx_node::NodeHandle::connect_isolated

pub mod proto;
mod server;
mod stats;
#[cfg(test)]
mod tests;

pub use proto::{Reply, SocksError};
pub use server::{SocksConfig, SocksServer, serve};
pub use stats::{SocksCounters, SocksStats};

use nyx_node::ErrorKind;
use nyx_node::IsolationGroup;

/// The isolation group of a SOCKS client: without credentials, the node's default group
/// (shared with `connect` and the control API's pre-built circuits), otherwise
/// `socks5:` followed by the username and the password, each as lowercase hex and ended by
/// `:`. Hex never contains `:`, so distinct pairs always give distinct names (`("ab", "")`
/// and `("a", "b")` differ), and no pair gives the no-credentials group or a group an
/// embedding application names without the `socks5:` prefix.
pub fn isolation_group(credentials: Option<&proto::Credentials>) -> IsolationGroup {
    let Some(c) = credentials else {
        return IsolationGroup::default();
    };
    let mut name = String::with_capacity(9 + 2 * (c.username.len() + c.password.len()));
    name.push_str("socks5:");
    for field in [&c.username, &c.password] {
        for b in field.iter() {
            name.push(hex_digit(b >> 4));
            name.push(hex_digit(b & 0x0f));
        }
        name.push(':');
    }
    IsolationGroup::new(name)
}

fn hex_digit(n: u8) -> char {
    char::from(b"0123456789abcdef"[usize::from(n & 0x0f)])
}

/// The reply for a failed [`NodeHandle::connect_isolated`], by the error's
/// [`ErrorKind`]:
///
/// | kind | reply |
/// |---|---|
/// | `TargetRefused` (stream reset: the target refused) | 0x05 connection refused |
/// | `NotAllowed` (stream reset by exit policy, or no exit's policy allows the target) | 0x02 not allowed by ruleset |
/// | `TargetUnreachable` (stream reset: unreachable or unresolvable) | 0x04 host unreachable |
/// | `Timeout` (stream reset: timeout) | 0x06 TTL expired |
/// | `NoPath`, `CircuitFailed` (no path, every build attempt failed) | 0x03 network unreachable |
/// | anything else (bad target, circuit lost, resource limit, node stopped) | 0x01 general failure |
///
/// [`NodeHandle::connect_isolated`]: nyx_node::NodeHandle::connect_isolated
pub fn reply_for_error(error: &nyx_node::Error) -> Reply {
    match error.kind() {
        ErrorKind::TargetRefused => Reply::ConnectionRefused,
        ErrorKind::NotAllowed => Reply::NotAllowed,
        ErrorKind::TargetUnreachable => Reply::HostUnreachable,
        ErrorKind::Timeout => Reply::TtlExpired,
        ErrorKind::NoPath | ErrorKind::CircuitFailed => Reply::NetworkUnreachable,
        _ => Reply::GeneralFailure,
    }
}
