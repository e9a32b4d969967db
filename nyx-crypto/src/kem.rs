//! The hybrid key encapsulation NyxNet keys links and circuit hops with: X25519 and
//! ML-KEM-768 side by side, combined so that a key stays secret while **either** holds.
//!
//! ```text
//! public key  = ML-KEM-768 encapsulation key (1184) || X25519 public key (32)      1216 bytes
//! ciphertext  = ML-KEM-768 ciphertext (1088)       || X25519 ephemeral key (32)    1120 bytes
//! binding     = SHA-256("nyx/v1/hybrid-kem" || public key || ciphertext)
//! key         = HKDF-Expand(HKDF-Extract(salt = label, ikm = ss_mlkem || ss_x25519 || binding),
//!                           info = context, 32)
//! ```
//!
//! Keys come only out of [`SharedSecrets::combine`], which always takes both shared secrets,
//! both public keys and both ciphertexts (through `binding`) and a caller's label and context
//! (the handshake transcript). This is a "kitchen-sink" combiner: unlike X-Wing it hashes the
//! ML-KEM public key and ciphertext too, so its security does not rest on ML-KEM's
//! ciphertext-binding property; the extra hashing (about 2.3 KB of SHA-256) is small next to
//! the KEM operations. An X25519 result that is not contributory (a low-order point) is
//! refused.

use std::fmt;

use hkdf::Hkdf;
use ml_kem::array::Array;
use ml_kem::{
    Ciphertext, Decapsulate, DecapsulationKey, EncapsulationKey, KeyExport, MlKem768, Seed,
};
use sha2::{Digest, Sha256};
use x25519_dalek::{PublicKey, StaticSecret};
use zeroize::{Zeroize, Zeroizing};

use crate::Error;

const MLKEM_PK_LEN: usize = 1184;
const MLKEM_CT_LEN: usize = 1088;
/// Length of an encoded hybrid public key.
pub const PUBLIC_KEY_LEN: usize = MLKEM_PK_LEN + 32;
/// Length of a hybrid ciphertext.
pub const CIPHERTEXT_LEN: usize = MLKEM_CT_LEN + 32;
/// Length of the seed a secret key is derived from (ML-KEM `d || z`, then the X25519 secret).
pub const SEED_LEN: usize = 64 + 32;

const BINDING_LABEL: &[u8] = b"nyx/v1/hybrid-kem";

/// A hybrid secret key. Zeroized on drop; `Debug` shows nothing secret.
pub struct HybridSecretKey {
    /// The seed everything is derived from, kept for key files.
    seed: Zeroizing<[u8; SEED_LEN]>,
    mlkem: DecapsulationKey<MlKem768>,
    x25519: StaticSecret,
    public: HybridPublicKey,
}

/// A hybrid public key.
#[derive(Clone)]
pub struct HybridPublicKey {
    mlkem: EncapsulationKey<MlKem768>,
    x25519: PublicKey,
    bytes: Box<[u8; PUBLIC_KEY_LEN]>,
}

/// The two shared secrets of one encapsulation and what they are bound to. Only
/// [`combine`](Self::combine) turns them into key material.
pub struct SharedSecrets {
    mlkem: Zeroizing<[u8; 32]>,
    x25519: Zeroizing<[u8; 32]>,
    binding: [u8; 32],
}

impl HybridSecretKey {
    /// A fresh key from the operating system's random number generator.
    pub fn generate() -> Result<Self, Error> {
        let mut seed = Zeroizing::new([0u8; SEED_LEN]);
        fill_random(seed.as_mut_slice())?;
        Ok(Self::from_seed(&seed))
    }

    /// The key derived from a 96-byte seed (key files and test vectors).
    pub fn from_seed(seed: &[u8; SEED_LEN]) -> Self {
        let mut mlkem_seed = [0u8; 64];
        mlkem_seed.copy_from_slice(&seed[..64]);
        let mlkem = DecapsulationKey::<MlKem768>::from_seed(Seed::from(mlkem_seed));
        mlkem_seed.zeroize();
        let mut x = [0u8; 32];
        x.copy_from_slice(&seed[64..]);
        let x25519 = StaticSecret::from(x);
        x.zeroize();
        let public =
            HybridPublicKey::assemble(mlkem.encapsulation_key().clone(), PublicKey::from(&x25519));
        HybridSecretKey {
            seed: Zeroizing::new(*seed),
            mlkem,
            x25519,
            public,
        }
    }

