//! ChaCha20-Poly1305 (RFC 8439 section 2.8) in place: the one-time Poly1305 key is the
//! first 32 bytes of keystream block 0, the message is encrypted from block 1 on, and the tag
//! covers `aad || pad16 || ciphertext || pad16 || le64(len(aad)) || le64(len(ciphertext))`.
//!
//! The message is processed in chunks of one batch of keystream (8 or 16 blocks, as the
//! kernel computes them; the first chunk is one block shorter, because block 0 is the
//! Poly1305 key). While the kernel computes the keystream of chunk `i + 1`, Poly1305 absorbs
//! chunk `i` between its rounds: on seal that is ciphertext just written, so only the last
//! chunk's Poly1305 blocks run alone. Open has all the ciphertext from the start: every batch
//! after the first absorbs what is not yet absorbed up to its own chunk, and the last one the
//! rest as well, so nothing runs alone; a chunk is decrypted only after it has been absorbed,
//! from the batch kept from the step before.
//!
//! Open decrypts while it authenticates; if the tag then fails, the keystream is applied
//! again, so the caller's buffer is left exactly as it was.

use std::mem;

use subtle::ConstantTimeEq;
use zeroize::Zeroizing;

use crate::backend::{Backend, Batch, Kernel, Lane, MAC_BATCH_BLOCKS, blocks_for, xor_lanes};
use crate::chacha20::{ChaCha20, state};
use crate::poly1305::{self, BLOCK, Poly1305};
use crate::{Error, KEY_LEN, MAX_MESSAGE_LEN, NONCE_LEN, TAG_LEN};

/// Encrypt `buf` in place and return the tag over `aad` and the ciphertext, on the fastest
/// backend. A (key, nonce) pair must never seal two messages.
pub fn seal_in_place(
    key: &[u8; KEY_LEN],
    nonce: &[u8; NONCE_LEN],
    aad: &[u8],
    buf: &mut [u8],
) -> Result<[u8; TAG_LEN], Error> {
    seal_in_place_with(Backend::detect(), key, nonce, aad, buf)
}

/// [`seal_in_place`] on a chosen backend.
pub fn seal_in_place_with(
    backend: Backend,
    key: &[u8; KEY_LEN],
    nonce: &[u8; NONCE_LEN],
    aad: &[u8],
    buf: &mut [u8],
) -> Result<[u8; TAG_LEN], Error> {
    check_len(buf.len())?;
    let kernel = backend.kernel();
    let state = Zeroizing::new(state(key, nonce));
    Ok(if wide_batches(kernel, 64 + buf.len()) {
        seal::<WIDE>(kernel, &state, aad, buf)
    } else {
        seal::<NARROW>(kernel, &state, aad, buf)
    })
}

/// Seal with keystream batches of up to `LANES / 2` blocks.
fn seal<const LANES: usize>(
    kernel: Kernel,
    state: &[u32; 16],
    aad: &[u8],
    buf: &mut [u8],
) -> [u8; TAG_LEN] {
    let len = buf.len();
    let mut ks = Batch::<LANES>::new();
    let held = kernel.batch(state, 0, blocks_for(64 + len), &mut ks.0, None);
    let mut mac = mac_from(ks.bytes());
    mac.update_padded(aad);
    let (first, mut rest) = buf.split_at_mut(len.min(held * 64 - 64));
    ks.xor_into(kernel, 64, first);
    let mut pending: &[u8] = first;
    let mut counter = held as u32;
    while !rest.is_empty() {
        // `pending` is a whole batch here: whole Poly1305 blocks.
        let held = kernel.batch(
            state,
            counter,
            blocks_for(rest.len()),
            &mut ks.0,
            Some((&mut mac, pending)),
        );
        let n = rest.len().min(held * 64);
        let (chunk, tail) = mem::take(&mut rest).split_at_mut(n);
        ks.xor_into(kernel, 0, chunk);
        pending = chunk;
        rest = tail;
        counter = counter.wrapping_add(held as u32);
    }
    kernel.absorb(&mut mac, pending);
    finish_tag(mac, aad.len(), len)
}

