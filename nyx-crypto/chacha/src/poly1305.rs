//! Poly1305 (RFC 8439 section 2.5), scalar, in radix 2^64.
//!
//! Why our own: RustCrypto's `poly1305` 0.9 picks its AVX2 backend at run time, but in a
//! portable build the backend's helpers are compiled without AVX2, so every vector
//! intrinsic becomes a function call and a 1280-byte MAC costs about 1.6 µs (docs/benchmarks.md
//! has the profile). This scalar version needs no CPU feature and has no per-message setup.
//! Being scalar is also what lets it overlap with ChaCha20: the AEAD absorbs Poly1305 blocks
//! on the integer multiplier between the rounds the vector units compute (`stitched.rs`). It is
//! checked against RFC 8439's vectors (below) and, differentially, against the `poly1305`
//! crate (`tests/differential.rs`).
//!
//! The accumulator `h = h0 + 2^64 h1 + 2^128 h2` is kept below `2^130 + 2^128`; the clamped
//! key `r = r0 + 2^64 r1` has `r0, r1 < 2^60` and `4 | r1`, so with `s1 = r1 + r1 / 4`
//! (`= 5 r1 / 4`), using `2^130 ≡ 5 (mod p)`:
//!
//! ```text
//! h · r ≡ (h0 r0 + h1 s1) + 2^64 (h0 r1 + h1 r0 + h2 s1) + 2^128 (h2 r0)   (mod 2^130 − 5)
//! ```
//!
//! Each product fits a `u128` with room for the sums; the carry out of bit 130 is folded back
//! as `5 · (h2 >> 2)`. Everything is constant time: no branch or index depends on secret data.

use zeroize::{Zeroize, ZeroizeOnDrop};

use crate::TAG_LEN;

/// Bytes in a Poly1305 key (`r || s`).
pub(crate) const KEY_LEN: usize = 32;
/// Bytes in a Poly1305 block.
pub(crate) const BLOCK: usize = 16;

/// A Poly1305 computation in progress. Holds key material: wiped on drop, never printed.
#[derive(Zeroize, ZeroizeOnDrop)]
pub struct Poly1305 {
    r0: u64,
    r1: u64,
    s1: u64,
    h0: u64,
    h1: u64,
    h2: u64,
    s: [u64; 2],
    /// The vector kernels' form of the accumulator, in use while `wide.active`.
    wide: Wide,
}

/// Poly1305's accumulator as the vector kernels keep it: four lanes, lane `k` absorbing
/// block `k` of every group of four (in the order `0, 2, 1, 3`, the order the kernels load
/// the blocks in), each lane's value in three limbs of 44, 44 and 42 bits, the width AVX-512
/// IFMA's 52-bit multipliers take with room for sums.
///
/// Meaning: the true accumulator is `h = Σ_k acc_k · r^e(k)`, with `e = 4, 2, 3, 1` for
/// lanes `0, 1, 2, 3`, because each group updates `acc_k ← acc_k · r^4 + m_k` (the first
/// one `acc_k ← acc_k + m_k`, with the scalar accumulator in lane 0 before it).
/// [`Poly1305::narrow`] folds the lanes back with Horner's rule, which is exactly that sum.
/// Wiped with the rest of the state.
#[derive(Default, Zeroize)]
pub(crate) struct Wide {
    /// Limb `i` of lanes `0..4` in `acc[i]`; below 2^45 between groups.
    pub(crate) acc: [[u64; 4]; 3],
    /// Limb `i` of each lane's power of r in the sum above (`r^4, r^2, r^3, r`, partly
    /// reduced: limbs below 2^44, 2^44, 2^43) once `has_powers`. Lane 0's, `r^4`, is also
    /// what every group multiplies by; all four fold the lanes back in vectors
    /// ([`Poly1305::narrow_from`]).
    pub(crate) powers: [[u64; 4]; 3],
    /// No group absorbed yet: the next is added, not multiplied in.
    pub(crate) fresh: bool,
    /// `acc` holds the accumulator (the scalar `h` is zero).
    pub(crate) active: bool,
    has_powers: bool,
}

