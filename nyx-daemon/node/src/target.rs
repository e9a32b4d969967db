//! [`IntoTarget`]: what [`NodeHandle::connect`](crate::NodeHandle::connect) accepts as the
//! place a stream goes: `"host:port"`, `(host, port)`, a socket address or an
//! [`ExitTarget`].

use std::net::{IpAddr, SocketAddr};

use nyx_overlay::directory::ExitTarget;

use crate::Error;

/// A stream target: a host name (resolved by the exit) or an address, and a port in
/// 1..=65535.
///
/// ```
/// use nyx_node::IntoTarget;
/// assert_eq!(("example.org", 443).into_target().unwrap().to_string(), "example.org:443");
/// assert_eq!("[::1]:80".into_target().unwrap().to_string(), "[::1]:80");
/// assert_eq!(("::1", 80).into_target().unwrap().to_string(), "[::1]:80");
/// assert!("example.org".into_target().is_err());
/// assert!(("example.org", 0).into_target().is_err());
/// ```
pub trait IntoTarget {
    /// The target, or [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput).
    fn into_target(self) -> Result<ExitTarget, Error>;
}

fn bad(target: String) -> Error {
    nyx_overlay::Error::BadTarget {
        target,
        reason: "expected host:port with a port in 1..=65535",
    }
    .into()
}

impl IntoTarget for ExitTarget {
    fn into_target(self) -> Result<ExitTarget, Error> {
        Ok(self)
    }
}

impl IntoTarget for &str {
    fn into_target(self) -> Result<ExitTarget, Error> {
        self.parse().map_err(|_| bad(self.to_owned()))
    }
}

impl IntoTarget for String {
    fn into_target(self) -> Result<ExitTarget, Error> {
        self.as_str().into_target()
    }
}

impl IntoTarget for &String {
    fn into_target(self) -> Result<ExitTarget, Error> {
        self.as_str().into_target()
    }
}

impl IntoTarget for SocketAddr {
    fn into_target(self) -> Result<ExitTarget, Error> {
        if self.port() == 0 {
            return Err(bad(self.to_string()));
        }
        Ok(ExitTarget::Addr(self))
    }
}

impl IntoTarget for (IpAddr, u16) {
    fn into_target(self) -> Result<ExitTarget, Error> {
        SocketAddr::from(self).into_target()
    }
}

impl IntoTarget for (&str, u16) {
    fn into_target(self) -> Result<ExitTarget, Error> {
        let (host, port) = self;
        if let Ok(ip) = host.parse::<IpAddr>() {
            return (ip, port).into_target();
        }
        format!("{host}:{port}").into_target()
    }
}

impl IntoTarget for (String, u16) {
    fn into_target(self) -> Result<ExitTarget, Error> {
        (self.0.as_str(), self.1).into_target()
    }
}
