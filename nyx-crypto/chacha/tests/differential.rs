//! Every backend this CPU runs, checked against RustCrypto's `chacha20`, `poly1305` and
//! `chacha20poly1305` crates (the reference implementations), and against each other.
//! On x86-64 that is the kernels against independent code. The portable backend draws its
//! keystream from the same `chacha20` crate, so for it these tests check what this crate
//! adds: positioning at any byte, partial blocks, the composition with its own Poly1305,
//! and the tail after a seal or an open. RFC 8439's own vectors are in `tests/rfc8439.rs`.
#![allow(clippy::unwrap_used)]

use chacha20::cipher::{KeyIvInit, StreamCipher, StreamCipherCore, StreamCipherSeek};
use chacha20poly1305::aead::{AeadInOut, KeyInit};
use nyx_chacha::{Backend, ChaCha20, Error, Poly1305};
use proptest::prelude::*;

fn backends() -> Vec<Backend> {
    Backend::ALL
        .into_iter()
        .filter(|b| b.is_available())
        .collect()
}

fn reference_keystream(key: &[u8; 32], nonce: &[u8; 12], offset: u64, len: usize) -> Vec<u8> {
    let mut stream = chacha20::ChaCha20::new(key.into(), nonce.into());
    stream.seek(offset);
    let mut out = vec![0u8; len];
    stream.apply_keystream(&mut out);
    out
}

fn reference_seal(key: &[u8; 32], nonce: &[u8; 12], aad: &[u8], msg: &[u8]) -> (Vec<u8>, [u8; 16]) {
    let cipher = chacha20poly1305::ChaCha20Poly1305::new(&(*key).into());
    let mut ct = msg.to_vec();
    let tag = cipher
        .encrypt_inout_detached(&(*nonce).into(), aad, ct.as_mut_slice().into())
        .unwrap();
    (ct, tag.into())
}

/// Lengths around every chunk edge (448, 512, 576, 768 and multiples) and Poly1305's 16, plus random.
fn length() -> impl Strategy<Value = usize> {
    prop_oneof![
        prop::sample::select(vec![
            0usize, 1, 15, 16, 17, 63, 64, 65, 447, 448, 449, 511, 512, 513, 575, 576, 577, 767,
            768, 769, 959, 960, 961, 1128, 1152, 1279, 1280, 1281, 1471, 1472, 1473, 2048
        ]),
        0usize..2600,
    ]
}

