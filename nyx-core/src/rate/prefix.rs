//! [`IpPrefix`]: the key for per-network limits.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::{Error, Result};

/// An IP network prefix such as `192.0.2.0/24` or `2001:db8::/48`, used as the key of
/// per-source limits so that one host cannot escape a limit by cycling through the addresses
/// of its subnet.
///
/// IPv4-mapped IPv6 addresses (`::ffff:a.b.c.d`, as a dual-stack socket reports IPv4 peers)
/// are treated as the IPv4 address they carry, so the IPv4 prefix length applies to them.
///
/// ```
/// use nyx_core::rate::IpPrefix;
/// let p = IpPrefix::of("192.0.2.77".parse().unwrap(), 24, 48);
/// assert_eq!(p.to_string(), "192.0.2.0/24");
/// assert_eq!(p, IpPrefix::of("::ffff:192.0.2.1".parse().unwrap(), 24, 48));
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct IpPrefix {
    network: IpAddr,
    len: u8,
}

impl IpPrefix {
    /// The prefix of length `len` containing `addr`; `len` is at most 32 for IPv4 and 128 for
    /// IPv6.
    pub fn new(addr: IpAddr, len: u8) -> Result<Self> {
        let addr = canonical(addr);
        let max = if addr.is_ipv4() { 32 } else { 128 };
        if len > max {
            return Err(Error::InvalidParameter {
                what: "ip prefix length",
                reason: format!("{len} is longer than the {max} bits of {addr}"),
            });
        }
        Ok(IpPrefix {
            network: mask(addr, len),
            len,
        })
    }

    /// The prefix containing `addr`, `v4_len` bits long for IPv4 and `v6_len` for IPv6; lengths
    /// beyond the address size are clamped.
    pub fn of(addr: IpAddr, v4_len: u8, v6_len: u8) -> Self {
        let addr = canonical(addr);
        let len = if addr.is_ipv4() {
            v4_len.min(32)
        } else {
            v6_len.min(128)
        };
        IpPrefix {
            network: mask(addr, len),
            len,
        }
    }

    /// The network address (host bits zero).
    pub fn network(&self) -> IpAddr {
        self.network
    }

    /// The prefix length in bits.
    pub fn prefix_len(&self) -> u8 {
        self.len
    }

    /// Whether `addr` lies within this prefix.
    pub fn contains(&self, addr: IpAddr) -> bool {
        let addr = canonical(addr);
        addr.is_ipv4() == self.network.is_ipv4() && mask(addr, self.len) == self.network
    }
}

fn canonical(addr: IpAddr) -> IpAddr {
    match addr {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(addr, IpAddr::V4),
        v4 => v4,
    }
}

fn mask(addr: IpAddr, len: u8) -> IpAddr {
    match addr {
        IpAddr::V4(a) => {
            let m = u32::MAX.checked_shl(32 - u32::from(len)).unwrap_or(0);
            IpAddr::V4(Ipv4Addr::from(u32::from(a) & m))
        }
        IpAddr::V6(a) => {
            let m = u128::MAX.checked_shl(128 - u32::from(len)).unwrap_or(0);
            IpAddr::V6(Ipv6Addr::from(u128::from(a) & m))
        }
    }
}

impl fmt::Display for IpPrefix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.network, self.len)
    }
}

impl fmt::Debug for IpPrefix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "IpPrefix({self})")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn masks_host_bits_and_checks_lengths() {
        assert_eq!(
            IpPrefix::new(ip("10.1.2.3"), 8).unwrap().to_string(),
            "10.0.0.0/8"
        );
        assert_eq!(
            IpPrefix::new(ip("10.1.2.3"), 0).unwrap().to_string(),
            "0.0.0.0/0"
        );
        assert_eq!(
            IpPrefix::new(ip("10.1.2.3"), 32).unwrap().to_string(),
            "10.1.2.3/32"
        );
        assert_eq!(
            IpPrefix::new(ip("2001:db8:1:2::5"), 48)
                .unwrap()
                .to_string(),
            "2001:db8:1::/48"
        );
        assert!(
            IpPrefix::new(ip("10.0.0.1"), 33)
                .unwrap_err()
                .to_string()
                .contains("33")
        );
        assert!(IpPrefix::new(ip("::1"), 129).is_err());
        assert_eq!(IpPrefix::of(ip("::1"), 24, 200).prefix_len(), 128);
    }

    #[test]
    fn contains_and_mapped_addresses() {
        let p = IpPrefix::of(ip("192.0.2.9"), 24, 64);
        assert!(p.contains(ip("192.0.2.200")));
        assert!(p.contains(ip("::ffff:192.0.2.1")));
        assert!(!p.contains(ip("192.0.3.1")));
        assert!(
            !p.contains(ip("c000:200::")),
            "an IPv6 address is never inside an IPv4 prefix"
        );
    }
}
