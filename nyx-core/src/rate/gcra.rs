//! The single-key GCRA limiter and its quota.

use std::fmt;
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::time::{Timestamp, duration_to_nanos};
use crate::{Error, Result};

/// How fast tokens come back and how many an idle limiter holds. See the [module
/// docs](crate::rate) for the exact admission rule.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Quota {
    /// Emission interval `T` in nanoseconds (>= 1).
    interval_ns: u64,
    /// Burst `b` (>= 1).
    burst: u32,
    /// `b·T`, the tolerance, precomputed (fits in u64 by construction).
    tau_ns: u64,
}

impl Quota {
    /// `per_second` tokens per second with a burst of the same size (one second's worth).
    ///
    /// The interval is rounded **up** to whole nanoseconds, so the limiter never admits more
    /// than the nominal rate; rates above 10⁹/s are therefore limited to 10⁹/s.
    pub fn per_second(per_second: u32) -> Result<Quota> {
        if per_second == 0 {
            return Err(invalid("rate must be at least 1 per second"));
        }
        let interval = 1_000_000_000u64.div_ceil(u64::from(per_second));
        Quota::from_parts(interval, per_second)
    }

    /// `per_second` tokens per second with a burst of `burst`: infallible (an interval of at
    /// most 1 s times a `u32` burst always fits), so it serves constants and defaults.
    pub const fn new(per_second: NonZeroU32, burst: NonZeroU32) -> Quota {
        let interval_ns = 1_000_000_000u64.div_ceil(per_second.get() as u64);
        Quota {
            interval_ns,
            burst: burst.get(),
            tau_ns: interval_ns * burst.get() as u64,
        }
    }

    /// One token every `interval`, burst 1. Use this for rates below one per second.
    pub fn per_interval(interval: Duration) -> Result<Quota> {
        let ns = duration_to_nanos(interval);
        if ns == 0 {
            return Err(invalid("interval must be at least 1 ns"));
        }
        Quota::from_parts(ns, 1)
    }

    /// `per_second` tokens per second (fractional rates allowed) with the given burst; the form
    /// used by configuration files.
    pub fn from_rate(per_second: f64, burst: u32) -> Result<Quota> {
        if !per_second.is_finite() || per_second <= 0.0 {
            return Err(invalid(format!(
                "rate must be a positive number, got {per_second}"
            )));
        }
        let interval = (1e9 / per_second).ceil();
        if interval >= u64::MAX as f64 {
            return Err(invalid(format!(
                "rate {per_second}/s is too small to represent"
            )));
        }
        // In range by the checks above; `as` saturates, it cannot wrap.
        Quota::from_parts((interval as u64).max(1), burst)
    }

    /// The same rate with a different burst.
    pub fn with_burst(self, burst: u32) -> Result<Quota> {
        Quota::from_parts(self.interval_ns, burst)
    }

    fn from_parts(interval_ns: u64, burst: u32) -> Result<Quota> {
        if burst == 0 {
            return Err(invalid("burst must be at least 1"));
        }
        let tau_ns = interval_ns
            .checked_mul(u64::from(burst))
            .ok_or_else(|| invalid("burst × interval exceeds 584 years"))?;
        Ok(Quota {
            interval_ns,
            burst,
            tau_ns,
        })
    }

    /// The emission interval `T`: the time one token takes to come back.
    pub fn interval(&self) -> Duration {
        Duration::from_nanos(self.interval_ns)
    }

    /// The burst `b`: how many tokens an idle limiter admits at once.
    pub fn burst(&self) -> u32 {
        self.burst
    }

    /// The GCRA decision for a stored `tat` (ns). `Ok(new_tat)` admits.
    #[inline]
    pub(crate) fn decide(&self, tat: u64, now: u64, n: u32) -> Result<u64, Denied> {
        // n <= burst is checked by callers, so n·T <= tau fits in u64.
        let cost = u64::from(n) * self.interval_ns;
        // At the end of the timeline refuse rather than saturate into a free pass.
        let Some(new_tat) = tat.max(now).checked_add(cost) else {
            return Err(Denied::RetryAt(Timestamp::MAX));
        };
        if new_tat <= now.saturating_add(self.tau_ns) {
            Ok(new_tat)
        } else {
            Err(Denied::RetryAt(Timestamp::from_nanos(
                new_tat - self.tau_ns,
            )))
        }
    }

