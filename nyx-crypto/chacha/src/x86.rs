//! The x86-64 kernels: eight ChaCha20 blocks at once, one block per 32-bit lane of 256-bit
//! vectors, with Poly1305 blocks absorbed on the scalar multiplier between the double rounds;
//! and on AVX-512, sixteen blocks in 512-bit vectors for long keystream.
//!
//! Two builds of the same kernel (one macro): AVX2, and AVX2 + AVX-512F + AVX-512VL, which
//! rotates with one instruction (`vprold`) where AVX2 needs a shuffle or two shifts and an
//! OR, and has 32 vector registers, so the 16 state vectors never spill.
//!
//! This is the crate's only unsafe code, and all of it is the call into a
//! `#[target_feature]` function, which is sound only on a CPU that has the feature. A
//! [`Simd`] is that proof: its field is private, so it exists only if [`Simd::avx2`] or
//! [`Simd::avx512vl`] saw the features reported by the CPU (`is_x86_feature_detected!`).
//! Inside the kernels every intrinsic is safe to call (their features are enabled), and the
//! results are stored into an array of vectors (`Batch`), which the rest of the crate reads
//! through `bytemuck`'s safe byte views: no raw pointer is touched.
#![allow(unsafe_code)]

use crate::backend::Lane;
use crate::poly1305::Poly1305;

/// Proof that this CPU runs AVX2, and with `vl`, also AVX-512F and AVX-512VL.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Simd {
    vl: bool,
}

impl Simd {
    /// AVX2, if the CPU has it.
    pub(crate) fn avx2() -> Option<Simd> {
        std::is_x86_feature_detected!("avx2").then_some(Simd { vl: false })
    }

    /// AVX2 with AVX-512F and AVX-512VL, if the CPU has them.
    pub(crate) fn avx512vl() -> Option<Simd> {
        (std::is_x86_feature_detected!("avx2")
            && std::is_x86_feature_detected!("avx512f")
            && std::is_x86_feature_detected!("avx512vl"))
        .then_some(Simd { vl: true })
    }

    /// Keystream blocks from `counter` into `out`: eight, or sixteen when `wanted` asks for
    /// more than eight, `out` has room and the CPU has 512-bit vectors. `mac`'s
    /// whole 16-byte blocks are absorbed between the rounds. Returns the number of blocks.
    #[inline]
    pub(crate) fn batch(
        self,
        state: &[u32; 16],
        counter: u32,
        wanted: usize,
        out: &mut [Lane],
        mac: Option<(&mut Poly1305, &[u8])>,
    ) -> usize {
        match (self.vl, wanted > 8 && out.len() >= 32) {
            // SAFETY: `vl` is true only in a `Simd` made by `avx512vl()`, which saw this CPU
            // report AVX2, AVX-512F and AVX-512VL: every feature `avx512vl::*` enables.
            (true, true) => unsafe { avx512vl::batch16(state, counter, out, mac) },
            // SAFETY: as above.
            (true, false) => unsafe { avx512vl::batch8(state, counter, out, mac) },
            // SAFETY: every `Simd` was made by `avx2()` or `avx512vl()`, and both saw this
            // CPU report AVX2, the one feature `avx2::batch8` enables.
            (false, _) => unsafe { avx2::batch8(state, counter, out, mac) },
        }
    }
}

