//! # HTTP CONNECT entry (Tor's HTTPTunnelPort)
//!
//! What it is for: applications that can use an HTTP proxy but not SOCKS (browsers,
//! package managers, anything honouring `https_proxy`). An
//! [`EntryServer`](crate::entry::EntryServer) of
//! [`Protocol::HttpConnect`](crate::entry::Protocol) listens on a local TCP port; each
//! client sends `CONNECT host:port HTTP/1.1` (or 1.0), gets `HTTP/1.1 200 Connection
//! established` once a [`NyxStream`] to the target is open through a 3-hop circuit, and then
//! bytes are relayed both ways with half-close preserved, exactly as for SOCKS. For example
//! `curl --proxy http://127.0.0.1:9080 https://example.org/` (curl tunnels plain `http://`
//! only with `--proxytunnel`). The exit resolves host names.
//!
//! * Only CONNECT: any other method gets 405 (this is a tunnel, not a forwarding proxy,
//!   as Tor's HTTPTunnelPort is). A head longer than [`proto::MAX_HEAD_LEN`] gets 431, a
//!   malformed one 400, an HTTP version other than 1.0 and 1.1 505.
//! * Bytes the client sent after its head (before hearing the answer) are kept and sent
//!   once the stream is open.
//! * Isolation: `Proxy-Authorization: Basic` credentials select the isolation group exactly
//!   as the same username/password pair does through SOCKS5
//!   ([`crate::socks::isolation_group`]); without the header, the default
//!   group. Any credentials are accepted: they are a label, not a secret check.
//! * Failures are answered with the status of [`status_for`] (the table is in
//!   `docs/http-connect.md`).
//! * Limits and privacy are the entry server's ([`crate::entry`]).
//!
//! [`proto`] is the sans-IO codec (also what the fuzz target feeds).
//!
//! [`NyxStream`]: nyx_node::NyxStream

pub mod proto;
#[cfg(test)]
mod tests;

pub use proto::{HttpConnectError, Status};

use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::entry::{Accepted, Answer, HandshakeError, read_message};
use crate::socks::{Reply, isolation_group};

/// The status telling a client the outcome `reply` of its CONNECT (the reason, in SOCKS5's
/// terms, from [`reply_for_error`](crate::socks::reply_for_error)):
///
/// | reason | status |
/// |---|---|
/// | succeeded | 200 Connection established |
/// | 0x02 not allowed (exit policy) | 403 Forbidden |
/// | 0x03 network unreachable (no circuit) | 503 Service Unavailable |
/// | 0x06 TTL expired (a timeout) | 504 Gateway Timeout |
/// | 0x07 command not supported | 405 Method Not Allowed |
/// | 0x08 address type not supported | 400 Bad Request |
/// | 0x01 general failure, 0x04 host unreachable, 0x05 connection refused | 502 Bad Gateway |
pub fn status_for(reply: Reply) -> Status {
    match reply {
        Reply::Succeeded => Status::Established,
        Reply::NotAllowed => Status::Forbidden,
        Reply::NetworkUnreachable => Status::ServiceUnavailable,
        Reply::TtlExpired => Status::GatewayTimeout,
        Reply::CommandNotSupported => Status::MethodNotAllowed,
        Reply::AddressTypeNotSupported => Status::BadRequest,
        Reply::GeneralFailure | Reply::HostUnreachable | Reply::ConnectionRefused => {
            Status::BadGateway
        }
    }
}

/// Read a request head; answer a refused one with its status and close. Success is the
/// entry server's to answer, once the stream is open.
pub(crate) async fn handshake<S>(conn: &mut S) -> Result<Accepted, HandshakeError>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let mut buf = Vec::with_capacity(1024);
    let request = match read_message(conn, &mut buf, proto::parse_request).await? {
        Ok(request) => request,
        Err(error) => {
            let _ = conn
                .write_all(&proto::encode_response(error.status()))
                .await;
            let _ = conn.shutdown().await;
            return Err(HandshakeError::Protocol {
                reason: error.to_string(),
                replied: Some(error.reply()),
            });
        }
    };
    Ok(Accepted {
        target: request.target,
        group: isolation_group(request.credentials.as_ref()),
        early: buf,
        answer: Answer::Http,
    })
}

/// How long a refused client's further bytes are read and discarded after the answer.
const LINGER: Duration = Duration::from_secs(1);
/// How many of them, at most.
const MAX_DISCARD: usize = 64 * 1024;

/// After a refusal (answered, the write side shut down): read and discard what the client
/// still sends (a head too large, a body) until it closes, for at most [`LINGER`] and
/// [`MAX_DISCARD`] bytes. A close with unread bytes would reset the connection, and the
/// client might lose the answer. The entry server calls it once the refusal is counted,
/// outside the handshake timeout.
pub(crate) async fn drain_refused<S: AsyncRead + Unpin>(conn: &mut S) {
    let drain = async {
        let mut chunk = [0u8; 4096];
        let mut total = 0;
        while total < MAX_DISCARD {
            match conn.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => total += n,
            }
        }
    };
    let _ = tokio::time::timeout(LINGER, drain).await;
}
