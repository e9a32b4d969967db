//! The SOCKS4 and SOCKS4a wire format, sans IO: one request, one reply (SOCKS4 has no
//! greeting). SOCKS4a is SOCKS4 whose address is `0.0.0.x` (`x` not 0), followed, after
//! the user id, by a host name for the proxy (here: the exit) to resolve.
//!
//! [`parse_request`] follows the convention of [`proto`](super::proto): `Ok(Some((request,
//! consumed)))` once the whole request is there, `Ok(None)` while it is incomplete, `Err` as
//! soon as the bytes cannot start a valid request. Bytes after `consumed` are the
//! application's (optimistic data).

use std::fmt;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};

use super::proto::{
    MAX_HOST_LEN, Parsed, Reply, SocksError, TargetAddr, connect_header, host_name,
};

/// The version byte of a SOCKS4 request.
pub const VERSION: u8 = 4;
/// Command byte of CONNECT, the only command supported (as in SOCKS5).
pub const CMD_CONNECT: u8 = super::proto::CMD_CONNECT;
/// Command byte of BIND (not supported: reply 91).
pub const CMD_BIND: u8 = 2;
/// Reply code: request granted.
pub const GRANTED: u8 = 90;
/// Reply code: request rejected or failed (every failure gets it).
pub const REJECTED: u8 = 91;
/// Longest user id accepted (SOCKS4 sets no limit; this is SOCKS5's for a username).
pub const MAX_USERID_LEN: usize = 255;
/// Length of every reply.
pub const REPLY_LEN: usize = 8;

/// A SOCKS4 or SOCKS4a CONNECT request.
#[derive(Clone, PartialEq, Eq)]
pub struct Request4 {
    /// The target: an IPv4 address (SOCKS4) or a host name (SOCKS4a).
    pub target: TargetAddr,
    /// The user id (0 to 255 bytes, without its terminating NUL); it selects the isolation
    /// group ([`socks4_isolation_group`](super::socks4_isolation_group)).
    pub userid: Vec<u8>,
}

impl fmt::Debug for Request4 {
    /// The target and the user id's length, not the user id.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Request4")
            .field("target", &self.target)
            .field("userid_len", &self.userid.len())
            .finish()
    }
}

/// Parse a request: `VN=4 CD DSTPORT(2) DSTIP(4) USERID NUL`, and for SOCKS4a (DSTIP
/// `0.0.0.x`, `x` ≠ 0) then `HOST NUL`. Only CONNECT is accepted, and not to `0.0.0.0`. Errors are reported as
/// soon as the offending byte arrives, and a user id or host name without its NUL is
/// refused once it is longer than allowed: a request is at most 518 bytes, and a caller
/// never buffers more than that plus one read.
pub fn parse_request(buf: &[u8]) -> Parsed<Request4> {
    if !connect_header(buf, VERSION)? {
        return Ok(None);
    }
    let Some(&[p0, p1]) = buf.get(2..4) else {
        return Ok(None);
    };
    let port = u16::from_be_bytes([p0, p1]);
    if port == 0 {
        return Err(SocksError::ZeroPort);
    }
    let Some(&[a, b, c, d]) = buf.get(4..8) else {
        return Ok(None);
    };
    if [a, b, c, d] == [0; 4] {
        // Neither an address to connect to nor SOCKS4a's marker (Tor refuses it too).
        return Err(SocksError::UnspecifiedAddress);
    }
    let Some((userid, after_user)) =
        nul_terminated(&buf[8..], MAX_USERID_LEN, SocksError::UserIdTooLong)?
    else {
        return Ok(None);
    };
    let ip = Ipv4Addr::new(a, b, c, d);
    let socks4a = [a, b, c] == [0, 0, 0] && d != 0;
    if !socks4a {
        let target = TargetAddr::Ip(SocketAddr::V4(SocketAddrV4::new(ip, port)));
        let request = Request4 {
            target,
            userid: userid.to_vec(),
        };
        return Ok(Some((request, 8 + after_user)));
    }
    let too_long = SocksError::BadHostName {
        reason: "longer than 253 bytes",
    };
    let rest = &buf[8 + after_user..];
    let Some((name, after_name)) = nul_terminated(rest, MAX_HOST_LEN, too_long)? else {
        return Ok(None);
    };
    if name.is_empty() {
        return Err(SocksError::BadHostName { reason: "empty" });
    }
    let request = Request4 {
        target: TargetAddr::Domain {
            host: host_name(name)?,
            port,
        },
        userid: userid.to_vec(),
    };
    Ok(Some((request, 8 + after_user + after_name)))
}

/// The bytes before the first NUL of `buf` and the length including the NUL; `None` while
/// no NUL has come and at most `max` bytes have; `too_long` once more have.
fn nul_terminated(
    buf: &[u8],
    max: usize,
    too_long: SocksError,
) -> Result<Option<(&[u8], usize)>, SocksError> {
    match buf.iter().position(|&b| b == 0) {
        Some(at) if at <= max => Ok(Some((&buf[..at], at + 1))),
        Some(_) => Err(too_long),
        None if buf.len() > max => Err(too_long),
        None => Ok(None),
    }
}

/// A reply: `VN=0 CD DSTPORT=0 DSTIP=0.0.0.0`, `CD` 90 for [`Reply::Succeeded`] and 91 for
/// every failure (SOCKS4 has no finer code; 92 and 93 are about identd, which this proxy
/// does not ask). The address is zero: the real socket is at the exit.
pub fn encode_reply(reply: Reply) -> [u8; REPLY_LEN] {
    let code = match reply {
        Reply::Succeeded => GRANTED,
        _ => REJECTED,
    };
    [0, code, 0, 0, 0, 0, 0, 0]
}