fn bytes(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 131 + 7) as u8).collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn keystream_matches_reference_at_any_offset(
        key in any::<[u8; 32]>(),
        nonce in any::<[u8; 12]>(),
        offset in 0u64..5000,
        len in length(),
        split in any::<prop::sample::Index>(),
    ) {
        let want = reference_keystream(&key, &nonce, offset, len);
        for backend in backends() {
            // In two calls split anywhere: the cached batch must line up.
            let mut got = vec![0u8; len];
            let mut stream = ChaCha20::with_backend(backend, &key, &nonce);
            stream.seek(offset);
            let cut = if len == 0 { 0 } else { split.index(len + 1) };
            let (a, b) = got.split_at_mut(cut);
            stream.apply_keystream(a).unwrap();
            stream.apply_keystream(b).unwrap();
            prop_assert_eq!(stream.offset(), offset + len as u64);
            prop_assert_eq!(&got, &want, "backend {:?}", backend);
        }
    }

    #[test]
    fn one_call_keystream_matches_reference(
        key in any::<[u8; 32]>(),
        nonce in any::<[u8; 12]>(),
        block in 0u64..80,
        misalign in prop_oneof![3 => Just(0u64), 1 => 1u64..64],
        len in length(),
    ) {
        // Mostly from a block's start (the kernels' direct path), sometimes not.
        let offset = block * 64 + misalign;
        let want = reference_keystream(&key, &nonce, offset, len);
        for backend in backends() {
            let mut got = vec![0u8; len];
            nyx_chacha::xor_keystream_with(backend, &key, &nonce, offset, &mut got).unwrap();
            prop_assert_eq!(&got, &want, "backend {:?}", backend);
        }
    }

    #[test]
    fn seal_and_open_match_reference(
        key in any::<[u8; 32]>(),
        nonce in any::<[u8; 12]>(),
        aad_len in prop_oneof![Just(0usize), Just(8), 0usize..70],
        len in length(),
        tail_len in prop_oneof![Just(0usize), Just(25), 0usize..600],
    ) {
        let (aad, msg) = (bytes(aad_len), bytes(len));
        let (ct, tag) = reference_seal(&key, &nonce, &aad, &msg);
        let after = reference_keystream(&key, &nonce, 64 + len as u64, tail_len);
        for backend in backends() {
            let mut buf = msg.clone();
            let ours = nyx_chacha::seal_in_place_with(backend, &key, &nonce, &aad, &mut buf).unwrap();
            prop_assert_eq!(&buf, &ct, "backend {:?}", backend);
            prop_assert_eq!(ours, tag, "backend {:?}", backend);
            let mut tail = vec![0u8; tail_len];
            nyx_chacha::open_in_place_with_tail(backend, &key, &nonce, &aad, &mut buf, &tag, &mut tail)
                .unwrap();
            prop_assert_eq!(&buf, &msg, "backend {:?}", backend);
            prop_assert_eq!(&tail, &after, "backend {:?}", backend);
            // Seal with a tail: the same ciphertext and tag, and the keystream after it.
            let mut tail = bytes(tail_len);
            let ours = nyx_chacha::seal_in_place_with_tail(backend, &key, &nonce, &aad, &mut buf, &mut tail)
                .unwrap();
            prop_assert_eq!(&buf, &ct, "backend {:?}", backend);
            prop_assert_eq!(ours, tag, "backend {:?}", backend);
            let want: Vec<u8> = bytes(tail_len).iter().zip(&after).map(|(a, b)| a ^ b).collect();
            prop_assert_eq!(&tail, &want, "backend {:?}", backend);
        }
    }

    #[test]
    fn a_seal_with_a_suffix_opens_as_the_ciphertext_joined_to_it(
        key in any::<[u8; 32]>(),
        nonce in any::<[u8; 12]>(),
        aad_len in prop_oneof![Just(0usize), Just(8), 0usize..70],
        len in length(),
        suffix_len in prop_oneof![Just(0usize), Just(25), Just(50), 0usize..100],
    ) {
        let (aad, msg, suffix) = (bytes(aad_len), bytes(len), bytes(suffix_len + 3)[3..].to_vec());
        let (ct, _) = reference_seal(&key, &nonce, &aad, &msg);
        let cipher = chacha20poly1305::ChaCha20Poly1305::new(&key.into());
        for backend in backends() {
            let mut buf = msg.clone();
            let tag = nyx_chacha::seal_in_place_with_suffix(backend, &key, &nonce, &aad, &mut buf, &suffix)
                .unwrap();
            prop_assert_eq!(&buf, &ct, "backend {:?}", backend);
            // The reference opens ciphertext ‖ suffix under that tag (and nothing else).
            let mut joined = [buf.as_slice(), suffix.as_slice()].concat();
            cipher
                .decrypt_inout_detached(&nonce.into(), &aad, joined.as_mut_slice().into(), &tag.into())
                .unwrap();
            prop_assert_eq!(&joined[..len], &msg[..], "backend {:?}", backend);
            if suffix_len > 0 {
                let mut cut = ct.clone();
                prop_assert!(cipher
                    .decrypt_inout_detached(&nonce.into(), &aad, cut.as_mut_slice().into(), &tag.into())
                    .is_err());
            }
        }
    }

    #[test]
    fn any_flip_is_refused_and_changes_nothing(
        key in any::<[u8; 32]>(),
        len in 1usize..1400,
        aad_len in 1usize..40,
        which in 0usize..3,
        at in any::<prop::sample::Index>(),
        bit in 0u8..8,
    ) {
        let nonce = [3u8; 12];
        let (mut aad, msg) = (bytes(aad_len), bytes(len));
        let (mut ct, mut tag) = reference_seal(&key, &nonce, &aad, &msg);
        match which {
            0 => { let i = at.index(ct.len()); ct[i] ^= 1 << bit }
            1 => { let i = at.index(aad.len()); aad[i] ^= 1 << bit }
            _ => { let i = at.index(16); tag[i] ^= 1 << bit }
        }
        for backend in backends() {
            let mut buf = ct.clone();
            let mut tail = [0x5au8; 25];
            prop_assert_eq!(
                nyx_chacha::open_in_place_with_tail(backend, &key, &nonce, &aad, &mut buf, &tag, &mut tail),
                Err(Error::AuthenticationFailed)
            );
            prop_assert_eq!(&buf, &ct, "backend {:?}", backend);
            prop_assert_eq!(tail, [0x5au8; 25]);
        }
    }

    #[test]
    fn poly1305_matches_reference(
        key in prop_oneof![any::<[u8; 32]>(), Just([0xff; 32])],
        msg in prop_oneof![
            proptest::collection::vec(any::<u8>(), 0..600),
            proptest::collection::vec(prop_oneof![Just(0xffu8), Just(0u8), any::<u8>()], 0..600),
        ],
    ) {
        let ours = Poly1305::new(&key).finish_message(&msg);
        let theirs = ::poly1305::Poly1305::new(&key.into()).compute_unpadded(&msg);
        prop_assert_eq!(ours.to_vec(), theirs.to_vec());
    }
}

