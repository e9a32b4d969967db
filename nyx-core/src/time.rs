//! Time for sans-IO code: a monotonic [`Timestamp`] passed in by the caller, and a
//! [`CoarseClock`] that a driver ticks so hot paths never read the system clock.
//!
//! Protocol state machines in NyxNet never call `Instant::now()`. They take `now: Timestamp`
//! as an argument, which makes them deterministic under test (start at [`Timestamp::ZERO`] and
//! advance by hand) and cheap on the data path (one relaxed atomic load via [`CoarseClock::now`]).

use std::fmt;
use std::ops::{Add, AddAssign};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// A point on a monotonic timeline, in nanoseconds since an origin chosen by whoever
/// produces the timestamps (a [`CoarseClock`]'s creation, or zero in a simulation).
///
/// Timestamps from different origins must not be compared. 64 bits of nanoseconds cover
/// 584 years, so arithmetic saturates instead of wrapping and never panics.
///
/// ```
/// use nyx_core::Timestamp;
/// use std::time::Duration;
///
/// let start = Timestamp::ZERO;                      // a simulation starts here
/// let deadline = start + Duration::from_millis(250);
/// assert_eq!(deadline, Timestamp::from_millis(250));
/// assert_eq!(deadline.saturating_duration_since(start), Duration::from_millis(250));
/// assert_eq!(start.checked_duration_since(deadline), None); // never a panic
/// assert_eq!(deadline.to_string(), "0.250000000s");
/// ```
#[derive(Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timestamp(u64);

impl Timestamp {
    /// The origin of the timeline.
    pub const ZERO: Timestamp = Timestamp(0);
    /// The last representable instant; useful as "never".
    pub const MAX: Timestamp = Timestamp(u64::MAX);

    /// A timestamp `nanos` nanoseconds after the origin.
    pub const fn from_nanos(nanos: u64) -> Self {
        Timestamp(nanos)
    }

    /// A timestamp `millis` milliseconds after the origin (saturating).
    pub const fn from_millis(millis: u64) -> Self {
        Timestamp(millis.saturating_mul(1_000_000))
    }

    /// A timestamp `secs` seconds after the origin (saturating).
    pub const fn from_secs(secs: u64) -> Self {
        Timestamp(secs.saturating_mul(1_000_000_000))
    }

    /// Nanoseconds since the origin.
    pub const fn as_nanos(self) -> u64 {
        self.0
    }

    /// Time elapsed from `earlier` to `self`, or zero if `earlier` is later.
    pub const fn saturating_duration_since(self, earlier: Timestamp) -> Duration {
        Duration::from_nanos(self.0.saturating_sub(earlier.0))
    }

    /// Time elapsed from `earlier` to `self`, or `None` if `earlier` is later.
    pub fn checked_duration_since(self, earlier: Timestamp) -> Option<Duration> {
        self.0.checked_sub(earlier.0).map(Duration::from_nanos)
    }

    /// `self + d`, saturating at [`Timestamp::MAX`].
    pub fn saturating_add(self, d: Duration) -> Timestamp {
        Timestamp(self.0.saturating_add(duration_to_nanos(d)))
    }

    /// `self - d`, saturating at [`Timestamp::ZERO`].
    pub fn saturating_sub(self, d: Duration) -> Timestamp {
        Timestamp(self.0.saturating_sub(duration_to_nanos(d)))
    }
}

/// A [`Duration`] in nanoseconds, saturating at `u64::MAX` (584 years).
pub(crate) fn duration_to_nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

impl Add<Duration> for Timestamp {
    type Output = Timestamp;
    /// Saturating addition: never panics.
    fn add(self, rhs: Duration) -> Timestamp {
        self.saturating_add(rhs)
    }
}

impl AddAssign<Duration> for Timestamp {
    fn add_assign(&mut self, rhs: Duration) {
        *self = self.saturating_add(rhs);
    }
}

impl fmt::Debug for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{self}")
    }
}

impl fmt::Display for Timestamp {
    /// Seconds since the origin with nanosecond precision, e.g. `12.000000500s`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}.{:09}s",
            self.0 / 1_000_000_000,
            self.0 % 1_000_000_000
        )
    }
}

