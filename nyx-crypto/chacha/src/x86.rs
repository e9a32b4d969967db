//! The x86-64 kernels: eight ChaCha20 blocks at once, one block per 32-bit lane of 256-bit
//! vectors, with Poly1305 absorbed between the double rounds; four blocks (two per vector)
//! for the last one to four blocks a message needs; on AVX2 alone, twelve (those eight and
//! four, their rounds in one loop) for the last 9-12 blocks of keystream; on AVX-512,
//! sixteen blocks in 512-bit vectors for long keystream, and twenty (those sixteen beside
//! four of the two-per-vector kind, their rounds in one loop) for a message of 17-20
//! blocks, a cell's size; and on AVX-512 IFMA, Poly1305 itself four blocks at a time in
//! vector lanes.
//!
//! Three builds of the same ChaCha20 kernel (one macro): AVX2; AVX2 + AVX-512F +
//! AVX-512VL, which rotates with one instruction (`vprold`) where AVX2 needs a shuffle or two
//! shifts and an OR, and has 32 vector registers, so the 16 state vectors never spill; and
//! that plus AVX-512 IFMA (52-bit multiply-add), whose kernel absorbs Poly1305 in vector
//! lanes (`avx512ifma::Lanes`) instead of on the scalar multiplier.
//!
//! This is the crate's only unsafe code, and all of it is the call into a
//! `#[target_feature]` function, which is sound only on a CPU that has the feature. A
//! [`Simd`] is that proof: its fields are private, so it exists only if one of its
//! constructors saw the features reported by the CPU (`is_x86_feature_detected!`).
//! Inside the kernels every intrinsic is safe to call (their features are enabled); the
//! keystream is XORed into the message through slices (`bytemuck::pod_read_unaligned` in,
//! `bytemuck::bytes_of` out) or stored into an array of vectors (`Batch`), which the rest of
//! the crate reads through `bytemuck`'s safe byte views: no raw pointer is touched.
#![allow(unsafe_code)]

use crate::batch::{Job, Xor};
use crate::poly1305::{BLOCK, Poly1305};

/// Proof that this CPU runs AVX2; with `vl`, also AVX-512F and AVX-512VL; with `ifma`, also
/// AVX-512 IFMA.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Simd {
    vl: bool,
    ifma: bool,
}

impl Simd {
    /// AVX2, if the CPU has it.
    pub(crate) fn avx2() -> Option<Simd> {
        std::is_x86_feature_detected!("avx2").then_some(Simd {
            vl: false,
            ifma: false,
        })
    }

    /// AVX2 with AVX-512F and AVX-512VL, if the CPU has them.
    pub(crate) fn avx512vl() -> Option<Simd> {
        (std::is_x86_feature_detected!("avx2")
            && std::is_x86_feature_detected!("avx512f")
            && std::is_x86_feature_detected!("avx512vl"))
        .then_some(Simd {
            vl: true,
            ifma: false,
        })
    }

    /// [`Simd::avx512vl`] plus AVX-512 IFMA, if the CPU has them all.
    pub(crate) fn avx512ifma() -> Option<Simd> {
        Simd::avx512vl()
            .filter(|_| std::is_x86_feature_detected!("avx512ifma"))
            .map(|simd| Simd { ifma: true, ..simd })
    }

