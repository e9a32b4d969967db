//! Which incoming QUIC connection attempts a relay spends a handshake on (sans-IO policy).
//!
//! Answering a QUIC Initial costs the responder a hybrid key encapsulation (ML-KEM-768 and
//! X25519) and an Ed25519 signature; a spoofed first packet costs its sender nothing. So,
//! before any of that work:
//!
//! 1. **Address validation when loaded.** When more than `retry_threshold` attempts arrived
//!    in the current second, or `max_handshakes / 2` handshakes are in progress, an attempt
//!    whose source address QUIC has not validated gets a stateless Retry (a token the
//!    dialler must echo from its address; quinn's clients do so on their own). Spoofed
//!    sources never come back with it.
//! 2. **Per-source limit.** Attempts per source prefix (IPv4 /24, IPv6 /48) are limited
//!    (`per_source`, a GCRA quota: the daemon's `limits.handshakes_per_prefix`, as for UDP
//!    HELLOs; nyx-core `KeyedLimiter`), so one network cannot take every
//!    handshake slot. Validated and unvalidated attempts have separate budgets, and an
//!    unvalidated attempt over its budget gets a Retry, not a refusal: a spoofer who sends
//!    in a victim's prefix only makes the victim's diallers prove their address (one round
//!    trip more), never locks them out. Loopback sources (a local test network, all in one
//!    prefix) have no per-prefix budget.
//! 3. **Handshakes in progress** are capped at `max_handshakes`; beyond that an attempt is
//!    dropped unanswered. A slot is held for the cryptographic handshake only, until quinn
//!    completes it (the link is then up) or gives up.
//!
//! Refused attempts get no answer at all (nothing to reflect at a spoofed victim). Each
//! outcome is counted ([`AdmissionStats`]).

use std::net::SocketAddr;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use nyx_core::Timestamp;
use nyx_core::rate::{IpPrefix, KeyedLimiter, Quota};

use crate::Error;

/// The default rate and burst per source prefix.
const TEN: NonZeroU32 = match NonZeroU32::new(10) {
    Some(n) => n,
    None => NonZeroU32::MIN,
};

/// Settings of [`Admission`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AdmissionConfig {
    /// Attempts per second across all sources above which unvalidated sources get a Retry.
    /// Default 64; 0 always validates.
    pub retry_threshold: u32,
    /// Attempts from one source prefix (IPv4 /24, IPv6 /48): rate and burst, for
    /// unvalidated and validated attempts each (so up to twice this from a network that
    /// answers Retries). Default 10 a second, burst 10.
    pub per_source: Quota,
    /// Handshakes in progress at once, at most. Default 256.
    pub max_handshakes: usize,
    /// Source prefixes the limiter tracks at once. Default 4096.
    pub max_sources: usize,
    /// Loopback sources have no per-prefix budget (they cannot be spoofed from the network,
    /// and a local test network puts every node in one prefix). Default true.
    pub loopback_unlimited: bool,
}

impl Default for AdmissionConfig {
    fn default() -> Self {
        AdmissionConfig {
            retry_threshold: 64,
            per_source: Quota::new(TEN, TEN),
            max_handshakes: 256,
            max_sources: 4096,
            loopback_unlimited: true,
        }
    }
}

/// What to do with one connection attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Do the handshake.
    Accept,
    /// Send a stateless Retry: validate the source address first.
    Retry,
    /// Drop the attempt unanswered.
    Refuse(Refusal),
}

/// Why an attempt was dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// Its source prefix is over its rate.
    SourceRate,
    /// Too many handshakes are in progress.
    Busy,
}

/// Counters of [`Admission`] (plain data for metrics).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AdmissionStats {
    /// Attempts accepted for a handshake.
    pub accepted: u64,
    /// Retries sent (address validation asked for).
    pub retries: u64,
    /// Validated attempts dropped by the per-source limit.
    pub refused_source_rate: u64,
    /// Attempts dropped because too many handshakes were in progress.
    pub refused_busy: u64,
}