    /// The public half.
    pub fn public(&self) -> &HybridPublicKey {
        &self.public
    }

    /// The seed, for writing the key file.
    pub(crate) fn seed(&self) -> &[u8; SEED_LEN] {
        &self.seed
    }

    /// Recover the shared secrets from a ciphertext made for this key. A well-formed but wrong
    /// ciphertext yields secrets that match nobody's (ML-KEM's implicit rejection); the
    /// handshake's key confirmation then fails.
    pub fn decapsulate(&self, ciphertext: &[u8]) -> Result<SharedSecrets, Error> {
        if ciphertext.len() != CIPHERTEXT_LEN {
            return Err(Error::BadLength {
                what: "hybrid ciphertext",
                expected: CIPHERTEXT_LEN,
                got: ciphertext.len(),
            });
        }
        let ct = Ciphertext::<MlKem768>::try_from(&ciphertext[..MLKEM_CT_LEN]).map_err(|_| {
            Error::BadLength {
                what: "ML-KEM ciphertext",
                expected: MLKEM_CT_LEN,
                got: MLKEM_CT_LEN,
            }
        })?;
        // ML-KEM returns its shared secret by value: keep that temporary in `Zeroizing` too, so
        // it is wiped after the copy.
        let ss_raw = Zeroizing::new(self.mlkem.decapsulate(&ct));
        let mut ss_m = Zeroizing::new([0u8; 32]);
        ss_m.copy_from_slice(&ss_raw);
        let mut eph = [0u8; 32];
        eph.copy_from_slice(&ciphertext[MLKEM_CT_LEN..]);
        let dh = self.x25519.diffie_hellman(&PublicKey::from(eph));
        if !dh.was_contributory() {
            return Err(Error::InvalidPublicKey);
        }
        Ok(SharedSecrets {
            mlkem: ss_m,
            x25519: Zeroizing::new(dh.to_bytes()),
            binding: binding(&self.public.bytes[..], ciphertext),
        })
    }
}

impl fmt::Debug for HybridSecretKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HybridSecretKey")
            .field("public", &self.public)
            .finish_non_exhaustive()
    }
}

impl HybridPublicKey {
    fn assemble(mlkem: EncapsulationKey<MlKem768>, x25519: PublicKey) -> Self {
        let mut bytes = Box::new([0u8; PUBLIC_KEY_LEN]);
        bytes[..MLKEM_PK_LEN].copy_from_slice(&mlkem.to_bytes());
        bytes[MLKEM_PK_LEN..].copy_from_slice(x25519.as_bytes());
        HybridPublicKey {
            mlkem,
            x25519,
            bytes,
        }
    }

    /// Parse and validate an encoded public key (length, and FIPS 203's modulus check on the
    /// ML-KEM part).
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, Error> {
        if bytes.len() != PUBLIC_KEY_LEN {
            return Err(Error::BadLength {
                what: "hybrid public key",
                expected: PUBLIC_KEY_LEN,
                got: bytes.len(),
            });
        }
        let ek = Array::try_from(&bytes[..MLKEM_PK_LEN]).map_err(|_| Error::InvalidPublicKey)?;
        let mlkem = EncapsulationKey::<MlKem768>::new(&ek).map_err(|_| Error::InvalidPublicKey)?;
        let mut x = [0u8; 32];
        x.copy_from_slice(&bytes[MLKEM_PK_LEN..]);
        Ok(Self::assemble(mlkem, PublicKey::from(x)))
    }

    /// The 1216-byte encoding.
    pub fn to_bytes(&self) -> &[u8; PUBLIC_KEY_LEN] {
        &self.bytes
    }

    /// Encapsulate fresh secrets to this key: returns the ciphertext to send and the secrets.
    pub fn encapsulate(&self) -> Result<([u8; CIPHERTEXT_LEN], SharedSecrets), Error> {
        let mut coins = Zeroizing::new([0u8; 64]);
        fill_random(coins.as_mut_slice())?;
        let mut m = Zeroizing::new([0u8; 32]);
        let mut eph = Zeroizing::new([0u8; 32]);
        m.copy_from_slice(&coins[..32]);
        eph.copy_from_slice(&coins[32..]);
        self.encapsulate_from(&m, &eph)
    }

