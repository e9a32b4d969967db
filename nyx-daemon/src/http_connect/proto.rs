//! The HTTP CONNECT request head and the proxy's responses, sans IO (RFC 9110 section 9.3.6,
//! RFC 9112 for the message syntax, RFC 7617 for Basic credentials).
//!
//! [`parse_request`] takes the bytes received so far and returns `Ok(Some((request,
//! consumed)))` once the head (request line, header lines, empty line) is complete,
//! `Ok(None)` while it is not, or `Err` with the status to answer. Bytes after `consumed`
//! are the application's (data it sent before hearing the answer), never part of the head.

use std::net::{IpAddr, SocketAddr};

use base64::Engine;
use base64::engine::general_purpose::STANDARD;

use crate::socks::proto::{Credentials, MAX_HOST_LEN, Reply, TargetAddr, host_name};

/// Longest request head accepted, the empty line included; a longer one gets 431.
pub const MAX_HEAD_LEN: usize = 8192;

/// The statuses this proxy answers with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Status {
    /// 200: the stream is open; bytes flow from the end of the response on.
    Established,
    /// 400: a malformed request line, target or header.
    BadRequest,
    /// 403: no exit's policy allows the target, or the exit refused it by policy.
    Forbidden,
    /// 405: a method other than CONNECT (answered with `Allow: CONNECT`).
    MethodNotAllowed,
    /// 431: a request head longer than [`MAX_HEAD_LEN`].
    HeadTooLarge,
    /// 502: the exit could not resolve or reach the target, the target refused, the circuit
    /// was lost, or another failure.
    BadGateway,
    /// 503: no circuit could be built.
    ServiceUnavailable,
    /// 504: a timeout (the exit's connect, or the proxy's connect timeout).
    GatewayTimeout,
    /// 505: an HTTP version other than 1.0 and 1.1.
    VersionNotSupported,
}

impl Status {
    /// Every status, in code order.
    pub const ALL: [Status; 9] = [
        Status::Established,
        Status::BadRequest,
        Status::Forbidden,
        Status::MethodNotAllowed,
        Status::HeadTooLarge,
        Status::BadGateway,
        Status::ServiceUnavailable,
        Status::GatewayTimeout,
        Status::VersionNotSupported,
    ];

    /// The status code and reason phrase.
    pub fn code_and_reason(self) -> (u16, &'static str) {
        match self {
            Status::Established => (200, "Connection established"),
            Status::BadRequest => (400, "Bad Request"),
            Status::Forbidden => (403, "Forbidden"),
            Status::MethodNotAllowed => (405, "Method Not Allowed"),
            Status::HeadTooLarge => (431, "Request Header Fields Too Large"),
            Status::BadGateway => (502, "Bad Gateway"),
            Status::ServiceUnavailable => (503, "Service Unavailable"),
            Status::GatewayTimeout => (504, "Gateway Timeout"),
            Status::VersionNotSupported => (505, "HTTP Version Not Supported"),
        }
    }
}

/// Why a request head was refused. The messages never contain a byte the client sent.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum HttpConnectError {
    /// No empty line within [`MAX_HEAD_LEN`] bytes.
    #[error("request head longer than 8192 bytes")]
    HeadTooLarge,
    /// The request line is not `METHOD TARGET HTTP/x.y`.
    #[error("bad request line: {reason}")]
    BadRequestLine {
        /// What is wrong.
        reason: &'static str,
    },
    /// An HTTP version other than 1.0 and 1.1.
    #[error("HTTP version not supported")]
    VersionNotSupported,
    /// A method other than CONNECT.
    #[error("method not allowed (only CONNECT)")]
    MethodNotAllowed,
    /// The target is not `host:port` with a host a target can have and a port from 1.
    #[error("bad target: {reason}")]
    BadTarget {
        /// What is wrong.
        reason: &'static str,
    },
    /// A header line without a name and a colon, or a folded one.
    #[error("bad header line: {reason}")]
    BadHeader {
        /// What is wrong.
        reason: &'static str,
    },
    /// A `Proxy-Authorization` header that is not one set of Basic credentials.
    #[error("bad Proxy-Authorization: {reason}")]
    BadAuthorization {
        /// What is wrong.
        reason: &'static str,
    },
}

