//! The sd_notify protocol (systemd's `Type=notify` and `Type=notify-reload`): one datagram
//! per state change to the unix socket named by `$NOTIFY_SOCKET` (a path, or an abstract
//! name when it starts with `@`). The daemon sends `READY=1` once it serves,
//! `RELOADING=1` (with `MONOTONIC_USEC`) and `READY=1` around a SIGHUP reload,
//! `STOPPING=1` when it stops, and `WATCHDOG=1` at half of `$WATCHDOG_USEC`.

use std::os::linux::net::SocketAddrExt as _;
use std::os::unix::net::{SocketAddr, UnixDatagram};
use std::time::Duration;

use rustix::time::{ClockId, clock_gettime};

use crate::Error;

/// A connection to the service manager's notification socket.
#[derive(Debug)]
pub struct Notifier {
    socket: UnixDatagram,
    addr: SocketAddr,
    watchdog: Option<Duration>,
}

impl Notifier {
    /// The notifier `$NOTIFY_SOCKET` asks for, or `None` when it is unset or empty (not
    /// started by a service manager that listens).
    pub fn from_env() -> Result<Option<Self>, Error> {
        let Some(name) = std::env::var_os("NOTIFY_SOCKET").filter(|v| !v.is_empty()) else {
            return Ok(None);
        };
        let watchdog = watchdog_interval(
            std::env::var("WATCHDOG_USEC").ok().as_deref(),
            std::env::var("WATCHDOG_PID").ok().as_deref(),
            std::process::id(),
        );
        Self::new(&name.to_string_lossy(), watchdog).map(Some)
    }

    /// A notifier for the socket `name` (a path, or `@` and an abstract name) that pings
    /// the watchdog every `watchdog`.
    pub fn new(name: &str, watchdog: Option<Duration>) -> Result<Self, Error> {
        let fail = |source| Error::Notify {
            socket: name.to_owned(),
            source,
        };
        let addr = match name.strip_prefix('@') {
            Some(abstract_name) => SocketAddr::from_abstract_name(abstract_name.as_bytes()),
            None => SocketAddr::from_pathname(name),
        }
        .map_err(fail)?;
        let socket = UnixDatagram::unbound().map_err(fail)?;
        Ok(Notifier {
            socket,
            addr,
            watchdog,
        })
    }

    /// How often to send `WATCHDOG=1` (half of `$WATCHDOG_USEC`), if the watchdog is on.
    pub fn watchdog(&self) -> Option<Duration> {
        self.watchdog
    }

    /// `READY=1`: the node serves (also after a reload).
    pub fn ready(&self) {
        self.send("READY=1");
    }

    /// `RELOADING=1` with the monotonic time, as `Type=notify-reload` requires.
    pub fn reloading(&self) {
        self.send(&format!("RELOADING=1\nMONOTONIC_USEC={}", monotonic_usec()));
    }

    /// `STOPPING=1`: a graceful stop has begun.
    pub fn stopping(&self) {
        self.send("STOPPING=1");
    }

    /// `WATCHDOG=1`: the daemon's main loop is alive.
    pub fn watchdog_ping(&self) {
        self.send("WATCHDOG=1");
    }

    /// Send one state; a failure is logged (the service manager may be gone) and the
    /// daemon runs on.
    fn send(&self, state: &str) {
        if let Err(e) = self.socket.send_to_addr(state.as_bytes(), &self.addr) {
            tracing::warn!(error = %e, state, "cannot notify the service manager");
        }
    }
}

/// The watchdog ping interval: half of `usec` (`$WATCHDOG_USEC`), when it is a positive
/// number and `$WATCHDOG_PID` is unset or names this process (`pid`).
pub fn watchdog_interval(
    usec: Option<&str>,
    watchdog_pid: Option<&str>,
    pid: u32,
) -> Option<Duration> {
    if watchdog_pid.is_some_and(|target| target.trim().parse::<u32>().ok() != Some(pid)) {
        return None;
    }
    let usec = usec?.trim().parse::<u64>().ok().filter(|&u| u > 0)?;
    Some(Duration::from_micros(usec / 2)).filter(|d| !d.is_zero())
}

/// CLOCK_MONOTONIC in microseconds (what `MONOTONIC_USEC` carries).
fn monotonic_usec() -> u64 {
    let now = clock_gettime(ClockId::Monotonic);
    let secs = u64::try_from(now.tv_sec).unwrap_or(0);
    let micros = u64::try_from(now.tv_nsec / 1_000).unwrap_or(0);
    secs.saturating_mul(1_000_000).saturating_add(micros)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_watchdog_pings_at_half_its_timeout_for_this_process_only() {
        let half = Some(Duration::from_millis(1500));
        assert_eq!(watchdog_interval(Some("3000000"), None, 7), half);
        assert_eq!(watchdog_interval(Some("3000000"), Some("7"), 7), half);
        assert_eq!(watchdog_interval(Some("3000000"), Some("8"), 7), None);
        assert_eq!(watchdog_interval(Some("0"), None, 7), None);
        assert_eq!(watchdog_interval(Some("1"), None, 7), None);
        assert_eq!(watchdog_interval(Some("soon"), None, 7), None);
        assert_eq!(watchdog_interval(None, None, 7), None);
    }

    #[test]
    fn states_reach_an_abstract_socket_one_datagram_each() {
        let name = format!("nyx-sd-notify-test-{}", std::process::id());
        let addr = SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
        let manager = UnixDatagram::bind_addr(&addr).unwrap();
        manager
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        let notifier = Notifier::new(&format!("@{name}"), None).unwrap();
        let mut buf = [0u8; 256];
        let mut next = || {
            let n = manager.recv(&mut buf).unwrap();
            String::from_utf8(buf[..n].to_vec()).unwrap()
        };
        notifier.ready();
        assert_eq!(next(), "READY=1");
        notifier.reloading();
        let reloading = next();
        let usec = reloading
            .strip_prefix("RELOADING=1\nMONOTONIC_USEC=")
            .unwrap();
        assert!(usec.parse::<u64>().unwrap() > 0, "{reloading}");
        notifier.stopping();
        assert_eq!(next(), "STOPPING=1");
        notifier.watchdog_ping();
        assert_eq!(next(), "WATCHDOG=1");
        // A name that is no socket address at all is refused with its name.
        let err = Notifier::new(&"x".repeat(200), None).unwrap_err();
        assert!(matches!(err, Error::Notify { .. }), "{err}");
    }

    #[test]
    fn the_monotonic_clock_moves_forward() {
        let a = monotonic_usec();
        std::thread::sleep(Duration::from_millis(2));
        let b = monotonic_usec();
        assert!(a > 0 && b >= a + 1_000, "{a} then {b}");
    }
}
