//! [`KeyedLimiter`]: one GCRA state per key with bounded memory.

use std::fmt;
use std::hash::{BuildHasher, Hash, RandomState};
use std::sync::{Mutex, MutexGuard, PoisonError};

use hashbrown::HashTable;

use super::gcra::{Denied, Quota};
use crate::time::Timestamp;
use crate::{Error, Result};

/// Keys each shard should at least be able to hold before the table is split further.
const MIN_KEYS_PER_SHARD: usize = 64;
/// Upper bound on shards; more only spreads memory thinner.
const MAX_SHARDS: usize = 64;

/// A rate limiter per key (peer id, [`IpPrefix`](super::IpPrefix), circuit id, ...) whose memory
/// is bounded no matter what keys strangers present.
///
/// * Every key gets the same [`Quota`], with the semantics of the [module docs](crate::rate).
/// * A key is **idle** once its limiter is full again (its theoretical arrival time has
///   passed). An idle key's state equals that of a key never seen, so idle keys are forgotten:
///   [`retain_recent`](Self::retain_recent) sweeps them, and a full shard sweeps itself
///   before refusing a new key. A key that is new to a shard starts as if it had been idle
///   since that shard's latest sweep, so forgetting never admits more than remembering would,
///   even for a caller whose `now` lags behind the sweeper's.
/// * At most `max_keys` keys are held (split evenly over the shards). When a shard is full of
///   keys that are all still limited, a *new* key is refused with [`Denied::TableFull`]: the
///   limiter fails closed rather than grow or forget a debt. Known keys are unaffected. A full
///   shard does not sweep again before its earliest key can have become idle, so a flood of
///   new keys costs O(1) per refusal.
/// * Keys are hashed with a per-instance random SipHash key, so strangers cannot aim their
///   keys at one shard or one bucket chain.
///
/// Checks on known keys allocate nothing; a new key may grow its shard's table, never beyond
/// what `max_keys` entries need.
///
/// ```
/// use nyx_core::rate::{Denied, KeyedLimiter, Quota};
/// use nyx_core::Timestamp;
///
/// let limiter = KeyedLimiter::new(Quota::per_second(1)?, 1000)?;
/// let t = Timestamp::from_secs(1);
/// assert!(limiter.check(&"alice", t).is_ok());
/// assert!(limiter.check(&"alice", t).is_err(), "alice spent her burst");
/// assert!(limiter.check(&"bob", t).is_ok(), "bob has his own budget");
/// // A second later both are idle again, and a sweep forgets them.
/// assert_eq!(limiter.retain_recent(Timestamp::from_secs(2)), 2);
/// assert!(limiter.is_empty());
/// # Ok::<(), nyx_core::Error>(())
/// ```
pub struct KeyedLimiter<K, S = RandomState> {
    quota: Quota,
    hasher: S,
    shards: Box<[Shard<K>]>,
    /// `shards.len() - 1`; the length is a power of two.
    shard_mask: usize,
    keys_per_shard: usize,
}

/// Padded to two cache lines so that neighbouring shards' locks do not share a line.
#[repr(align(128))]
struct Shard<K> {
    state: Mutex<ShardState<K>>,
}

struct ShardState<K> {
    /// `(key, theoretical arrival time in ns)`.
    table: HashTable<(K, u64)>,
    /// No key of this shard can be idle before this time (ns): a lower bound on every tat.
    no_sweep_before: u64,
    /// The latest `now` (ns) of any sweep of this shard: keys new to the shard start here.
    swept_up_to: u64,
}

impl<K: Hash + Eq + Clone> KeyedLimiter<K> {
    /// A limiter holding at most `max_keys` keys (rounded up to a multiple of the shard count).
    pub fn new(quota: Quota, max_keys: usize) -> Result<Self> {
        Self::with_hasher(quota, max_keys, RandomState::new())
    }
}