/// The low 44 bits: the width of the lower two limbs.
const M44: u64 = (1 << 44) - 1;
/// The low 42 bits: the width of the top limb.
const M42: u64 = (1 << 42) - 1;

impl Poly1305 {
    /// Start a MAC under the one-time key `key` (`r || s`, clamped here).
    pub fn new(key: &[u8; KEY_LEN]) -> Self {
        let r0 = le64(&key[0..8]) & 0x0fff_fffc_0fff_ffff;
        let r1 = le64(&key[8..16]) & 0x0fff_fffc_0fff_fffc;
        Poly1305 {
            r0,
            r1,
            s1: r1 + (r1 >> 2),
            h0: 0,
            h1: 0,
            h2: 0,
            s: [le64(&key[16..24]), le64(&key[24..32])],
            wide: Wide::default(),
        }
    }

    /// The accumulator in the vector kernels' form, converting the scalar one (and
    /// computing the powers of r) on the first call; later calls return it as the kernel
    /// left it.
    #[cfg(target_arch = "x86_64")]
    pub(crate) fn widen(&mut self) -> &mut Wide {
        if !self.wide.has_powers {
            // r^2, r^3, r^4: steps of `h = (h + v) · r` from h = 0, v = r, then v = 0.
            let r = (self.r0, self.r1, self.s1);
            let r2 = add_mul((0, 0, 0), (self.r0, self.r1, 0), r);
            let r3 = add_mul(r2, (0, 0, 0), r);
            let r4 = add_mul(r3, (0, 0, 0), r);
            let lanes = [r4, r2, r3, (self.r0, self.r1, 0)];
            for (k, (v0, v1, v2)) in lanes.into_iter().enumerate() {
                for (i, l) in limbs(v0, v1, v2).into_iter().enumerate() {
                    self.wide.powers[i][k] = l;
                }
            }
            self.wide.has_powers = true;
        }
        if !self.wide.active {
            self.wide.acc = [[0; 4]; 3];
            for (a, l) in self
                .wide
                .acc
                .iter_mut()
                .zip(limbs(self.h0, self.h1, self.h2))
            {
                a[0] = l;
            }
            (self.h0, self.h1, self.h2) = (0, 0, 0);
            self.wide.fresh = true;
            self.wide.active = true;
        }
        &mut self.wide
    }

    /// Fold the vector kernels' lanes back into the scalar accumulator (a no-op when they
    /// hold nothing).
    #[inline(always)]
    pub(crate) fn narrow(&mut self) {
        if self.wide.active {
            self.fold_lanes();
        }
    }

    /// Horner's rule over lanes `0, 2, 1, 3`, so lane 0 gets `r^4`, lane 2 `r^3`, lane 1
    /// `r^2` and lane 3 `r`, which is what [`Wide`]'s meaning asks for.
    #[inline(never)]
    fn fold_lanes(&mut self) {
        let acc = self.wide.acc;
        let lane = |k: usize| value([acc[0][k], acc[1][k], acc[2][k]]);
        if self.wide.fresh {
            // Only the scalar accumulator, unmultiplied, in lane 0.
            (self.h0, self.h1, self.h2) = lane(0);
        } else {
            for k in [0, 2, 1, 3] {
                let (v0, v1, v2) = lane(k);
                self.add_mul(v0, v1, v2);
            }
        }
        self.wide.acc.zeroize();
        self.wide.active = false;
    }

    /// Whether the vector kernels hold the accumulator.
    #[cfg(target_arch = "x86_64")]
    pub(crate) fn is_wide(&self) -> bool {
        self.wide.active
    }

    /// Take back the accumulator from the vector kernels, which have folded the lanes
    /// (each multiplied by its power in `Wide::powers`) into `sums`: three limbs of weights
    /// 2^0, 2^44, 2^88, each below 2^52.
    #[cfg(target_arch = "x86_64")]
    pub(crate) fn narrow_from(&mut self, sums: [u64; 3]) {
        (self.h0, self.h1, self.h2) = value(sums);
        self.wide.acc.zeroize();
        self.wide.active = false;
    }

