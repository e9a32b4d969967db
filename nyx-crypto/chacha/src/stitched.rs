//! ChaCha20-Poly1305 on the x86-64 kernels, with Poly1305 stitched between the rounds.
//!
//! The message is processed in chunks of one batch of keystream (16, 8 or, for the last one
//! to four blocks, 4 blocks, as the kernel computes them; a seal of 17-20 blocks, a cell's,
//! takes one batch of 20 and absorbs its MAC after it; the first chunk is one block
//! shorter, because block 0 is the Poly1305 key), and the kernel XORs each batch into the
//! message itself ([`Job::Xor`]):
//! the keystream never goes through a buffer, except block 0 (the key) and a short last
//! lane. While the kernel computes the keystream of chunk `i + 1`, Poly1305 absorbs chunk
//! `i` between its rounds: on seal that is ciphertext just written, so only the last chunk's
//! Poly1305 blocks run alone. Open has all the ciphertext from the start, but its first
//! batch cannot carry the MAC (its block 0 is the key), so that batch is kept; every later
//! batch absorbs the ciphertext not yet absorbed up to the end of its own chunk (the first
//! chunk's included) between its rounds, then decrypts its chunk, and the first chunk is
//! decrypted from the kept batch at the end. Nothing is decrypted before it is absorbed.
//!
//! Open decrypts while it authenticates; if the tag then fails, the keystream is applied
//! again, so the caller's buffer is left exactly as it was.

use std::ops::Range;

use zeroize::Zeroizing;

use crate::Error;
use crate::TAG_LEN;
use crate::aead::{absorb_with_suffix, tag_matches, tag_with_lengths};
use crate::batch::{Batch, Job, Lane, MAC_BATCH_BLOCKS, SPILL, Xor, blocks_for, xor_lanes};
use crate::chacha20::simd::Stream;
use crate::chacha20::stream_end;
use crate::poly1305::{BLOCK, Poly1305};
use crate::x86::Simd;

/// Seal with keystream batches of up to `LANES / 2` blocks, each XORed into the message
/// by the kernel that computes it, and XOR the keystream after the message into `tail`:
/// from the last batch when it reaches that far (its spill), else from a fresh stream. The
/// tag covers the ciphertext followed by `suffix`.
pub(crate) fn seal<const LANES: usize>(
    kernel: Simd,
    state: &Zeroizing<[u32; 16]>,
    aad: &[u8],
    buf: &mut [u8],
    tail: &mut [u8],
    suffix: &[u8],
) -> [u8; TAG_LEN] {
    let len = buf.len();
    // Block 0 (the MAC key), and the keystream of a short last lane.
    let (mut head, mut spill) = (Batch::<2>::new(), Batch::<SPILL>::new());
    let mut job = Job::Xor(Xor {
        head: Some(&mut head.0),
        buf,
        at: 0,
        spill: &mut spill.0,
        mac: None,
    });
    let wanted = blocks_for(64 + len + tail.len()).min(LANES / 2);
    let held = kernel.batch(state, 0, wanted, &mut job);
    let mut pending = 0..len.min(held * 64 - 64);
    // Lanes the last batch emitted into the message (block 0's two went to `head`).
    let mut emitted = 2 * held - 2;
    short_lane(kernel, &spill.0, buf, &pending);
    let mut mac = mac_from(&head.0[0]);
    mac.update_padded(aad);
    let mut counter = held as u32;
    while pending.end < len {
        // `pending` is whole batches here: whole Poly1305 blocks.
        let at = pending.end;
        let mut job = Job::Xor(Xor {
            head: None,
            buf,
            at,
            spill: &mut spill.0,
            mac: Some((&mut mac, pending)),
        });
        let held = kernel.batch(
            state,
            counter,
            blocks_for(len - at + tail.len()).min(LANES / 2),
            &mut job,
        );
        pending = at..len.min(at + held * 64);
        emitted = 2 * held;
        short_lane(kernel, &spill.0, buf, &pending);
        counter = counter.wrapping_add(held as u32);
    }
    absorb_with_suffix(&mut mac, &buf[pending.clone()], suffix, |mac, ct| {
        kernel.absorb(mac, ct);
    });
    if !tail.is_empty() {
        // The spill starts at the message's short last lane (or just past its end).
        let whole = (pending.end - pending.start) / 32;
        let kept = SPILL.min(emitted - whole);
        let skip = pending.end - (pending.start + whole * 32);
        if skip + tail.len() <= kept * 32 {
            xor_lanes(kernel, &spill.0[..kept], skip, tail);
        } else {
            Stream::new(kernel, state.clone()).apply(64 + len as u64, tail);
        }
    }
    tag_with_lengths(&mut mac, aad.len(), len + suffix.len())
}

/// After an [`Xor`] batch has XORed the whole lanes of `buf[chunk]`, XOR a short last lane
/// from the batch's spill.
fn short_lane(kernel: Simd, spill: &[Lane], buf: &mut [u8], chunk: &Range<usize>) {
    let whole = chunk.start + (chunk.end - chunk.start) / 32 * 32;
    if whole < chunk.end {
        xor_lanes(kernel, spill, 0, &mut buf[whole..chunk.end]);
    }
}