impl HttpConnectError {
    /// The status a request refused with this error gets.
    pub fn status(&self) -> Status {
        match self {
            HttpConnectError::HeadTooLarge => Status::HeadTooLarge,
            HttpConnectError::VersionNotSupported => Status::VersionNotSupported,
            HttpConnectError::MethodNotAllowed => Status::MethodNotAllowed,
            _ => Status::BadRequest,
        }
    }

    /// The reason it is counted under, in SOCKS5's terms (the entry counters count
    /// failures by reason): an unsupported command for a method other than CONNECT, a
    /// general failure otherwise (as a malformed SOCKS5 request is).
    pub fn reply(&self) -> Reply {
        match self {
            HttpConnectError::MethodNotAllowed => Reply::CommandNotSupported,
            _ => Reply::GeneralFailure,
        }
    }
}

/// A CONNECT request (`Debug` shows the credentials' lengths only).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectRequest {
    /// The target (an IP address, or a host name for the exit to resolve).
    pub target: TargetAddr,
    /// Basic credentials from `Proxy-Authorization`, if given (they select the isolation
    /// group, as a SOCKS5 username/password pair does).
    pub credentials: Option<Credentials>,
}

/// Parse a request head: `CONNECT host:port HTTP/1.1` (or `HTTP/1.0`), header lines, an
/// empty line; lines end in CRLF or a bare LF. Only `Proxy-Authorization` is read among
/// the headers; the others are skipped. Decided once the empty line has come, or as soon
/// as more than [`MAX_HEAD_LEN`] bytes have without one.
pub fn parse_request(buf: &[u8]) -> Result<Option<(ConnectRequest, usize)>, HttpConnectError> {
    let Some(end) = head_end(buf) else {
        return match buf.len() > MAX_HEAD_LEN {
            true => Err(HttpConnectError::HeadTooLarge),
            false => Ok(None),
        };
    };
    if end > MAX_HEAD_LEN {
        return Err(HttpConnectError::HeadTooLarge);
    }
    let mut lines = buf[..end].split(|&b| b == b'\n').map(|line| match line {
        [rest @ .., b'\r'] => rest,
        line => line,
    });
    let target = request_line(lines.next().unwrap_or_default())?;
    let mut credentials = None;
    for line in lines.take_while(|line| !line.is_empty()) {
        let (name, value) = header(line)?;
        if name.eq_ignore_ascii_case(b"proxy-authorization") {
            if credentials.is_some() {
                return Err(HttpConnectError::BadAuthorization {
                    reason: "given twice",
                });
            }
            credentials = Some(basic_credentials(value)?);
        }
    }
    Ok(Some((
        ConnectRequest {
            target,
            credentials,
        },
        end,
    )))
}

/// The length of the head: up to and including the first empty line.
fn head_end(buf: &[u8]) -> Option<usize> {
    let mut start = 0;
    while let Some(at) = buf[start..].iter().position(|&b| b == b'\n') {
        let line = &buf[start..start + at];
        if line.is_empty() || line == b"\r" {
            return Some(start + at + 1);
        }
        start += at + 1;
    }
    None
}

fn request_line(line: &[u8]) -> Result<TargetAddr, HttpConnectError> {
    let bad = |reason| HttpConnectError::BadRequestLine { reason };
    let line = std::str::from_utf8(line).map_err(|_| bad("not ASCII"))?;
    let mut parts = line.split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(bad("not METHOD TARGET VERSION"));
    };
    match version {
        "HTTP/1.1" | "HTTP/1.0" => {}
        v if v.starts_with("HTTP/") => return Err(HttpConnectError::VersionNotSupported),
        _ => return Err(bad("no HTTP version")),
    }
    if method != "CONNECT" {
        return Err(HttpConnectError::MethodNotAllowed);
    }
    authority(target)
}

