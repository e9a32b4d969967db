//! Exit policies: which destinations a relay is willing to open streams to.
//!
//! A policy is an ordered list of rules; the first rule that matches a destination decides,
//! and a destination no rule matches is refused. The text form is Tor's:
//! `accept 127.0.0.0/8:1-65535, reject *:*` (rules separated by commas, an address pattern of
//! `*`, an IPv4 or bracketed IPv6 address, or either with a `/prefix`, and a port, a range
//! `lo-hi` or `*` for 1-65535). IPv4-mapped IPv6 destinations (`::ffff:a.b.c.d`) are matched
//! as the IPv4 address they reach.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::str::FromStr;

/// Most rules a policy may hold (text or binary).
pub const MAX_RULES: usize = 256;

/// A destination a client asks an exit to connect to.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ExitTarget {
    /// A socket address.
    Addr(SocketAddr),
    /// A host name the exit resolves itself.
    Host {
        /// The DNS name.
        name: String,
        /// The port.
        port: u16,
    },
}

impl fmt::Display for ExitTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ExitTarget::Addr(addr) => write!(f, "{addr}"),
            ExitTarget::Host { name, port } => write!(f, "{name}:{port}"),
        }
    }
}

impl std::str::FromStr for ExitTarget {
    type Err = PolicyError;

    /// `host:port`, `a.b.c.d:port` or `[v6]:port`; the port is 1..=65535 and a host name
    /// at most 253 printable characters without spaces.
    fn from_str(s: &str) -> Result<Self, PolicyError> {
        if let Ok(addr) = s.parse::<SocketAddr>() {
            if addr.port() == 0 {
                return Err(PolicyError::new(format!("{s:?}: port 0")));
            }
            return Ok(ExitTarget::Addr(addr));
        }
        let Some((name, port)) = s.rsplit_once(':') else {
            return Err(PolicyError::new(format!("{s:?}: expected host:port")));
        };
        let port: u16 = match port.parse() {
            Ok(p) if p > 0 => p,
            _ => return Err(PolicyError::new(format!("{s:?}: bad port"))),
        };
        let printable = |c: char| c.is_ascii_graphic() && c != '[' && c != ']' && c != ':';
        if name.is_empty() || name.len() > 253 || !name.chars().all(printable) {
            return Err(PolicyError::new(format!("{s:?}: bad host name")));
        }
        Ok(ExitTarget::Host {
            name: name.to_ascii_lowercase(),
            port,
        })
    }
}

/// Whether a rule lets matching destinations through.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Action {
    /// Open the stream.
    Accept,
    /// Refuse it.
    Reject,
}

/// The addresses a rule matches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AddrPattern {
    /// Every address (`*`).
    Any,
    /// An IPv4 network; no bits are set beyond the prefix.
    V4 {
        /// The network address.
        addr: Ipv4Addr,
        /// Prefix length, 0..=32.
        prefix: u8,
    },
    /// An IPv6 network; no bits are set beyond the prefix.
    V6 {
        /// The network address.
        addr: Ipv6Addr,
        /// Prefix length, 0..=128.
        prefix: u8,
    },
}

impl AddrPattern {
    /// A network pattern, refusing prefixes that are too long or addresses with host bits set.
    pub fn network(addr: IpAddr, prefix: u8) -> Result<Self, PolicyError> {
        let (max, masked) = match addr {
            IpAddr::V4(a) => (32, mask(u128::from(u32::from(a)), prefix, 32)),
            IpAddr::V6(a) => (128, mask(u128::from(a), prefix, 128)),
        };
        if prefix > max {
            return Err(PolicyError::new(format!(
                "{addr}/{prefix}: prefix longer than {max}"
            )));
        }
        let host_bits = match addr {
            IpAddr::V4(a) => u128::from(u32::from(a)) != masked,
            IpAddr::V6(a) => u128::from(a) != masked,
        };
        if host_bits {
            return Err(PolicyError::new(format!(
                "{addr}/{prefix}: bits are set beyond the /{prefix} prefix"
            )));
        }
        Ok(match addr {
            IpAddr::V4(addr) => AddrPattern::V4 { addr, prefix },
            IpAddr::V6(addr) => AddrPattern::V6 { addr, prefix },
        })
    }

