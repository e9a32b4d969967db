//! Poly1305 (RFC 8439 section 2.5), scalar, in radix 2^64.
//!
//! Why our own: RustCrypto's `poly1305` 0.9 picks its AVX2 backend at run time, but in a
//! portable build the backend's helpers are compiled without AVX2, so every vector
//! intrinsic becomes a function call and a 1280-byte MAC costs about 1.6 µs (docs/benchmarks.md
//! has the profile). This scalar version needs no CPU feature and has no per-message setup.
//! Being scalar is also what lets it overlap with ChaCha20: the AEAD absorbs Poly1305 blocks
//! on the integer multiplier between the rounds the vector units compute (`aead.rs`). It is
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
}

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
        }
    }

    /// Absorb `data` as 16-byte blocks, the last one zero-padded to 16 bytes (RFC 8439's
    /// AEAD construction pads every field this way, so each block carries the 2^128 bit).
    pub fn update_padded(&mut self, data: &[u8]) {
        let mut chunks = data.chunks_exact(BLOCK);
        for block in &mut chunks {
            self.block(le64(&block[0..8]), le64(&block[8..16]), 1);
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut last = [0u8; BLOCK];
            last[..rest.len()].copy_from_slice(rest);
            self.block(le64(&last[0..8]), le64(&last[8..16]), 1);
        }
    }

    /// Absorb whole 16-byte blocks: `data.len()` must be a multiple of 16 (a remainder is
    /// ignored). The stitched kernels call this between ChaCha20 rounds.
    #[inline(always)]
    pub(crate) fn absorb_blocks(&mut self, data: &[u8]) {
        for block in data.chunks_exact(BLOCK) {
            self.block(le64(&block[0..8]), le64(&block[8..16]), 1);
        }
    }

    /// Finish a plain Poly1305 message (RFC 8439 section 2.5, not the AEAD's padding): a
    /// short final block gets a `0x01` byte after it instead of the 2^128 bit. The AEAD
    /// never needs this; it is here for Poly1305's own test vectors.
    pub fn finish_message(mut self, data: &[u8]) -> [u8; TAG_LEN] {
        let mut chunks = data.chunks_exact(BLOCK);
        for block in &mut chunks {
            self.block(le64(&block[0..8]), le64(&block[8..16]), 1);
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut last = [0u8; BLOCK];
            last[..rest.len()].copy_from_slice(rest);
            last[rest.len()] = 1;
            self.block(le64(&last[0..8]), le64(&last[8..16]), 0);
        }
        self.finalize()
    }

    /// `h = (h + m) · r mod p`, partially reduced; `hibit` is 1 for a full block.
    #[inline(always)]
    fn block(&mut self, m0: u64, m1: u64, hibit: u64) {
        // h += m
        let (h0, c) = self.h0.overflowing_add(m0);
        let (h1, c1) = self.h1.overflowing_add(m1);
        let (h1, c2) = h1.overflowing_add(u64::from(c));
        let h2 = self.h2 + hibit + u64::from(c1) + u64::from(c2);

        // h * r
        let d0 = mul(h0, self.r0) + mul(h1, self.s1);
        let d1 = mul(h0, self.r1) + mul(h1, self.r0) + mul(h2, self.s1);
        let d2 = h2 * self.r0;

        // Carry d0 -> d1 -> d2.
        let h0 = d0 as u64;
        let d1 = d1 + (d0 >> 64);
        let h1 = d1 as u64;
        let d2 = d2 + (d1 >> 64) as u64;

        // Fold the bits above 2^130 back in: 2^130 ≡ 5.
        let c = (d2 >> 2) * 5;
        let (h0, c0) = h0.overflowing_add(c);
        let (h1, c1) = h1.overflowing_add(u64::from(c0));
        self.h0 = h0;
        self.h1 = h1;
        self.h2 = (d2 & 3) + u64::from(c1);
    }

    /// Reduce fully and add `s`: the tag.
    pub fn finalize(mut self) -> [u8; TAG_LEN] {
        // h < 2^130 + 2^128 < 2p, so one conditional subtraction of p reduces it. g = h + 5;
        // if g reaches 2^130 then h >= p and h - p is g's low 130 bits.
        let (g0, c) = self.h0.overflowing_add(5);
        let (g1, c) = self.h1.overflowing_add(u64::from(c));
        let g2 = self.h2 + u64::from(c);
        // all ones when h >= p, else zero.
        let use_g = 0u64.wrapping_sub(g2 >> 2);
        let h0 = (g0 & use_g) | (self.h0 & !use_g);
        let h1 = (g1 & use_g) | (self.h1 & !use_g);

        let (t0, c) = h0.overflowing_add(self.s[0]);
        let t1 = h1.wrapping_add(self.s[1]).wrapping_add(u64::from(c));
        let mut tag = [0u8; TAG_LEN];
        tag[..8].copy_from_slice(&t0.to_le_bytes());
        tag[8..].copy_from_slice(&t1.to_le_bytes());
        self.zeroize();
        tag
    }
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
}
