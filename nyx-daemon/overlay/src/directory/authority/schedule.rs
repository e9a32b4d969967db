//! An authority's configuration and its voting schedule: pure functions of the period length
//! (after Tor's dir-spec v3 voting schedule, shortened to fixed fractions of the period).
//!
//! For the period starting at `T` (a multiple of `period`, Unix seconds):
//!
//! ```text
//! T - period/2     probe every held relay not yet probed since T - period
//! T - period/4     vote: sign this authority's vote, send it to the other authorities
//! T - 3·period/16  fetch the votes of the authorities not heard from
//! T - period/8     compute the consensus from the votes held, sign it, send the signature
//!                  (and not before FETCH_TO_SIGN after the fetch step ran)
//! T                the consensus applies (valid_after); fresh until T + period,
//!                  valid until T + validity_periods·period
//! ```
//!
//! With `period` ≥ [`MIN_PERIOD`] each step is at least a second after the one before.

use nyx_core::NodeId;
use nyx_crypto::identity::IdentityPublic;

use super::AuthorityError;
use crate::directory::consensus::{MAX_AUTHORITIES, MAX_RELAYS, Period};

/// Shortest period an authority accepts, seconds: from 16 on, every step of the schedule
/// is at least a second after the one before (the fetch strictly before the signing).
pub const MIN_PERIOD: u64 = 16;

/// The consensus is computed at least this long after the fetch step ran (seconds), so that
/// the answers to the fetches, which a driver carries out asynchronously, arrive in time.
pub(super) const FETCH_TO_SIGN: u64 = 1;

/// How an authority runs. Defaults: see each field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuthorityConfig {
    /// Length of a period, seconds; periods start at multiples of it (Unix time). Default
    /// 3600; at least [`MIN_PERIOD`].
    pub period: u64,
    /// Every configured authority, this one included: who may vote and sign. At most
    /// [`MAX_AUTHORITIES`], no key twice.
    pub authorities: Vec<IdentityPublic>,
    /// A consensus is valid for this many periods from its start, so that clients survive
    /// missed periods. Default 3; at least 1.
    pub validity_periods: u64,
    /// Seconds of continuous reachability before a relay is voted Stable. Default 86 400.
    pub stable_after: u64,
    /// Seconds of continuous reachability before a relay is voted Guard (it must be Stable
    /// too). Default 8 days.
    pub guard_after: u64,
    /// Most relays held. Default 65 536 ([`MAX_RELAYS`], the most a vote lists); 1 to that.
    pub max_descriptors: usize,
    /// Most held relays without a successful probe yet (a new relay beyond is refused as
    /// busy). Default 1024; at least 1.
    pub max_unprobed: usize,
    /// Most relays held at one IP address (Tor's `AuthDirMaxServersPerAddr`). Default 2;
    /// at least 1.
    pub max_relays_per_address: usize,
}

impl AuthorityConfig {
    /// The defaults, with these `authorities`.
    pub fn new(authorities: Vec<IdentityPublic>) -> Self {
        AuthorityConfig {
            period: 3600,
            authorities,
            validity_periods: 3,
            stable_after: 86_400,
            guard_after: 8 * 86_400,
            max_descriptors: MAX_RELAYS,
            max_unprobed: 1024,
            max_relays_per_address: 2,
        }
    }

