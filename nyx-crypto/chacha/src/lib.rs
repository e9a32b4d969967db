//! # nyx-chacha: ChaCha20, Poly1305 and ChaCha20-Poly1305 for NyxNet
//!
//! What it is for: the symmetric cipher under every NyxNet link, session and onion layer
//! (RFC 8439), fast on the machines relays run on and allocation-free:
//!
//! * [`seal_in_place`] / [`open_in_place`]: the AEAD on a buffer in place. On x86-64 with
//!   AVX2, keystream for eight blocks is computed at a time (one per 32-bit lane of 256-bit
//!   vectors, or sixteen in 512-bit vectors where that pays; a message's last one to four
//!   blocks four at a time, two per vector; with AVX-512, a cell-sized keystream or seal of
//!   17-20 blocks in one batch of twenty), and Poly1305 is absorbed
//!   *between the ChaCha20 rounds* ("stitching", as in OpenSSL and BoringSSL's assembly): on
//!   CPUs with AVX-512 IFMA in vector lanes, four blocks at a time; elsewhere on the scalar
//!   multiplier, which works beside the vector units. On every other CPU (AArch64 among
//!   them) the keystream comes from RustCrypto's `chacha20` crate (NEON on AArch64) and the
//!   scalar Poly1305 runs after it.
//! * [`seal_in_place_with_suffix`]: a seal whose tag also covers bytes that will follow the
//!   ciphertext when it is opened, in the same pass (NyxNet's forward onion layers: the
//!   filler their relays append).
//! * [`ChaCha20`]: the keystream at any byte offset, for constructions that use the
//!   keystream past a message (NyxNet's onion layers do); [`xor_keystream`] for keystream
//!   needed once, XORed straight into the data.
//! * [`Poly1305`]: the one-time authenticator, scalar in radix 2^64 (the AEAD moves it into
//!   vector lanes and back where that pays).
//! * [`Backend`]: which kernel runs. The best one the CPU supports is chosen at run time
//!   (AVX-512 IFMA, AVX-512VL, AVX2, then the portable backend); tests and benchmarks can
//!   pick one.
//!
//! The only unsafe code of this crate is in the `x86` module: calling a `#[target_feature]`
//! kernel after the CPU has reported that feature. The kernels XOR keystream into messages
//! through slices, or keep it in arrays of vectors that are viewed as bytes through
//! `bytemuck`'s safe casts, so no code here touches a raw pointer. (RustCrypto's `chacha20`,
//! which the portable backend calls, has unsafe code of its own in its SIMD backends.)
//!
//! What it is not for: key management (nyx-crypto), nonce choice (callers must never seal
//! two messages under one key and nonce), or other ciphers.
//!
//! ```
//! let key = [7u8; 32];
//! let nonce = [0u8; 12];
//! let mut buf = *b"attack at dawn";
//! let tag = nyx_chacha::seal_in_place(&key, &nonce, b"header", &mut buf)?;
//! nyx_chacha::open_in_place(&key, &nonce, b"header", &mut buf, &tag)?;
//! assert_eq!(&buf, b"attack at dawn");
//! # Ok::<(), nyx_chacha::Error>(())
//! ```

#![deny(unsafe_code)]

mod aead;
mod backend;
#[cfg(target_arch = "x86_64")]
mod batch;
mod chacha20;
mod error;
mod poly1305;
mod portable;
#[cfg(target_arch = "x86_64")]
mod stitched;
#[cfg(target_arch = "x86_64")]
mod x86;

pub use aead::{
    finish_tag, keystream_and_mac, open_in_place, open_in_place_with, open_in_place_with_tail,
    seal_in_place, seal_in_place_with, seal_in_place_with_suffix, seal_in_place_with_tail,
};
pub use backend::Backend;
pub use chacha20::{ChaCha20, xor_keystream, xor_keystream_with};
pub use error::Error;
pub use poly1305::Poly1305;

/// Bytes in a key.
pub const KEY_LEN: usize = 32;
/// Bytes in a nonce.
pub const NONCE_LEN: usize = 12;
/// Bytes in a tag.
pub const TAG_LEN: usize = 16;
/// The longest message one (key, nonce) pair can encrypt: ChaCha20's 32-bit block counter
/// starts at 1 for the message, so 2^32 − 1 blocks of 64 bytes.
pub const MAX_MESSAGE_LEN: u64 = ((1u64 << 32) - 1) * 64;
