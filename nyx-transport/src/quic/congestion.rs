//! [`CircuitsOnly`]: a quinn congestion controller that leaves the path to the circuits.
//!
//! Every cell on a link belongs to a circuit whose two ends already run their own window
//! (nyx-overlay's Vegas, with FEC making random loss cheap). A second, loss-reacting
//! controller per link throttles DATAGRAM frames on random loss (they are never resent, so
//! the link gains nothing from holding them back), and quinn drops the oldest queued
//! datagrams when its send buffer fills: self-inflicted loss the circuits then repair. The
//! UDP transport has no link controller at all; this makes a QUIC link behave the same.
//! QUIC's own frames (handshake, ACK, the link's control chunks) still get loss recovery.

use std::any::Any;
use std::sync::Arc;
use std::time::Instant;

use quinn::congestion::{Controller, ControllerFactory};

/// The window quinn is given: far above any link's bandwidth-delay product (100 Mbit/s at
/// a 1 s round trip is 12.5 MB), so it never binds, and small enough that quinn's pacing
/// arithmetic stays in range.
pub const CIRCUITS_ONLY_WINDOW: u64 = 64 << 20;

/// The factory quinn builds a [`CircuitsOnly`] controller from for each link.
#[derive(Debug, Clone, Copy, Default)]
pub struct CircuitsOnlyConfig;

impl ControllerFactory for CircuitsOnlyConfig {
    fn build(self: Arc<Self>, _now: Instant, _current_mtu: u16) -> Box<dyn Controller> {
        Box::new(CircuitsOnly)
    }
}

/// A controller whose window is always [`CIRCUITS_ONLY_WINDOW`], whatever is lost.
#[derive(Debug, Clone, Copy)]
pub struct CircuitsOnly;

impl Controller for CircuitsOnly {
    fn on_congestion_event(
        &mut self,
        _now: Instant,
        _sent: Instant,
        _is_persistent_congestion: bool,
        _lost_bytes: u64,
    ) {
    }

    fn on_mtu_update(&mut self, _new_mtu: u16) {}

    fn window(&self) -> u64 {
        CIRCUITS_ONLY_WINDOW
    }

    fn clone_box(&self) -> Box<dyn Controller> {
        Box::new(*self)
    }

    fn initial_window(&self) -> u64 {
        CIRCUITS_ONLY_WINDOW
    }

    fn into_any(self: Box<Self>) -> Box<dyn Any> {
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loss_never_shrinks_the_window() {
        let now = Instant::now();
        let mut c = Arc::new(CircuitsOnlyConfig).build(now, 1200);
        assert_eq!(c.initial_window(), CIRCUITS_ONLY_WINDOW);
        for persistent in [false, true] {
            c.on_congestion_event(now, now, persistent, 1 << 20);
            assert_eq!(c.window(), CIRCUITS_ONLY_WINDOW);
        }
        c.on_mtu_update(1400);
        assert_eq!(c.clone_box().window(), CIRCUITS_ONLY_WINDOW);
    }
}