/// Check `tag` over `aad` and the ciphertext in `buf` and decrypt `buf` in place, on the
/// fastest backend. On failure `buf` is left as it was.
pub fn open_in_place(
    key: &[u8; KEY_LEN],
    nonce: &[u8; NONCE_LEN],
    aad: &[u8],
    buf: &mut [u8],
    tag: &[u8; TAG_LEN],
) -> Result<(), Error> {
    open_in_place_with_tail(Backend::detect(), key, nonce, aad, buf, tag, &mut [])
}

/// [`open_in_place`] on a chosen backend.
pub fn open_in_place_with(
    backend: Backend,
    key: &[u8; KEY_LEN],
    nonce: &[u8; NONCE_LEN],
    aad: &[u8],
    buf: &mut [u8],
    tag: &[u8; TAG_LEN],
) -> Result<(), Error> {
    open_in_place_with_tail(backend, key, nonce, aad, buf, tag, &mut [])
}

/// [`open_in_place_with`], and then, if the tag was good, XOR the keystream that follows
/// the message into `tail` (for constructions that use it: NyxNet's onion layers derive
/// their filler this way). On failure neither `buf` nor `tail` changes.
pub fn open_in_place_with_tail(
    backend: Backend,
    key: &[u8; KEY_LEN],
    nonce: &[u8; NONCE_LEN],
    aad: &[u8],
    buf: &mut [u8],
    tag: &[u8; TAG_LEN],
    tail: &mut [u8],
) -> Result<(), Error> {
    check_len(buf.len())?;
    let kernel = backend.kernel();
    let state = Zeroizing::new(state(key, nonce));
    if wide_batches(kernel, 64 + buf.len() + tail.len()) {
        open::<WIDE>(kernel, state, aad, buf, tag, tail)
    } else {
        open::<NARROW>(kernel, state, aad, buf, tag, tail)
    }
}

/// Open with keystream batches of up to `LANES / 2` blocks. The ciphertext is all there
/// from the start, so the MAC rides along with every batch after the first, the last
/// chunk's blocks included when the next batch is the last.
fn open<const LANES: usize>(
    kernel: Kernel,
    state: Zeroizing<[u32; 16]>,
    aad: &[u8],
    buf: &mut [u8],
    tag: &[u8; TAG_LEN],
    tail: &mut [u8],
) -> Result<(), Error> {
    let len = buf.len();
    // The first batch may hold sixteen blocks, the later ones (which carry the MAC) eight.
    let (mut first, mut second) = (Batch::<LANES>::new(), Batch::<NARROW>::new());
    let (mut ks, mut next): (&mut [Lane], &mut [Lane]) = (&mut first.0, &mut second.0);
    // `ks` holds blocks `counter..counter + held` and decrypts `buf[pos..end]`, which starts
    // `skip` bytes into it; the MAC has absorbed `buf[..absorbed]`.
    let mut held = kernel.batch(&state, 0, blocks_for(64 + len + tail.len()), ks, None);
    let mut mac = mac_from(bytemuck::cast_slice(ks));
    mac.update_padded(aad);
    let (mut counter, mut skip, mut pos, mut absorbed) = (0u32, 64, 0, 0);
    loop {
        let end = len.min(pos + held * 64 - skip);
        if end == len {
            break;
        }
        // More follows. A batch that carries a MAC holds at least eight blocks, so if what
        // follows fits in eight, the next batch is the last and absorbs the rest of the
        // ciphertext as well; else up to `end`. Whole blocks only: `end` is a whole number of
        // blocks into the message, and a short last block is left for the padding below.
        let upto = if len - end <= MAC_BATCH_BLOCKS * 64 {
            absorbed + (len - absorbed) / BLOCK * BLOCK
        } else {
            end.max(absorbed)
        };
        let next_counter = counter.wrapping_add(held as u32);
        let wanted = blocks_for(len - end + tail.len());
        let next_held = kernel.batch(
            &state,
            next_counter,
            wanted,
            next,
            Some((&mut mac, &buf[absorbed..upto])),
        );
        absorbed = upto;
        // Decrypt only what the MAC has seen.
        xor_lanes(kernel, ks, skip, &mut buf[pos..end]);
        mem::swap(&mut ks, &mut next);
        (counter, held, skip, pos) = (next_counter, next_held, 0, end);
    }
    kernel.absorb(&mut mac, &buf[absorbed..]);
    xor_lanes(kernel, ks, skip, &mut buf[pos..]);
    let expected = finish_tag(mac, aad.len(), len);
    if !bool::from(expected.ct_eq(tag)) {
        // Undo the decryption: XOR the same keystream again.
        let mut stream = ChaCha20::with_kernel(kernel, state);
        stream.seek(64);
        stream.apply_keystream(buf)?;
        return Err(Error::AuthenticationFailed);
    }
    if !tail.is_empty() {
        // Usually inside the batch the last chunk came from (the onion filler is).
        let (at, start) = (64 + len as u64, u64::from(counter) * 64);
        if at + tail.len() as u64 <= start + held as u64 * 64 {
            xor_lanes(kernel, ks, (at - start) as usize, tail);
        } else {
            let mut stream = ChaCha20::with_kernel(kernel, state);
            stream.seek(at);
            stream.apply_keystream(tail)?;
        }
    }
    Ok(())
}

