//! # Application entries: the server the SOCKS and HTTP CONNECT entries share
//!
//! What it is for: the part of a local proxy that does not depend on its protocol. An
//! [`EntryServer`] accepts TCP clients on one listener, runs the protocol's handshake
//! ([`Protocol::Socks`]: [`crate::socks`]; [`Protocol::HttpConnect`]:
//! [`crate::http_connect`]) under a timeout, opens a [`NyxStream`] to the requested target
//! in the requested isolation group ([`NodeHandle::connect_isolated`]), answers the client
//! in its protocol, and relays bytes both ways with half-close until both sides are done.
//!
//! * Limits ([`EntryConfig`]): a handshake must complete within the handshake timeout, the
//!   stream must open within the connect timeout, at most `max_connections` clients are
//!   served at once (more are closed at once).
//! * Failures: every connect error is reduced to a SOCKS5 [`Reply`] by
//!   [`reply_for_error`](crate::socks::reply_for_error), the reason each protocol then
//!   tells in its own words (a SOCKS5 reply code, SOCKS4's 91, an HTTP status). The
//!   counters ([`EntryStats`]) count failures by that reason, whatever the protocol.
//! * Privacy: nothing here logs a target, an address, a credential or a payload; logs and
//!   counters hold only counts and reasons.
//!
//! What it is not for: parsing. Each protocol's wire format is a sans-IO codec in its own
//! module; its handshake reads with this module's `read_message` and returns what the
//! client asked for.
//!
//! [`NyxStream`]: nyx_node::NyxStream
//! [`NodeHandle::connect_isolated`]: nyx_node::NodeHandle::connect_isolated

mod server;
mod stats;
#[cfg(test)]
pub(crate) mod testing;

pub use server::{EntryServer, serve};
pub use stats::{EntryCounters, EntryStats};

use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt};

use crate::Error;
use crate::socks::Reply;
use nyx_node::IsolationGroup;

/// The protocol an entry speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Protocol {
    /// SOCKS5, SOCKS4 and SOCKS4a on one port, told apart by the client's first byte.
    Socks,
    /// HTTP CONNECT (what Tor calls an HTTPTunnelPort).
    HttpConnect,
}

impl Protocol {
    /// `socks` or `http_connect` (in logs).
    pub fn as_str(self) -> &'static str {
        match self {
            Protocol::Socks => "socks",
            Protocol::HttpConnect => "http_connect",
        }
    }
}

/// How an entry server runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EntryConfig {
    /// A client must have sent a complete request within this time of connecting, or it is
    /// closed. Default 10 s.
    pub handshake_timeout: Duration,
    /// Building a circuit and opening the stream must finish within this time, or the
    /// client is told of a timeout (SOCKS5 0x06, SOCKS4 91, HTTP 504). Default 60 s.
    pub connect_timeout: Duration,
    /// Clients served at once; one more is accepted and closed at once. Default 1024.
    pub max_connections: usize,
}

impl Default for EntryConfig {
    fn default() -> Self {
        EntryConfig {
            handshake_timeout: Duration::from_secs(10),
            connect_timeout: Duration::from_secs(60),
            max_connections: 1024,
        }
    }
}

impl EntryConfig {
    /// Refuse settings that cannot work: a zero timeout or no connections at all.
    pub fn validate(&self) -> Result<(), Error> {
        let bad = |field, reason: &str| {
            Err(Error::EntryConfig {
                field,
                reason: reason.to_string(),
            })
        };
        if self.handshake_timeout.is_zero() {
            return bad("handshake_timeout", "must be more than zero");
        }
        if self.connect_timeout.is_zero() {
            return bad("connect_timeout", "must be more than zero");
        }
        if self.max_connections == 0 {
            return bad("max_connections", "must be at least 1");
        }
        Ok(())
    }
}

/// A completed handshake: where to go, in which group, and how to answer.
#[derive(Debug)]
pub(crate) struct Accepted {
    pub(crate) target: crate::socks::TargetAddr,
    pub(crate) group: IsolationGroup,
    /// Bytes the client sent after its request (optimistic data), for the stream.
    pub(crate) early: Vec<u8>,
    /// The protocol to answer in.
    pub(crate) answer: Answer,
}

/// The protocol a client is answered in (one entry may speak more than one).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Answer {
    Socks5,
    Socks4,
    Http,
}

impl Answer {
    /// The bytes telling the client `reply` (success, or the reason of a failure).
    pub(crate) fn encode(self, reply: Reply) -> Vec<u8> {
        match self {
            Answer::Socks5 => crate::socks::proto::encode_reply(reply).to_vec(),
            Answer::Socks4 => crate::socks::proto4::encode_reply(reply).to_vec(),
            Answer::Http => {
                crate::http_connect::proto::encode_response(crate::http_connect::status_for(reply))
            }
        }
    }
}

/// Why a handshake ended without a request.
#[derive(Debug)]
pub(crate) enum HandshakeError {
    /// The client broke the protocol (`reason` says how, never with its bytes); `replied`
    /// is the reason it was told, if it was answered.
    Protocol {
        reason: String,
        replied: Option<Reply>,
    },
    /// The client closed its connection, or it failed.
    Gone,
}

/// Read until `parse` has a whole message at the front of `buf`, and remove it. The buffer
/// never grows past the longest message plus one read, provided `parse` decides by then
/// (every parser here does: each refuses an input longer than its longest message).
pub(crate) async fn read_message<S, T, E>(
    conn: &mut S,
    buf: &mut Vec<u8>,
    parse: impl Fn(&[u8]) -> Result<Option<(T, usize)>, E>,
) -> Result<Result<T, E>, HandshakeError>
where
    S: AsyncRead + Unpin,
{
    loop {
        match parse(buf) {
            Ok(Some((value, used))) => {
                buf.drain(..used);
                return Ok(Ok(value));
            }
            Err(e) => return Ok(Err(e)),
            Ok(None) => {}
        }
        let mut chunk = [0u8; 512];
        match conn.read(&mut chunk).await {
            Ok(0) | Err(_) => return Err(HandshakeError::Gone),
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}