    /// Refuse settings that cannot work for the authority `me`.
    pub fn check(&self, me: NodeId) -> Result<(), AuthorityError> {
        let bad = |reason: String| Err(AuthorityError::Config { reason });
        if self.period < MIN_PERIOD {
            return bad(format!(
                "period of {} s is shorter than {MIN_PERIOD} s",
                self.period
            ));
        }
        if self.validity_periods == 0 {
            return bad("validity_periods must be at least 1".into());
        }
        if self
            .period
            .checked_mul(self.validity_periods.saturating_add(1))
            .is_none()
        {
            return bad("period × validity_periods overflows".into());
        }
        if self.max_descriptors == 0 || self.max_descriptors > MAX_RELAYS {
            return bad(format!(
                "max_descriptors {} is not between 1 and {MAX_RELAYS}",
                self.max_descriptors
            ));
        }
        if self.max_unprobed == 0 || self.max_relays_per_address == 0 {
            return bad("max_unprobed and max_relays_per_address must be at least 1".into());
        }
        let n = self.authorities.len();
        if n == 0 || n > MAX_AUTHORITIES {
            return bad(format!("{n} authorities, must be 1 to {MAX_AUTHORITIES}"));
        }
        let ids: Vec<NodeId> = self.authorities.iter().map(|a| a.node_id()).collect();
        if let Some((i, id)) = ids
            .iter()
            .enumerate()
            .find(|(i, id)| ids[..*i].contains(id))
        {
            return bad(format!("authority {id} listed twice (entry {})", i + 1));
        }
        if !ids.contains(&me) {
            return bad(format!(
                "this authority ({me}) is not in the authority list"
            ));
        }
        Ok(())
    }

    /// The schedule these settings make.
    pub(super) fn schedule(&self) -> Schedule {
        Schedule {
            period: self.period,
            validity_periods: self.validity_periods,
        }
    }
}

/// The times of one authority's schedule (a checked config: period ≥ [`MIN_PERIOD`] and no
/// overflow for realistic times; the arithmetic saturates otherwise).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Schedule {
    pub(super) period: u64,
    validity_periods: u64,
}

/// The steps of one period's round, in the order they run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Step {
    Probe,
    Vote,
    Fetch,
    Sign,
    Done,
}

impl Schedule {
    /// The first period start after `now` (the period whose round runs at `now`).
    pub(super) fn upcoming(self, now: u64) -> u64 {
        (now / self.period)
            .saturating_add(1)
            .saturating_mul(self.period)
    }

    /// When `step` of the round for the period starting at `t` runs (`None` for Done).
    pub(super) fn at(self, t: u64, step: Step) -> Option<u64> {
        let p = self.period;
        let before = match step {
            Step::Probe => p / 2,
            Step::Vote => p / 4,
            Step::Fetch => p.saturating_mul(3) / 16,
            Step::Sign => p / 8,
            Step::Done => return None,
        };
        Some(t.saturating_sub(before))
    }

    /// The period starting at `t`.
    pub(super) fn period(self, t: u64) -> Period {
        Period {
            valid_after: t,
            fresh_until: t.saturating_add(self.period),
            valid_until: t.saturating_add(self.period.saturating_mul(self.validity_periods)),
        }
    }

    /// When `step` of the round for the period starting at `t` is due, the fetch step
    /// having run at `fetched_at`: its time, and for Sign also [`FETCH_TO_SIGN`] after the
    /// fetch (`None` for Done).
    pub(super) fn due(self, t: u64, step: Step, fetched_at: Option<u64>) -> Option<u64> {
        let at = self.at(t, step)?;
        match (step, fetched_at) {
            (Step::Sign, Some(f)) => Some(at.max(f.saturating_add(FETCH_TO_SIGN))),
            _ => Some(at),
        }
    }

    /// The first period an authority started at `now` votes for: the first whose vote time
    /// is at least `period/2` after `now`, so that every relay, which uploads its descriptor
    /// every half period, could upload it (and be probed) before that vote. An authority
    /// never votes late.
    pub(super) fn first_round(self, now: u64) -> u64 {
        let p = self.period;
        // Vote time t - p/4 ≥ now + p/2: the first period start at or after this.
        let earliest = now.saturating_add(p / 2).saturating_add(p / 4);
        earliest.div_ceil(p).saturating_mul(p)
    }
}

#[cfg(test)]
mod tests {
    use nyx_crypto::identity::IdentityKey;
    use proptest::prelude::*;

    use super::*;

    fn keys(n: u8) -> Vec<IdentityPublic> {
        (0..n)
            .map(|i| IdentityKey::from_seed(&[i; 32]).public())
            .collect()
    }

