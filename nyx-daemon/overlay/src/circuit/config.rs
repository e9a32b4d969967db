//! [`OverlayConfig`]: the overlay core's settings and defaults, and the [`LiveLimits`] that
//! can change while it runs.

use std::num::NonZeroU32;
use std::time::Duration;

use nyx_core::rate::Quota;

/// Settings of the overlay core. Defaults suit a public node; tests shorten the timers.
#[derive(Debug, Clone)]
pub struct OverlayConfig {
    /// Whether this node relays others' circuits. A client-only node (false) refuses every
    /// CREATE and CREATE_FAST with DESTROY, whatever link it came over. Default true.
    pub relay: bool,
    /// A circuit not built within this is abandoned. Default 10 s.
    pub build_timeout: Duration,
    /// The shortest wait before an unanswered EXTEND is resent. The wait follows the round
    /// trips the build has measured and doubles with each resend. Default 50 ms.
    pub extend_resend: Duration,
    /// A built circuit is destroyed this long after it was built. Default 10 min (Tor's
    /// `MaxCircuitDirtiness`).
    pub max_circuit_lifetime: Duration,
    /// [`Event::Expiring`](super::Event::Expiring) comes this long before the end of a circuit's lifetime, so its
    /// owner can build the replacement in time. Default 1 min.
    pub rotate_before: Duration,
    /// A relayed circuit that carries nothing for this long is destroyed. Default 15 min.
    pub relay_idle_timeout: Duration,
    /// A relayed circuit whose next hop is gone waits this long for its owner to destroy
    /// it after TRUNCATED, then destroys it itself. Default 5 s.
    pub truncated_grace: Duration,
    /// A link with circuits that has heard nothing for this long is probed. Default 5 s.
    pub keepalive: Duration,
    /// A probe unanswered for this long declares the link dead. Default 15 s.
    pub link_timeout: Duration,
    /// How often timers are checked. Default 250 ms.
    pub timer_granularity: Duration,
    /// Most circuits relayed at once. Default 8192.
    pub max_relay_circuits: usize,
    /// Most relayed circuits arriving over one link. Default 2048.
    pub max_circuits_per_link: usize,
    /// Cells queued for one link at most before drops. Default 1024.
    pub link_queue_cells: usize,
    /// Cells of one relayed circuit queued at most before drops. Default 256.
    pub circuit_queue_cells: usize,
    /// Cells a peer may send over its link. Default 200000/s (about 230 MB/s), burst 20000.
    pub link_cells: Quota,
    /// Cells on one relayed circuit. Default 100000/s (about 115 MB/s), burst 10000.
    pub circuit_cells: Quota,
    /// CREATEs a peer may send. Default 10/s, burst 20.
    pub circuit_creates: Quota,
    /// CREATEs (not CREATE_FASTs) answered from all peers together: each costs a hybrid
    /// decapsulation, and
    /// peers (client links) are free to mint, so this bounds the CPU CREATEs take. Default
    /// 500/s (a few percent of one core), burst 1000.
    pub all_creates: Quota,
    /// Peers each keyed limiter tracks at most. Default 65536.
    pub max_limited_keys: usize,
    /// CREATE messages remembered to refuse replays. Default 65536.
    pub replay_cache: usize,
}

impl Default for OverlayConfig {
    fn default() -> Self {
        let quota = |rate, burst| match (NonZeroU32::new(rate), NonZeroU32::new(burst)) {
            (Some(rate), Some(burst)) => Quota::new(rate, burst),
            _ => Quota::new(NonZeroU32::MIN, NonZeroU32::MIN),
        };
        OverlayConfig {
            relay: true,
            build_timeout: Duration::from_secs(10),
            extend_resend: Duration::from_millis(50),
            max_circuit_lifetime: Duration::from_secs(600),
            rotate_before: Duration::from_secs(60),
            relay_idle_timeout: Duration::from_secs(900),
            truncated_grace: Duration::from_secs(5),
            keepalive: Duration::from_secs(5),
            link_timeout: Duration::from_secs(15),
            timer_granularity: Duration::from_millis(250),
            max_relay_circuits: 8192,
            max_circuits_per_link: 2048,
            link_queue_cells: 1024,
            circuit_queue_cells: 256,
            link_cells: quota(200_000, 20_000),
            circuit_cells: quota(100_000, 10_000),
            circuit_creates: quota(10, 20),
            all_creates: quota(500, 1000),
            max_limited_keys: 65_536,
            replay_cache: 65_536,
        }
    }
}

/// The limits of an overlay that can change while it runs ([`Overlay::set_limits`](super::Overlay::set_limits)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LiveLimits {
    /// Cells a peer may send over its link.
    pub link_cells: Quota,
    /// Cells on one relayed circuit.
    pub circuit_cells: Quota,
    /// CREATEs a peer may send.
    pub circuit_creates: Quota,
    /// Most circuits relayed at once.
    pub max_relay_circuits: usize,
}
