//! Onion-key certificates: a relay's identity key vouches for an onion key and the period in
//! which clients may use it.
//!
//! ```text
//! 0     version       u8 = 1
//! 1     node id       32      the relay's NodeId (must match the verifying identity)
//! 33    valid after   u64     Unix seconds, inclusive
//! 41    valid until   u64     Unix seconds, exclusive (> valid after)
//! 49    onion key     1216    hybrid public key (X25519 + ML-KEM-768)
//! 1265  signature     64      Ed25519 by the identity key over bytes 0..1265,
//!                             context "nyx/v1/onion-key"
//! ```
//!
//! Relays rotate onion keys (daily, say) with an overlap, publishing the next key's
//! certificate before the current one expires; the overlay decides the schedule. Clients must
//! not use a key outside its window ([`OnionKeyCert::is_valid_at`]; enforcing that is the
//! overlay's path selection, which knows the wall-clock time), and relays erase keys after it,
//! which bounds what a later key compromise exposes.

use crate::Error;
use crate::identity::{IdentityKey, IdentityPublic, SIGNATURE_LEN};
use crate::kem::{HybridPublicKey, PUBLIC_KEY_LEN};
use nyx_core::NodeId;

const VERSION: u8 = 1;
const CONTEXT: &[u8] = b"nyx/v1/onion-key";
const SIGNED_LEN: usize = 1 + 32 + 8 + 8 + PUBLIC_KEY_LEN;
/// Length of an encoded certificate.
pub const CERT_LEN: usize = SIGNED_LEN + SIGNATURE_LEN;

/// A verified onion-key certificate.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OnionKeyCert {
    node_id: NodeId,
    valid_after: u64,
    valid_until: u64,
    onion: HybridPublicKey,
    bytes: Box<[u8; CERT_LEN]>,
}

impl OnionKeyCert {
    /// Certify `onion` for `[valid_after, valid_until)` (Unix seconds) with `identity`.
    pub fn sign(
        identity: &IdentityKey,
        onion: &HybridPublicKey,
        valid_after: u64,
        valid_until: u64,
    ) -> Result<Self, Error> {
        if valid_until <= valid_after {
            return Err(Error::BadValidity {
                valid_after,
                valid_until,
            });
        }
        let node_id = identity.node_id();
        let mut bytes = Box::new([0u8; CERT_LEN]);
        bytes[0] = VERSION;
        bytes[1..33].copy_from_slice(node_id.as_bytes());
        bytes[33..41].copy_from_slice(&valid_after.to_be_bytes());
        bytes[41..49].copy_from_slice(&valid_until.to_be_bytes());
        bytes[49..SIGNED_LEN].copy_from_slice(&onion.to_bytes()[..]);
        let sig = identity.sign(CONTEXT, &bytes[..SIGNED_LEN]);
        bytes[SIGNED_LEN..].copy_from_slice(&sig);
        Ok(OnionKeyCert {
            node_id,
            valid_after,
            valid_until,
            onion: onion.clone(),
            bytes,
        })
    }

    /// Parse and verify a certificate against the relay's identity key (from its descriptor).
    pub fn verify(bytes: &[u8], identity: &IdentityPublic) -> Result<Self, Error> {
        if bytes.len() != CERT_LEN {
            return Err(Error::BadLength {
                what: "onion-key certificate",
                expected: CERT_LEN,
                got: bytes.len(),
            });
        }
        if bytes[0] != VERSION {
            return Err(Error::UnsupportedVersion { version: bytes[0] });
        }
        let node_id = NodeId::from_slice(&bytes[1..33]).map_err(|_| Error::WrongIdentity)?;
        if node_id != identity.node_id() {
            return Err(Error::WrongIdentity);
        }
        let mut sig = [0u8; SIGNATURE_LEN];
        sig.copy_from_slice(&bytes[SIGNED_LEN..]);
        identity.verify(CONTEXT, &bytes[..SIGNED_LEN], &sig)?;
        let valid_after = u64_at(bytes, 33);
        let valid_until = u64_at(bytes, 41);
        if valid_until <= valid_after {
            return Err(Error::BadValidity {
                valid_after,
                valid_until,
            });
        }
        let onion = HybridPublicKey::from_bytes(&bytes[49..SIGNED_LEN])?;
        let mut owned = Box::new([0u8; CERT_LEN]);
        owned.copy_from_slice(bytes);
        Ok(OnionKeyCert {
            node_id,
            valid_after,
            valid_until,
            onion,
            bytes: owned,
        })
    }