    #[test]
    fn an_hour_long_period_has_the_documented_times() {
        let s = AuthorityConfig::new(keys(1)).schedule();
        let t = 1_800_000_000 / 3600 * 3600 + 3600;
        assert_eq!(s.upcoming(t - 1), t);
        assert_eq!(s.upcoming(t), t + 3600, "at T the round for T is over");
        let times: Vec<u64> = [Step::Probe, Step::Vote, Step::Fetch, Step::Sign]
            .iter()
            .filter_map(|&step| s.at(t, step))
            .map(|at| t - at)
            .collect();
        assert_eq!(times, [1800, 900, 675, 450]);
        assert_eq!(s.at(t, Step::Done), None);
        let p = s.period(t);
        assert_eq!((p.fresh_until, p.valid_until), (t + 3600, t + 3 * 3600));
        assert_eq!(
            s.first_round(t - 2700),
            t,
            "started half a period before the vote"
        );
        assert_eq!(s.first_round(t - 2699), t + 3600, "less: the next period");
        assert_eq!(
            s.first_round(t - 3600),
            t,
            "started at the period start before"
        );
        assert_eq!(s.due(t, Step::Sign, None), Some(t - 450));
        assert_eq!(s.due(t, Step::Sign, Some(t - 675)), Some(t - 450));
        assert_eq!(
            s.due(t, Step::Sign, Some(t - 450)),
            Some(t - 449),
            "a fetch run late"
        );
        assert_eq!(s.due(t, Step::Fetch, Some(t - 450)), Some(t - 675));
    }

    #[test]
    fn configs_that_cannot_work_are_refused() {
        let me = IdentityKey::from_seed(&[0; 32]).node_id();
        let check = |f: &dyn Fn(&mut AuthorityConfig)| {
            let mut c = AuthorityConfig::new(keys(3));
            f(&mut c);
            c.check(me)
        };
        assert_eq!(check(&|_| {}), Ok(()));
        assert_eq!(check(&|c| c.period = MIN_PERIOD), Ok(()));
        let refused = [
            check(&|c| c.period = MIN_PERIOD - 1),
            check(&|c| c.validity_periods = 0),
            check(&|c| c.period = u64::MAX / 2),
            check(&|c| c.max_descriptors = 0),
            check(&|c| c.max_descriptors = MAX_RELAYS + 1),
            check(&|c| c.max_unprobed = 0),
            check(&|c| c.max_relays_per_address = 0),
            check(&|c| c.authorities.clear()),
            check(&|c| c.authorities = keys(MAX_AUTHORITIES as u8 + 1)),
            check(&|c| c.authorities.push(c.authorities[1])),
            check(&|c| {
                c.authorities.remove(0);
            }),
        ];
        for (i, r) in refused.into_iter().enumerate() {
            assert!(
                matches!(r, Err(AuthorityError::Config { .. })),
                "case {i}: {r:?}"
            );
        }
        let dup = check(&|c| c.authorities.push(c.authorities[1])).unwrap_err();
        assert!(dup.to_string().contains("listed twice"), "{dup}");
        let absent = check(&|c| {
            c.authorities.remove(0);
        })
        .unwrap_err();
        assert!(
            absent.to_string().contains("not in the authority list"),
            "{absent}"
        );
    }

    proptest! {
        #[test]
        fn steps_come_in_order_inside_the_round(period in MIN_PERIOD..1_000_000, now in 0u64..1 << 40) {
            let s = Schedule { period, validity_periods: 3 };
            let t = s.upcoming(now);
            prop_assert!(t > now && t.is_multiple_of(period) && t - now <= period);
            let times: Vec<u64> = [Step::Probe, Step::Vote, Step::Fetch, Step::Sign]
                .iter()
                .filter_map(|&step| s.at(t, step))
                .collect();
            // Each step at its own second, all after the last period began and before T.
            prop_assert!(times.windows(2).all(|w| w[0] < w[1]), "{:?}", times);
            prop_assert!(times[0] > t - period && times[3] < t);
            // The first vote: the first at least half a period after the start.
            let first = s.first_round(now);
            prop_assert!(first > now && first.is_multiple_of(period));
            prop_assert!(s.at(first, Step::Vote).is_some_and(|v| v >= now + period / 2));
            let before = first - period;
            prop_assert!(before <= now || s.at(before, Step::Vote).is_some_and(|v| v < now + period / 2));
        }
    }
}