/// For constructions that compose the AEAD themselves: the keystream positioned at the
/// message's first byte (block 1) and Poly1305 keyed from block 0. Finish with
/// [`finish_tag`].
pub fn keystream_and_mac(key: &[u8; KEY_LEN], nonce: &[u8; NONCE_LEN]) -> (ChaCha20, Poly1305) {
    let state = Zeroizing::new(state(key, nonce));
    let mut stream = ChaCha20::with_kernel(Backend::detect().kernel(), state);
    let mac = mac_from(stream.block0_head());
    stream.seek(64);
    (stream, mac)
}

/// Absorb the two lengths and produce the tag.
pub fn finish_tag(mut mac: Poly1305, aad_len: usize, ct_len: usize) -> [u8; TAG_LEN] {
    let mut lens = [0u8; 16];
    lens[..8].copy_from_slice(&(aad_len as u64).to_le_bytes());
    lens[8..].copy_from_slice(&(ct_len as u64).to_le_bytes());
    mac.update_padded(&lens);
    mac.finalize()
}

/// Poly1305 keyed by the first 32 bytes of keystream block 0.
fn mac_from(block0: &[u8]) -> Poly1305 {
    let mut otk = Zeroizing::new([0u8; poly1305::KEY_LEN]);
    otk.copy_from_slice(&block0[..poly1305::KEY_LEN]);
    Poly1305::new(&otk)
}

/// Lanes of the AEAD's keystream batches when Poly1305 runs on the scalar multiplier: eight
/// blocks, so the kernels never take their 16-block path. Poly1305 (about 13 cycles per
/// 16-byte block, one multiply chain) is then the longer task, and eight-block batches give
/// it about three blocks per double round to overlap with, where sixteen would leave more of
/// it running alone (measured: docs/benchmarks.md). Half the size also halves what each seal
/// or open zeroes and wipes.
const NARROW: usize = 16;
/// Lanes of the AEAD's keystream batches when Poly1305 runs in vector lanes and the message
/// needs more than one narrow batch: sixteen blocks, so the first batch (which cannot carry
/// the MAC: block 0 is its key) takes the 512-bit kernel, 1.6 times cheaper per block.
/// Batches that carry the MAC still hold eight.
const WIDE: usize = 32;

/// Whether an operation needing `keystream` bytes takes [`WIDE`] batches: only when the
/// MAC runs in vector lanes and one narrow batch (`NARROW` lanes of 32 bytes) is too short.
fn wide_batches(kernel: Kernel, keystream: usize) -> bool {
    kernel.mac_in_vectors() && keystream > NARROW * 32
}

fn check_len(len: usize) -> Result<(), Error> {
    if len as u64 > MAX_MESSAGE_LEN {
        return Err(Error::MessageTooLong { len });
    }
    Ok(())
}
