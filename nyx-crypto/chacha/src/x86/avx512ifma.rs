//! AVX-512 IFMA: the AVX-512VL kernel, with Poly1305 in four vector lanes instead of on the
//! scalar multiplier. `vpmadd52luq` / `vpmadd52huq` multiply 52-bit numbers and add the low
//! or high 52 bits of the 104-bit product to an accumulator, so Poly1305's accumulator is
//! kept in three limbs of 44, 44 and 42 bits: a group of four blocks takes 18 multiply-adds
//! and three limbs' carries, where radix 2^26 on plain AVX2 takes 25 multiplies, 20 adds and
//! five limbs' carries (measured no faster than the scalar code there, so not kept).
//!
//! No unsafe code here: the kernels are safe `#[target_feature]` functions, called only
//! through [`super::Simd`], whose constructors checked the features.
#![forbid(unsafe_code)]

use super::avx512vl::{rotl7, rotl8, rotl12, rotl16};
use crate::poly1305::{Poly1305, Wide};

kernel!("avx2,avx512f,avx512vl,avx512ifma", IfmaMac);

/// See [`super::Simd::absorb`]. Ends with the accumulator back on the scalar side,
/// folded in vectors. Pairs of groups run as two independent chains (multiplying by
/// `r^8`), which the CPU overlaps: one chain waits on its multiply-adds' latency about 24
/// cycles a group, two take about 17 (docs/benchmarks.md).
#[target_feature(enable = "avx2,avx512f,avx512vl,avx512ifma")]
pub(super) fn absorb(poly: &mut Poly1305, data: &[u8]) {
    let (mut groups, rest) = data.as_chunks::<64>();
    let mut lanes = Lanes::load(poly.widen());
    if lanes.fresh
        && let Some((first, later)) = groups.split_first()
    {
        lanes.absorb(first);
        groups = later;
    }
    let (pairs, odd) = groups.as_chunks::<2>();
    let single = if pairs.len() >= MIN_PAIRS {
        lanes.absorb_pairs(pairs);
        odd
    } else {
        groups
    };
    for group in single {
        lanes.absorb(group);
    }
    let sums = lanes.fold(poly.widen());
    poly.narrow_from(sums);
    poly.update_padded(rest);
}

/// The fewest pairs of groups worth two chains (below, squaring `r^4` and joining the
/// chains cost more than they save).
const MIN_PAIRS: usize = 4;

/// Stitching in vector lanes: a tenth of the MAC's groups of four blocks after each
/// double round. The ChaCha20 rounds leave vector ports idle while they wait on their
/// rotates, and the groups fill some of them: a stitched group adds 17–23 cycles to the
/// batch where one alone takes about 25 (docs/benchmarks.md).
struct IfmaMac<'a> {
    poly: &'a mut Poly1305,
    groups: &'a [[u8; 64]],
    rest: &'a [u8],
    lanes: Lanes,
    done: usize,
}

impl<'a> IfmaMac<'a> {
    #[target_feature(enable = "avx2,avx512f,avx512vl,avx512ifma")]
    #[inline]
    fn start(poly: &'a mut Poly1305, data: &'a [u8]) -> Self {
        let (groups, rest) = data.as_chunks::<64>();
        let lanes = Lanes::load(poly.widen());
        IfmaMac {
            poly,
            groups,
            rest,
            lanes,
            done: 0,
        }
    }

    #[target_feature(enable = "avx2,avx512f,avx512vl,avx512ifma")]
    #[inline]
    fn round(&mut self, round: usize) {
        let until = (round + 1) * self.groups.len() / 10;
        for group in &self.groups[self.done..until] {
            self.lanes.absorb(group);
        }
        self.done = until;
    }

    #[target_feature(enable = "avx2,avx512f,avx512vl,avx512ifma")]
    #[inline]
    fn finish(self) {
        self.lanes.store(self.poly.widen());
        if !self.rest.is_empty() {
            self.poly.narrow();
            self.poly.absorb_blocks(self.rest);
        }
    }
}

/// Poly1305's [`Wide`] accumulator in registers: limb `i` of the four lanes in `acc[i]`,
/// beside `r^4`'s limbs and `20 ·` its upper two, broadcast to every lane. Wiped on drop.
/// Made only with the powers of r computed ([`Poly1305::widen`]).
struct Lanes {
    acc: [__m256i; 3],
    r: [__m256i; 3],
    r20: [__m256i; 2],
    fresh: bool,
}

/// The low 44 bits.
const M44: i64 = (1 << 44) - 1;