    /// Whether clients may use the key at `unix_secs`.
    pub fn is_valid_at(&self, unix_secs: u64) -> bool {
        (self.valid_after..self.valid_until).contains(&unix_secs)
    }

    /// The certified onion key.
    pub fn onion_key(&self) -> &HybridPublicKey {
        &self.onion
    }

    /// The relay the key belongs to.
    pub fn node_id(&self) -> NodeId {
        self.node_id
    }

    /// Start of validity (Unix seconds, inclusive).
    pub fn valid_after(&self) -> u64 {
        self.valid_after
    }

    /// End of validity (Unix seconds, exclusive).
    pub fn valid_until(&self) -> u64 {
        self.valid_until
    }

    /// The encoded certificate.
    pub fn to_bytes(&self) -> &[u8; CERT_LEN] {
        &self.bytes
    }
}

fn u64_at(bytes: &[u8], at: usize) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&bytes[at..at + 8]);
    u64::from_be_bytes(b)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kem::{HybridSecretKey, SEED_LEN};
    use proptest::prelude::*;

    fn fixture() -> (IdentityKey, HybridPublicKey) {
        let id = IdentityKey::from_seed(&[1; 32]);
        let onion = HybridSecretKey::from_seed(&[2; SEED_LEN]).public().clone();
        (id, onion)
    }

    #[test]
    fn sign_verify_and_validity_window() {
        let (id, onion) = fixture();
        let cert = OnionKeyCert::sign(&id, &onion, 1000, 2000).unwrap();
        let parsed = OnionKeyCert::verify(&cert.to_bytes()[..], &id.public()).unwrap();
        assert_eq!(parsed, cert);
        assert_eq!(parsed.onion_key(), &onion);
        assert_eq!(parsed.node_id(), id.node_id());
        assert!(!parsed.is_valid_at(999));
        assert!(parsed.is_valid_at(1000) && parsed.is_valid_at(1999));
        assert!(!parsed.is_valid_at(2000));
        assert_eq!(
            OnionKeyCert::sign(&id, &onion, 5, 5).unwrap_err(),
            Error::BadValidity {
                valid_after: 5,
                valid_until: 5
            }
        );
    }

    #[test]
    fn another_identity_or_any_flipped_bit_is_refused() {
        let (id, onion) = fixture();
        let cert = OnionKeyCert::sign(&id, &onion, 1, 2).unwrap();
        let other = IdentityKey::from_seed(&[9; 32]).public();
        assert_eq!(
            OnionKeyCert::verify(&cert.to_bytes()[..], &other).unwrap_err(),
            Error::WrongIdentity
        );
        for bit in 0..CERT_LEN * 8 {
            let mut bad = *cert.to_bytes();
            bad[bit / 8] ^= 1 << (bit % 8);
            assert!(
                OnionKeyCert::verify(&bad, &id.public()).is_err(),
                "bit {bit}"
            );
        }
        assert!(matches!(
            OnionKeyCert::verify(&cert.to_bytes()[..100], &id.public()),
            Err(Error::BadLength { got: 100, .. })
        ));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        #[test]
        fn round_trips_any_valid_window(after in any::<u64>(), len in 1u64..u64::MAX) {
            let (id, onion) = fixture();
            let until = after.saturating_add(len);
            prop_assume!(until > after);
            let cert = OnionKeyCert::sign(&id, &onion, after, until).unwrap();
            let parsed = OnionKeyCert::verify(&cert.to_bytes()[..], &id.public()).unwrap();
            prop_assert_eq!((parsed.valid_after(), parsed.valid_until()), (after, until));
        }

        #[test]
        fn verify_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..1400)) {
            let (id, _) = fixture();
            let _ = OnionKeyCert::verify(&bytes, &id.public());
        }
    }
}