    /// Whether `ip` is in the pattern (IPv4-mapped IPv6 addresses count as IPv4).
    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = canonical(ip);
        match (*self, ip) {
            (AddrPattern::Any, _) => true,
            (AddrPattern::V4 { addr, prefix }, IpAddr::V4(ip)) => {
                mask(u128::from(u32::from(ip)), prefix, 32) == u128::from(u32::from(addr))
            }
            (AddrPattern::V6 { addr, prefix }, IpAddr::V6(ip)) => {
                mask(u128::from(ip), prefix, 128) == u128::from(addr)
            }
            _ => false,
        }
    }
}

/// `ip` with an IPv4-mapped IPv6 address turned into the IPv4 address it reaches.
pub(crate) fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        IpAddr::V4(_) => ip,
    }
}

/// The top `prefix` bits of a `width`-bit value.
fn mask(value: u128, prefix: u8, width: u32) -> u128 {
    let prefix = u32::from(prefix).min(width);
    if prefix == 0 {
        return 0;
    }
    let all = if width == 128 {
        u128::MAX
    } else {
        (1u128 << width) - 1
    };
    let keep = all & !all.checked_shr(prefix).unwrap_or(0);
    value & keep
}

/// An inclusive port range within 1..=65535.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PortRange {
    lo: u16,
    hi: u16,
}

impl PortRange {
    /// Every port, 1-65535.
    pub const ALL: PortRange = PortRange { lo: 1, hi: 65535 };

    /// `lo..=hi`; refuses port 0 and empty ranges.
    pub fn new(lo: u16, hi: u16) -> Result<Self, PolicyError> {
        if lo == 0 || hi < lo {
            return Err(PolicyError::new(format!(
                "port range {lo}-{hi}: ports are 1-65535 and the range must not be empty"
            )));
        }
        Ok(PortRange { lo, hi })
    }

    /// The first port.
    pub fn lo(&self) -> u16 {
        self.lo
    }

    /// The last port.
    pub fn hi(&self) -> u16 {
        self.hi
    }

    /// Whether `port` is in the range.
    pub fn contains(&self, port: u16) -> bool {
        (self.lo..=self.hi).contains(&port)
    }
}

/// One rule of an [`ExitPolicy`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ExitRule {
    /// What happens to matching destinations.
    pub action: Action,
    /// The addresses matched.
    pub addr: AddrPattern,
    /// The ports matched.
    pub ports: PortRange,
}

/// An ordered exit policy: first match wins, no match rejects.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct ExitPolicy {
    rules: Vec<ExitRule>,
}

impl ExitPolicy {
    /// A policy from rules; at most [`MAX_RULES`].
    pub fn new(rules: Vec<ExitRule>) -> Result<Self, PolicyError> {
        if rules.len() > MAX_RULES {
            return Err(PolicyError::new(format!(
                "{} rules, at most {MAX_RULES} are allowed",
                rules.len()
            )));
        }
        Ok(ExitPolicy { rules })
    }

    /// No exit traffic at all (a middle-only relay): the empty policy.
    pub fn reject_all() -> Self {
        ExitPolicy { rules: Vec::new() }
    }

    /// Every destination: `accept *:*`.
    pub fn accept_all() -> Self {
        ExitPolicy {
            rules: vec![ExitRule {
                action: Action::Accept,
                addr: AddrPattern::Any,
                ports: PortRange::ALL,
            }],
        }
    }