    #[inline]
    pub(crate) fn check_size(&self, n: u32) -> Result<(), Denied> {
        if n > self.burst {
            Err(Denied::ExceedsBurst {
                requested: n,
                burst: self.burst,
            })
        } else {
            Ok(())
        }
    }
}

impl fmt::Debug for Quota {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Quota")
            .field("interval", &self.interval())
            .field("burst", &self.burst)
            .finish()
    }
}

fn invalid(reason: impl Into<String>) -> Error {
    Error::InvalidParameter {
        what: "rate quota",
        reason: reason.into(),
    }
}

/// Why a limiter refused a request. A refused request consumed nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Denied {
    /// Not enough tokens now; the same request would be admitted at this time if nothing else
    /// is admitted in between.
    #[error("retry at {0}")]
    RetryAt(Timestamp),
    /// The request asks for more tokens than the burst: it can never be admitted.
    #[error("{requested} tokens requested but the burst is {burst}")]
    ExceedsBurst {
        /// Tokens asked for.
        requested: u32,
        /// The quota's burst.
        burst: u32,
    },
    /// A keyed limiter has no room for another key: its table is full of keys that are not yet
    /// idle. The request is refused rather than letting memory grow.
    #[error("too many keys are being limited at once")]
    TableFull,
}

/// A GCRA rate limiter in one `AtomicU64`: lock-free, shareable by reference between threads,
/// no clock read inside. See the [module docs](crate::rate) for the semantics.
pub struct Limiter {
    quota: Quota,
    /// Theoretical arrival time in nanoseconds on the caller's timeline.
    tat: AtomicU64,
}

impl Limiter {
    /// A limiter that starts idle (a full burst available).
    pub fn new(quota: Quota) -> Self {
        Limiter {
            quota,
            tat: AtomicU64::new(0),
        }
    }

    /// The quota this limiter enforces.
    pub fn quota(&self) -> Quota {
        self.quota
    }

    /// Admit one token at `now`, or say when to retry.
    #[inline]
    pub fn check(&self, now: Timestamp) -> Result<(), Denied> {
        self.check_n(now, 1)
    }

    /// Admit `n` tokens at `now` all at once, or none of them.
    #[inline]
    pub fn check_n(&self, now: Timestamp, n: u32) -> Result<(), Denied> {
        self.quota.check_size(n)?;
        let now = now.as_nanos();
        let mut tat = self.tat.load(Ordering::Relaxed);
        loop {
            let new_tat = self.quota.decide(tat, now, n)?;
            // Relaxed suffices: the word publishes no other memory.
            match self
                .tat
                .compare_exchange_weak(tat, new_tat, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => return Ok(()),
                Err(actual) => tat = actual,
            }
        }
    }

    /// Whether the limiter holds its full burst at `now` (nothing to remember).
    pub fn is_idle(&self, now: Timestamp) -> bool {
        self.tat.load(Ordering::Relaxed) <= now.as_nanos()
    }
}