/// The admission policy of one endpoint.
#[derive(Debug)]
pub struct Admission {
    config: AdmissionConfig,
    /// Attempts from addresses QUIC has validated, per prefix.
    validated: KeyedLimiter<IpPrefix>,
    /// Attempts from addresses not validated, per prefix (over it: a Retry).
    unvalidated: KeyedLimiter<IpPrefix>,
    /// (Unix second, attempts in it).
    second: (u64, u32),
    handshakes: Arc<AtomicUsize>,
    stats: AdmissionStats,
}

/// A handshake in progress; dropping it frees its slot.
#[derive(Debug)]
pub struct HandshakeSlot(Arc<AtomicUsize>);

impl Drop for HandshakeSlot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Admission {
    /// A policy with `config`.
    pub fn new(config: AdmissionConfig) -> Result<Self, Error> {
        let invalid = |e: nyx_core::Error| Error::TlsConfig {
            reason: format!("admission: {e}"),
        };
        let limiter =
            || KeyedLimiter::new(config.per_source, config.max_sources.max(1)).map_err(invalid);
        Ok(Admission {
            config,
            validated: limiter()?,
            unvalidated: limiter()?,
            second: (0, 0),
            handshakes: Arc::new(AtomicUsize::new(0)),
            stats: AdmissionStats::default(),
        })
    }

    /// Decide on an attempt from `from` at `now`; `validated` if QUIC has validated its
    /// address (it echoed a Retry token). An [`Verdict::Accept`] comes with the slot the
    /// handshake holds until it ends.
    pub fn decide(
        &mut self,
        from: SocketAddr,
        validated: bool,
        now: Timestamp,
    ) -> (Verdict, Option<HandshakeSlot>) {
        let second = now.as_nanos() / 1_000_000_000;
        if self.second.0 != second {
            self.second = (second, 0);
        }
        self.second.1 = self.second.1.saturating_add(1);
        let in_progress = self.handshakes.load(Ordering::Relaxed);
        let loaded = self.second.1 > self.config.retry_threshold
            || in_progress >= self.config.max_handshakes / 2;
        let prefix = IpPrefix::of(from.ip(), 24, 48);
        // Loopback sources cannot be spoofed from the network and share one prefix on a
        // local test network: no per-prefix budget for them (the rest applies).
        let local = self.config.loopback_unlimited && from.ip().to_canonical().is_loopback();
        if !validated && (loaded || (!local && self.unvalidated.check(&prefix, now).is_err())) {
            self.stats.retries += 1;
            return (Verdict::Retry, None);
        }
        if validated && !local && self.validated.check(&prefix, now).is_err() {
            self.stats.refused_source_rate += 1;
            return (Verdict::Refuse(Refusal::SourceRate), None);
        }
        if in_progress >= self.config.max_handshakes {
            self.stats.refused_busy += 1;
            return (Verdict::Refuse(Refusal::Busy), None);
        }
        self.handshakes.fetch_add(1, Ordering::Relaxed);
        self.stats.accepted += 1;
        (
            Verdict::Accept,
            Some(HandshakeSlot(self.handshakes.clone())),
        )
    }

    /// Handshakes in progress now.
    pub fn in_progress(&self) -> usize {
        self.handshakes.load(Ordering::Relaxed)
    }

    /// The counters.
    pub fn stats(&self) -> AdmissionStats {
        self.stats
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ms: u64) -> Timestamp {
        Timestamp::from_millis(ms)
    }