    /// Keystream blocks from `counter` for `job`: four when `wanted` is at most four; when no
    /// MAC rides along and the CPU has 512-bit vectors, twenty when it asks for 17-20 and
    /// sixteen when it asks for more than eight; when no MAC rides along and it has only
    /// AVX2, twelve when it asks for 9-12 (a cell's 18 blocks are eight, then twelve); else
    /// eight. The MAC's whole 16-byte blocks are absorbed between the rounds. Returns the
    /// number of blocks.
    ///
    /// An AEAD keeps to eight: a seal of a cell's 19 blocks as twelve, then eight leaves
    /// more of Poly1305 to run after the rounds, and took 859 ns against 808 for eight,
    /// eight, four (docs/benchmarks.md, session 42).
    #[inline]
    pub(crate) fn batch(
        self,
        state: &[u32; 16],
        counter: u32,
        wanted: usize,
        job: &mut Job<'_>,
    ) -> usize {
        let with_mac = matches!(job, Job::Xor(Xor { mac: Some(_), .. }));
        let len = self.batch_len(wanted, with_mac);
        match (self.vl, self.ifma) {
            // SAFETY: `vl` is true only in a `Simd` made by `avx512vl()` (or from one by
            // `avx512ifma()`), which saw this CPU report AVX2, AVX-512F and AVX-512VL: every
            // feature `avx512vl::*` enables.
            (true, _) if len == 16 => unsafe { avx512vl::batch16(state, counter, job) },
            // SAFETY: as for `batch16`.
            (true, _) if len == 20 => unsafe { avx512vl::batch20(state, counter, job) },
            // SAFETY: `ifma` is true only in a `Simd` made by `avx512ifma()`, which saw this
            // CPU report those features and AVX-512 IFMA: every feature `avx512ifma::*`
            // enables.
            (true, true) if len == 4 => unsafe { avx512ifma::batch4(state, counter, job) },
            // SAFETY: as for `avx512ifma::batch4`.
            (true, true) => unsafe { avx512ifma::batch8(state, counter, job) },
            // SAFETY: as for `batch16`.
            (true, false) if len == 4 => unsafe { avx512vl::batch4(state, counter, job) },
            // SAFETY: as for `batch16`.
            (true, false) => unsafe { avx512vl::batch8(state, counter, job) },
            // SAFETY: every `Simd` was made by one of the constructors, and all saw this CPU
            // report AVX2, the one feature `avx2::batch4` enables.
            (false, _) if len == 4 => unsafe { avx2::batch4(state, counter, job) },
            // SAFETY: as for `avx2::batch4`; AVX2 is the one feature `avx2::batch12` enables.
            (false, _) if len == 12 => unsafe { avx2::batch12(state, counter, job) },
            // SAFETY: as for `avx2::batch4`; AVX2 is the one feature `avx2::batch8` enables.
            (false, _) => unsafe { avx2::batch8(state, counter, job) },
        }
    }

    /// See [`Simd::batch`].
    #[inline]
    pub(crate) fn batch_len(self, wanted: usize, with_mac: bool) -> usize {
        if wanted <= 4 {
            4
        } else if !self.vl && !with_mac && (9..=12).contains(&wanted) {
            12
        } else if self.vl && !with_mac && (17..=20).contains(&wanted) {
            20
        } else if self.vl && !with_mac && wanted > 8 {
            16
        } else {
            8
        }
    }

    /// `data ^= keystream`, 32 bytes at a time.
    #[inline]
    pub(crate) fn xor(self, keystream: &[u8], data: &mut [u8]) {
        // SAFETY: every `Simd` saw this CPU report AVX2, the one feature `avx2::xor` enables.
        unsafe { avx2::xor(keystream, data) }
    }

    /// Whether batches of twenty blocks exist (AVX-512VL).
    pub(crate) fn has_batch20(self) -> bool {
        self.vl
    }

    /// Whether [`Simd::absorb`] and the stitched kernels run Poly1305 in vector lanes.
    pub(crate) fn mac_in_vectors(self) -> bool {
        self.ifma
    }

    /// Absorb `data` into `poly` as the AEAD pads it (a short last block zero-padded): in
    /// vector lanes, four blocks at a time, on AVX-512 IFMA; on the scalar code otherwise.
    /// Below four groups (and with the accumulator still scalar) the scalar code is
    /// cheaper than moving into the lanes and back (`r^2`..`r^4`, the fold), so this is
    /// where that choice is made; the kernel itself always works in the lanes.
    #[inline]
    pub(crate) fn absorb(self, poly: &mut Poly1305, data: &[u8]) {
        if self.ifma && (poly.is_wide() || data.len() >= 4 * 64) {
            // SAFETY: as for `avx512ifma::batch8` above.
            unsafe { avx512ifma::absorb(poly, data) }
        } else {
            poly.update_padded(data);
        }
    }
}

/// Stitching on the scalar multiplier: about a tenth of the MAC's blocks after each double
/// round, independent of the vector work, so the CPU runs both at once.
struct ScalarMac<'a> {
    poly: &'a mut Poly1305,
    data: &'a [u8],
    blocks: usize,
}

impl<'a> ScalarMac<'a> {
    #[inline(always)]
    fn start(poly: &'a mut Poly1305, data: &'a [u8]) -> Self {
        poly.narrow();
        let blocks = data.len() / BLOCK;
        ScalarMac { poly, data, blocks }
    }

    #[inline(always)]
    fn round(&mut self, round: usize) {
        let (from, to) = (round * self.blocks / 10, (round + 1) * self.blocks / 10);
        self.poly
            .absorb_blocks(&self.data[from * BLOCK..to * BLOCK]);
    }

    #[inline(always)]
    fn finish(self) {}
}