    /// The default for local testnets: `accept 127.0.0.0/8:*, accept [::1]:*, reject *:*`.
    pub fn loopback_only() -> Self {
        let rule = |addr| ExitRule {
            action: Action::Accept,
            addr,
            ports: PortRange::ALL,
        };
        ExitPolicy {
            rules: vec![
                rule(AddrPattern::V4 {
                    addr: Ipv4Addr::new(127, 0, 0, 0),
                    prefix: 8,
                }),
                rule(AddrPattern::V6 {
                    addr: Ipv6Addr::LOCALHOST,
                    prefix: 128,
                }),
                ExitRule {
                    action: Action::Reject,
                    addr: AddrPattern::Any,
                    ports: PortRange::ALL,
                },
            ],
        }
    }

    /// The rules, in order.
    pub fn rules(&self) -> &[ExitRule] {
        &self.rules
    }

    /// Whether the policy refuses everything. An accept rule counts as dead when an earlier
    /// reject rule for every address covers all of its ports; a policy all of whose accept
    /// rules are dead (or that has none) rejects all.
    pub fn is_reject_all(&self) -> bool {
        self.rules.iter().enumerate().all(|(i, rule)| {
            rule.action == Action::Reject
                || self.rules[..i].iter().any(|earlier| {
                    earlier.action == Action::Reject
                        && earlier.addr == AddrPattern::Any
                        && earlier.ports.lo <= rule.ports.lo
                        && earlier.ports.hi >= rule.ports.hi
                })
        })
    }

    /// Whether the policy allows (or, for a host name, might allow) `target`.
    ///
    /// For an address the first rule matching address and port decides; none rejects. A host
    /// name is resolved later, at the exit, so the answer is whether the policy *might* allow
    /// it (Tor's rule): walking the rules that match the port, a rule for every address (`*`)
    /// decides, an accept rule for specific addresses answers "might allow", and a reject rule
    /// for specific addresses is skipped (the name may resolve elsewhere). A name that is an
    /// IP literal is treated as that address. The exit checks the resolved address again with
    /// [`allows_resolved`](Self::allows_resolved).
    pub fn allows(&self, target: &ExitTarget) -> bool {
        match target {
            ExitTarget::Addr(addr) => self.decide(addr.ip(), addr.port()),
            ExitTarget::Host { name, port } => {
                if let Ok(ip) = name.parse::<IpAddr>() {
                    return self.decide(ip, *port);
                }
                for rule in self.rules.iter().filter(|r| r.ports.contains(*port)) {
                    match (rule.addr, rule.action) {
                        (AddrPattern::Any, action) => return action == Action::Accept,
                        (_, Action::Accept) => return true,
                        (_, Action::Reject) => {}
                    }
                }
                false
            }
        }
    }

    /// Whether the policy allows a resolved address: `allows(&ExitTarget::Addr(addr))`.
    pub fn allows_resolved(&self, addr: SocketAddr) -> bool {
        self.allows(&ExitTarget::Addr(addr))
    }

    fn decide(&self, ip: IpAddr, port: u16) -> bool {
        self.rules
            .iter()
            .find(|r| r.ports.contains(port) && r.addr.contains(ip))
            .is_some_and(|r| r.action == Action::Accept)
    }
}

/// A policy text that could not be parsed, or a rule that cannot exist.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("exit policy: {message}")]
pub struct PolicyError {
    message: String,
}

impl PolicyError {
    fn new(message: String) -> Self {
        PolicyError { message }
    }
}

impl FromStr for ExitPolicy {
    type Err = PolicyError;

    /// Parse `accept 127.0.0.0/8:1-65535, reject *:*`. Empty (or blank) text is the empty
    /// policy, which rejects everything.
    fn from_str(text: &str) -> Result<Self, PolicyError> {
        if text.trim().is_empty() {
            return Ok(ExitPolicy::reject_all());
        }
        let rules = text
            .split(',')
            .enumerate()
            .map(|(i, entry)| {
                parse_rule(entry.trim())
                    .map_err(|e| PolicyError::new(format!("rule {}: {}", i + 1, e.message)))
            })
            .collect::<Result<Vec<_>, _>>()?;
        ExitPolicy::new(rules)
    }
}

