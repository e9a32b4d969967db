//! AVX-512VL: every rotation is one `vprold` on a 256-bit register. Batches of sixteen blocks
//! use 512-bit registers: twice the independent work per round hides the rotations'
//! latency (two cycles on AMD Zen 4, where a round of eight blocks waits on it).
//!
//! No unsafe code here: the kernels are safe `#[target_feature]` functions, called only
//! through [`super::Simd`], whose constructors checked the features.
#![forbid(unsafe_code)]

use super::ScalarMac;

kernel!("avx2,avx512f,avx512vl", ScalarMac);

/// Sixteen blocks, one per 32-bit lane of 512-bit vectors; see [`super::Simd::batch`].
#[target_feature(enable = "avx2,avx512f,avx512vl")]
pub(super) fn batch16(state: &[u32; 16], counter: u32, job: &mut Job<'_>) -> usize {
    let mut input = [_mm512_setzero_si512(); 16];
    for (v, w) in input.iter_mut().zip(state) {
        *v = _mm512_set1_epi32(*w as i32);
    }
    input[12] = _mm512_add_epi32(
        _mm512_set1_epi32(counter as i32),
        _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
    );
    let mut x = input;
    for _ in 0..10 {
        quarter_round16(&mut x, 0, 4, 8, 12);
        quarter_round16(&mut x, 1, 5, 9, 13);
        quarter_round16(&mut x, 2, 6, 10, 14);
        quarter_round16(&mut x, 3, 7, 11, 15);
        quarter_round16(&mut x, 0, 5, 10, 15);
        quarter_round16(&mut x, 1, 6, 11, 12);
        quarter_round16(&mut x, 2, 7, 8, 13);
        quarter_round16(&mut x, 3, 4, 9, 14);
    }
    // Blocks 0..8 are the low halves, blocks 8..16 the high halves.
    let mut low = [_mm256_setzero_si256(); 16];
    let mut high = [_mm256_setzero_si256(); 16];
    for w in 0..16 {
        let v = _mm512_add_epi32(x[w], input[w]);
        low[w] = _mm512_extracti64x4_epi64::<0>(v);
        high[w] = _mm512_extracti64x4_epi64::<1>(v);
    }
    match job {
        Job::Keep(out) => {
            let (first, second) = out[..32].split_at_mut(16);
            transpose(&low, first);
            transpose(&high, second);
        }
        Job::Xor(xor) => {
            let mut lanes = [_mm256_setzero_si256(); 32];
            let (first, second) = lanes.split_at_mut(16);
            transpose(&low, first);
            transpose(&high, second);
            emit(&mut lanes, xor);
        }
    }
    // `input` holds the key words and `x` the permuted state, which inverts back to the key
    // (the feed-forward went into `low`/`high`, which hold keystream): wipe both. Copies in
    // registers and spills the compiler made are beyond our reach.
    zeroize::Zeroize::zeroize(&mut input);
    zeroize::Zeroize::zeroize(&mut x);
    16
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
