//! # SOCKS entry: SOCKS5, SOCKS4 and SOCKS4a
//!
//! What it is for: letting unmodified applications use the network. An
//! [`EntryServer`](crate::entry::EntryServer) of [`Protocol::Socks`](crate::entry::Protocol)
//! listens on a local TCP port; each client speaks SOCKS5 (RFC 1928, with RFC 1929
//! username/password) or SOCKS4 (with the SOCKS4a host-name extension), told apart by its
//! first byte, asks to CONNECT to a target, and gets a [`NyxStream`] to it through a 3-hop
//! circuit of the node ([`NodeHandle::connect_isolated`]), after which bytes are relayed
//! both ways with half-close preserved. For example
//! `curl --socks5-hostname 127.0.0.1:9050 http://example.org/` (or `--socks4a`) lets the
//! exit resolve the name.
//!
//! * Only CONNECT is supported (SOCKS5 BIND and UDP ASSOCIATE get reply 0x07, SOCKS4 BIND
//!   gets 91); targets are IPv4, IPv6 (SOCKS5) or a host name the exit resolves.
//! * Isolation: the SOCKS5 username/password pair ([`isolation_group`]) or the SOCKS4 user
//!   id ([`socks4_isolation_group`]) selects the [`IsolationGroup`] (streams of different
//!   groups never share a circuit), and every client without credentials (or with an empty
//!   SOCKS4 user id) shares one group. Any credentials are accepted: they are a label, not
//!   a secret check.
//! * Failures are answered with the reply code of [`reply_for_error`] (SOCKS4: 91 for
//!   every failure; the tables are in `docs/socks.md`).
//! * Limits and privacy are the entry server's ([`crate::entry`]).
//!
//! [`proto`] (SOCKS5) and [`proto4`] (SOCKS4, 4a) are the sans-IO codecs (also what the
//! fuzz target feeds); only the handshake and the entry server do IO.
//!
//! [`NyxStream`]: nyx_node::NyxStream
//! [`NodeHandle::connect_isolated`]: nyx_node::NodeHandle::connect_isolated

mod handshake;
pub mod proto;
pub mod proto4;
#[cfg(test)]
mod tests;

pub(crate) use handshake::handshake;
pub use proto::{Reply, SocksError, TargetAddr};

use nyx_node::ErrorKind;
use nyx_node::IsolationGroup;

/// The isolation group of a SOCKS5 client: without credentials, the node's default group
/// (shared with `connect` and the control API's pre-built circuits), otherwise
/// `socks5:` followed by the username and the password, each as lowercase hex and ended by
/// `:`. Hex never contains `:`, so distinct pairs always give distinct names (`("ab", "")`
/// and `("a", "b")` differ), and no pair gives the no-credentials group or a group an
/// embedding application names without the `socks5:` prefix. An HTTP CONNECT client's
/// Basic credentials give the same group as the same pair through SOCKS5.
pub fn isolation_group(credentials: Option<&proto::Credentials>) -> IsolationGroup {
    match credentials {
        None => IsolationGroup::default(),
        Some(c) => hex_group("socks5:", &[&c.username, &c.password]),
    }
}

/// The isolation group of a SOCKS4 client: for an empty user id (what clients send when
/// given none), the node's default group, as for SOCKS5 without credentials (Tor too
/// treats an empty SOCKS4 user id as no credentials); otherwise `socks4:` followed by the
/// user id as lowercase hex and `:`. The prefix keeps SOCKS4 groups apart from every
/// SOCKS5 group: a user id never shares circuits with a username/password pair.
pub fn socks4_isolation_group(userid: &[u8]) -> IsolationGroup {
    if userid.is_empty() {
        return IsolationGroup::default();
    }
    hex_group("socks4:", &[userid])
}

/// `prefix`, then each field as lowercase hex followed by `:`.
fn hex_group(prefix: &str, fields: &[&[u8]]) -> IsolationGroup {
    let len: usize = fields.iter().map(|f| 2 * f.len() + 1).sum();
    let mut name = String::with_capacity(prefix.len() + len);
    name.push_str(prefix);
    for field in fields {
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
/// | `InvalidInput` (a target the node refuses as given: host:port over 255 bytes) | 0x08 address type not supported |
/// | anything else (circuit lost, resource limit, node stopped) | 0x01 general failure |
///
/// [`NodeHandle::connect_isolated`]: nyx_node::NodeHandle::connect_isolated
pub fn reply_for_error(error: &nyx_node::Error) -> Reply {
    match error.kind() {
        ErrorKind::TargetRefused => Reply::ConnectionRefused,
        ErrorKind::NotAllowed => Reply::NotAllowed,
        ErrorKind::TargetUnreachable => Reply::HostUnreachable,
        ErrorKind::Timeout => Reply::TtlExpired,
        ErrorKind::NoPath | ErrorKind::CircuitFailed => Reply::NetworkUnreachable,
        // A target the node refuses as given (a host:port too long for a stream's OPEN).
        ErrorKind::InvalidInput => Reply::AddressTypeNotSupported,
        _ => Reply::GeneralFailure,
    }
}