/// Ten double rounds, each `$double_round` (a statement on the caller's state), with the
/// MAC of `$job` (if it carries one) stitched in by `$mac` after each: the loop both
/// kernels of `kernel!` share. A macro, not a function, so that the rounds and the MAC
/// steps stay in the kernel's own body, where nothing spills the state vectors.
macro_rules! stitched_rounds {
    ($mac:ident, $job:expr, $double_round:stmt) => {
        if let Job::Xor(Xor {
            buf,
            mac: Some((poly, range)),
            ..
        }) = $job
        {
            let mut mac = $mac::start(poly, &buf[range.clone()]);
            for round in 0..10 {
                $double_round
                mac.round(round);
            }
            mac.finish();
        } else {
            for _ in 0..10 {
                $double_round
            }
        }
    };
}

/// The kernel, for the target features `$features`, stitching Poly1305 in with `$mac` (a
/// type with `start(poly, data)`, `round(round)` called after each double round, and
/// `finish()`); the module that expands it supplies `rotl16`, `rotl12`, `rotl8` and `rotl7`
/// for those features.
macro_rules! kernel {
    ($features:literal, $mac:ident) => {
        use core::arch::x86_64::*;

        use crate::batch::{Job, Xor};

        /// Eight blocks; see [`super::Simd::batch`].
        #[target_feature(enable = $features)]
        pub(super) fn batch8(state: &[u32; 16], counter: u32, job: &mut Job<'_>) -> usize {
            let mut input = initial(state, counter);
            let mut x = input;
            stitched_rounds!($mac, job, {
                column_round(&mut x);
                diagonal_round(&mut x);
            });
            finish(&mut x, &input);
            match job {
                Job::Keep(out) => transpose(&x, &mut out[..16]),
                Job::Xor(xor) => {
                    let mut lanes = [_mm256_setzero_si256(); 16];
                    transpose(&x, &mut lanes);
                    emit(&mut lanes, xor);
                }
            }
            // `input` holds the key words, and `x` was the permuted state (invertible back to
            // the key) before the feed-forward: wipe both rather than leave them on the stack.
            // Copies in registers and spills the compiler made are beyond our reach.
            zeroize::Zeroize::zeroize(&mut input);
            zeroize::Zeroize::zeroize(&mut x);
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

        /// Hand a batch's lanes to `xor` (see [`Xor`]). If it takes block 0 (the
        /// AEAD's one-time key), that block's copy here is wiped; the other lanes are
        /// keystream already XORed into the message and are left for the stack to reuse.
        #[target_feature(enable = $features)]
        #[inline]
        fn emit(lanes: &mut [__m256i], xor: &mut Xor<'_>) {
            xor.emit(
                lanes,
                |dst, lane| *dst = lane,
                |data, lane| {
                    let x = _mm256_xor_si256(bytemuck::pod_read_unaligned(data), lane);
                    data.copy_from_slice(bytemuck::bytes_of(&x));
                },
            );
            if xor.head.is_some() {
                for lane in &mut lanes[..2] {
                    zeroize::Zeroize::zeroize(lane);
                }
            }
        }

        /// Four blocks, for the last few of a message: two per set of four vectors, each
        /// vector holding one row of the 4x4 state of two blocks (one per 128-bit half), so the
        /// diagonal round is a rotation of three rows within each half (`vpshufd`). A double
        /// round takes 38 vector operations for two blocks where [`batch8`] takes 32 (on AVX2,
        /// whose rotations by 12 and 7 take three), but an eight-block batch for a tail of one
        /// to four blocks computes two to eight times the blocks needed: a 1152-byte cell sealed
        /// needs 19 blocks, and gets 20 instead of 24. The two sets are independent, so their
        /// chains interleave. Every build has it; on Zen 4 (AVX-512 IFMA) it took about 7% off a
        /// 1152-byte seal, a seal and open, and a keystream pass (docs/benchmarks.md, session 28).
        #[target_feature(enable = $features)]
        pub(super) fn batch4(state: &[u32; 16], counter: u32, job: &mut Job<'_>) -> usize {
            let mut input = rows_input(state, counter);
            let mut x = input;
            stitched_rounds!($mac, job, double_round_rows(&mut x));
            let mut lanes = [_mm256_setzero_si256(); 8];
            rows_output(&x, &input, &mut lanes);
            match job {
                Job::Keep(out) => out[..8].copy_from_slice(&lanes),
                Job::Xor(xor) => emit(&mut lanes, xor),
            }
            // As in `batch8`: the input rows hold the key, and `x` inverts back to it.
            zeroize::Zeroize::zeroize(&mut input);
            zeroize::Zeroize::zeroize(&mut x);
            4
        }

        /// The rows of blocks `counter..counter + 4` for [`batch4`]: set `s` (vectors `4s..4s
        /// + 4`) holds blocks `counter + 2s` (lower half) and `counter + 2s + 1` (upper half).
        #[target_feature(enable = $features)]
        #[inline]
        fn rows_input(state: &[u32; 16], counter: u32) -> [__m256i; 8] {
            let row = |i: usize| {
                let w = |j: usize| state[4 * i + j] as i32;
                _mm256_setr_epi32(w(0), w(1), w(2), w(3), w(0), w(1), w(2), w(3))
            };
            // Word 12 is the block counter.
            let d = |first: u32| {
                let d = row(3);
                let c =
                    _mm256_setr_epi32(first as i32, 0, 0, 0, first.wrapping_add(1) as i32, 0, 0, 0);
                _mm256_blend_epi32::<0b0001_0001>(d, c)
            };
            [
                row(0),
                row(1),
                row(2),
                d(counter),
                row(0),
                row(1),
                row(2),
                d(counter.wrapping_add(2)),
            ]
        }

        /// Feed forward the rows, then block `2s + h` of set `s` (half `h`) is rows 0-1 and
        /// 2-3 of that half: `out[4s + 2h]` and `out[4s + 2h + 1]` of 8 lanes.
        #[target_feature(enable = $features)]
        #[inline]
        fn rows_output(x: &[__m256i; 8], input: &[__m256i; 8], out: &mut [__m256i]) {
            for s in 0..2 {
                let v: [__m256i; 4] =
                    std::array::from_fn(|r| _mm256_add_epi32(x[4 * s + r], input[4 * s + r]));
                out[4 * s] = _mm256_permute2x128_si256::<0x20>(v[0], v[1]);
                out[4 * s + 1] = _mm256_permute2x128_si256::<0x20>(v[2], v[3]);
                out[4 * s + 2] = _mm256_permute2x128_si256::<0x31>(v[0], v[1]);
                out[4 * s + 3] = _mm256_permute2x128_si256::<0x31>(v[2], v[3]);
            }
        }

        /// A column round on rows `x[0..4]` and `x[4..8]` (two blocks each), then the diagonal
        /// round: rows 1, 2 and 3 rotated left by one, two and three words within each half so
        /// that the diagonals line up as columns, and back.
        #[target_feature(enable = $features)]
        #[inline]
        fn double_round_rows(x: &mut [__m256i; 8]) {
            for step in 0..4 {
                rows_step(x, step);
            }
            turn_rows::<0x39, 0x93>(x);
            for step in 0..4 {
                rows_step(x, step);
            }
            turn_rows::<0x93, 0x39>(x);
        }

        /// Step `step` (0-3) of the quarter round on the four columns of both sets at once:
        /// an add, an XOR and a rotation on each set, the two sets' steps interleaved.
        #[target_feature(enable = $features)]
        #[inline]
        fn rows_step(x: &mut [__m256i; 8], step: usize) {
            for s in [0, 4] {
                match step {
                    0 => {
                        x[s] = _mm256_add_epi32(x[s], x[s + 1]);
                        x[s + 3] = rotl16(_mm256_xor_si256(x[s + 3], x[s]));
                    }
                    1 => {
                        x[s + 2] = _mm256_add_epi32(x[s + 2], x[s + 3]);
                        x[s + 1] = rotl12(_mm256_xor_si256(x[s + 1], x[s + 2]));
                    }
                    2 => {
                        x[s] = _mm256_add_epi32(x[s], x[s + 1]);
                        x[s + 3] = rotl8(_mm256_xor_si256(x[s + 3], x[s]));
                    }
                    _ => {
                        x[s + 2] = _mm256_add_epi32(x[s + 2], x[s + 3]);
                        x[s + 1] = rotl7(_mm256_xor_si256(x[s + 1], x[s + 2]));
                    }
                }
            }
        }

        /// Rows 1 and 3 of both sets shuffled by `ROW1` and `ROW3` within each half, row 2
        /// by two words: `<0x39, 0x93>` lines the diagonals up as columns, `<0x93, 0x39>`
        /// turns them back.
        #[target_feature(enable = $features)]
        #[inline]
        fn turn_rows<const ROW1: i32, const ROW3: i32>(x: &mut [__m256i; 8]) {
            for s in [0, 4] {
                x[s + 1] = _mm256_shuffle_epi32::<ROW1>(x[s + 1]);
                x[s + 2] = _mm256_shuffle_epi32::<0x4e>(x[s + 2]);
                x[s + 3] = _mm256_shuffle_epi32::<ROW3>(x[s + 3]);
            }
        }
    };
}

/// AVX2 (`x86/avx2.rs`).
mod avx2;

/// AVX-512VL (`x86/avx512vl.rs`).
mod avx512vl;

/// AVX-512 IFMA: the AVX-512VL kernel with Poly1305 in vector lanes (`x86/avx512ifma.rs`).
mod avx512ifma;
