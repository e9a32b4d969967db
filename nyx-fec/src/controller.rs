//! How much redundancy to send up front: a loss estimator fed by the receiver's cumulative
//! counters, a model that turns the estimate into repair symbols for a block, and a slow
//! integral trim that corrects the model from what actually happened. docs/fec.md derives the
//! control law and its tuning.

/// Prior loss rate before the first feedback arrives: cautious, since the first blocks go
/// out before any is reported (it costs a few percent on a clean path for one round trip).
const PRIOR_LOSS: f64 = 0.05;
/// Horizon of the long (steady-state) estimate, in packets.
const LONG_HORIZON: f64 = 2000.0;
/// Horizon of the short (step-detection) estimate, in packets.
const SHORT_HORIZON: f64 = 150.0;
/// The short estimate replaces the long one when it exceeds it by this many standard errors.
const JUMP_SIGMAS: f64 = 3.0;
/// Gain of the integral trim per block outcome.
const TRIM_GAIN: f64 = 0.02;
/// Bounds of the trim on the loss rate: anti-windup (the integral stops at them).
const TRIM_MIN: f64 = 0.8;
const TRIM_MAX: f64 = 2.0;
/// Extra symbols beyond K the receiver asks for when a block is stuck: RaptorQ fails with
/// probability about 1e-2 at exactly K and 1e-4 at K + 1 (RFC 6330, section 4.4).
pub const DECODE_MARGIN: u32 = 1;
const DECODE_FAIL_AT_K: f64 = 1e-2;
const DECODE_FAIL_AT_K1: f64 = 1e-4;

/// Packets per span over which the estimator measures how much the loss count varies
/// ([`LossEstimator::dispersion`]): about half a full block of the overlay's streams, and
/// far longer than the runs of losses a path has.
const DISPERSION_SPAN: f64 = 1024.0;
/// Spans measured before the measured dispersion replaces the one the run length implies.
const DISPERSION_MIN_SPANS: u32 = 8;
/// Horizon of the dispersion estimate, in spans (about 32 000 packets).
const DISPERSION_HORIZON: f64 = 32.0;
/// One span's sample counts for at most this many times the current estimate (and at
/// least [`DISPERSION_SAMPLE_FLOOR`], at most [`DISPERSION_SAMPLE_MAX`]): a step of the loss
/// rate, or an outage, makes two spans differ far more than any dispersion would, and
/// unclamped one such sample kept the estimate high for the next thirty spans (in the
/// simulation's step from 1% to 15%, 1.122 overhead against 1.096). A real rise is still
/// followed, by up to this factor per 32 spans. For samples of independent losses (the
/// estimate times a χ² variable of one degree) the clamp takes off under 1%.
const DISPERSION_SAMPLE_GAIN: f64 = 8.0;
const DISPERSION_SAMPLE_FLOOR: f64 = 16.0;
const DISPERSION_SAMPLE_MAX: f64 = 1024.0;

/// Estimates the loss rate, the mean burst length and the dispersion of losses on the path
/// from feedback counters.
#[derive(Debug, Clone)]
pub struct LossEstimator {
    last: Option<(u32, u32, u32)>,
    long: f64,
    short: f64,
    burst: f64,
    packets: f64,
    /// The span being filled: packets and losses so far.
    span: (f64, f64),
    /// The previous complete span: packets and losses.
    prev_span: Option<(f64, f64)>,
    /// Measured dispersion (EWMA over spans) and how many spans it has seen.
    dispersion: f64,
    spans: u32,
    /// A dispersion an earlier stream on the path measured ([`Self::seed`]).
    seeded_dispersion: Option<f64>,
}

impl Default for LossEstimator {
    fn default() -> Self {
        LossEstimator {
            last: None,
            long: PRIOR_LOSS,
            short: PRIOR_LOSS,
            burst: 1.0,
            packets: 0.0,
            span: (0.0, 0.0),
            prev_span: None,
            dispersion: 1.0,
            spans: 0,
            seeded_dispersion: None,
        }
    }
}

