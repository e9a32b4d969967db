//! nyx-crypto's own ChaCha20-Poly1305 (nyx-chacha, on the backend this CPU gets) against
//! RustCrypto's `chacha20poly1305`, on inputs chosen by the fuzzer: the same ciphertext and
//! tag, both open what the other sealed, and a changed tag is refused by ours.
#![no_main]

use chacha20poly1305::aead::{AeadInOut, KeyInit};
use libfuzzer_sys::fuzz_target;
use nyx_crypto::aead::ChaCha20Poly1305;

fuzz_target!(|data: &[u8]| {
    if data.len() < 46 {
        return;
    }
    let key: [u8; 32] = data[..32].try_into().expect("32");
    let nonce: [u8; 12] = data[32..44].try_into().expect("12");
    let split = usize::from(data[44]).min(data.len() - 45);
    let (aad, msg) = data[45..].split_at(split);

    let ours = ChaCha20Poly1305::new(&key);
    let mut a = msg.to_vec();
    let tag = ours.seal_in_place(&nonce, aad, &mut a).expect("seal");

    let theirs = chacha20poly1305::ChaCha20Poly1305::new(&key.into());
    let mut b = msg.to_vec();
    let their_tag = theirs
        .encrypt_inout_detached(&nonce.into(), aad, b.as_mut_slice().into())
        .expect("seal");
    assert_eq!(a, b, "ciphertexts differ");
    assert_eq!(&tag[..], &their_tag[..], "tags differ");

    let mut bad = tag;
    bad[usize::from(data[45 % data.len()]) % 16] ^= 1;
    let before = a.clone();
    assert!(ours.open_in_place(&nonce, aad, &mut a, &bad).is_err());
    assert_eq!(a, before);
    ours.open_in_place(&nonce, aad, &mut a, &tag).expect("open");
    assert_eq!(a, msg);
});