fn parse_rule(entry: &str) -> Result<ExitRule, PolicyError> {
    let (action, rest) = entry.split_once(char::is_whitespace).ok_or_else(|| {
        PolicyError::new(format!("{entry:?}: expected \"accept|reject ADDR:PORTS\""))
    })?;
    let action = match action {
        "accept" => Action::Accept,
        "reject" => Action::Reject,
        other => {
            return Err(PolicyError::new(format!(
                "{other:?}: expected \"accept\" or \"reject\""
            )));
        }
    };
    let rest = rest.trim();
    let (addr, ports) = rest
        .rsplit_once(':')
        .ok_or_else(|| PolicyError::new(format!("{rest:?}: expected ADDR:PORTS")))?;
    Ok(ExitRule {
        action,
        addr: parse_addr(addr)?,
        ports: parse_ports(ports)?,
    })
}

fn parse_addr(text: &str) -> Result<AddrPattern, PolicyError> {
    if text == "*" {
        return Ok(AddrPattern::Any);
    }
    let (ip, prefix) = match text.split_once('/') {
        Some((ip, prefix)) => {
            let prefix = prefix
                .parse::<u8>()
                .map_err(|_| PolicyError::new(format!("{text:?}: bad prefix length")))?;
            (ip, Some(prefix))
        }
        None => (text, None),
    };
    let ip: IpAddr = if let Some(inner) = ip.strip_prefix('[').and_then(|i| i.strip_suffix(']')) {
        inner
            .parse::<Ipv6Addr>()
            .map(IpAddr::V6)
            .map_err(|_| PolicyError::new(format!("{text:?}: bad IPv6 address")))?
    } else {
        ip.parse::<Ipv4Addr>().map(IpAddr::V4).map_err(|_| {
            PolicyError::new(format!(
                "{text:?}: expected *, an IPv4 address or a [bracketed] IPv6 address"
            ))
        })?
    };
    let full = if ip.is_ipv4() { 32 } else { 128 };
    AddrPattern::network(ip, prefix.unwrap_or(full))
}

fn parse_ports(text: &str) -> Result<PortRange, PolicyError> {
    if text == "*" {
        return Ok(PortRange::ALL);
    }
    let port = |p: &str| {
        p.parse::<u16>()
            .map_err(|_| PolicyError::new(format!("{text:?}: expected a port, lo-hi or *")))
    };
    match text.split_once('-') {
        Some((lo, hi)) => PortRange::new(port(lo)?, port(hi)?),
        None => {
            let p = port(text)?;
            PortRange::new(p, p)
        }
    }
}

impl fmt::Display for PortRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if *self == PortRange::ALL {
            f.write_str("*")
        } else if self.lo == self.hi {
            write!(f, "{}", self.lo)
        } else {
            write!(f, "{}-{}", self.lo, self.hi)
        }
    }
}

impl fmt::Display for AddrPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            AddrPattern::Any => f.write_str("*"),
            AddrPattern::V4 { addr, prefix: 32 } => write!(f, "{addr}"),
            AddrPattern::V4 { addr, prefix } => write!(f, "{addr}/{prefix}"),
            AddrPattern::V6 { addr, prefix: 128 } => write!(f, "[{addr}]"),
            AddrPattern::V6 { addr, prefix } => write!(f, "[{addr}]/{prefix}"),
        }
    }
}

impl fmt::Display for ExitRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let action = match self.action {
            Action::Accept => "accept",
            Action::Reject => "reject",
        };
        write!(f, "{action} {}:{}", self.addr, self.ports)
    }
}

impl fmt::Display for ExitPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, rule) in self.rules.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{rule}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