/// `host:port` (RFC 9110's authority-form): a host name, an IPv4 address or a bracketed
/// IPv6 address, and a decimal port from 1 to 65535.
fn authority(target: &str) -> Result<TargetAddr, HttpConnectError> {
    let bad = |reason| HttpConnectError::BadTarget { reason };
    let (host, port) = target.rsplit_once(':').ok_or(bad("no port"))?;
    let port: u16 = match port.bytes().all(|b| b.is_ascii_digit()) && port.len() <= 5 {
        true => port.parse().map_err(|_| bad("port out of range"))?,
        false => return Err(bad("port not a number")),
    };
    if port == 0 {
        return Err(bad("port 0"));
    }
    let bracketed = host.starts_with('[') && host.ends_with(']');
    if host.contains(':') && !bracketed {
        return Err(bad("an IPv6 address must be in brackets"));
    }
    if host.is_empty() || host.len() > MAX_HOST_LEN + 2 * usize::from(bracketed) {
        return Err(bad("host empty or longer than 253 bytes"));
    }
    let host = host_name(host.as_bytes()).map_err(|_| bad("characters a host name cannot hold"))?;
    Ok(match host.parse::<IpAddr>() {
        Ok(ip) => TargetAddr::Ip(SocketAddr::new(ip, port)),
        Err(_) => TargetAddr::Domain { host, port },
    })
}

/// A header line's name and value (optional whitespace around the value removed).
fn header(line: &[u8]) -> Result<(&[u8], &[u8]), HttpConnectError> {
    let bad = |reason| HttpConnectError::BadHeader { reason };
    if line.starts_with(b" ") || line.starts_with(b"\t") {
        return Err(bad("folded line"));
    }
    let at = line
        .iter()
        .position(|&b| b == b':')
        .ok_or(bad("no colon"))?;
    let (name, value) = (&line[..at], &line[at + 1..]);
    if name.is_empty() || !name.iter().all(|b| b.is_ascii_graphic()) {
        return Err(bad("bad name"));
    }
    Ok((name, value.trim_ascii()))
}

/// `Basic base64(user:pass)`; the user id ends at the first colon (RFC 7617).
fn basic_credentials(value: &[u8]) -> Result<Credentials, HttpConnectError> {
    let bad = |reason| HttpConnectError::BadAuthorization { reason };
    let at = value
        .iter()
        .position(|&b| b == b' ')
        .ok_or(bad("not Basic"))?;
    if !value[..at].eq_ignore_ascii_case(b"basic") {
        return Err(bad("not Basic"));
    }
    let decoded = STANDARD
        .decode(value[at + 1..].trim_ascii())
        .map_err(|_| bad("not base64"))?;
    let colon = decoded
        .iter()
        .position(|&b| b == b':')
        .ok_or(bad("no colon in the credentials"))?;
    Ok(Credentials {
        username: decoded[..colon].to_vec(),
        password: decoded[colon + 1..].to_vec(),
    })
}

/// A response head: `HTTP/1.1 CODE REASON`; an error also says `Content-Length: 0` and
/// `Connection: close` (the proxy closes after it), and 405 says `Allow: CONNECT`.
pub fn encode_response(status: Status) -> Vec<u8> {
    let (code, reason) = status.code_and_reason();
    let extra = match status {
        Status::Established => "",
        Status::MethodNotAllowed => "Allow: CONNECT\r\nContent-Length: 0\r\nConnection: close\r\n",
        _ => "Content-Length: 0\r\nConnection: close\r\n",
    };
    format!("HTTP/1.1 {code} {reason}\r\n{extra}\r\n").into_bytes()
}