    fn addr(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    /// The per-prefix quota's burst is honoured, not only its rate: 1 a second with a burst
    /// of 3 lets three validated attempts through at once and refuses the fourth, and the
    /// prefix gets one more a second later.
    #[test]
    fn a_prefix_gets_its_quotas_burst_then_its_rate() {
        let config = AdmissionConfig {
            per_source: Quota::per_second(1).unwrap().with_burst(3).unwrap(),
            ..AdmissionConfig::default()
        };
        let mut a = Admission::new(config).unwrap();
        let from = addr("203.0.113.9:1");
        let verdicts: Vec<_> = (0..4).map(|_| a.decide(from, true, at(0)).0).collect();
        assert_eq!(verdicts[..3], [Verdict::Accept; 3]);
        assert_eq!(verdicts[3], Verdict::Refuse(Refusal::SourceRate));
        assert_eq!(a.decide(from, true, at(1000)).0, Verdict::Accept);
        assert_eq!(
            a.decide(from, true, at(1000)).0,
            Verdict::Refuse(Refusal::SourceRate)
        );
    }

    #[test]
    fn quiet_attempts_are_accepted_and_hold_a_slot_until_done() {
        let mut a = Admission::new(AdmissionConfig::default()).unwrap();
        let (v, slot) = a.decide(addr("192.0.2.1:1"), false, at(0));
        assert_eq!(v, Verdict::Accept);
        assert_eq!(a.in_progress(), 1);
        drop(slot);
        assert_eq!(a.in_progress(), 0);
    }

    #[test]
    fn a_flood_makes_unvalidated_sources_prove_their_address() {
        let mut a = Admission::new(AdmissionConfig::default()).unwrap();
        let mut slots = Vec::new();
        for i in 0..200u32 {
            let [_, _, x, y] = i.to_be_bytes();
            let from = SocketAddr::from(([10, x, y, 1], 4000));
            let (v, slot) = a.decide(from, false, at(500));
            slots.extend(slot);
            if i < 64 {
                assert_eq!(v, Verdict::Accept, "attempt {i}");
            } else {
                assert_eq!(v, Verdict::Retry, "attempt {i}");
            }
        }
        // A validated source still gets through the same second.
        let (v, _slot) = a.decide(addr("198.51.100.9:1"), true, at(600));
        assert_eq!(v, Verdict::Accept);
        assert_eq!(a.stats().retries, 136);
        // The next second, with 65 handshakes still in progress (under half of 256),
        // unvalidated sources are accepted again.
        let (v, _slot2) = a.decide(addr("198.51.100.10:1"), false, at(1500));
        assert_eq!(v, Verdict::Accept);
    }

    #[test]
    fn one_prefix_is_limited_and_busy_handshakes_cap_the_rest() {
        let config = AdmissionConfig {
            max_handshakes: 4,
            ..AdmissionConfig::default()
        };
        let mut a = Admission::new(config).unwrap();
        let mut slots = Vec::new();
        // Validated (as after a Retry) so only the prefix limit and the cap apply.
        for port in 0..12u16 {
            let (v, slot) = a.decide(SocketAddr::from(([203, 0, 113, 7], port)), true, at(0));
            slots.extend(slot);
            match port {
                0..4 => assert_eq!(v, Verdict::Accept),
                4..10 => assert_eq!(v, Verdict::Refuse(Refusal::Busy), "{port}"),
                _ => assert_eq!(v, Verdict::Refuse(Refusal::SourceRate), "{port}"),
            }
        }
        slots.clear();
        let (v, _) = a.decide(addr("198.51.100.1:1"), true, at(100));
        assert_eq!(v, Verdict::Accept, "slots free again");
        // Half the slots busy: unvalidated attempts are asked to validate.
        let _held: Vec<_> = (0..2)
            .filter_map(|i| {
                a.decide(SocketAddr::from(([198, 51, 101, i], 1)), true, at(200))
                    .1
            })
            .collect();
        let (v, _) = a.decide(addr("198.51.102.1:1"), false, at(200));
        assert_eq!(v, Verdict::Retry);
    }

    /// A spoofer sending in a victim's prefix, under the load threshold: the victim's
    /// unvalidated attempts get a Retry, and once validated it gets its handshake.
    #[test]
    fn spoofed_attempts_in_a_prefix_cannot_lock_its_diallers_out() {
        let mut a = Admission::new(AdmissionConfig::default()).unwrap();
        let mut slots = Vec::new();
        for port in 0..30u16 {
            let spoofed = SocketAddr::from(([203, 0, 113, 9], port));
            slots.extend(a.decide(spoofed, false, at(10)).1);
        }
        assert_eq!(slots.len(), 10, "the unvalidated budget of the prefix");
        let victim = addr("203.0.113.77:5000");
        assert_eq!(a.decide(victim, false, at(20)).0, Verdict::Retry);
        assert_eq!(a.decide(victim, true, at(40)).0, Verdict::Accept);
        assert_eq!(a.stats().refused_source_rate, 0);
    }
}
