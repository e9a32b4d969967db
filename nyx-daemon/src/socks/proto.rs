//! The SOCKS5 wire format, sans IO: RFC 1928 (greeting, method selection, request, reply)
//! and RFC 1929 (username/password sub-negotiation).
//!
//! Every parser takes the bytes received so far and returns `Ok(Some((value, consumed)))`
//! once a whole message is there, `Ok(None)` while it is still incomplete (read more and
//! call again with the longer buffer), or `Err` as soon as the bytes cannot be the start of a
//! valid message. Bytes after `consumed` belong to the next message (or, after the request,
//! to the application: optimistic data).

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// The protocol version byte of every SOCKS5 message but the RFC 1929 ones.
pub const VERSION: u8 = 5;
/// The version byte of the RFC 1929 username/password sub-negotiation.
pub const AUTH_VERSION: u8 = 1;
/// Method byte: no authentication.
pub const METHOD_NO_AUTH: u8 = 0x00;
/// Method byte: username/password (RFC 1929).
pub const METHOD_USER_PASSWORD: u8 = 0x02;
/// Method byte answered when no offered method is acceptable.
pub const METHOD_NONE_ACCEPTABLE: u8 = 0xFF;
/// Command byte of CONNECT, the only command supported.
pub const CMD_CONNECT: u8 = 0x01;
/// Command byte of BIND (not supported).
pub const CMD_BIND: u8 = 0x02;
/// Command byte of UDP ASSOCIATE (not supported).
pub const CMD_UDP_ASSOCIATE: u8 = 0x03;
/// Address type: IPv4 (4 bytes).
pub const ATYP_IPV4: u8 = 0x01;
/// Address type: domain name (a length byte, then the name).
pub const ATYP_DOMAIN: u8 = 0x03;
/// Address type: IPv6 (16 bytes).
pub const ATYP_IPV6: u8 = 0x04;
/// Longest host name accepted (the limit of [`ExitTarget`](nyx_overlay::directory::ExitTarget);
/// the wire allows 255).
pub const MAX_HOST_LEN: usize = 253;
/// Length of every reply [`encode_reply`] makes (an IPv4 bound address).
pub const REPLY_LEN: usize = 10;

/// The REP field of a reply (RFC 1928 section 6).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Reply {
    /// 0x00: the stream is open.
    Succeeded,
    /// 0x01: general SOCKS server failure (also: a malformed request).
    GeneralFailure,
    /// 0x02: connection not allowed by ruleset (no exit's policy allows the target).
    NotAllowed,
    /// 0x03: network unreachable (no circuit could be built).
    NetworkUnreachable,
    /// 0x04: host unreachable (the exit could not resolve or reach the target).
    HostUnreachable,
    /// 0x05: connection refused by the target.
    ConnectionRefused,
    /// 0x06: TTL expired (used, as Tor does, for timeouts).
    TtlExpired,
    /// 0x07: command not supported (only CONNECT is).
    CommandNotSupported,
    /// 0x08: address type not supported.
    AddressTypeNotSupported,
}

impl Reply {
    /// Every reply, in code order.
    pub const ALL: [Reply; 9] = [
        Reply::Succeeded,
        Reply::GeneralFailure,
        Reply::NotAllowed,
        Reply::NetworkUnreachable,
        Reply::HostUnreachable,
        Reply::ConnectionRefused,
        Reply::TtlExpired,
        Reply::CommandNotSupported,
        Reply::AddressTypeNotSupported,
    ];

    /// The REP byte.
    pub fn code(self) -> u8 {
        match self {
            Reply::Succeeded => 0x00,
            Reply::GeneralFailure => 0x01,
            Reply::NotAllowed => 0x02,
            Reply::NetworkUnreachable => 0x03,
            Reply::HostUnreachable => 0x04,
            Reply::ConnectionRefused => 0x05,
            Reply::TtlExpired => 0x06,
            Reply::CommandNotSupported => 0x07,
            Reply::AddressTypeNotSupported => 0x08,
        }
    }
}