impl LossEstimator {
    /// Take the receiver's cumulative counters. Counters older than the last ones seen (a
    /// reordered feedback message) are ignored.
    pub fn update(&mut self, expected: u32, received: u32, runs: u32) {
        let Some((e0, r0, u0)) = self.last else {
            self.last = Some((expected, received, runs));
            if expected > 0 {
                self.observe(expected, f64::from(expected.saturating_sub(received)), runs);
            }
            return;
        };
        if expected < e0 || received < r0 || runs < u0 {
            return;
        }
        self.last = Some((expected, received, runs));
        let n = expected - e0;
        // Reordered packets count as lost in one interval and as received in a later one,
        // so an interval's loss may be negative: keeping the sign keeps the estimate
        // unbiased (clamping each interval at zero would overestimate under reordering).
        let lost = f64::from(n) - f64::from(received - r0);
        if n > 0 {
            self.observe(n, lost, runs - u0);
        }
    }

    fn observe(&mut self, n: u32, lost: f64, runs: u32) {
        let n = f64::from(n);
        let rate = (lost / n).clamp(-1.0, 1.0);
        self.packets += n;
        // Until a horizon's worth of packets has been seen, average everything seen (the
        // prior then fades after the first report instead of over thousands of packets).
        let warm = n / self.packets;
        self.short += (1.0 - (-n / SHORT_HORIZON).exp()).max(warm) * (rate - self.short);
        self.long += (1.0 - (-n / LONG_HORIZON).exp()).max(warm) * (rate - self.long);
        // A rise the long estimate would take thousands of packets to follow: jump to it.
        let samples = self.packets.min(SHORT_HORIZON);
        let se = (self.long.max(0.001) * (1.0 - self.long) / samples).sqrt();
        if self.short > self.long + JUMP_SIGMAS * se {
            self.long = self.short;
        }
        if runs > 0 && lost > 0.0 {
            let b = (lost / f64::from(runs)).max(1.0);
            self.burst += (1.0 - (-n / LONG_HORIZON).exp()) * (b - self.burst);
        }
        self.span.0 += n;
        self.span.1 += lost;
        if self.span.0 >= DISPERSION_SPAN {
            let span = std::mem::take(&mut self.span);
            if let Some(prev) = self.prev_span.replace(span) {
                self.observe_spans(prev, span);
            }
        }
    }

    /// One sample of the dispersion from two consecutive spans: the squared difference of
    /// their loss rates over what independent losses at rate p would give,
    /// `p (1 − p) (1/n₁ + 1/n₂)`. A difference, not a deviation from the estimated rate, so
    /// that neither the estimate's own error nor a slow drift of the rate reads as
    /// dispersion.
    fn observe_spans(&mut self, (n1, l1): (f64, f64), (n2, l2): (f64, f64)) {
        let p = self.long.clamp(1e-4, 0.95);
        let diff = l2 / n2 - l1 / n1;
        let most = (DISPERSION_SAMPLE_GAIN * self.dispersion())
            .clamp(DISPERSION_SAMPLE_FLOOR, DISPERSION_SAMPLE_MAX);
        let sample = (diff * diff / (p * (1.0 - p) * (1.0 / n1 + 1.0 / n2))).clamp(0.0, most);
        self.spans = self.spans.saturating_add(1);
        // A plain mean until a horizon's worth of spans, then exponential.
        let w = (1.0 / f64::from(self.spans)).max(1.0 - (-1.0 / DISPERSION_HORIZON).exp());
        self.dispersion += w * (sample - self.dispersion);
    }

    /// Start from `loss` and `dispersion` instead of the prior (what an earlier stream on
    /// the same path measured: [`Self::loss`] and [`Self::dispersion`]), if nothing was
    /// reported yet. The first report replaces the loss rate as it replaces the prior; the
    /// dispersion stands until this estimator has measured its own. Until the first report
    /// it is no more than a prior ([`Self::has_data`] stays false). Out-of-range values are
    /// clamped (loss to 0..=0.95, dispersion to at least 1).
    pub fn seed(&mut self, loss: f64, dispersion: f64) {
        if self.last.is_some() || self.packets > 0.0 {
            return;
        }
        let loss = if loss.is_finite() {
            loss.clamp(0.0, 0.95)
        } else {
            PRIOR_LOSS
        };
        self.long = loss;
        self.short = loss;
        self.seeded_dispersion = dispersion.is_finite().then(|| dispersion.max(1.0));
    }