/// The eight lanes of the last batches before the counter runs out: lanes past block
/// 2^32 − 1 are computed but never used, and the stream refuses to go past it.
#[test]
fn the_end_of_the_keystream() {
    let (key, nonce) = ([0x11; 32], [0x22; 12]);
    let end = (1u64 << 32) * 64;
    // The reference crate's stream stops one block early (it keeps counter 2^32 - 1 back), so
    // block 2^32 - 1 itself is checked against its block-level core.
    let want = reference_keystream(&key, &nonce, end - 700, 636);
    let mut last_block = Default::default();
    let mut core = chacha20::ChaChaCore::<chacha20::R20, chacha20::variants::Ietf>::new(
        (&key).into(),
        (&nonce).into(),
    );
    core.set_block_pos(u32::MAX);
    core.write_keystream_block(&mut last_block);
    for backend in backends() {
        let mut stream = ChaCha20::with_backend(backend, &key, &nonce);
        stream.seek(end - 700);
        let mut got = vec![0u8; 700];
        stream.apply_keystream(&mut got).unwrap();
        assert_eq!(got[..636], want, "backend {backend:?}");
        assert_eq!(got[636..], last_block[..], "backend {backend:?}");
        // The last two blocks alone: a four-block batch whose counter wraps past 2^32 - 1
        // (on every backend with SIMD kernels); the wrapped blocks are computed, not used.
        let mut tail = ChaCha20::with_backend(backend, &key, &nonce);
        tail.seek(end - 128);
        let mut two = [0u8; 128];
        tail.apply_keystream(&mut two).unwrap();
        assert_eq!(two[..64], want[572..], "backend {backend:?}");
        assert_eq!(two[64..], last_block[..], "backend {backend:?}");
        let mut more = [0u8; 1];
        assert_eq!(
            stream.apply_keystream(&mut more),
            Err(Error::KeystreamExhausted { offset: end + 1 })
        );
        assert_eq!((more, stream.offset()), ([0], end));
        stream.seek(u64::MAX);
        assert!(stream.apply_keystream(&mut more).is_err());
        // The one-call keystream: the same last blocks from a block's start, and the same
        // refusal past the end, leaving the data as it was.
        let mut one = [0u8; 128];
        nyx_chacha::xor_keystream_with(backend, &key, &nonce, end - 128, &mut one).unwrap();
        assert_eq!(one, two, "backend {backend:?}");
        let mut past = [0u8; 65];
        assert_eq!(
            nyx_chacha::xor_keystream_with(backend, &key, &nonce, end - 64, &mut past),
            Err(Error::KeystreamExhausted { offset: end + 1 })
        );
        assert_eq!(past, [0u8; 65]);
    }
}

/// All backends agree on long messages, across many batches.
#[test]
fn backends_agree_on_long_messages() {
    let msg = bytes(70_000);
    let (ct, tag) = reference_seal(&[5; 32], &[6; 12], b"aad", &msg);
    for backend in backends() {
        let mut buf = msg.clone();
        let ours = nyx_chacha::seal_in_place_with(backend, &[5; 32], &[6; 12], b"aad", &mut buf);
        assert_eq!(ours, Ok(tag), "backend {backend:?}");
        assert!(buf == ct, "backend {backend:?}");
    }
}

#[test]
fn composed_use_matches_the_aead() {
    let (key, nonce) = ([8u8; 32], [9u8; 12]);
    let msg = bytes(1000);
    let (ct, tag) = reference_seal(&key, &nonce, b"hdr", &msg);
    let (mut stream, mut mac) = nyx_chacha::keystream_and_mac(&key, &nonce);
    let mut buf = msg.clone();
    stream.apply_keystream(&mut buf).unwrap();
    mac.update_padded(b"hdr");
    mac.update_padded(&buf);
    assert_eq!(nyx_chacha::finish_tag(mac, 3, buf.len()), tag);
    assert_eq!(buf, ct);
}

#[test]
fn a_backend_the_cpu_lacks_falls_back_to_portable() {
    // Whatever this CPU has, every backend gives the reference output.
    let want = reference_keystream(&[1; 32], &[2; 12], 0, 300);
    for backend in Backend::ALL {
        let mut got = vec![0u8; 300];
        ChaCha20::with_backend(backend, &[1; 32], &[2; 12])
            .apply_keystream(&mut got)
            .unwrap();
        assert_eq!(got, want, "backend {backend:?}");
    }
    assert!(Backend::detect().is_available());
}

#[test]
fn debug_shows_no_key_material() {
    let stream = ChaCha20::new(&[0xab; 32], &[0xcd; 12]);
    let shown = format!("{stream:?} {:?}", Poly1305::new(&[0xab; 32]));
    assert!(
        !shown.contains("ab") && !shown.contains("171") && !shown.contains("205"),
        "{shown}"
    );
}
