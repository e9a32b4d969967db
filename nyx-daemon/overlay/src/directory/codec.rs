//! Byte-level pieces of the descriptor encoding: a bounds-checked reader, socket addresses and
//! exit policies. Every length is checked; nothing here panics on any input.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use super::DescriptorError;
use super::policy::{Action, AddrPattern, ExitPolicy, ExitRule, MAX_RULES, PortRange};

/// Address kind byte: no address.
const ADDR_NONE: u8 = 0;
/// Address kind byte: IPv4 (4 bytes) and a port.
const ADDR_V4: u8 = 4;
/// Address kind byte: IPv6 (16 bytes) and a port.
const ADDR_V6: u8 = 6;

/// Reads fields from the front of a byte slice.
pub(super) struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    pub(super) fn new(bytes: &'a [u8]) -> Self {
        Reader { bytes, pos: 0 }
    }

    /// Bytes consumed so far.
    pub(super) fn pos(&self) -> usize {
        self.pos
    }

    /// Bytes not consumed yet.
    pub(super) fn remaining(&self) -> usize {
        self.bytes.len() - self.pos
    }

    pub(super) fn take(
        &mut self,
        n: usize,
        field: &'static str,
    ) -> Result<&'a [u8], DescriptorError> {
        if self.remaining() < n {
            return Err(DescriptorError::Truncated {
                field,
                needed: n,
                remaining: self.remaining(),
            });
        }
        let out = &self.bytes[self.pos..self.pos + n];
        self.pos += n;
        Ok(out)
    }

    pub(super) fn array<const N: usize>(
        &mut self,
        field: &'static str,
    ) -> Result<[u8; N], DescriptorError> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N, field)?);
        Ok(out)
    }

    pub(super) fn u8(&mut self, field: &'static str) -> Result<u8, DescriptorError> {
        Ok(self.array::<1>(field)?[0])
    }

    pub(super) fn u16(&mut self, field: &'static str) -> Result<u16, DescriptorError> {
        Ok(u16::from_be_bytes(self.array(field)?))
    }

    pub(super) fn u32(&mut self, field: &'static str) -> Result<u32, DescriptorError> {
        Ok(u32::from_be_bytes(self.array(field)?))
    }

    pub(super) fn u64(&mut self, field: &'static str) -> Result<u64, DescriptorError> {
        Ok(u64::from_be_bytes(self.array(field)?))
    }
}

fn malformed(field: &'static str, reason: impl Into<String>) -> DescriptorError {
    DescriptorError::Malformed {
        field,
        reason: reason.into(),
    }
}

/// Append an optional address: kind byte, then the IP and a big-endian port.
pub(super) fn put_addr(out: &mut Vec<u8>, addr: Option<SocketAddr>) {
    match addr {
        None => out.push(ADDR_NONE),
        Some(SocketAddr::V4(a)) => {
            out.push(ADDR_V4);
            out.extend_from_slice(&a.ip().octets());
            out.extend_from_slice(&a.port().to_be_bytes());
        }
        Some(SocketAddr::V6(a)) => {
            out.push(ADDR_V6);
            out.extend_from_slice(&a.ip().octets());
            out.extend_from_slice(&a.port().to_be_bytes());
        }
    }
}

/// Read an optional address written by [`put_addr`]; refuses port 0 and unspecified IPs.
pub(super) fn get_addr(
    r: &mut Reader<'_>,
    field: &'static str,
) -> Result<Option<SocketAddr>, DescriptorError> {
    let ip = match r.u8(field)? {
        ADDR_NONE => return Ok(None),
        ADDR_V4 => IpAddr::V4(Ipv4Addr::from(r.array::<4>(field)?)),
        ADDR_V6 => IpAddr::V6(Ipv6Addr::from(r.array::<16>(field)?)),
        kind => return Err(malformed(field, format!("unknown address kind {kind}"))),
    };
    let addr = SocketAddr::new(ip, r.u16(field)?);
    check_addr(addr, field)?;
    Ok(Some(addr))
}

/// A relay address clients can connect to: a port and a specified IP.
pub(super) fn check_addr(addr: SocketAddr, field: &'static str) -> Result<(), DescriptorError> {
    if addr.port() == 0 || addr.ip().is_unspecified() {
        return Err(malformed(
            field,
            format!("{addr} is not reachable (port 0 or unspecified address)"),
        ));
    }
    Ok(())
}