    /// Absorb `data` as 16-byte blocks, the last one zero-padded to 16 bytes (RFC 8439's
    /// AEAD construction pads every field this way, so each block carries the 2^128 bit).
    pub fn update_padded(&mut self, data: &[u8]) {
        if data.is_empty() {
            return;
        }
        self.narrow();
        let mut chunks = data.chunks_exact(BLOCK);
        for block in &mut chunks {
            self.add_mul(le64(&block[0..8]), le64(&block[8..16]), 1);
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut last = [0u8; BLOCK];
            last[..rest.len()].copy_from_slice(rest);
            self.add_mul(le64(&last[0..8]), le64(&last[8..16]), 1);
        }
    }

    /// [`update_padded`](Self::update_padded) on the fastest code this CPU has: in vector
    /// lanes, four blocks at a time, on AVX-512 IFMA once `data` is long enough to pay for
    /// entering them (four 64-byte groups), on the scalar multiplier otherwise. The same
    /// result either way. For constructions that compose the AEAD themselves (NyxNet's
    /// client checks a backward cell's tag before it decrypts, for hops other than the
    /// last), where the scalar chain would be the larger part of the work: a kilobyte is
    /// about 70 dependent multiplications there.
    pub fn absorb_padded(&mut self, data: &[u8]) {
        match crate::Backend::detect().kernel() {
            #[cfg(target_arch = "x86_64")]
            crate::backend::Kernel::Simd(kernel) => kernel.absorb(self, data),
            _ => self.update_padded(data),
        }
    }

    /// Absorb whole 16-byte blocks: `data.len()` must be a multiple of 16 (a remainder is
    /// ignored). The stitched kernels call this between ChaCha20 rounds, so it calls
    /// nothing (a call there would spill every vector register): the accumulator must be
    /// scalar already ([`Poly1305::narrow`]).
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    pub(crate) fn absorb_blocks(&mut self, data: &[u8]) {
        debug_assert!(!self.wide.active, "absorb_blocks on a wide accumulator");
        for block in data.chunks_exact(BLOCK) {
            self.add_mul(le64(&block[0..8]), le64(&block[8..16]), 1);
        }
    }

    /// Finish a plain Poly1305 message (RFC 8439 section 2.5, not the AEAD's padding): a
    /// short final block gets a `0x01` byte after it instead of the 2^128 bit. The AEAD
    /// never needs this; it is here for Poly1305's own test vectors.
    pub fn finish_message(mut self, data: &[u8]) -> [u8; TAG_LEN] {
        self.narrow();
        let mut chunks = data.chunks_exact(BLOCK);
        for block in &mut chunks {
            self.add_mul(le64(&block[0..8]), le64(&block[8..16]), 1);
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut last = [0u8; BLOCK];
            last[..rest.len()].copy_from_slice(rest);
            last[rest.len()] = 1;
            self.add_mul(le64(&last[0..8]), le64(&last[8..16]), 0);
        }
        self.finalize()
    }

    /// `h = (h + v) · r mod p`: see [`add_mul`].
    #[inline(always)]
    fn add_mul(&mut self, v0: u64, v1: u64, v2: u64) {
        (self.h0, self.h1, self.h2) = add_mul(
            (self.h0, self.h1, self.h2),
            (v0, v1, v2),
            (self.r0, self.r1, self.s1),
        );
    }

    /// Reduce fully and add `s`: the tag.
    pub fn finalize(mut self) -> [u8; TAG_LEN] {
        // Dropping `self` wipes the state.
        self.tag()
    }

    /// The tag over what has been absorbed, leaving the state in place (the AEAD's
    /// state is large enough that moving it into [`Poly1305::finalize`] costs a copy).
    #[inline]
    pub(crate) fn tag(&mut self) -> [u8; TAG_LEN] {
        self.narrow();
        let (h0, h1, _) = reduce((self.h0, self.h1, self.h2));

        let (t0, c) = h0.overflowing_add(self.s[0]);
        let t1 = h1.wrapping_add(self.s[1]).wrapping_add(u64::from(c));
        let mut tag = [0u8; TAG_LEN];
        tag[..8].copy_from_slice(&t0.to_le_bytes());
        tag[8..].copy_from_slice(&t1.to_le_bytes());
        tag
    }
}