impl<K: Hash + Eq + Clone, S: BuildHasher> KeyedLimiter<K, S> {
    /// As [`new`](KeyedLimiter::new), with a chosen hasher. A hasher strangers can predict lets
    /// them pile their keys into one shard, where they are refused sooner: keep it keyed.
    pub fn with_hasher(quota: Quota, max_keys: usize, hasher: S) -> Result<Self> {
        if max_keys == 0 {
            return Err(Error::InvalidParameter {
                what: "keyed limiter max_keys",
                reason: "must be at least 1".to_owned(),
            });
        }
        let parallelism = std::thread::available_parallelism().map_or(1, usize::from);
        let by_threads = (parallelism * 4).next_power_of_two();
        let by_size = prev_power_of_two((max_keys / MIN_KEYS_PER_SHARD).max(1));
        let n_shards = by_threads.min(by_size).min(MAX_SHARDS);
        let keys_per_shard = max_keys.div_ceil(n_shards);
        let shards = (0..n_shards)
            .map(|_| Shard {
                state: Mutex::new(ShardState {
                    table: HashTable::new(),
                    no_sweep_before: 0,
                    swept_up_to: 0,
                }),
            })
            .collect();
        Ok(KeyedLimiter {
            quota,
            hasher,
            shards,
            shard_mask: n_shards - 1,
            keys_per_shard,
        })
    }

    /// The quota each key gets.
    pub fn quota(&self) -> Quota {
        self.quota
    }

    /// The most keys this limiter holds at once.
    pub fn max_keys(&self) -> usize {
        self.keys_per_shard.saturating_mul(self.shards.len())
    }

    /// Admit one token for `key` at `now`.
    #[inline]
    pub fn check(&self, key: &K, now: Timestamp) -> Result<(), Denied> {
        self.check_n(key, now, 1)
    }

    /// Admit `n` tokens for `key` at `now`, all or none.
    pub fn check_n(&self, key: &K, now: Timestamp, n: u32) -> Result<(), Denied> {
        self.quota.check_size(n)?;
        let now = now.as_nanos();
        let hash = self.hasher.hash_one(key);
        let mut shard = self.shard(hash);
        if let Some((_, tat)) = shard.table.find_mut(hash, |(k, _)| k == key) {
            *tat = self.quota.decide(*tat, now, n)?;
            return Ok(());
        }
        // A key never seen, or forgotten while idle: it has been idle at least since the
        // shard's latest sweep, and no longer (which matters to callers whose `now` lags).
        if shard.table.len() >= self.keys_per_shard && !shard.sweep(now, self.keys_per_shard) {
            return Err(Denied::TableFull);
        }
        let new_tat = self.quota.decide(shard.swept_up_to, now, n)?;
        shard.no_sweep_before = shard.no_sweep_before.min(new_tat);
        shard
            .table
            .insert_unique(hash, (key.clone(), new_tat), |(k, _)| {
                self.hasher.hash_one(k)
            });
        Ok(())
    }

    /// Forget every idle key (one whose limiter is full again at `now`); returns how many were
    /// forgotten. Decisions are unchanged by this: call it from a timer to return memory.
    pub fn retain_recent(&self, now: Timestamp) -> usize {
        let now = now.as_nanos();
        self.shards
            .iter()
            .map(|s| {
                let mut state = lock(s);
                let before = state.table.len();
                state.table.retain(|(_, tat)| *tat > now);
                state.swept_up_to = state.swept_up_to.max(now);
                state.no_sweep_before = 0;
                before - state.table.len()
            })
            .sum()
    }

    /// Forget `key` now, whatever its state (e.g. when its circuit is closed).
    pub fn remove(&self, key: &K) {
        let hash = self.hasher.hash_one(key);
        if let Ok(entry) = self.shard(hash).table.find_entry(hash, |(k, _)| k == key) {
            entry.remove();
        }
    }

    /// How many keys are held (idle ones included until swept).
    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| lock(s).table.len()).sum()
    }

    /// Whether no key is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn shard(&self, hash: u64) -> MutexGuard<'_, ShardState<K>> {
        // hashbrown indexes buckets with the low bits and tags with the top 7: take the middle.
        lock(&self.shards[(hash >> 32) as usize & self.shard_mask])
    }
}

impl<K> ShardState<K> {
    /// Drop idle keys; `true` if that left room below `limit`. Skipped (returning `false`)
    /// while no key can be idle yet, so a full shard of busy keys refuses in O(1).
    fn sweep(&mut self, now: u64, limit: usize) -> bool {
        if now < self.no_sweep_before {
            return false;
        }
        let mut earliest = u64::MAX;
        self.table.retain(|(_, tat)| {
            let busy = *tat > now;
            if busy {
                earliest = earliest.min(*tat);
            }
            busy
        });
        self.swept_up_to = self.swept_up_to.max(now);
        self.no_sweep_before = earliest;
        self.table.len() < limit
    }
}

