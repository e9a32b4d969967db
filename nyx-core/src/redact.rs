//! Scrubbing identifying details from logs.
//!
//! What it is for: a process-wide switch ([`set_sensitive_logging`], off by default) and a
//! wrapper, [`Redacted`], to put around anything that identifies who this node talks to
//! (socket addresses, node ids of peers) when it is logged. Its `Display` and `Debug` print
//! the value only while the switch is on, else `[scrubbed]`:
//!
//! ```
//! use std::net::SocketAddr;
//! use nyx_core::redact::Redacted;
//!
//! let addr: SocketAddr = "192.0.2.7:443".parse().unwrap();
//! // In a log call: tracing::debug!(peer = %Redacted(addr), "link up");
//! if !nyx_core::redact::sensitive_logging() {
//!     assert_eq!(Redacted(addr).to_string(), "[scrubbed]");
//! }
//! ```
//!
//! The daemon sets the switch once at start-up from `log.log_sensitive`.
//!
//! What it is not for: secrets. Keys, payloads and plaintext are never logged, switch or no
//! switch; do not wrap them in [`Redacted`], leave them out of log calls altogether.

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};

/// What a [`Redacted`] value prints while sensitive logging is off.
pub const SCRUBBED: &str = "[scrubbed]";

static SENSITIVE: AtomicBool = AtomicBool::new(false);

/// Turn sensitive logging on or off for the whole process (default off).
pub fn set_sensitive_logging(on: bool) {
    SENSITIVE.store(on, Ordering::Relaxed);
}

/// Whether [`Redacted`] values print themselves.
pub fn sensitive_logging() -> bool {
    SENSITIVE.load(Ordering::Relaxed)
}

/// A value that identifies a peer: formats as itself only while
/// [`sensitive_logging`] is on, else as [`SCRUBBED`].
///
/// The check happens when the value is formatted, so wrap the value itself, not a string
/// made from it.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Redacted<T>(pub T);

impl<T: fmt::Display> fmt::Display for Redacted<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if sensitive_logging() {
            self.0.fmt(f)
        } else {
            f.write_str(SCRUBBED)
        }
    }
}

impl<T: fmt::Debug> fmt::Debug for Redacted<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if sensitive_logging() {
            self.0.fmt(f)
        } else {
            f.write_str(SCRUBBED)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::NodeId;
    use std::net::SocketAddr;

    // The switch is global: this is the only test in the crate that flips it, and it puts
    // it back before asserting anything that could fail half-way.
    #[test]
    fn redacted_is_scrubbed_by_default_and_shown_when_on() {
        let addr: SocketAddr = "192.0.2.7:4433".parse().unwrap();
        let node = NodeId::from_bytes([0xab; 32]);
        let before = sensitive_logging();
        assert!(!before, "sensitive logging must default to off");
        let off = (
            Redacted(addr).to_string(),
            format!("{:?}", Redacted(addr)),
            Redacted(node).to_string(),
        );
        set_sensitive_logging(true);
        let on = (
            Redacted(addr).to_string(),
            format!("{:?}", Redacted(addr)),
            Redacted(node).to_string(),
        );
        set_sensitive_logging(before);
        let after = Redacted(addr).to_string();

        assert_eq!(off.0, SCRUBBED);
        assert_eq!(off.1, SCRUBBED);
        assert_eq!(off.2, SCRUBBED);
        assert_eq!(on.0, "192.0.2.7:4433");
        assert_eq!(on.1, "192.0.2.7:4433");
        assert_eq!(on.2, "ab".repeat(32));
        assert_eq!(after, SCRUBBED, "the switch was restored");
    }
}