/// `h = (h + v) · r mod p`, partially reduced, for `h = h0 + 2^64 h1 + 2^128 h2` with
/// `h2 <= 4`, `v = v0 + 2^64 v1 + 2^128 v2` a message block (`v2` its 2^128 bit) or a lane
/// of [`Wide`] (`v2 <= 3`), and `r = (r0, r1, s1)` clamped as in the module's comment. The
/// sum's top word is then at most 9, so `h2 · r0 < 2^64` (`r0 < 2^60`) and the fold cannot
/// overflow either; the result again has `h2 <= 4`.
#[inline(always)]
fn add_mul(h: (u64, u64, u64), v: (u64, u64, u64), r: (u64, u64, u64)) -> (u64, u64, u64) {
    let (r0, r1, s1) = r;
    let (h0, c) = h.0.overflowing_add(v.0);
    let (h1, c1) = h.1.overflowing_add(v.1);
    let (h1, c2) = h1.overflowing_add(u64::from(c));
    let h2 = h.2 + v.2 + u64::from(c1) + u64::from(c2);

    // h * r
    let d0 = mul(h0, r0) + mul(h1, s1);
    let d1 = mul(h0, r1) + mul(h1, r0) + mul(h2, s1);
    let d2 = h2 * r0;

    // Carry d0 -> d1 -> d2.
    let h0 = d0 as u64;
    let d1 = d1 + (d0 >> 64);
    let h1 = d1 as u64;
    let d2 = d2 + (d1 >> 64) as u64;

    // Fold the bits above 2^130 back in: 2^130 ≡ 5.
    let c = (d2 >> 2) * 5;
    let (h0, c0) = h0.overflowing_add(c);
    let (h1, c1) = h1.overflowing_add(u64::from(c0));
    (h0, h1, (d2 & 3) + u64::from(c1))
}

/// `h mod p` for `h < 2^130 + 2^128 < 2p`: one conditional subtraction of p reduces it.
/// With g = h + 5, if g reaches 2^130 then h >= p and h - p is g's low 130 bits.
fn reduce(h: (u64, u64, u64)) -> (u64, u64, u64) {
    let (g0, c) = h.0.overflowing_add(5);
    let (g1, c) = h.1.overflowing_add(u64::from(c));
    let g2 = h.2 + u64::from(c);
    // all ones when h >= p, else zero.
    let use_g = 0u64.wrapping_sub(g2 >> 2);
    (
        (g0 & use_g) | (h.0 & !use_g),
        (g1 & use_g) | (h.1 & !use_g),
        (g2 & 3 & use_g) | (h.2 & !use_g),
    )
}

/// `v0 + 2^64 v1 + 2^128 v2` (`v2 <= 4`) in limbs of 44, 44 and 42 bits; the top one
/// takes what is above 2^88, so it stays below 2^43.
#[cfg(target_arch = "x86_64")]
fn limbs(v0: u64, v1: u64, v2: u64) -> [u64; 3] {
    [
        v0 & M44,
        ((v0 >> 44) | (v1 << 20)) & M44,
        (v1 >> 24) | (v2 << 40),
    ]
}

/// A lane's limbs (each below 2^52) carried and folded into `v0 + 2^64 v1 + 2^128 v2`,
/// congruent mod p, with `v2 <= 3`.
fn value(mut l: [u64; 3]) -> (u64, u64, u64) {
    l[1] += l[0] >> 44;
    l[0] &= M44;
    l[2] += l[1] >> 44;
    l[1] &= M44;
    l[0] += 5 * (l[2] >> 42);
    l[2] &= M42;
    l[1] += l[0] >> 44;
    l[0] &= M44;
    // l[1] may exceed 44 bits by a few units; the sum still stays below 2^128.
    let low =
        u128::from(l[0]) + (u128::from(l[1]) << 44) + (u128::from(l[2] & ((1 << 40) - 1)) << 88);
    (low as u64, (low >> 64) as u64, l[2] >> 40)
}

impl std::fmt::Debug for Poly1305 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Poly1305 { .. }")
    }
}

#[inline(always)]
fn mul(a: u64, b: u64) -> u128 {
    u128::from(a) * u128::from(b)
}

