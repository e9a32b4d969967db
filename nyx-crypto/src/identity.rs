//! Node identity: an Ed25519 signing key, the [`NodeId`] derived from it, and
//! domain-separated signatures.
//!
//! `NodeId = SHA-256("nyx/v1/node-id" || identity public key)`. Every signature covers
//! `context || 0x00 || message`, where `context` names what is being signed (for example
//! `b"nyx/v1/descriptor"`), so a signature made for one purpose is never valid for another.
//! Verification is strict (no malleable or small-order encodings).

use std::fmt;

use ed25519_dalek::{Signature, Signer, SigningKey, VerifyingKey};
use nyx_core::NodeId;
use sha2::{Digest, Sha256};
use zeroize::Zeroizing;

use crate::Error;

/// Length of a signature in bytes.
pub const SIGNATURE_LEN: usize = 64;
/// Length of an identity public key in bytes.
pub const PUBLIC_KEY_LEN: usize = 32;

const NODE_ID_LABEL: &[u8] = b"nyx/v1/node-id";

/// A node's long-term identity key. The secret is zeroized on drop and never printed.
pub struct IdentityKey {
    signing: SigningKey,
}

impl IdentityKey {
    /// A fresh key from the operating system's random number generator.
    pub fn generate() -> Result<Self, Error> {
        let mut seed = Zeroizing::new([0u8; 32]);
        getrandom::fill(seed.as_mut_slice()).map_err(|e| Error::Random {
            reason: e.to_string(),
        })?;
        Ok(Self::from_seed(&seed))
    }

    /// The key with this 32-byte secret seed (as stored in a key file or a test vector).
    pub fn from_seed(seed: &[u8; 32]) -> Self {
        IdentityKey {
            signing: SigningKey::from_bytes(seed),
        }
    }

    /// The secret seed, for writing the key file.
    pub(crate) fn seed(&self) -> Zeroizing<[u8; 32]> {
        Zeroizing::new(self.signing.to_bytes())
    }

    /// The key as PKCS#8 v1 DER (RFC 8410), for TLS libraries that take a certificate's key
    /// that way (nyx-transport binds its TLS certificates to the identity). Wiped on drop.
    pub fn to_pkcs8_der(&self) -> Zeroizing<Vec<u8>> {
        // SEQUENCE { INTEGER 0, AlgorithmIdentifier { id-Ed25519 }, OCTET STRING { OCTET
        // STRING seed } }: a fixed 16-byte prefix and the 32-byte seed.
        const PREFIX: [u8; 16] = [
            0x30, 0x2e, 0x02, 0x01, 0x00, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x04, 0x22,
            0x04, 0x20,
        ];
        let mut der = Zeroizing::new(Vec::with_capacity(48));
        der.extend_from_slice(&PREFIX);
        der.extend_from_slice(&self.seed()[..]);
        der
    }

    /// The public half.
    pub fn public(&self) -> IdentityPublic {
        IdentityPublic(self.signing.verifying_key())
    }

    /// This node's id.
    pub fn node_id(&self) -> NodeId {
        self.public().node_id()
    }

    /// Sign `message` for the purpose named by `context`.
    pub fn sign(&self, context: &[u8], message: &[u8]) -> [u8; SIGNATURE_LEN] {
        let framed = frame(context, message);
        self.signing.sign(&framed).to_bytes()
    }
}

impl fmt::Debug for IdentityKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IdentityKey")
            .field("node_id", &self.node_id())
            .finish_non_exhaustive()
    }
}

/// A node's identity public key.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct IdentityPublic(VerifyingKey);

impl IdentityPublic {
    /// Parse 32 bytes; fails for encodings that are not a valid curve point.
    pub fn from_bytes(bytes: &[u8; PUBLIC_KEY_LEN]) -> Result<Self, Error> {
        VerifyingKey::from_bytes(bytes)
            .map(IdentityPublic)
            .map_err(|_| Error::InvalidPublicKey)
    }