/// Why bytes from a SOCKS client (SOCKS5, or SOCKS4 and 4a: [`proto4`](super::proto4)) were
/// refused. The messages never contain the target, the credentials or any other byte the
/// client sent but the offending field's value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SocksError {
    /// A greeting or request whose version byte is not 5.
    #[error("version byte {got}, expected 5")]
    BadVersion {
        /// The byte received.
        got: u8,
    },
    /// A username/password sub-negotiation whose version byte is not 1.
    #[error("username/password version byte {got}, expected 1")]
    BadAuthVersion {
        /// The byte received.
        got: u8,
    },
    /// The client offered neither "no authentication" nor username/password.
    #[error("no acceptable authentication method offered")]
    NoAcceptableMethod,
    /// BIND, UDP ASSOCIATE or an unknown command.
    #[error("command {cmd:#04x} not supported (only CONNECT)")]
    UnsupportedCommand {
        /// The command byte.
        cmd: u8,
    },
    /// An address type other than IPv4, domain name or IPv6.
    #[error("address type {atyp:#04x} not supported")]
    UnsupportedAddressType {
        /// The ATYP byte.
        atyp: u8,
    },
    /// A domain name that is empty, too long, or holds characters a host name cannot.
    #[error("bad host name: {reason}")]
    BadHostName {
        /// What is wrong (never the name itself).
        reason: &'static str,
    },
    /// A request for port 0.
    #[error("port 0 requested")]
    ZeroPort,
    /// A SOCKS4 request for the address 0.0.0.0.
    #[error("SOCKS4 address 0.0.0.0 requested")]
    UnspecifiedAddress,
    /// A SOCKS4 user id longer than [`MAX_USERID_LEN`](super::proto4::MAX_USERID_LEN) bytes.
    #[error("SOCKS4 user id longer than 255 bytes")]
    UserIdTooLong,
}

impl SocksError {
    /// The reply a request refused with this error gets (greeting and sub-negotiation
    /// errors have no REP field: the server answers method 0xFF or auth status 1, or just
    /// closes).
    pub fn reply(&self) -> Reply {
        match self {
            SocksError::UnsupportedCommand { .. } => Reply::CommandNotSupported,
            SocksError::UnsupportedAddressType { .. } => Reply::AddressTypeNotSupported,
            _ => Reply::GeneralFailure,
        }
    }
}

/// A parse result: a value and the bytes it used, `None` if more bytes are needed.
pub type Parsed<T> = Result<Option<(T, usize)>, SocksError>;

/// The client's first message: the authentication methods it offers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Greeting {
    /// The method bytes, as offered (0 to 255 of them).
    pub methods: Vec<u8>,
}

/// The methods this server accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Method {
    /// 0x00: no authentication (one shared isolation group).
    NoAuth,
    /// 0x02: username/password (the pair selects the isolation group).
    UserPassword,
}

impl Method {
    /// The method byte.
    pub fn code(self) -> u8 {
        match self {
            Method::NoAuth => METHOD_NO_AUTH,
            Method::UserPassword => METHOD_USER_PASSWORD,
        }
    }
}

/// Parse a greeting: `VER=5 NMETHODS METHODS...`.
pub fn parse_greeting(buf: &[u8]) -> Parsed<Greeting> {
    let Some(&ver) = buf.first() else {
        return Ok(None);
    };
    if ver != VERSION {
        return Err(SocksError::BadVersion { got: ver });
    }
    let Some(&n) = buf.get(1) else {
        return Ok(None);
    };
    let end = 2 + usize::from(n);
    match buf.get(2..end) {
        Some(methods) => Ok(Some((
            Greeting {
                methods: methods.to_vec(),
            },
            end,
        ))),
        None => Ok(None),
    }
}