#[inline(always)]
fn le64(b: &[u8]) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[..8]);
    u64::from_le_bytes(a)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    fn key(s: &str) -> [u8; 32] {
        hex(s).try_into().unwrap()
    }

    /// RFC 8439 section 2.5.2.
    #[test]
    fn rfc8439_2_5_2() {
        let k = key("85d6be7857556d337f4452fe42d506a80103808afb0db2fd4abff6af4149f51b");
        let tag = Poly1305::new(&k).finish_message(b"Cryptographic Forum Research Group");
        assert_eq!(tag.to_vec(), hex("a8061dc1305136c6c22b8baf0c0127a9"));
    }

    /// RFC 8439 appendix A.3, Poly1305 test vectors #1, #2 and #5 to #11 (#5 to #11 stress the
    /// final reduction and the carries).
    #[test]
    fn rfc8439_appendix_a3() {
        // With r = 0 the tag is s whatever the message (RFC test vector #2 uses a long text).
        let text = [0xa5u8; 375];
        let cases: Vec<(String, Vec<u8>, &str)> = vec![
            (
                "00".repeat(32),
                vec![0u8; 64],
                "00000000000000000000000000000000",
            ),
            (
                format!("{}{}", "00".repeat(16), "36e5f6b5c5e06070f0efca96227a863e"),
                text.to_vec(),
                "36e5f6b5c5e06070f0efca96227a863e",
            ),
            (
                format!("02{}", "00".repeat(31)),
                hex("ffffffffffffffffffffffffffffffff"),
                "03000000000000000000000000000000",
            ),
            (
                format!("02{}{}", "00".repeat(15), "ff".repeat(16)),
                hex("02000000000000000000000000000000"),
                "03000000000000000000000000000000",
            ),
            (
                format!("01{}", "00".repeat(31)),
                hex(
                    "fffffffffffffffffffffffffffffffff0ffffffffffffffffffffffffffffff11000000000000000000000000000000",
                ),
                "05000000000000000000000000000000",
            ),
            (
                format!("01{}", "00".repeat(31)),
                hex(
                    "fffffffffffffffffffffffffffffffffbfefefefefefefefefefefefefefefe01010101010101010101010101010101",
                ),
                "00000000000000000000000000000000",
            ),
            (
                format!("02{}", "00".repeat(31)),
                hex("fdffffffffffffffffffffffffffffff"),
                "faffffffffffffffffffffffffffffff",
            ),
            (
                format!("01000000000000000400000000000000{}", "00".repeat(16)),
                hex(
                    "e33594d7505e43b900000000000000003394d7505e4379cd01000000000000000000000000000000000000000000000001000000000000000000000000000000",
                ),
                "14000000000000005500000000000000",
            ),
            (
                format!("01000000000000000400000000000000{}", "00".repeat(16)),
                hex(
                    "e33594d7505e43b900000000000000003394d7505e4379cd010000000000000000000000000000000000000000000000",
                ),
                "13000000000000000000000000000000",
            ),
        ];
        for (i, (k, msg, want)) in cases.iter().enumerate() {
            let tag = Poly1305::new(&key(k)).finish_message(msg);
            assert_eq!(tag.to_vec(), hex(want), "case {i}");
        }
    }

    #[test]
    fn padded_update_equals_message_of_padded_blocks() {
        let k = [0x42u8; 32];
        let msg: Vec<u8> = (0..37u8).collect();
        let mut padded = msg.clone();
        padded.resize(48, 0);
        let mut a = Poly1305::new(&k);
        a.update_padded(&msg);
        assert_eq!(a.finalize(), Poly1305::new(&k).finish_message(&padded));
    }

    /// `absorb_padded` (vector lanes on an AVX-512 IFMA CPU, as on the machines these
    /// tests run on; the scalar code elsewhere) gives `update_padded`'s tag at every length
    /// a cell's MAC takes and around the 256 bytes where the lanes start, alone and after
    /// a short field (a forward layer's header), in several calls.
    #[test]
    fn absorb_padded_equals_update_padded() {
        let k: [u8; 32] = std::array::from_fn(|i| (i as u8).wrapping_mul(29) ^ 0xa5);
        let data: Vec<u8> = (0..1300u32).map(|i| (i * 7 + i / 13) as u8).collect();
        for len in (0..=300).chain(1100..=1200).chain([1299, 1300]) {
            let msg = &data[..len];
            let mut want = Poly1305::new(&k);
            want.update_padded(&data[..8]);
            want.update_padded(msg);
            let mut got = Poly1305::new(&k);
            got.absorb_padded(&data[..8]);
            got.absorb_padded(msg);
            assert_eq!(got.finalize(), want.finalize(), "after a header, len {len}");
            let (a, b) = msg.split_at(len / 32 * 16);
            let mut want = Poly1305::new(&k);
            want.update_padded(a);
            want.update_padded(b);
            let mut got = Poly1305::new(&k);
            got.absorb_padded(a);
            got.absorb_padded(b);
            assert_eq!(got.finalize(), want.finalize(), "in two calls, len {len}");
        }
    }

    /// The vector kernels' lanes (AVX-512 IFMA here) against the scalar code: unstitched
    /// (in one chain, and in two for long runs), stitched into a keystream batch, split
    /// across calls, and stitched then absorbed alone, after a scalar prefix, with
    /// the largest limbs there can be (every clamped bit of r set, all-ones blocks) as well
    /// as zeros and a pattern, at lengths around the 64-byte groups.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn vector_lanes_agree_with_the_scalar_code() {
        use crate::backend::Kernel;
        let pattern: [u8; 32] = core::array::from_fn(|i| (i * 37 + 11) as u8);
        let keys = [[0xff; 32], [0; 32], pattern];
        let kernels = crate::Backend::ALL
            .into_iter()
            .filter_map(|b| match b.kernel() {
                Kernel::Simd(simd) => Some(simd),
                Kernel::Portable => None,
            });
        for kernel in kernels {
            for key in &keys {
                for fill in [0xffu8, 0, 0x5a] {
                    for len in [0, 15, 16, 63, 64, 65, 127, 128, 320, 1024, 1472, 4113] {
                        let data: Vec<u8> = (0..len)
                            .map(|i| {
                                if fill == 0x5a {
                                    (i * 131 + 7) as u8
                                } else {
                                    fill
                                }
                            })
                            .collect();
                        let start = || {
                            let mut p = Poly1305::new(key);
                            p.update_padded(b"thirteen byte");
                            p
                        };
                        let mut want = start();
                        want.update_padded(&data);
                        let want = want.finalize();

                        let mut once = start();
                        kernel.absorb(&mut once, &data);
                        assert_eq!(once.finalize(), want, "absorb, len {len}");

                        let whole = len / BLOCK * BLOCK;
                        let mut stitched = start();
                        let mut copy = data.clone();
                        let mut spill = crate::batch::Batch::<{ crate::batch::SPILL }>::new();
                        let half = whole / 2 / 64 * 64;
                        for (counter, range) in [(0, 0..half), (8, half..whole)] {
                            let mut job = crate::batch::Job::Xor(crate::batch::Xor {
                                head: None,
                                buf: &mut copy,
                                at: len,
                                spill: &mut spill.0,
                                mac: Some((&mut stitched, range)),
                            });
                            kernel.batch(&[0; 16], counter, 8, &mut job);
                        }
                        kernel.absorb(&mut stitched, &data[whole..]);
                        assert_eq!(stitched.finalize(), want, "stitched, len {len}");

                        // Lanes already in use when a long run is absorbed alone (the
                        // two-chain path starts from them).
                        let mut then_alone = start();
                        let mut job = crate::batch::Job::Xor(crate::batch::Xor {
                            head: None,
                            buf: &mut copy,
                            at: len,
                            spill: &mut spill.0,
                            mac: Some((&mut then_alone, 0..half)),
                        });
                        kernel.batch(&[0; 16], 0, 8, &mut job);
                        kernel.absorb(&mut then_alone, &data[half..]);
                        assert_eq!(
                            then_alone.finalize(),
                            want,
                            "stitched, then alone, len {len}"
                        );
                    }
                }
            }
        }
    }
}