/// A clock that is read with one relaxed atomic load and advanced by a driver.
///
/// Each async driver owns one as its time line: it [`tick`](CoarseClock::tick)s it when it
/// wakes up and passes the reading to its sans-IO state machine, converts the machine's next
/// deadline back with [`instant_of`](CoarseClock::instant_of) for its timer, and code that
/// runs within the same wake-up reads [`now`](CoarseClock::now) (one relaxed load) instead of
/// the system clock. In NyxNet the node's driver, each circuit's stream endpoint, the UDP
/// transport and the fault shim do so. Readings never go backwards, and clones share the same
/// reading.
///
/// ```
/// use nyx_core::time::CoarseClock;
/// let clock = CoarseClock::new();
/// let a = clock.now();
/// std::thread::sleep(std::time::Duration::from_millis(2));
/// assert_eq!(clock.now(), a, "no tick, no change");
/// let b = clock.tick();
/// assert!(b > a);
/// assert_eq!(clock.now(), b);
/// ```
#[derive(Clone, Debug)]
pub struct CoarseClock {
    origin: Instant,
    nanos: Arc<AtomicU64>,
}

impl CoarseClock {
    /// A clock whose origin ([`Timestamp::ZERO`]) is now.
    pub fn new() -> Self {
        CoarseClock {
            origin: Instant::now(),
            nanos: Arc::new(AtomicU64::new(0)),
        }
    }

    /// The reading as of the last tick. Cheap: one relaxed load.
    #[inline]
    pub fn now(&self) -> Timestamp {
        Timestamp(self.nanos.load(Ordering::Relaxed))
    }

    /// Read the system's monotonic clock, publish the reading and return it.
    ///
    /// Concurrent ticks never move the published reading backwards.
    pub fn tick(&self) -> Timestamp {
        let now = self.timestamp_of(Instant::now());
        let prev = self.nanos.fetch_max(now.0, Ordering::Relaxed);
        Timestamp(prev.max(now.0))
    }

    /// The timestamp of `instant` on this clock's timeline (zero if it precedes the origin).
    pub fn timestamp_of(&self, instant: Instant) -> Timestamp {
        Timestamp(duration_to_nanos(
            instant.saturating_duration_since(self.origin),
        ))
    }

    /// The `Instant` at which this clock reads `ts` (for handing deadlines to a timer).
    pub fn instant_of(&self, ts: Timestamp) -> Instant {
        self.origin + Duration::from_nanos(ts.0)
    }
}

impl Default for CoarseClock {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arithmetic_saturates_instead_of_panicking() {
        assert_eq!(Timestamp::MAX + Duration::from_secs(1), Timestamp::MAX);
        assert_eq!(
            Timestamp::ZERO.saturating_sub(Duration::from_secs(1)),
            Timestamp::ZERO
        );
        assert_eq!(
            Timestamp::ZERO.checked_duration_since(Timestamp::from_nanos(1)),
            None
        );
        assert_eq!(
            Timestamp::from_secs(2).saturating_duration_since(Timestamp::from_millis(500)),
            Duration::from_millis(1500)
        );
        assert_eq!(Timestamp::from_secs(u64::MAX), Timestamp::MAX);
    }

    #[test]
    fn display_shows_seconds_with_nanoseconds() {
        assert_eq!(
            Timestamp::from_nanos(12_000_000_500).to_string(),
            "12.000000500s"
        );
        assert_eq!(format!("{:?}", Timestamp::ZERO), "0.000000000s");
    }

    #[test]
    fn coarse_clock_is_shared_between_clones_and_monotonic() {
        let clock = CoarseClock::new();
        let other = clock.clone();
        let t1 = clock.tick();
        assert_eq!(other.now(), t1);
        let t2 = other.tick();
        assert!(t2 >= t1);
        assert_eq!(clock.now(), t2);
        let deadline = t2 + Duration::from_millis(5);
        assert_eq!(clock.timestamp_of(clock.instant_of(deadline)), deadline);
    }
}