    /// Whether enough has been reported for the estimate to be more than the prior (100
    /// packets).
    pub fn has_data(&self) -> bool {
        self.packets >= 100.0
    }

    /// The loss rate to plan for.
    pub fn loss(&self) -> f64 {
        self.long.clamp(0.0, 0.95)
    }

    /// Mean length of a run of losses (1 for independent losses).
    pub fn burst(&self) -> f64 {
        self.burst.max(1.0)
    }

    /// How much more the number of losses among `n` packets varies than if each were lost
    /// independently: Var(lost) / (n p (1 − p)), the variance the redundancy is planned for
    /// ([`Redundancy::repair_symbols`]). 1 for independent losses; for runs of geometric
    /// length with mean b about 2b − 1; for runs of exactly b (a whole batch of packets
    /// dropped at once) about b. Measured over spans of 1 024 packets once eight spans
    /// were seen; until then what an earlier stream measured ([`Self::seed`]), or else
    /// 2b − 1 from the mean run length.
    pub fn dispersion(&self) -> f64 {
        if self.spans >= DISPERSION_MIN_SPANS {
            self.dispersion.max(1.0)
        } else if let Some(d) = self.seeded_dispersion {
            d
        } else {
            2.0 * self.burst() - 1.0
        }
    }
}

/// Chooses the up-front repair symbols of each block.
#[derive(Debug, Clone)]
pub struct Redundancy {
    target: f64,
    max_redundancy: f64,
    trim: f64,
}

impl Redundancy {
    /// A controller aiming at `target` probability of a second round, never adding more than
    /// `max_redundancy` × K repair symbols.
    pub fn new(target: f64, max_redundancy: f64) -> Self {
        Redundancy {
            target,
            max_redundancy,
            trim: 1.0,
        }
    }

    /// Repair symbols to send with a block of `k` source symbols, for loss rate `p` and
    /// dispersion `d` ([`LossEstimator::dispersion`]): the fewest that keep the probability
    /// of a second round at or below the target. A block of `n = K + R` symbols fails if
    /// fewer than K arrive, and with RaptorQ's decoding failure probability if exactly K
    /// (1e-2) or K + 1 (1e-4) do (RFC 6330, section 4.4); the number lost is modelled as
    /// binomial over `n / d` independent events of `d` packets each, which has the
    /// variance the path showed.
    pub fn repair_symbols(&self, k: u16, p: f64, d: f64) -> u32 {
        let k = u32::from(k);
        let p = (p * self.trim).clamp(0.0, 0.95);
        let max = (f64::from(k) * self.max_redundancy).floor() as u32;
        if p <= 0.0 || max == 0 {
            return 0;
        }
        let d = if d.is_finite() { d.max(1.0) } else { 1.0 };
        let fails = |r: u32| -> f64 {
            let n_eff = ((f64::from(k + r) / d).round() as u32).max(1);
            // Losses (in units of D packets) that still leave K, K + 1 and K + 2 symbols.
            let spare = |extra: u32| (f64::from(r.saturating_sub(extra)) / d).floor() as u32;
            // P(losses <= spare(j)) for j = 2, 1, 0 (spare(2) <= spare(1) <= spare(0)), in one
            // pass; "r < extra" means not even that many symbols were sent.
            let [c2, c1, c0] = binomial_cdfs(n_eff, p, [spare(2), spare(1), spare(0)]);
            let c2 = if r < 2 { 0.0 } else { c2 };
            let c1 = if r < 1 { 0.0 } else { c1 };
            let fewer_than_k = 1.0 - c0;
            let exactly_k = c0 - c1;
            let exactly_k1 = c1 - c2;
            fewer_than_k + DECODE_FAIL_AT_K * exactly_k + DECODE_FAIL_AT_K1 * exactly_k1
        };
        // fails() decreases in r: binary search the smallest r that meets the target.
        let (mut lo, mut hi) = (0u32, max);
        if fails(hi) > self.target {
            return max;
        }
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if fails(mid) <= self.target {
                hi = mid;
            } else {
                lo = mid + 1;
            }
        }
        lo
    }

    /// Learn from one finished block whether it needed a second round: an integral on the
    /// error against the target, clamped (anti-windup), scaling the loss rate the model uses.
    pub fn on_block(&mut self, second_round: bool) {
        let error = if second_round { 1.0 } else { 0.0 } - self.target;
        self.trim = (self.trim * (TRIM_GAIN * error).exp()).clamp(TRIM_MIN, TRIM_MAX);
    }

    /// The current trim factor on the loss rate (1 = the model as is).
    pub fn trim(&self) -> f64 {
        self.trim
    }
}

