//! AVX-512VL: every rotation is one `vprold` on a 256-bit register. Batches of sixteen blocks
//! use 512-bit registers: twice the independent work per round hides the rotations'
//! latency (two cycles on AMD Zen 4, where a round of eight blocks waits on it). Batches of
//! twenty add four blocks in 256-bit registers beside them.
//!
//! No unsafe code here: the kernels are safe `#[target_feature]` functions, called only
//! through [`super::Simd`], whose constructors checked the features.
#![forbid(unsafe_code)]

use super::ScalarMac;

kernel!("avx2,avx512f,avx512vl", ScalarMac);

/// Sixteen blocks, one per 32-bit lane of 512-bit vectors; see [`super::Simd::batch`].
#[target_feature(enable = "avx2,avx512f,avx512vl")]
pub(super) fn batch16(state: &[u32; 16], counter: u32, job: &mut Job<'_>) -> usize {
    let mut input = input16(state, counter);
    let mut x = input;
    for _ in 0..10 {
        double_round16(&mut x, |_| {});
    }
    match job {
        Job::Keep(out) => output16(&x, &input, &mut out[..32]),
        Job::Xor(xor) => {
            let mut lanes = [_mm256_setzero_si256(); 32];
            output16(&x, &input, &mut lanes);
            emit(&mut lanes, xor);
        }
    }
    // `input` holds the key words and `x` the permuted state, which inverts back to the key
    // (the feed-forward went into the lanes, which hold keystream): wipe both. Copies in
    // registers and spills the compiler made are beyond our reach.
    zeroize::Zeroize::zeroize(&mut input);
    zeroize::Zeroize::zeroize(&mut x);
    16
}

/// Twenty blocks: sixteen as in [`batch16`] and four more as in `batch4` (two per 256-bit
/// vector, one row of each block's state per 128-bit half), their rounds in one loop. A
/// cell's keystream needs 18-20 blocks; the four-block kernel alone is bound by its chain of
/// dependent operations, while beside the sixteen-block rounds (bound by throughput) its
/// operations fill the issue slots those leave. See [`super::Simd::batch`].
#[target_feature(enable = "avx2,avx512f,avx512vl")]
pub(super) fn batch20(state: &[u32; 16], counter: u32, job: &mut Job<'_>) -> usize {
    let mut input = input16(state, counter);
    let mut rows_in = rows_input(state, counter.wrapping_add(16));
    let mut x = input;
    let mut rows = rows_in;
    // A quarter of a row round after each quarter round of the sixteen, so that both
    // stay in the scheduler's window together.
    stitched_rounds!(
        ScalarMac,
        job,
        double_round16(&mut x, |i| {
            rows_step(&mut rows, i % 4);
            if i == 3 {
                turn_rows::<0x39, 0x93>(&mut rows);
            } else if i == 7 {
                turn_rows::<0x93, 0x39>(&mut rows);
            }
        })
    );
    let mut lanes = [_mm256_setzero_si256(); 40];
    output16(&x, &input, &mut lanes[..32]);
    rows_output(&rows, &rows_in, &mut lanes[32..]);
    match job {
        Job::Keep(out) => out[..40].copy_from_slice(&lanes),
        Job::Xor(xor) => emit(&mut lanes, xor),
    }
    // As in `batch16`; `rows_in` holds key words too.
    zeroize::Zeroize::zeroize(&mut input);
    zeroize::Zeroize::zeroize(&mut x);
    zeroize::Zeroize::zeroize(&mut rows_in);
    zeroize::Zeroize::zeroize(&mut rows);
    20
}

/// Word `w` of blocks `counter..counter + 16` in vector `w`.
#[target_feature(enable = "avx2,avx512f,avx512vl")]
#[inline]
fn input16(state: &[u32; 16], counter: u32) -> [__m512i; 16] {
    let mut input = [_mm512_setzero_si512(); 16];
    for (v, w) in input.iter_mut().zip(state) {
        *v = _mm512_set1_epi32(*w as i32);
    }
    input[12] = _mm512_add_epi32(
        _mm512_set1_epi32(counter as i32),
        _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
    );
    input
}

/// One double round of the sixteen blocks, calling `between(i)` after quarter round `i`
/// (0-7): where `batch20` fits in the steps of its other four.
#[target_feature(enable = "avx2,avx512f,avx512vl")]
#[inline]
fn double_round16(x: &mut [__m512i; 16], mut between: impl FnMut(usize)) {
    // Written out: with the indices in a table the state would live in memory.
    quarter_round16(x, 0, 4, 8, 12);
    between(0);
    quarter_round16(x, 1, 5, 9, 13);
    between(1);
    quarter_round16(x, 2, 6, 10, 14);
    between(2);
    quarter_round16(x, 3, 7, 11, 15);
    between(3);
    quarter_round16(x, 0, 5, 10, 15);
    between(4);
    quarter_round16(x, 1, 6, 11, 12);
    between(5);
    quarter_round16(x, 2, 7, 8, 13);
    between(6);
    quarter_round16(x, 3, 4, 9, 14);
    between(7);
}

/// The feed-forward, then block `k` of the sixteen in `out[2k]` and `out[2k + 1]` (32
/// lanes): blocks 0..8 are the vectors' low halves, blocks 8..16 the high halves.
#[target_feature(enable = "avx2,avx512f,avx512vl")]
#[inline]
fn output16(x: &[__m512i; 16], input: &[__m512i; 16], out: &mut [__m256i]) {
    let mut low = [_mm256_setzero_si256(); 16];
    let mut high = [_mm256_setzero_si256(); 16];
    for w in 0..16 {
        let v = _mm512_add_epi32(x[w], input[w]);
        low[w] = _mm512_extracti64x4_epi64::<0>(v);
        high[w] = _mm512_extracti64x4_epi64::<1>(v);
    }
    let (first, second) = out.split_at_mut(16);
    transpose(&low, first);
    transpose(&high, second);
}

#[target_feature(enable = "avx2,avx512f,avx512vl")]
#[inline]
fn quarter_round16(x: &mut [__m512i; 16], a: usize, b: usize, c: usize, d: usize) {
    x[a] = _mm512_add_epi32(x[a], x[b]);
    x[d] = _mm512_rol_epi32::<16>(_mm512_xor_si512(x[d], x[a]));
    x[c] = _mm512_add_epi32(x[c], x[d]);
    x[b] = _mm512_rol_epi32::<12>(_mm512_xor_si512(x[b], x[c]));
    x[a] = _mm512_add_epi32(x[a], x[b]);
    x[d] = _mm512_rol_epi32::<8>(_mm512_xor_si512(x[d], x[a]));
    x[c] = _mm512_add_epi32(x[c], x[d]);
    x[b] = _mm512_rol_epi32::<7>(_mm512_xor_si512(x[b], x[c]));
}

#[target_feature(enable = "avx2,avx512f,avx512vl")]
#[inline]
pub(super) fn rotl16(x: __m256i) -> __m256i {
    _mm256_rol_epi32::<16>(x)
}

#[target_feature(enable = "avx2,avx512f,avx512vl")]
#[inline]
pub(super) fn rotl12(x: __m256i) -> __m256i {
    _mm256_rol_epi32::<12>(x)
}

#[target_feature(enable = "avx2,avx512f,avx512vl")]
#[inline]
pub(super) fn rotl8(x: __m256i) -> __m256i {
    _mm256_rol_epi32::<8>(x)
}

#[target_feature(enable = "avx2,avx512f,avx512vl")]
#[inline]
pub(super) fn rotl7(x: __m256i) -> __m256i {
    _mm256_rol_epi32::<7>(x)
}