/// The method to use: username/password if offered (credentials select isolation), else
/// no authentication if offered, else `None` (answer [`METHOD_NONE_ACCEPTABLE`] and close).
pub fn choose_method(greeting: &Greeting) -> Option<Method> {
    if greeting.methods.contains(&METHOD_USER_PASSWORD) {
        Some(Method::UserPassword)
    } else if greeting.methods.contains(&METHOD_NO_AUTH) {
        Some(Method::NoAuth)
    } else {
        None
    }
}

/// The method-selection message: `VER=5 METHOD` (0xFF for `None`).
pub fn encode_method(choice: Option<Method>) -> [u8; 2] {
    [VERSION, choice.map_or(METHOD_NONE_ACCEPTABLE, Method::code)]
}

/// RFC 1929 credentials, as raw bytes (the RFC does not require text). `Debug` shows only
/// their lengths.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Credentials {
    /// The username (0 to 255 bytes).
    pub username: Vec<u8>,
    /// The password (0 to 255 bytes).
    pub password: Vec<u8>,
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Credentials")
            .field("username_len", &self.username.len())
            .field("password_len", &self.password.len())
            .finish()
    }
}

/// Parse the username/password sub-negotiation: `VER=1 ULEN UNAME PLEN PASSWD`. Empty
/// usernames and passwords are accepted.
pub fn parse_auth(buf: &[u8]) -> Parsed<Credentials> {
    let Some(&ver) = buf.first() else {
        return Ok(None);
    };
    if ver != AUTH_VERSION {
        return Err(SocksError::BadAuthVersion { got: ver });
    }
    let Some(&ulen) = buf.get(1) else {
        return Ok(None);
    };
    let user_end = 2 + usize::from(ulen);
    let Some(&plen) = buf.get(user_end) else {
        return Ok(None);
    };
    let end = user_end + 1 + usize::from(plen);
    let (Some(username), Some(password)) = (buf.get(2..user_end), buf.get(user_end + 1..end))
    else {
        return Ok(None);
    };
    let creds = Credentials {
        username: username.to_vec(),
        password: password.to_vec(),
    };
    Ok(Some((creds, end)))
}

/// The sub-negotiation status: `VER=1 STATUS` (0 success; anything else fails and the
/// server closes).
pub fn encode_auth_status(ok: bool) -> [u8; 2] {
    [AUTH_VERSION, if ok { 0 } else { 1 }]
}

/// Where a CONNECT request asks to go.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum TargetAddr {
    /// An IPv4 or IPv6 address (ATYP 1 or 4).
    Ip(SocketAddr),
    /// A host name for the exit to resolve (ATYP 3); checked to be 1 to 253 printable
    /// ASCII characters without `[`, `]` or `:`, or an IPv6 literal.
    Domain {
        /// The name.
        host: String,
        /// The port.
        port: u16,
    },
}

impl TargetAddr {
    /// The port.
    pub fn port(&self) -> u16 {
        match self {
            TargetAddr::Ip(a) => a.port(),
            TargetAddr::Domain { port, .. } => *port,
        }
    }
}

impl fmt::Display for TargetAddr {
    /// `1.2.3.4:port`, `[v6]:port` or `host:port`: the form
    /// [`ExitTarget`](nyx_overlay::directory::ExitTarget) parses.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TargetAddr::Ip(a) => write!(f, "{a}"),
            TargetAddr::Domain { host, port } if host.parse::<Ipv6Addr>().is_ok() => {
                write!(f, "[{host}]:{port}")
            }
            TargetAddr::Domain { host, port } => write!(f, "{host}:{port}"),
        }
    }
}

/// A CONNECT request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// The target.
    pub target: TargetAddr,
}

