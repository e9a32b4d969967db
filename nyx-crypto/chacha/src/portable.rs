//! The portable kernel: RFC 8439's block function in plain Rust, one block at a time.
//! It runs wherever AVX2 does not, and it is the reference the vector kernels are tested
//! against.

use crate::backend::{Batch, Job, Kernel, MAX_LANES, Xor};

/// Absorb `job`'s MAC range, if any, then compute blocks `counter..` (as many as
/// [`Kernel::batch_len`](crate::backend::Kernel::batch_len) says) and hand them to `job`.
/// Returns the number of blocks.
pub(crate) fn batch(state: &[u32; 16], counter: u32, wanted: usize, job: &mut Job<'_>) -> usize {
    let with_mac = matches!(job, Job::Xor(Xor { mac: Some(_), .. }));
    let blocks = Kernel::Portable.batch_len(wanted, with_mac);
    let mut own = Batch::<MAX_LANES>::new();
    let out = match job {
        Job::Keep(out) => out,
        Job::Xor(xor) => {
            if let Some((poly, range)) = xor.mac.as_mut() {
                poly.narrow();
                poly.absorb_blocks(&xor.buf[range.clone()]);
            }
            &mut own.0[..]
        }
    };
    let bytes: &mut [u8] = bytemuck::cast_slice_mut(out);
    for (i, chunk) in bytes.chunks_exact_mut(64).take(blocks).enumerate() {
        block(state, counter.wrapping_add(i as u32), chunk);
    }
    if let Job::Xor(xor) = job {
        xor.emit(
            &own.0[..2 * blocks],
            |dst, lane| *dst = lane,
            |data, lane| crate::backend::xor(bytemuck::bytes_of(&lane), data),
        );
    }
    blocks
}

/// RFC 8439 section 2.3: the 64-byte keystream block `counter` of `state` (key, nonce;
/// word 12 is replaced by `counter`).
pub(crate) fn block(state: &[u32; 16], counter: u32, out: &mut [u8]) {
    let mut input = *state;
    input[12] = counter;
    let mut x = input;
    for _ in 0..10 {
        quarter_round(&mut x, 0, 4, 8, 12);
        quarter_round(&mut x, 1, 5, 9, 13);
        quarter_round(&mut x, 2, 6, 10, 14);
        quarter_round(&mut x, 3, 7, 11, 15);
        quarter_round(&mut x, 0, 5, 10, 15);
        quarter_round(&mut x, 1, 6, 11, 12);
        quarter_round(&mut x, 2, 7, 8, 13);
        quarter_round(&mut x, 3, 4, 9, 14);
    }
    for ((o, w), i) in out.chunks_exact_mut(4).zip(x).zip(input) {
        o.copy_from_slice(&w.wrapping_add(i).to_le_bytes());
    }
    // The key words and the permuted state (invertible back to the key): wiped, as in the
    // SIMD kernels.
    zeroize::Zeroize::zeroize(&mut input);
    zeroize::Zeroize::zeroize(&mut x);
}

#[inline(always)]
fn quarter_round(x: &mut [u32; 16], a: usize, b: usize, c: usize, d: usize) {
    x[a] = x[a].wrapping_add(x[b]);
    x[d] = (x[d] ^ x[a]).rotate_left(16);
    x[c] = x[c].wrapping_add(x[d]);
    x[b] = (x[b] ^ x[c]).rotate_left(12);
    x[a] = x[a].wrapping_add(x[b]);
    x[d] = (x[d] ^ x[a]).rotate_left(8);
    x[c] = x[c].wrapping_add(x[d]);
    x[b] = (x[b] ^ x[c]).rotate_left(7);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chacha20::state;

    /// RFC 8439 section 2.3.2: key 00..1f, nonce 000000090000004a00000000, counter 1.
    #[test]
    fn rfc8439_block_function() {
        let key: [u8; 32] = core::array::from_fn(|i| i as u8);
        let nonce = [0, 0, 0, 0x09, 0, 0, 0, 0x4a, 0, 0, 0, 0];
        let mut out = [0u8; 64];
        block(&state(&key, &nonce), 1, &mut out);
        let want = "10f1e7e4d13b5915500fdd1fa32071c4c7d1f4c733c068030422aa9ac3d46c4e\
                    d2826446079faa0914c2d705d98b02a2b5129cd1de164eb9cbd083e8a2503c4e";
        assert_eq!(hex(&out), want);
    }

    fn hex(b: &[u8]) -> String {
        b.iter().map(|x| format!("{x:02x}")).collect()
    }
}
