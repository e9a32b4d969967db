//! The one error type of nyx-chacha.

/// What can go wrong sealing, opening or drawing keystream.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The tag does not match: wrong key, wrong nonce, or the data was modified.
    #[error("message failed authentication")]
    AuthenticationFailed,
    /// The message is longer than one (key, nonce) pair can encrypt.
    #[error("message of {len} bytes exceeds ChaCha20-Poly1305's 256 GiB limit")]
    MessageTooLong {
        /// The message length.
        len: usize,
    },
    /// The keystream would run past block 2^32 − 1 and repeat.
    #[error("keystream exhausted: byte {offset} is past ChaCha20's 32-bit block counter")]
    KeystreamExhausted {
        /// The stream offset that was asked for.
        offset: u64,
    },
}