/// Parse a request: `VER=5 CMD RSV ATYP DST.ADDR DST.PORT`. Only CONNECT is accepted; the
/// reserved byte is ignored. Errors are reported as soon as the offending byte arrives.
pub fn parse_request(buf: &[u8]) -> Parsed<Request> {
    if !connect_header(buf, VERSION)? {
        return Ok(None);
    }
    let Some(&atyp) = buf.get(3) else {
        return Ok(None);
    };
    let (addr, rest) = match atyp {
        ATYP_IPV4 => match buf.get(4..8).and_then(|b| <[u8; 4]>::try_from(b).ok()) {
            Some(b) => (Addr::Ip(IpAddr::V4(Ipv4Addr::from(b))), 8),
            None => return Ok(None),
        },
        ATYP_IPV6 => match buf.get(4..20).and_then(|b| <[u8; 16]>::try_from(b).ok()) {
            Some(b) => (Addr::Ip(IpAddr::V6(Ipv6Addr::from(b))), 20),
            None => return Ok(None),
        },
        ATYP_DOMAIN => {
            let Some(&len) = buf.get(4) else {
                return Ok(None);
            };
            let end = 5 + usize::from(len);
            if len == 0 {
                return Err(SocksError::BadHostName { reason: "empty" });
            }
            if usize::from(len) > MAX_HOST_LEN {
                return Err(SocksError::BadHostName {
                    reason: "longer than 253 bytes",
                });
            }
            match buf.get(5..end) {
                Some(name) => (Addr::Domain(host_name(name)?), end),
                None => return Ok(None),
            }
        }
        atyp => return Err(SocksError::UnsupportedAddressType { atyp }),
    };
    let Some(port) = buf.get(rest..rest + 2) else {
        return Ok(None);
    };
    let port = u16::from_be_bytes([port[0], port[1]]);
    if port == 0 {
        return Err(SocksError::ZeroPort);
    }
    let target = match addr {
        Addr::Ip(ip) => TargetAddr::Ip(SocketAddr::new(ip, port)),
        Addr::Domain(host) => TargetAddr::Domain { host, port },
    };
    Ok(Some((Request { target }, rest + 2)))
}

/// Whether `buf` starts with `version` and CONNECT's command byte (1 in SOCKS5 and SOCKS4
/// alike): `false` while a byte is missing, an error as soon as one is wrong.
pub(crate) fn connect_header(buf: &[u8], version: u8) -> Result<bool, SocksError> {
    let Some(&ver) = buf.first() else {
        return Ok(false);
    };
    if ver != version {
        return Err(SocksError::BadVersion { got: ver });
    }
    let Some(&cmd) = buf.get(1) else {
        return Ok(false);
    };
    if cmd != CMD_CONNECT {
        return Err(SocksError::UnsupportedCommand { cmd });
    }
    Ok(true)
}

enum Addr {
    Ip(IpAddr),
    Domain(String),
}

/// A domain field (or an HTTP CONNECT host) as a host name `ExitTarget` accepts: printable ASCII without `[`, `]`
/// or `:` (an IPv6 literal, bare or bracketed, is allowed and stored bare).
pub(crate) fn host_name(name: &[u8]) -> Result<String, SocksError> {
    let text = std::str::from_utf8(name).map_err(|_| SocksError::BadHostName {
        reason: "not ASCII",
    })?;
    let bare = text
        .strip_prefix('[')
        .and_then(|t| t.strip_suffix(']'))
        .unwrap_or(text);
    if bare.parse::<Ipv6Addr>().is_ok() {
        return Ok(bare.to_string());
    }
    if !text.is_ascii() {
        return Err(SocksError::BadHostName {
            reason: "not ASCII",
        });
    }
    let printable = |c: char| c.is_ascii_graphic() && c != '[' && c != ']' && c != ':';
    if !text.chars().all(printable) {
        return Err(SocksError::BadHostName {
            reason: "characters a host name cannot hold",
        });
    }
    Ok(text.to_string())
}

/// A reply: `VER=5 REP RSV=0 ATYP=1 BND.ADDR=0.0.0.0 BND.PORT=0`. The bound address is
/// always zero: the real socket is at the exit, and its address is not this client's
/// business.
pub fn encode_reply(reply: Reply) -> [u8; REPLY_LEN] {
    [VERSION, reply.code(), 0, ATYP_IPV4, 0, 0, 0, 0, 0, 0]
}