/// The kernel, for the target features `$features`; the module that expands it supplies
/// `rotl16`, `rotl12`, `rotl8` and `rotl7` for those features.
macro_rules! kernel {
    ($features:literal) => {
        use core::arch::x86_64::*;

        use crate::poly1305::{BLOCK, Poly1305};

        /// Eight blocks; see [`super::Simd::batch`].
        #[target_feature(enable = $features)]
        pub(super) fn batch8(
            state: &[u32; 16],
            counter: u32,
            out: &mut [__m256i],
            mut mac: Option<(&mut Poly1305, &[u8])>,
        ) -> usize {
            let input = initial(state, counter);
            let blocks = mac.as_ref().map_or(0, |(_, data)| data.len() / BLOCK);
            let mut x = input;
            for round in 0..10 {
                column_round(&mut x);
                diagonal_round(&mut x);
                // About a tenth of the Poly1305 blocks per double round: independent of the
                // vector work, so the CPU runs both at once.
                if let Some((poly, data)) = mac.as_mut() {
                    poly.absorb_blocks(
                        &data[round * blocks / 10 * BLOCK..(round + 1) * blocks / 10 * BLOCK],
                    );
                }
            }
            finish(&mut x, &input);
            transpose(&x, &mut out[..16]);
            8
        }

        /// Word `w` of blocks `counter..counter + 8` in vector `w`.
        #[target_feature(enable = $features)]
        #[inline]
        fn initial(state: &[u32; 16], counter: u32) -> [__m256i; 16] {
            let mut input = [_mm256_setzero_si256(); 16];
            for (v, w) in input.iter_mut().zip(state) {
                *v = _mm256_set1_epi32(*w as i32);
            }
            input[12] = _mm256_add_epi32(
                _mm256_set1_epi32(counter as i32),
                _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7),
            );
            input
        }

        /// The feed-forward: add the input words.
        #[target_feature(enable = $features)]
        #[inline]
        fn finish(x: &mut [__m256i; 16], input: &[__m256i; 16]) {
            for (v, i) in x.iter_mut().zip(input) {
                *v = _mm256_add_epi32(*v, *i);
            }
        }

        #[target_feature(enable = $features)]
        #[inline]
        fn column_round(x: &mut [__m256i; 16]) {
            quarter_round(x, 0, 4, 8, 12);
            quarter_round(x, 1, 5, 9, 13);
            quarter_round(x, 2, 6, 10, 14);
            quarter_round(x, 3, 7, 11, 15);
        }

        #[target_feature(enable = $features)]
        #[inline]
        fn diagonal_round(x: &mut [__m256i; 16]) {
            quarter_round(x, 0, 5, 10, 15);
            quarter_round(x, 1, 6, 11, 12);
            quarter_round(x, 2, 7, 8, 13);
            quarter_round(x, 3, 4, 9, 14);
        }

        #[target_feature(enable = $features)]
        #[inline]
        fn quarter_round(x: &mut [__m256i; 16], a: usize, b: usize, c: usize, d: usize) {
            x[a] = _mm256_add_epi32(x[a], x[b]);
            x[d] = rotl16(_mm256_xor_si256(x[d], x[a]));
            x[c] = _mm256_add_epi32(x[c], x[d]);
            x[b] = rotl12(_mm256_xor_si256(x[b], x[c]));
            x[a] = _mm256_add_epi32(x[a], x[b]);
            x[d] = rotl8(_mm256_xor_si256(x[d], x[a]));
            x[c] = _mm256_add_epi32(x[c], x[d]);
            x[b] = rotl7(_mm256_xor_si256(x[b], x[c]));
        }

        /// `x[w]` holds word `w` of blocks 0..8 (lane `k` = block `k`); block `k` goes to
        /// `out[2k]` (words 0..8) and `out[2k + 1]` (words 8..16) of 16 lanes.
        #[target_feature(enable = $features)]
        #[inline]
        fn transpose(x: &[__m256i; 16], out: &mut [__m256i]) {
            // Within each 128-bit half, transpose 4x4 words: t[g][k] holds words
            // 4g..4g+4 of block k (low half) and of block k + 4 (high half).
            let mut t = [[_mm256_setzero_si256(); 4]; 4];
            for (g, tg) in t.iter_mut().enumerate() {
                let w = 4 * g;
                let a0 = _mm256_unpacklo_epi32(x[w], x[w + 1]);
                let a1 = _mm256_unpackhi_epi32(x[w], x[w + 1]);
                let a2 = _mm256_unpacklo_epi32(x[w + 2], x[w + 3]);
                let a3 = _mm256_unpackhi_epi32(x[w + 2], x[w + 3]);
                tg[0] = _mm256_unpacklo_epi64(a0, a2);
                tg[1] = _mm256_unpackhi_epi64(a0, a2);
                tg[2] = _mm256_unpacklo_epi64(a1, a3);
                tg[3] = _mm256_unpackhi_epi64(a1, a3);
            }
            for k in 0..4 {
                out[2 * k] = _mm256_permute2x128_si256::<0x20>(t[0][k], t[1][k]);
                out[2 * k + 1] = _mm256_permute2x128_si256::<0x20>(t[2][k], t[3][k]);
                out[8 + 2 * k] = _mm256_permute2x128_si256::<0x31>(t[0][k], t[1][k]);
                out[8 + 2 * k + 1] = _mm256_permute2x128_si256::<0x31>(t[2][k], t[3][k]);
            }
        }
    };
}

