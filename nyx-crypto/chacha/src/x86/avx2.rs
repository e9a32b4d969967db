//! AVX2: rotations by 16 and 8 are byte shuffles, by 12 and 7 two shifts and an OR.
//!
//! No unsafe code here: the kernels are safe `#[target_feature]` functions, called only
//! through [`super::Simd`], whose constructors checked the features.
#![forbid(unsafe_code)]

use super::ScalarMac;

kernel!("avx2", ScalarMac);

/// Twelve blocks: eight as in [`batch8`] and four as in [`batch4`], their rounds in one
/// loop (a step of the four after each quarter round of the eight). The four-block kernel
/// alone waits on its chain of dependent operations; beside the eight its operations fill
/// issue slots the eight leave. A cell's keystream (18 blocks) takes eight, then twelve.
#[target_feature(enable = "avx2")]
pub(super) fn batch12(state: &[u32; 16], counter: u32, job: &mut Job<'_>) -> usize {
    let mut input = initial(state, counter);
    let mut rows_in = rows_input(state, counter.wrapping_add(8));
    let mut x = input;
    let mut rows = rows_in;
    stitched_rounds!(ScalarMac, job, {
        quarter_round(&mut x, 0, 4, 8, 12);
        rows_step(&mut rows, 0);
        quarter_round(&mut x, 1, 5, 9, 13);
        rows_step(&mut rows, 1);
        quarter_round(&mut x, 2, 6, 10, 14);
        rows_step(&mut rows, 2);
        quarter_round(&mut x, 3, 7, 11, 15);
        rows_step(&mut rows, 3);
        turn_rows::<0x39, 0x93>(&mut rows);
        quarter_round(&mut x, 0, 5, 10, 15);
        rows_step(&mut rows, 0);
        quarter_round(&mut x, 1, 6, 11, 12);
        rows_step(&mut rows, 1);
        quarter_round(&mut x, 2, 7, 8, 13);
        rows_step(&mut rows, 2);
        quarter_round(&mut x, 3, 4, 9, 14);
        rows_step(&mut rows, 3);
        turn_rows::<0x93, 0x39>(&mut rows);
    });
    finish(&mut x, &input);
    let mut lanes = [_mm256_setzero_si256(); 24];
    transpose(&x, &mut lanes[..16]);
    rows_output(&rows, &rows_in, &mut lanes[16..]);
    match job {
        Job::Keep(out) => out[..24].copy_from_slice(&lanes),
        Job::Xor(xor) => emit(&mut lanes, xor),
    }
    // As in `batch8`; `rows_in` holds key words too.
    zeroize::Zeroize::zeroize(&mut input);
    zeroize::Zeroize::zeroize(&mut x);
    zeroize::Zeroize::zeroize(&mut rows_in);
    zeroize::Zeroize::zeroize(&mut rows);
    12
}

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