/// Open with keystream batches of up to `LANES / 2` blocks. The first batch cannot carry
/// the MAC (block 0 is its key), so it is kept, and its chunk decrypted at the end; every
/// later batch absorbs the ciphertext not yet absorbed up to the end of its own chunk (the
/// first one's included) between its rounds and then decrypts its chunk.
pub(crate) fn open<const LANES: usize>(
    kernel: Simd,
    state: Zeroizing<[u32; 16]>,
    aad: &[u8],
    buf: &mut [u8],
    tag: &[u8; TAG_LEN],
    tail: &mut [u8],
) -> Result<(), Error> {
    let len = buf.len();
    let (mut first, mut spill) = (Batch::<LANES>::new(), Batch::<SPILL>::new());
    let wanted = blocks_for(64 + len + tail.len()).min(LANES / 2);
    let first_held = kernel.batch(&state, 0, wanted, &mut Job::Keep(&mut first.0));
    let mut mac = mac_from(&first.0[0]);
    mac.update_padded(aad);
    // The MAC has absorbed `buf[..absorbed]`; the batch that ended at `pos` held `held`
    // blocks from `counter`.
    let first_end = len.min(first_held * 64 - 64);
    let (mut counter, mut held, mut pos, mut absorbed) = (0u32, first_held, first_end, 0);
    let mut chunk = 0..first_end;
    while pos < len {
        counter = counter.wrapping_add(held as u32);
        let wanted = blocks_for(len - pos + tail.len()).min(MAC_BATCH_BLOCKS);
        held = kernel.batch_len(wanted, true);
        chunk = pos..len.min(pos + held * 64);
        // Whole blocks: the chunk ends on one unless it ends the message, and a short last
        // block is left for the padding below.
        let upto = chunk.end / BLOCK * BLOCK;
        let mut job = Job::Xor(Xor {
            head: None,
            buf,
            at: pos,
            spill: &mut spill.0,
            mac: Some((&mut mac, absorbed..upto)),
        });
        kernel.batch(&state, counter, wanted, &mut job);
        // The short last lane waits for the padded block below.
        (absorbed, pos) = (upto, chunk.end);
    }
    kernel.absorb(&mut mac, &buf[absorbed..]);
    if first_end < len {
        short_lane(kernel, &spill.0, buf, &chunk);
    }
    xor_lanes(kernel, &first.0, 64, &mut buf[..first_end]);
    if !tag_matches(&tag_with_lengths(&mut mac, aad.len(), len), tag) {
        // Undo the decryption: XOR the same keystream again.
        Stream::new(kernel, state).apply(64, buf);
        return Err(Error::AuthenticationFailed);
    }
    if !tail.is_empty() {
        // Usually inside the last batch (the onion filler is): in `first` if that was
        // the only one, else in `spill` from the start of the message's short last lane.
        let (at, start, kept) = if first_end == len {
            (64 + len, 0, &first.0[..2 * first_held])
        } else {
            let whole = chunk.start + (chunk.end - chunk.start) / 32 * 32;
            let lanes = spill.0.len().min(2 * held - (whole - chunk.start) / 32);
            (len, whole, &spill.0[..lanes])
        };
        if at - start + tail.len() <= kept.len() * 32 {
            xor_lanes(kernel, kept, at - start, tail);
        } else {
            stream_end(64 + len as u64, tail.len())?;
            Stream::new(kernel, state).apply(64 + len as u64, tail);
        }
    }
    Ok(())
}

/// Poly1305 keyed by the first 32 bytes of keystream block 0 (a batch's first lane).
fn mac_from(lane0: &Lane) -> Poly1305 {
    Poly1305::new(bytemuck::cast_ref(lane0))
}

/// Lanes of the AEAD's keystream batches when Poly1305 runs on the scalar multiplier: eight
/// blocks, so the kernels never take their 16-block path. Poly1305 (about 13 cycles per
/// 16-byte block, one multiply chain) is then the longer task, and eight-block batches give
/// it about three blocks per double round to overlap with, where sixteen would leave more of
/// it running alone (measured: docs/benchmarks.md). Half the size also halves the first
/// batch an open keeps (zeroed and wiped).
pub(crate) const NARROW: usize = 16;
/// Lanes of the AEAD's keystream batches when Poly1305 runs in vector lanes and the message
/// needs more than one narrow batch: sixteen blocks, so the first batch (which cannot carry
/// the MAC: block 0 is its key) takes the 512-bit kernel, 1.6 times cheaper per block.
/// Batches that carry the MAC hold eight, or four for a message's last one to four blocks.
pub(crate) const WIDE: usize = 32;

/// Whether an operation needing `keystream` bytes takes [`WIDE`] batches: only when the
/// MAC runs in vector lanes and one narrow batch (`NARROW` lanes of 32 bytes) is too short.
pub(crate) fn wide_batches(kernel: Simd, keystream: usize) -> bool {
    kernel.mac_in_vectors() && keystream > NARROW * 32
}

/// Lanes of a seal's one keystream batch for a message of a cell's size (17-20 blocks with
/// block 0): the twenty-block kernel computes it all, and Poly1305 runs after it, in vector
/// lanes. That beats sixteen blocks and then four with most of the MAC riding along (a
/// 1152-byte seal 6-11% faster, docs/benchmarks.md). Open keeps [`WIDE`]: its MAC can
/// start only once block 0 is known, and then rides along in the four-block batch for
/// nothing, where after one batch of twenty it would run alone (measured slower).
pub(crate) const CELL: usize = 40;

/// Whether a seal needing `keystream` bytes takes one [`CELL`] batch.
pub(crate) fn one_batch(kernel: Simd, keystream: usize) -> bool {
    kernel.mac_in_vectors() && kernel.has_batch20() && (16 * 64 + 1..=20 * 64).contains(&keystream)
}