/// AVX2: rotations by 16 and 8 are byte shuffles, by 12 and 7 two shifts and an OR.
mod avx2 {
    kernel!("avx2");

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
}

/// AVX-512VL: every rotation is one `vprold` on a 256-bit register. Batches of sixteen blocks
/// use 512-bit registers: twice the independent work per round hides the rotations'
/// latency (two cycles on AMD Zen 4, where a round of eight blocks waits on it).
mod avx512vl {
    kernel!("avx2,avx512f,avx512vl");

    /// Sixteen blocks, one per 32-bit lane of 512-bit vectors; see [`super::Simd::batch`].
    #[target_feature(enable = "avx2,avx512f,avx512vl")]
    pub(super) fn batch16(
        state: &[u32; 16],
        counter: u32,
        out: &mut [__m256i],
        mut mac: Option<(&mut Poly1305, &[u8])>,
    ) -> usize {
        let mut input = [_mm512_setzero_si512(); 16];
        for (v, w) in input.iter_mut().zip(state) {
            *v = _mm512_set1_epi32(*w as i32);
        }
        input[12] = _mm512_add_epi32(
            _mm512_set1_epi32(counter as i32),
            _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
        );
        let blocks = mac.as_ref().map_or(0, |(_, data)| data.len() / BLOCK);
        let mut x = input;
        for round in 0..10 {
            quarter_round16(&mut x, 0, 4, 8, 12);
            quarter_round16(&mut x, 1, 5, 9, 13);
            quarter_round16(&mut x, 2, 6, 10, 14);
            quarter_round16(&mut x, 3, 7, 11, 15);
            quarter_round16(&mut x, 0, 5, 10, 15);
            quarter_round16(&mut x, 1, 6, 11, 12);
            quarter_round16(&mut x, 2, 7, 8, 13);
            quarter_round16(&mut x, 3, 4, 9, 14);
            if let Some((poly, data)) = mac.as_mut() {
                poly.absorb_blocks(
                    &data[round * blocks / 10 * BLOCK..(round + 1) * blocks / 10 * BLOCK],
                );
            }
        }
        // Blocks 0..8 are the low halves, blocks 8..16 the high halves.
        let mut low = [_mm256_setzero_si256(); 16];
        let mut high = [_mm256_setzero_si256(); 16];
        for w in 0..16 {
            let v = _mm512_add_epi32(x[w], input[w]);
            low[w] = _mm512_extracti64x4_epi64::<0>(v);
            high[w] = _mm512_extracti64x4_epi64::<1>(v);
        }
        let (first, second) = out[..32].split_at_mut(16);
        transpose(&low, first);
        transpose(&high, second);
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
    fn rotl16(x: __m256i) -> __m256i {
        _mm256_rol_epi32::<16>(x)
    }

    #[target_feature(enable = "avx2,avx512f,avx512vl")]
    #[inline]
    fn rotl12(x: __m256i) -> __m256i {
        _mm256_rol_epi32::<12>(x)
    }

    #[target_feature(enable = "avx2,avx512f,avx512vl")]
    #[inline]
    fn rotl8(x: __m256i) -> __m256i {
        _mm256_rol_epi32::<8>(x)
    }

    #[target_feature(enable = "avx2,avx512f,avx512vl")]
    #[inline]
    fn rotl7(x: __m256i) -> __m256i {
        _mm256_rol_epi32::<7>(x)
    }
}