impl Lanes {
    #[target_feature(enable = "avx2,avx512f,avx512vl,avx512ifma")]
    #[inline]
    fn load(wide: &Wide) -> Lanes {
        // Lane 0's power is r^4.
        let r = wide.powers.map(|limb| limb[0]);
        Lanes {
            acc: wide.acc.map(bytemuck::cast),
            r: [
                _mm256_set1_epi64x(r[0] as i64),
                _mm256_set1_epi64x(r[1] as i64),
                _mm256_set1_epi64x(r[2] as i64),
            ],
            r20: [
                _mm256_set1_epi64x(20 * r[1] as i64),
                _mm256_set1_epi64x(20 * r[2] as i64),
            ],
            fresh: wide.fresh,
        }
    }

    #[target_feature(enable = "avx2,avx512f,avx512vl,avx512ifma")]
    #[inline]
    fn store(&self, wide: &mut Wide) {
        wide.acc = self.acc.map(bytemuck::cast);
        wide.fresh = self.fresh;
    }

    /// One group of four blocks: `acc ← acc · r^4 + m` lane by lane (only `acc ← acc + m`
    /// for the first group).
    #[target_feature(enable = "avx2,avx512f,avx512vl,avx512ifma")]
    #[inline]
    fn absorb(&mut self, group: &[u8; 64]) {
        let m = limbs(group);
        if self.fresh {
            for (acc, m) in self.acc.iter_mut().zip(m) {
                *acc = _mm256_add_epi64(*acc, m);
            }
            self.fresh = false;
            return;
        }
        self.acc = mul_add(self.acc, self.r, self.r20, m);
    }

    /// Pairs of groups, the first of each pair in one chain and the second in another,
    /// both multiplying by `r^8`, joined at the end as `first · r^4 + second`: what
    /// [`Lanes::absorb`] on each group in turn would give. The accumulator starts in the
    /// second chain, so it is multiplied by `r^8` once per pair as it would be by `r^4`
    /// twice. Must not be fresh.
    #[target_feature(enable = "avx2,avx512f,avx512vl,avx512ifma")]
    #[inline]
    fn absorb_pairs(&mut self, pairs: &[[[u8; 64]; 2]]) {
        debug_assert!(!self.fresh, "absorb_pairs on a fresh accumulator");
        let zero = _mm256_setzero_si256();
        // r^8 = r^4 · r^4, its middle limb carried so all three are within r^4's bounds.
        let [s0, s1, s2] = mul_add(self.r, self.r, self.r20, [zero; 3]);
        let r8 = [
            s0,
            _mm256_and_si256(s1, _mm256_set1_epi64x(M44)),
            _mm256_add_epi64(s2, _mm256_srli_epi64::<44>(s1)),
        ];
        let r8_20 = [times20(r8[1]), times20(r8[2])];
        let (mut first, mut second) = ([zero; 3], self.acc);
        for [a, b] in pairs {
            first = mul_add(first, r8, r8_20, limbs(a));
            second = mul_add(second, r8, r8_20, limbs(b));
        }
        self.acc = mul_add(first, self.r, self.r20, second);
    }

    /// The lanes multiplied by their powers of r (`Wide::powers`) and summed: the
    /// accumulator's three limbs, each below 2^47.
    #[target_feature(enable = "avx2,avx512f,avx512vl,avx512ifma")]
    #[inline]
    fn fold(&self, wide: &Wide) -> [u64; 3] {
        let lanes: [[u64; 4]; 3] = if self.fresh {
            // Only lane 0 holds anything, and it is not multiplied yet.
            self.acc.map(bytemuck::cast)
        } else {
            let p: [__m256i; 3] = wide.powers.map(bytemuck::cast);
            // 20 x = 16 x + 4 x.
            let p20 = [times20(p[1]), times20(p[2])];
            let zero = _mm256_setzero_si256();
            mul_add(self.acc, p, p20, [zero; 3]).map(bytemuck::cast)
        };
        lanes.map(|limb: [u64; 4]| limb.iter().sum())
    }
}

/// A group of four blocks as lanes of limbs: lane `k` holds block `0, 2, 1, 3`, split into
/// 44, 44 and 40 bits, with the 2^128 bit of a full block at bit 40 of the top limb.
#[target_feature(enable = "avx2,avx512f,avx512vl,avx512ifma")]
#[inline]
fn limbs(group: &[u8; 64]) -> [__m256i; 3] {
    let a: __m256i = bytemuck::pod_read_unaligned(&group[..32]);
    let b: __m256i = bytemuck::pod_read_unaligned(&group[32..]);
    // 64-bit lanes: low halves, then high halves, of blocks 0, 2, 1, 3.
    let lo = _mm256_unpacklo_epi64(a, b);
    let hi = _mm256_unpackhi_epi64(a, b);
    let m44 = _mm256_set1_epi64x(M44);
    [
        _mm256_and_si256(lo, m44),
        _mm256_and_si256(
            _mm256_or_si256(_mm256_srli_epi64::<44>(lo), _mm256_slli_epi64::<20>(hi)),
            m44,
        ),
        _mm256_or_si256(_mm256_srli_epi64::<24>(hi), _mm256_set1_epi64x(1 << 40)),
    ]
}