/// P(X > m) for X ~ Binomial(n, p): exact summation for n ≤ 2000, else a normal
/// approximation with continuity correction.
pub fn binomial_tail(n: u32, p: f64, m: u32) -> f64 {
    if m >= n {
        return 0.0;
    }
    if p <= 0.0 {
        return 0.0;
    }
    if p >= 1.0 {
        return 1.0;
    }
    if n > 2000 {
        let mean = f64::from(n) * p;
        let sd = (mean * (1.0 - p)).sqrt();
        return 0.5 * erfc((f64::from(m) + 0.5 - mean) / (sd * std::f64::consts::SQRT_2));
    }
    // P(X <= m) by summing the pmf from 0 in log space, then the complement.
    let (lp, lq) = (p.ln(), (1.0 - p).ln());
    let mut log_pmf = f64::from(n) * lq;
    let mut cdf = log_pmf.exp();
    for i in 0..m {
        log_pmf += (f64::from(n - i) / f64::from(i + 1)).ln() + lp - lq;
        cdf += log_pmf.exp();
    }
    (1.0 - cdf).max(0.0)
}

/// P(X <= m) for X ~ Binomial(n, p) at three increasing thresholds, in one pass over the
/// pmf (exact for n <= 2000; normal approximation beyond, as [`binomial_tail`]).
fn binomial_cdfs(n: u32, p: f64, m: [u32; 3]) -> [f64; 3] {
    if n > 2000 || p <= 0.0 || p >= 1.0 {
        return m.map(|m| 1.0 - binomial_tail(n, p, m));
    }
    let (lp, lq) = (p.ln(), (1.0 - p).ln());
    let mut log_pmf = f64::from(n) * lq;
    let mut cdf = log_pmf.exp();
    let mut out = [0.0; 3];
    let mut next = 0;
    let last = m[2].min(n);
    for i in 0..=last {
        if i > 0 {
            log_pmf += (f64::from(n - i + 1) / f64::from(i)).ln() + lp - lq;
            cdf += log_pmf.exp();
        }
        while next < 3 && m[next].min(n) == i {
            out[next] = cdf.min(1.0);
            next += 1;
        }
    }
    while next < 3 {
        out[next] = cdf.min(1.0);
        next += 1;
    }
    out
}