    /// Encapsulation from explicit randomness: `m` for ML-KEM and the X25519 ephemeral secret.
    /// Both must be fresh uniform random bytes (test vectors aside).
    pub(crate) fn encapsulate_from(
        &self,
        m: &[u8; 32],
        ephemeral: &[u8; 32],
    ) -> Result<([u8; CIPHERTEXT_LEN], SharedSecrets), Error> {
        // The randomness `m` decides the shared secret, and ML-KEM returns that secret by
        // value: both temporaries are wiped when they go out of scope (`Zeroizing`).
        let m = Zeroizing::new(Array::from(*m));
        let (ct, ss_m) = self.mlkem.encapsulate_deterministic(&m);
        let ss_m = Zeroizing::new(ss_m);
        let eph = StaticSecret::from(*ephemeral);
        let dh = eph.diffie_hellman(&self.x25519);
        if !dh.was_contributory() {
            return Err(Error::InvalidPublicKey);
        }
        let mut out = [0u8; CIPHERTEXT_LEN];
        out[..MLKEM_CT_LEN].copy_from_slice(&ct);
        out[MLKEM_CT_LEN..].copy_from_slice(PublicKey::from(&eph).as_bytes());
        let mut mlkem = Zeroizing::new([0u8; 32]);
        mlkem.copy_from_slice(&ss_m);
        let secrets = SharedSecrets {
            mlkem,
            x25519: Zeroizing::new(dh.to_bytes()),
            binding: binding(&self.bytes[..], &out),
        };
        Ok((out, secrets))
    }
}

#[cfg(any(test, feature = "test-vectors"))]
impl HybridPublicKey {
    /// [`encapsulate`](Self::encapsulate) with explicit randomness, for reproducible test
    /// vectors (feature `test-vectors`). Reusing randomness breaks security.
    pub fn encapsulate_with(
        &self,
        m: &[u8; 32],
        ephemeral: &[u8; 32],
    ) -> Result<([u8; CIPHERTEXT_LEN], SharedSecrets), Error> {
        self.encapsulate_from(m, ephemeral)
    }
}

impl PartialEq for HybridPublicKey {
    fn eq(&self, other: &Self) -> bool {
        self.bytes == other.bytes
    }
}

impl Eq for HybridPublicKey {}

impl fmt::Debug for HybridPublicKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let digest = Sha256::digest(&self.bytes[..]);
        write!(
            f,
            "HybridPublicKey(sha256:{:02x}{:02x}{:02x}{:02x}…)",
            digest[0], digest[1], digest[2], digest[3]
        )
    }
}

impl SharedSecrets {
    /// 32 bytes of key material from both secrets, both keys and ciphertexts, a protocol
    /// `label` (HKDF salt) and a `context` (HKDF info, e.g. a transcript hash).
    pub fn combine(&self, label: &[u8], context: &[u8]) -> Zeroizing<[u8; 32]> {
        let mut ikm = Zeroizing::new([0u8; 96]);
        ikm[..32].copy_from_slice(self.mlkem.as_slice());
        ikm[32..64].copy_from_slice(self.x25519.as_slice());
        ikm[64..].copy_from_slice(&self.binding);
        let (_, hk) = Hkdf::<Sha256>::extract(Some(label), ikm.as_slice());
        let mut out = Zeroizing::new([0u8; 32]);
        // 32 bytes of output are always within HKDF's limit.
        let _ = hk.expand(context, out.as_mut_slice());
        out
    }

    /// For tests that model an attacker who broke one primitive: the same secrets with the
    /// ML-KEM or the X25519 part replaced.
    #[cfg(test)]
    fn with_parts(&self, mlkem: [u8; 32], x25519: [u8; 32]) -> SharedSecrets {
        SharedSecrets {
            mlkem: Zeroizing::new(mlkem),
            x25519: Zeroizing::new(x25519),
            binding: self.binding,
        }
    }
}

impl fmt::Debug for SharedSecrets {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SharedSecrets(<redacted>)")
    }
}

fn binding(public: &[u8], ciphertext: &[u8]) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(BINDING_LABEL);
    h.update(public);
    h.update(ciphertext);
    h.finalize().into()
}

fn fill_random(buf: &mut [u8]) -> Result<(), Error> {
    getrandom::fill(buf).map_err(|e| Error::Random {
        reason: e.to_string(),
    })
}

#[cfg(test)]
mod tests;