/// `20 x` lane by lane (`16 x + 4 x`).
#[target_feature(enable = "avx2,avx512f,avx512vl,avx512ifma")]
#[inline]
fn times20(x: __m256i) -> __m256i {
    _mm256_add_epi64(_mm256_slli_epi64::<4>(x), _mm256_slli_epi64::<2>(x))
}

/// `a · r + m` lane by lane, with one carry pass; `r20` is 20 times `r`'s upper two
/// limbs.
///
/// Limbs have weights 2^0, 2^44, 2^88; 2^130 ≡ 5, so a product landing at 2^132
/// (limbs 1 × 2, 2 × 1) or 2^176 (2 × 2) comes back times 20 at 2^0 or 2^44. Bounds:
/// `a`'s limbs are below 2^45, `r`'s below 2^44 and `20 · r` below 2^48.4, so every
/// product is below 2^93.4; three low halves and a message limb (below 2^44) sum below
/// 2^54, three high halves (weight 2^52) below 2^42. After the carry pass the limbs are
/// below 2^44, 2^44 + 2^11 and 2^42.
#[target_feature(enable = "avx2,avx512f,avx512vl,avx512ifma")]
#[inline]
fn mul_add(a: [__m256i; 3], r: [__m256i; 3], r20: [__m256i; 2], m: [__m256i; 3]) -> [__m256i; 3] {
    let [a0, a1, a2] = a;
    let [r0, r1, r2] = r;
    let [t1, t2] = r20;
    let zero = _mm256_setzero_si256();
    // Low halves, with the message limb as the starting sum, and high halves.
    let x0 = lo3(m[0], [(a0, r0), (a1, t2), (a2, t1)]);
    let x1 = lo3(m[1], [(a0, r1), (a1, r0), (a2, t2)]);
    let x2 = lo3(m[2], [(a0, r2), (a1, r1), (a2, r0)]);
    let y0 = hi3(zero, [(a0, r0), (a1, t2), (a2, t1)]);
    let y1 = hi3(zero, [(a0, r1), (a1, r0), (a2, t2)]);
    let y2 = hi3(zero, [(a0, r2), (a1, r1), (a2, r0)]);
    // Limb i is x_i + 2^52 y_i: what is above its width moves up, with y_i shifted by
    // the 8 (10 for the 42-bit top limb) bits from 2^52 to the next limb's weight; what
    // leaves the top comes back to limb 0 times 5.
    let m44 = _mm256_set1_epi64x(M44);
    let m42 = _mm256_set1_epi64x((1 << 42) - 1);
    let c = _mm256_add_epi64(_mm256_srli_epi64::<44>(x0), _mm256_slli_epi64::<8>(y0));
    let z0 = _mm256_and_si256(x0, m44);
    let x1 = _mm256_add_epi64(x1, c);
    let c = _mm256_add_epi64(_mm256_srli_epi64::<44>(x1), _mm256_slli_epi64::<8>(y1));
    let z1 = _mm256_and_si256(x1, m44);
    let x2 = _mm256_add_epi64(x2, c);
    let c = _mm256_add_epi64(_mm256_srli_epi64::<42>(x2), _mm256_slli_epi64::<10>(y2));
    let z2 = _mm256_and_si256(x2, m42);
    let z0 = _mm256_add_epi64(z0, _mm256_add_epi64(c, _mm256_slli_epi64::<2>(c)));
    let z1 = _mm256_add_epi64(z1, _mm256_srli_epi64::<44>(z0));
    let z0 = _mm256_and_si256(z0, m44);
    [z0, z1, z2]
}

impl Drop for Lanes {
    fn drop(&mut self) {
        zeroize::Zeroize::zeroize(&mut self.acc);
        zeroize::Zeroize::zeroize(&mut self.r);
        zeroize::Zeroize::zeroize(&mut self.r20);
    }
}

/// `sum` plus the low 52 bits of each product.
#[target_feature(enable = "avx2,avx512f,avx512vl,avx512ifma")]
#[inline]
fn lo3(sum: __m256i, p: [(__m256i, __m256i); 3]) -> __m256i {
    let sum = _mm256_madd52lo_epu64(sum, p[0].0, p[0].1);
    let sum = _mm256_madd52lo_epu64(sum, p[1].0, p[1].1);
    _mm256_madd52lo_epu64(sum, p[2].0, p[2].1)
}

/// `sum` plus bits 52..104 of each product.
#[target_feature(enable = "avx2,avx512f,avx512vl,avx512ifma")]
#[inline]
fn hi3(sum: __m256i, p: [(__m256i, __m256i); 3]) -> __m256i {
    let sum = _mm256_madd52hi_epu64(sum, p[0].0, p[0].1);
    let sum = _mm256_madd52hi_epu64(sum, p[1].0, p[1].1);
    _mm256_madd52hi_epu64(sum, p[2].0, p[2].1)
}