/// Complementary error function (Numerical Recipes' erfc approximation, relative error below
/// 1.2e-7), enough for choosing symbol counts.
fn erfc(x: f64) -> f64 {
    let z = x.abs();
    let t = 1.0 / (1.0 + 0.5 * z);
    let poly = -z * z - 1.265_512_23
        + t * (1.000_023_68
            + t * (0.374_091_96
                + t * (0.096_784_18
                    + t * (-0.186_288_06
                        + t * (0.278_868_07
                            + t * (-1.135_203_98
                                + t * (1.488_515_87 + t * (-0.822_152_23 + t * 0.170_872_77))))))));
    let r = t * poly.exp();
    if x >= 0.0 { r } else { 2.0 - r }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn binomial_tail_matches_known_values() {
        // P(X > 0) for Bin(10, 0.5) = 1 - 2^-10.
        assert!((binomial_tail(10, 0.5, 0) - (1.0 - 1.0 / 1024.0)).abs() < 1e-12);
        // P(X > 9) for Bin(10, 0.5) = 2^-10.
        assert!((binomial_tail(10, 0.5, 9) - 1.0 / 1024.0).abs() < 1e-12);
        assert_eq!(binomial_tail(10, 0.5, 10), 0.0);
        // The normal branch agrees with the exact one near its switch-over.
        let exact = binomial_tail(2000, 0.05, 110);
        let approx = binomial_tail(2001, 0.05, 110);
        assert!((exact - approx).abs() < 0.02, "{exact} {approx}");
    }

    #[test]
    fn one_pass_cdfs_match_the_tails() {
        for (n, p) in [(10, 0.5), (600, 0.05), (700, 0.3), (2500, 0.1)] {
            let m = [n / 20, n / 10, n / 5];
            let got = binomial_cdfs(n, p, m);
            for (g, m) in got.iter().zip(m) {
                assert!(
                    (g - (1.0 - binomial_tail(n, p, m))).abs() < 1e-9,
                    "{n} {p} {m}"
                );
            }
        }
    }

    #[test]
    fn more_loss_or_burstiness_needs_more_repair() {
        let c = Redundancy::new(0.01, 1.0);
        assert_eq!(c.repair_symbols(256, 0.0, 1.0), 0);
        let r1 = c.repair_symbols(256, 0.01, 1.0);
        let r5 = c.repair_symbols(256, 0.05, 1.0);
        let r20 = c.repair_symbols(256, 0.20, 1.0);
        let r5b = c.repair_symbols(256, 0.05, 5.0);
        assert!(0 < r1 && r1 < r5 && r5 < r20, "{r1} {r5} {r20}");
        assert!(r5b > r5, "{r5b} {r5}");
        // The choice meets the target and one fewer symbol would not (losses beyond r fail;
        // the decoding-failure terms only add).
        let fewer_than_k = |r: u32| binomial_tail(256 + r, 0.05, r);
        assert!(fewer_than_k(r5) <= 0.01);
        assert!(fewer_than_k(r5 - 2) > 0.01 * 0.5, "{r5}");
        // Clamped at max_redundancy.
        assert_eq!(Redundancy::new(0.01, 0.1).repair_symbols(100, 0.5, 1.0), 10);
    }

    #[test]
    fn a_seed_replaces_the_prior_until_the_first_report() {
        let mut e = LossEstimator::default();
        assert_eq!(e.loss(), PRIOR_LOSS);
        e.seed(0.002, 3.0);
        assert_eq!((e.loss(), e.dispersion()), (0.002, 3.0));
        assert!(!e.has_data(), "a seed is still a prior");
        e.seed(f64::NAN, -1.0);
        assert_eq!(
            (e.loss(), e.dispersion()),
            (PRIOR_LOSS, 1.0),
            "nonsense falls back"
        );
        e.seed(0.01, f64::INFINITY);
        assert_eq!(e.dispersion(), 1.0, "no seed: the run length's 2b - 1");
        e.seed(7.0, 1.0);
        assert_eq!(e.loss(), 0.95);
        // The first report takes over; a later seed changes nothing.
        e.update(200, 180, 20);
        assert!((e.loss() - 0.1).abs() < 1e-9, "{}", e.loss());
        e.seed(0.0, 1.0);
        assert!((e.loss() - 0.1).abs() < 1e-9, "{}", e.loss());
    }

    #[test]
    fn estimator_follows_a_step_within_a_few_hundred_packets_and_is_steady() {
        let mut e = LossEstimator::default();
        let (mut expected, mut received, mut runs) = (0u32, 0u32, 0u32);
        let mut feed = |e: &mut LossEstimator, n: u32, lost: u32| {
            expected += n;
            received += n - lost;
            runs += lost;
            e.update(expected, received, runs);
        };
        for _ in 0..100 {
            feed(&mut e, 50, 0); // 1% loss, as 1 in every 100
            feed(&mut e, 50, 1);
        }
        assert!((e.loss() - 0.01).abs() < 0.003, "{}", e.loss());
        // Step to 15%: within 300 packets the estimate is near it.
        for _ in 0..6 {
            feed(&mut e, 50, 8);
        }
        assert!(e.loss() > 0.12, "after the step: {}", e.loss());
        // Steady at 15%: successive estimates stay close (no oscillation).
        let mut seen = Vec::new();
        for _ in 0..100 {
            feed(&mut e, 50, 7);
            feed(&mut e, 50, 8);
            seen.push(e.loss());
        }
        let (lo, hi) = seen[50..]
            .iter()
            .fold((1.0f64, 0.0f64), |(a, b), &x| (a.min(x), b.max(x)));
        assert!(hi - lo < 0.01 && (lo + hi) / 2.0 > 0.14, "{lo}..{hi}");
        // Stale (reordered) feedback is ignored.
        let before = e.loss();
        e.update(1, 1, 0);
        assert_eq!(e.loss(), before);
    }

    /// A seeded generator for the channels the tests below draw losses from.
    struct Rng(proptest::test_runner::TestRng);

    fn seeded(seed: u8) -> Rng {
        use proptest::test_runner::{RngAlgorithm, TestRng};
        Rng(TestRng::from_seed(RngAlgorithm::ChaCha, &[seed; 32]))
    }

    impl Rng {
        /// Uniform in [0, 1).
        fn unit(&mut self) -> f64 {
            use proptest::prelude::Rng as _;
            (self.0.next_u64() >> 11) as f64 / (1u64 << 53) as f64
        }
    }

    /// Feed `packets` packets whose losses `lost(i)` decides to an estimator, reported
    /// every 300 packets as a receiver's cumulative counters; returns it.
    fn estimate(packets: u32, mut lost: impl FnMut(u32) -> bool) -> LossEstimator {
        let mut e = LossEstimator::default();
        let (mut expected, mut received, mut runs, mut in_run) = (0u32, 0u32, 0u32, false);
        for i in 0..packets {
            expected += 1;
            if lost(i) {
                runs += u32::from(!in_run);
                in_run = true;
            } else {
                received += 1;
                in_run = false;
            }
            if expected.is_multiple_of(300) {
                e.update(expected, received, runs);
            }
        }
        e
    }

    #[test]
    fn dispersion_is_measured_not_assumed_from_the_run_length() {
        // Independent losses: about 1.
        let mut rng = seeded(1);
        let e = estimate(200_000, |_| rng.unit() < 0.1);
        assert!((0.7..1.4).contains(&e.dispersion()), "{}", e.dispersion());
        // Whole batches of 16 dropped (nft on a GSO send), each independently: exactly 16,
        // where the geometric model's 2b - 1 would say about 35 (consecutive lost batches
        // make the mean run 16 / 0.9).
        let mut rng = seeded(2);
        let mut batch_lost = false;
        let e = estimate(400_000, |i| {
            if i.is_multiple_of(16) {
                batch_lost = rng.unit() < 0.1;
            }
            batch_lost
        });
        assert!((16.0..20.0).contains(&e.burst()), "burst {}", e.burst());
        assert!((11.0..22.0).contains(&e.dispersion()), "{}", e.dispersion());
        // Runs of geometric length with mean 5 (Gilbert-Elliott): about 2b - 1 = 9.
        let mut rng = seeded(3);
        let mut bad = false;
        let (leave, enter) = (0.2, 0.1 * 0.2 / 0.9);
        let e = estimate(400_000, |_| {
            let u = rng.unit();
            bad = if bad { u >= leave } else { u < enter };
            bad
        });
        assert!((6.0..13.0).contains(&e.dispersion()), "{}", e.dispersion());
        // Before eight spans the run length stands in: 2b - 1.
        let early = estimate(3000, |i| i % 20 < 2);
        assert!(early.burst() > 1.5, "{}", early.burst());
        assert_eq!(early.dispersion(), 2.0 * early.burst() - 1.0);
    }

    #[test]
    fn a_slow_drift_of_the_rate_is_not_dispersion() {
        // Independent losses whose rate moves from 2% to 12% over the run: consecutive
        // spans differ little, so the measure stays near 1.
        let mut rng = seeded(4);
        let n = 300_000;
        let e = estimate(n, |i| {
            rng.unit() < 0.02 + 0.10 * f64::from(i) / f64::from(n)
        });
        assert!((0.6..1.6).contains(&e.dispersion()), "{}", e.dispersion());
    }

    #[test]
    fn trim_is_bounded_and_settles_at_the_target_rate() {
        let mut c = Redundancy::new(0.01, 1.0);
        for _ in 0..1000 {
            c.on_block(true);
        }
        assert_eq!(c.trim(), TRIM_MAX);
        for _ in 0..100_000 {
            c.on_block(false);
        }
        assert_eq!(c.trim(), TRIM_MIN);
        // One failure in a hundred is the equilibrium: the trim neither climbs nor falls.
        let mut c = Redundancy::new(0.01, 1.0);
        for i in 0..10_000 {
            c.on_block(i % 100 == 0);
        }
        assert!((c.trim() - 1.0).abs() < 0.1, "{}", c.trim());
    }
}