impl fmt::Debug for Limiter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Limiter")
            .field("quota", &self.quota)
            .field(
                "tat",
                &Timestamp::from_nanos(self.tat.load(Ordering::Relaxed)),
            )
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn ms(n: u64) -> Timestamp {
        Timestamp::from_millis(n)
    }

    #[test]
    fn const_quota_matches_the_checked_one() {
        let n = |v| NonZeroU32::new(v).unwrap();
        assert_eq!(
            Quota::new(n(20_000), n(2_000)),
            Quota::from_rate(20_000.0, 2_000).unwrap()
        );
        assert_eq!(Quota::new(n(3), n(3)), Quota::per_second(3).unwrap());
        let max = Quota::new(n(1), n(u32::MAX));
        assert_eq!(max.burst(), u32::MAX);
    }

    #[test]
    fn quota_constructors_validate() {
        assert!(Quota::per_second(0).is_err());
        assert!(Quota::per_interval(Duration::ZERO).is_err());
        assert!(Quota::from_rate(f64::NAN, 1).is_err());
        assert!(Quota::from_rate(-1.0, 1).is_err());
        assert!(Quota::from_rate(1e-300, 1).is_err());
        assert!(Quota::per_second(5).unwrap().with_burst(0).is_err());
        assert!(
            Quota::per_interval(Duration::from_secs(u64::MAX / 2))
                .unwrap()
                .with_burst(10)
                .is_err()
        );
        let q = Quota::from_rate(0.5, 2).unwrap();
        assert_eq!(q.interval(), Duration::from_secs(2));
        assert_eq!(q.burst(), 2);
        // Rounded up: 3/s is an interval of 333_333_334 ns, never faster than asked.
        assert_eq!(
            Quota::per_second(3).unwrap().interval(),
            Duration::from_nanos(333_333_334)
        );
    }

    #[test]
    fn burst_then_steady_rate() {
        let l = Limiter::new(Quota::per_second(10).unwrap().with_burst(3).unwrap());
        for _ in 0..3 {
            assert!(l.check(ms(0)).is_ok());
        }
        assert_eq!(l.check(ms(0)), Err(Denied::RetryAt(ms(100))));
        assert_eq!(l.check(ms(99)), Err(Denied::RetryAt(ms(100))));
        assert!(l.check(ms(100)).is_ok());
        assert!(l.check(ms(150)).is_err());
        assert!(l.check(ms(200)).is_ok());
        // Admissions at 100 and 200 ms each pushed the full-again time out by 100 ms.
        assert!(!l.is_idle(ms(499)));
        assert!(l.is_idle(ms(500)));
    }

    #[test]
    fn check_n_is_all_or_nothing() {
        let l = Limiter::new(Quota::per_second(10).unwrap().with_burst(5).unwrap());
        assert_eq!(
            l.check_n(ms(0), 6),
            Err(Denied::ExceedsBurst {
                requested: 6,
                burst: 5
            })
        );
        assert!(l.check_n(ms(0), 4).is_ok());
        assert_eq!(l.check_n(ms(0), 2), Err(Denied::RetryAt(ms(100))));
        // The refused request consumed nothing: one token is still there.
        assert!(l.check_n(ms(0), 1).is_ok());
        assert!(
            l.check_n(ms(0), 0).is_ok(),
            "zero tokens are always available"
        );
    }

    #[test]
    fn time_going_backwards_never_admits_extra() {
        let l = Limiter::new(Quota::per_second(1).unwrap().with_burst(1).unwrap());
        assert!(l.check(ms(5_000)).is_ok());
        assert!(l.check(ms(1_000)).is_err());
        let near_end = Timestamp::MAX.saturating_sub(Duration::from_secs(10));
        assert!(l.check(near_end).is_ok());
        assert!(l.check(near_end).is_err());
        // Where the arithmetic would overflow the limiter refuses instead of wrapping or
        // saturating into a free pass.
        assert_eq!(
            l.check(Timestamp::MAX),
            Err(Denied::RetryAt(Timestamp::MAX))
        );
    }

    proptest! {
        /// Over every window [t_i, t_j] of a random request sequence the limiter admits at most
        /// (t_j - t_i)/T + b tokens, and each `RetryAt` it gives is honest.
        #[test]
        fn never_admits_more_than_rate_times_window_plus_burst(
            interval_ms in 1u64..50,
            burst in 1u32..20,
            steps in proptest::collection::vec((0u64..40, 1u32..6), 1..200),
        ) {
            let quota = Quota::per_interval(Duration::from_millis(interval_ms)).unwrap().with_burst(burst).unwrap();
            let l = Limiter::new(quota);
            let mut now = 0u64;
            let mut admitted: Vec<(u64, u32)> = Vec::new();
            for (dt, n) in steps {
                now += dt;
                match l.check_n(ms(now), n) {
                    Ok(()) => admitted.push((now, n)),
                    Err(Denied::RetryAt(at)) => {
                        prop_assert!(at > ms(now));
                        // Honest hint: a clone of the state admits at `at`.
                        let probe = || Limiter { quota, tat: AtomicU64::new(l.tat.load(Ordering::Relaxed)) };
                        prop_assert!(probe().check_n(at, n).is_ok());
                        // ...and the earliest such time.
                        prop_assert!(probe().check_n(at.saturating_sub(Duration::from_nanos(1)), n).is_err());
                    }
                    Err(Denied::ExceedsBurst { .. }) => prop_assert!(n > burst),
                    Err(other) => prop_assert!(false, "unexpected {other:?}"),
                }
            }
            for i in 0..admitted.len() {
                let mut tokens = 0u64;
                for j in i..admitted.len() {
                    tokens += u64::from(admitted[j].1);
                    let window = admitted[j].0 - admitted[i].0;
                    prop_assert!(tokens * interval_ms <= window + u64::from(burst) * interval_ms,
                        "{tokens} tokens in {window} ms with T={interval_ms} ms, b={burst}");
                }
            }
        }
    }
}