/// A poisoned shard only means another thread panicked mid-check; the GCRA state is a plain
/// integer that is never left half-written, so keep using it.
fn lock<K>(shard: &Shard<K>) -> MutexGuard<'_, ShardState<K>> {
    shard.state.lock().unwrap_or_else(PoisonError::into_inner)
}

fn prev_power_of_two(n: usize) -> usize {
    if n.is_power_of_two() {
        n
    } else {
        n.next_power_of_two() >> 1
    }
}

impl<K, S> fmt::Debug for KeyedLimiter<K, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyedLimiter")
            .field("quota", &self.quota)
            .field("shards", &self.shards.len())
            .field("keys_per_shard", &self.keys_per_shard)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::time::Duration;

    fn secs(n: u64) -> Timestamp {
        Timestamp::from_secs(n)
    }

    fn one_per_sec(burst: u32, max_keys: usize) -> KeyedLimiter<u32> {
        KeyedLimiter::new(
            Quota::per_second(1).unwrap().with_burst(burst).unwrap(),
            max_keys,
        )
        .unwrap()
    }

    #[test]
    fn keys_are_independent() {
        let l = one_per_sec(2, 100);
        assert!(l.check_n(&1, secs(0), 2).is_ok());
        assert_eq!(l.check(&1, secs(0)), Err(Denied::RetryAt(secs(1))));
        assert!(l.check_n(&2, secs(0), 2).is_ok());
        assert_eq!(
            l.check_n(&3, secs(0), 3),
            Err(Denied::ExceedsBurst {
                requested: 3,
                burst: 2
            })
        );
        assert_eq!(l.len(), 2, "a refused new key is not stored");
    }

    #[test]
    fn full_table_refuses_new_keys_until_one_is_idle() {
        let l = one_per_sec(5, 1);
        assert_eq!(l.max_keys(), 1);
        assert!(l.check_n(&1, secs(0), 5).is_ok());
        assert_eq!(l.check(&2, secs(0)), Err(Denied::TableFull));
        assert_eq!(
            l.check(&2, secs(4)),
            Err(Denied::TableFull),
            "key 1 is busy until t=5"
        );
        assert!(l.check(&1, secs(4)).is_ok(), "known keys are unaffected");
        // Key 1 is idle again at t=6 (its tokens came back), so key 2 takes its place.
        assert!(l.check(&2, secs(6)).is_ok());
        assert_eq!(l.len(), 1);
        // Key 1 was forgotten while idle: it gets a full burst, as it would have anyway.
        assert_eq!(l.check_n(&1, secs(12), 5), Ok(()));
    }

    #[test]
    fn remove_and_retain_recent() {
        let l = one_per_sec(1, 1000);
        for k in 0..100 {
            l.check(&k, secs(10)).unwrap();
        }
        l.remove(&7);
        l.remove(&1000);
        assert_eq!(l.len(), 99);
        assert_eq!(l.retain_recent(secs(10)), 0, "nobody is idle yet");
        assert_eq!(l.retain_recent(secs(11)), 99);
        assert!(l.is_empty());
    }

    #[test]
    fn invalid_parameters() {
        assert!(KeyedLimiter::<u8>::new(Quota::per_second(1).unwrap(), 0).is_err());
        let l = KeyedLimiter::<u8>::new(Quota::per_second(1).unwrap(), 1_000_000).unwrap();
        assert!(l.max_keys() >= 1_000_000);
        assert!(l.shards.len().is_power_of_two() && l.shards.len() <= MAX_SHARDS);
    }

    #[test]
    fn forgetting_a_key_never_helps_a_caller_with_a_stale_now() {
        let l = one_per_sec(5, 100);
        assert!(l.check_n(&1, secs(10), 5).is_ok()); // busy until t=15
        assert_eq!(l.retain_recent(secs(15)), 1); // a sweeper with a later reading
        // A data-path thread still at t=10.5 must not get a second burst.
        let stale = secs(10) + Duration::from_millis(500);
        assert!(l.check_n(&1, stale, 5).is_err());
        assert!(
            l.check_n(&1, secs(15), 5).is_ok(),
            "at the sweep's time the burst is back"
        );
    }

    #[test]
    fn remove_does_not_leave_a_stale_sweep_bound() {
        let l = one_per_sec(5, 2);
        assert_eq!(l.shards.len(), 1);
        assert!(l.check_n(&1, secs(0), 5).is_ok()); // busy until 5 s
        assert!(l.check_n(&2, secs(0), 5).is_ok());
        assert_eq!(l.check(&3, secs(1)), Err(Denied::TableFull));
        l.remove(&1);
        assert!(l.check(&3, secs(1)).is_ok()); // busy until 2 s
        // Key 3 is idle from 2 s on, so key 4 must find room at 3 s.
        assert!(l.check(&4, secs(3)).is_ok());
    }

    #[test]
    fn huge_max_keys_does_not_overflow() {
        let l = KeyedLimiter::<u8>::new(Quota::per_second(1).unwrap(), usize::MAX).unwrap();
        assert_eq!(l.max_keys(), usize::MAX);
    }

    #[test]
    fn many_keys_spread_over_several_shards() {
        let l = one_per_sec(1, 4096);
        assert!(l.shards.len() > 1, "{} shards", l.shards.len());
        for k in 0..2000 {
            assert!(l.check(&k, secs(1)).is_ok(), "key {k}");
        }
        assert_eq!(l.len(), 2000);
        let used = l
            .shards
            .iter()
            .filter(|s| !lock(s).table.is_empty())
            .count();
        assert_eq!(used, l.shards.len(), "every shard holds keys");
        assert_eq!(l.retain_recent(secs(2)), 2000);
    }

    proptest! {
        /// With callers whose `now` lags the true time by up to 0.5 s, sweeps at the true time,
        /// and more keys than fit: every key's admissions still obey the quota over every
        /// stretch of its requests, keys are never held beyond the cap, a refusal for lack of
        /// room happens only when no key is idle, and once all is idle a sweep empties the table.
        #[test]
        fn bounded_and_correct_under_churn_and_stale_clocks(
            max_keys in 1usize..40,
            steps in proptest::collection::vec(
                (0u64..300, 0u64..500, 0u32..60, any::<bool>()), 1..400),
        ) {
            let t = Duration::from_millis(100).as_nanos() as i128;
            let burst = 3i128;
            let quota = Quota::per_interval(Duration::from_millis(100)).unwrap().with_burst(3).unwrap();
            let l: KeyedLimiter<u32> = KeyedLimiter::new(quota, max_keys).unwrap();
            prop_assert_eq!(l.shards.len(), 1);
            let mut now = Timestamp::ZERO;
            let mut admitted: std::collections::HashMap<u32, Vec<i128>> = Default::default();
            for (dt_ms, lag_ms, key, sweep) in steps {
                now += Duration::from_millis(dt_ms);
                if sweep {
                    l.retain_recent(now);
                }
                let seen = now.saturating_sub(Duration::from_millis(lag_ms));
                match l.check(&key, seen) {
                    Ok(()) => admitted.entry(key).or_default().push(i128::from(seen.as_nanos())),
                    Err(Denied::TableFull) => {
                        prop_assert_eq!(l.len(), l.keys_per_shard);
                        // Nothing was idle at the caller's time: a sweep then frees nothing.
                        prop_assert_eq!(l.retain_recent(seen), 0);
                    }
                    Err(Denied::RetryAt(at)) => prop_assert!(at > seen),
                    Err(other) => prop_assert!(false, "unexpected {other:?}"),
                }
                prop_assert!(l.len() <= l.max_keys());
            }
            for times in admitted.values() {
                for i in 0..times.len() {
                    for j in i..times.len() {
                        let tokens = (j - i + 1) as i128;
                        prop_assert!(tokens * t <= times[j] - times[i] + burst * t,
                            "{tokens} tokens between {} and {}", times[i], times[j]);
                    }
                }
            }
            l.retain_recent(now + Duration::from_secs(1));
            prop_assert!(l.is_empty());
        }
    }
}