/// Append a policy: rule count (u16), then per rule action, address kind, address and prefix,
/// first and last port.
pub(super) fn put_policy(out: &mut Vec<u8>, policy: &ExitPolicy) {
    let count = u16::try_from(policy.rules().len()).unwrap_or(u16::MAX);
    out.extend_from_slice(&count.to_be_bytes());
    for rule in policy.rules().iter().take(usize::from(count)) {
        out.push(match rule.action {
            Action::Reject => 0,
            Action::Accept => 1,
        });
        match rule.addr {
            AddrPattern::Any => out.push(ADDR_NONE),
            AddrPattern::V4 { addr, prefix } => {
                out.push(ADDR_V4);
                out.extend_from_slice(&addr.octets());
                out.push(prefix);
            }
            AddrPattern::V6 { addr, prefix } => {
                out.push(ADDR_V6);
                out.extend_from_slice(&addr.octets());
                out.push(prefix);
            }
        }
        out.extend_from_slice(&rule.ports.lo().to_be_bytes());
        out.extend_from_slice(&rule.ports.hi().to_be_bytes());
    }
}

/// Read a policy written by [`put_policy`].
pub(super) fn get_policy(r: &mut Reader<'_>) -> Result<ExitPolicy, DescriptorError> {
    const F: &str = "exit policy";
    let count = usize::from(r.u16(F)?);
    if count > MAX_RULES {
        return Err(malformed(F, format!("{count} rules, at most {MAX_RULES}")));
    }
    let mut rules = Vec::with_capacity(count);
    for _ in 0..count {
        let action = match r.u8(F)? {
            0 => Action::Reject,
            1 => Action::Accept,
            other => return Err(malformed(F, format!("unknown rule action {other}"))),
        };
        let addr = match r.u8(F)? {
            ADDR_NONE => AddrPattern::Any,
            ADDR_V4 => {
                let ip = Ipv4Addr::from(r.array::<4>(F)?);
                AddrPattern::network(IpAddr::V4(ip), r.u8(F)?)
                    .map_err(|e| malformed(F, e.to_string()))?
            }
            ADDR_V6 => {
                let ip = Ipv6Addr::from(r.array::<16>(F)?);
                AddrPattern::network(IpAddr::V6(ip), r.u8(F)?)
                    .map_err(|e| malformed(F, e.to_string()))?
            }
            kind => return Err(malformed(F, format!("unknown address kind {kind}"))),
        };
        let ports =
            PortRange::new(r.u16(F)?, r.u16(F)?).map_err(|e| malformed(F, e.to_string()))?;
        rules.push(ExitRule {
            action,
            addr,
            ports,
        });
    }
    ExitPolicy::new(rules).map_err(|e| malformed(F, e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policies_and_addresses_round_trip() {
        let policy: ExitPolicy = "reject 10.0.0.0/8:*, accept [2001:db8::]/32:80-443, accept *:*"
            .parse()
            .unwrap();
        let mut out = Vec::new();
        put_policy(&mut out, &policy);
        put_addr(&mut out, Some("[::1]:9000".parse().unwrap()));
        put_addr(&mut out, None);
        put_addr(&mut out, Some("127.0.0.2:1".parse().unwrap()));
        let mut r = Reader::new(&out);
        assert_eq!(get_policy(&mut r).unwrap(), policy);
        assert_eq!(
            get_addr(&mut r, "a").unwrap(),
            Some("[::1]:9000".parse().unwrap())
        );
        assert_eq!(get_addr(&mut r, "a").unwrap(), None);
        assert_eq!(
            get_addr(&mut r, "a").unwrap(),
            Some("127.0.0.2:1".parse().unwrap())
        );
        assert_eq!(r.remaining(), 0);
        for cut in 0..out.len() {
            let mut r = Reader::new(&out[..cut]);
            let ok = get_policy(&mut r).is_ok()
                && get_addr(&mut r, "a").is_ok()
                && get_addr(&mut r, "a").is_ok()
                && get_addr(&mut r, "a").is_ok();
            assert!(!ok, "cut {cut}");
        }
    }

    #[test]
    fn unreachable_addresses_and_bad_rules_are_malformed() {
        for bytes in [
            &[ADDR_V4, 127, 0, 0, 1, 0, 0][..],
            &[ADDR_V4, 0, 0, 0, 0, 0, 80][..],
            &[9][..],
        ] {
            let err = get_addr(&mut Reader::new(bytes), "udp address").unwrap_err();
            assert!(matches!(err, DescriptorError::Malformed { .. }), "{err}");
        }
        for bytes in [
            &[0, 1, 2, 0, 0, 1, 0, 1][..],
            &[0, 1, 1, ADDR_V4, 10, 0, 0, 1, 8, 0, 1, 0, 1][..],
            &[0, 1, 1, 0, 0, 0, 0, 1][..],
            &[1, 1][..],
        ] {
            let err = get_policy(&mut Reader::new(bytes)).unwrap_err();
            assert!(matches!(err, DescriptorError::Malformed { .. }), "{err}");
        }
    }
}