    /// The 32-byte encoding.
    pub fn to_bytes(&self) -> [u8; PUBLIC_KEY_LEN] {
        self.0.to_bytes()
    }

    /// The node id this key belongs to.
    pub fn node_id(&self) -> NodeId {
        let mut h = Sha256::new();
        h.update(NODE_ID_LABEL);
        h.update(self.0.as_bytes());
        NodeId::from_bytes(h.finalize().into())
    }

    /// Check a signature made with [`IdentityKey::sign`] for the same `context`.
    pub fn verify(
        &self,
        context: &[u8],
        message: &[u8],
        signature: &[u8; SIGNATURE_LEN],
    ) -> Result<(), Error> {
        let sig = Signature::from_bytes(signature);
        self.0
            .verify_strict(&frame(context, message), &sig)
            .map_err(|_| Error::BadSignature)
    }
}

impl fmt::Debug for IdentityPublic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "IdentityPublic({:?})", self.node_id())
    }
}

/// `context || 0x00 || message`. Contexts are ASCII labels without NUL bytes, so the framing
/// is unambiguous.
fn frame(context: &[u8], message: &[u8]) -> Vec<u8> {
    let mut framed = Vec::with_capacity(context.len() + 1 + message.len());
    framed.extend_from_slice(context);
    framed.push(0);
    framed.extend_from_slice(message);
    framed
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 8032, section 7.1, TEST 1: secret key, public key. Our NodeId of that public key is
    /// our own vector, fixed here so that any change to the derivation is visible.
    #[test]
    fn rfc8032_test_1_public_key_and_our_node_id() {
        let seed = hex32("9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60");
        let key = IdentityKey::from_seed(&seed);
        assert_eq!(
            key.public().to_bytes(),
            hex32("d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a")
        );
        let expected = {
            let mut h = Sha256::new();
            h.update(b"nyx/v1/node-id");
            h.update(key.public().to_bytes());
            NodeId::from_bytes(h.finalize().into())
        };
        assert_eq!(key.node_id(), expected);
    }

    #[test]
    fn signatures_are_bound_to_context_message_and_key() {
        let key = IdentityKey::from_seed(&[1; 32]);
        let public = key.public();
        let sig = key.sign(b"nyx/v1/descriptor", b"hello");
        assert_eq!(public.verify(b"nyx/v1/descriptor", b"hello", &sig), Ok(()));
        assert_eq!(
            public.verify(b"nyx/v1/onion-key", b"hello", &sig),
            Err(Error::BadSignature)
        );
        assert_eq!(
            public.verify(b"nyx/v1/descriptor", b"hellO", &sig),
            Err(Error::BadSignature)
        );
        let other = IdentityKey::from_seed(&[2; 32]).public();
        assert_eq!(
            other.verify(b"nyx/v1/descriptor", b"hello", &sig),
            Err(Error::BadSignature)
        );
        for bit in 0..SIGNATURE_LEN * 8 {
            let mut bad = sig;
            bad[bit / 8] ^= 1 << (bit % 8);
            assert!(
                public.verify(b"nyx/v1/descriptor", b"hello", &bad).is_err(),
                "bit {bit}"
            );
        }
    }

    #[test]
    fn generated_keys_differ_and_public_keys_round_trip() {
        let a = IdentityKey::generate().unwrap();
        let b = IdentityKey::generate().unwrap();
        assert_ne!(a.node_id(), b.node_id());
        let bytes = a.public().to_bytes();
        assert_eq!(IdentityPublic::from_bytes(&bytes).unwrap(), a.public());
    }

    #[test]
    fn debug_shows_the_node_id_not_the_secret() {
        let key = IdentityKey::from_seed(&[0xAB; 32]);
        let text = format!("{key:?}");
        assert!(text.starts_with("IdentityKey { node_id: NodeId("), "{text}");
        assert!(!text.to_lowercase().contains("abab"), "{text}");
    }

    fn hex32(s: &str) -> [u8; 32] {
        let mut out = [0u8; 32];
        for (i, o) in out.iter_mut().enumerate() {
            *o = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).unwrap();
        }
        out
    }
}
