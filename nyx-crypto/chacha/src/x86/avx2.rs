//! AVX2: rotations by 16 and 8 are byte shuffles, by 12 and 7 two shifts and an OR.
//!
//! No unsafe code here: the kernels are safe `#[target_feature]` functions, called only
//! through [`super::Simd`], whose constructors checked the features.
#![forbid(unsafe_code)]

use super::ScalarMac;

kernel!("avx2", ScalarMac);

/// See [`super::Simd::xor`]: the portable loop, compiled for AVX2.
#[target_feature(enable = "avx2")]
pub(super) fn xor(keystream: &[u8], data: &mut [u8]) {
    crate::batch::xor(keystream, data);
}

#[target_feature(enable = "avx2")]
#[inline]
fn rotl16(x: __m256i) -> __m256i {
    let rot = _mm256_setr_epi8(
        2, 3, 0, 1, 6, 7, 4, 5, 10, 11, 8, 9, 14, 15, 12, 13, //
        2, 3, 0, 1, 6, 7, 4, 5, 10, 11, 8, 9, 14, 15, 12, 13,
    );
    _mm256_shuffle_epi8(x, rot)
}

#[target_feature(enable = "avx2")]
#[inline]
fn rotl8(x: __m256i) -> __m256i {
    let rot = _mm256_setr_epi8(
        3, 0, 1, 2, 7, 4, 5, 6, 11, 8, 9, 10, 15, 12, 13, 14, //
        3, 0, 1, 2, 7, 4, 5, 6, 11, 8, 9, 10, 15, 12, 13, 14,
    );
    _mm256_shuffle_epi8(x, rot)
}

#[target_feature(enable = "avx2")]
#[inline]
fn rotl12(x: __m256i) -> __m256i {
    _mm256_or_si256(_mm256_slli_epi32::<12>(x), _mm256_srli_epi32::<20>(x))
}

#[target_feature(enable = "avx2")]
#[inline]
fn rotl7(x: __m256i) -> __m256i {
    _mm256_or_si256(_mm256_slli_epi32::<7>(x), _mm256_srli_epi32::<25>(x))
}
