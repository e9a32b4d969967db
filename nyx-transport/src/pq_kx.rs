//! X25519MLKEM768 (TLS named group 0x11ec) for rustls' ring provider, in pure Rust.
//!
//! rustls' ring provider has no post-quantum key exchange; this group adds the hybrid of the
//! IETF draft (draft-kwiatkowski-tls-ecdhe-mlkem, the group browsers and aws-lc-rs ship), built
//! from the `ml-kem` and `x25519-dalek` crates nyx-crypto already uses:
//!
//! ```text
//! client key share  ML-KEM-768 encapsulation key (1184) || X25519 public key (32)
//! server key share  ML-KEM-768 ciphertext (1088)        || X25519 public key (32)
//! shared secret     ML-KEM-768 shared secret (32)       || X25519 shared secret (32)
//! ```
//!
//! TLS 1.3's key schedule then hashes the 64-byte secret with the transcript, so the session
//! keys stay secret while either ML-KEM-768 or X25519 holds. `tests/pq_interop.rs` proves the
//! group interoperates with aws-lc-rs's X25519MLKEM768 in both directions.

use ml_kem::array::Array;
use ml_kem::{
    Ciphertext, Decapsulate, DecapsulationKey, EncapsulationKey, KeyExport, MlKem768, Seed,
};
use rustls::crypto::{ActiveKeyExchange, CompletedKeyExchange, SharedSecret, SupportedKxGroup};
use rustls::{Error as TlsError, NamedGroup, PeerMisbehaved, ProtocolVersion};
use x25519_dalek::{PublicKey, StaticSecret};
use zeroize::Zeroizing;

const MLKEM_EK_LEN: usize = 1184;
const MLKEM_CT_LEN: usize = 1088;
const X25519_LEN: usize = 32;
/// Bytes of the client's key share.
pub const CLIENT_SHARE_LEN: usize = MLKEM_EK_LEN + X25519_LEN;
/// Bytes of the server's key share.
pub const SERVER_SHARE_LEN: usize = MLKEM_CT_LEN + X25519_LEN;

/// The X25519MLKEM768 group, to put first (or alone) in a crypto provider's `kx_groups`.
pub static X25519MLKEM768: &dyn SupportedKxGroup = &HybridGroup;

#[derive(Debug)]
struct HybridGroup;

impl SupportedKxGroup for HybridGroup {
    fn start(&self) -> Result<Box<dyn ActiveKeyExchange>, TlsError> {
        let mut seed = Zeroizing::new([0u8; 64 + 32]);
        random(seed.as_mut_slice())?;
        // Secret temporaries are wiped when they go out of scope (`Zeroizing`); copies the
        // callees make are theirs to wipe (ml-kem and x25519-dalek zeroize their keys).
        let mut mlkem_seed = Zeroizing::new(Seed::default());
        mlkem_seed.copy_from_slice(&seed[..64]);
        let decaps = DecapsulationKey::<MlKem768>::from_seed(*mlkem_seed);
        let mut x = Zeroizing::new([0u8; 32]);
        x.copy_from_slice(&seed[64..]);
        let x25519 = StaticSecret::from(*x);
        let mut share = Vec::with_capacity(CLIENT_SHARE_LEN);
        share.extend_from_slice(&decaps.encapsulation_key().to_bytes());
        share.extend_from_slice(PublicKey::from(&x25519).as_bytes());
        Ok(Box::new(ClientExchange {
            decaps,
            x25519,
            share,
        }))
    }

    /// The server's side in one step: encapsulate to the client's ML-KEM key and answer its
    /// X25519 share with an ephemeral one.
    fn start_and_complete(&self, client_share: &[u8]) -> Result<CompletedKeyExchange, TlsError> {
        if client_share.len() != CLIENT_SHARE_LEN {
            return Err(PeerMisbehaved::InvalidKeyShare.into());
        }
        let ek = Array::try_from(&client_share[..MLKEM_EK_LEN])
            .map_err(|_| TlsError::from(PeerMisbehaved::InvalidKeyShare))?;
        // FIPS 203's input check on the encapsulation key.
        let ek = EncapsulationKey::<MlKem768>::new(&ek)
            .map_err(|_| TlsError::from(PeerMisbehaved::InvalidKeyShare))?;
        let mut coins = Zeroizing::new([0u8; 64]);
        random(coins.as_mut_slice())?;
        // The encapsulation randomness, the ML-KEM shared secret (returned by value) and the
        // X25519 secret's copy are wiped when they go out of scope (`Zeroizing`).
        let mut m = Zeroizing::new(Array::default());
        m.copy_from_slice(&coins[..32]);
        let (ct, ss_mlkem) = ek.encapsulate_deterministic(&m);
        let ss_mlkem = Zeroizing::new(ss_mlkem);
        let mut x = Zeroizing::new([0u8; 32]);
        x.copy_from_slice(&coins[32..]);
        let ours = StaticSecret::from(*x);
        let ss_x25519 = x25519(&ours, &client_share[MLKEM_EK_LEN..])?;
        let mut share = Vec::with_capacity(SERVER_SHARE_LEN);
        share.extend_from_slice(&ct);
        share.extend_from_slice(PublicKey::from(&ours).as_bytes());
        Ok(CompletedKeyExchange {
            group: NamedGroup::X25519MLKEM768,
            pub_key: share,
            secret: secret(&ss_mlkem, &ss_x25519),
        })
    }

    fn name(&self) -> NamedGroup {
        NamedGroup::X25519MLKEM768
    }

    fn usable_for_version(&self, version: ProtocolVersion) -> bool {
        version == ProtocolVersion::TLSv1_3
    }
}

/// The client's side between ClientHello and ServerHello. Secrets are zeroized on drop
/// (`ml-kem` and `x25519-dalek` with their `zeroize` features).
struct ClientExchange {
    decaps: DecapsulationKey<MlKem768>,
    x25519: StaticSecret,
    share: Vec<u8>,
}

impl ActiveKeyExchange for ClientExchange {
    fn complete(self: Box<Self>, server_share: &[u8]) -> Result<SharedSecret, TlsError> {
        if server_share.len() != SERVER_SHARE_LEN {
            return Err(PeerMisbehaved::InvalidKeyShare.into());
        }
        let ct = Ciphertext::<MlKem768>::try_from(&server_share[..MLKEM_CT_LEN])
            .map_err(|_| TlsError::from(PeerMisbehaved::InvalidKeyShare))?;
        // ML-KEM's shared secret comes back by value: wiped when it goes out of scope.
        let ss_mlkem = Zeroizing::new(self.decaps.decapsulate(&ct));
        let ss_x25519 = x25519(&self.x25519, &server_share[MLKEM_CT_LEN..])?;
        Ok(secret(&ss_mlkem, &ss_x25519))
    }

    fn pub_key(&self) -> &[u8] {
        &self.share
    }

    fn group(&self) -> NamedGroup {
        NamedGroup::X25519MLKEM768
    }
}

/// X25519 with the peer's 32-byte share; an all-zero result (a small-order peer point) is
/// refused as RFC 8446 section 7.4.2 requires.
fn x25519(ours: &StaticSecret, peer: &[u8]) -> Result<Zeroizing<[u8; 32]>, TlsError> {
    let mut p = [0u8; 32];
    p.copy_from_slice(peer);
    let shared = ours.diffie_hellman(&PublicKey::from(p));
    if !shared.was_contributory() {
        return Err(PeerMisbehaved::InvalidKeyShare.into());
    }
    Ok(Zeroizing::new(shared.to_bytes()))
}

fn secret(mlkem: &[u8], x25519: &[u8; 32]) -> SharedSecret {
    let mut both = Zeroizing::new([0u8; 64]);
    both[..32].copy_from_slice(mlkem);
    both[32..].copy_from_slice(x25519);
    SharedSecret::from(&both[..])
}

fn random(buf: &mut [u8]) -> Result<(), TlsError> {
    getrandom::fill(buf).map_err(|_| TlsError::FailedToGetRandomBytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_and_server_agree_on_64_bytes() {
        let client = X25519MLKEM768.start().unwrap();
        assert_eq!(client.pub_key().len(), CLIENT_SHARE_LEN);
        let server = X25519MLKEM768.start_and_complete(client.pub_key()).unwrap();
        assert_eq!(server.pub_key.len(), SERVER_SHARE_LEN);
        let c = client.complete(&server.pub_key).unwrap();
        assert_eq!(c.secret_bytes().len(), 64);
        assert_eq!(c.secret_bytes(), server.secret.secret_bytes());
    }

    #[test]
    fn malformed_shares_are_refused() {
        let client = X25519MLKEM768.start().unwrap();
        assert!(
            X25519MLKEM768
                .start_and_complete(&client.pub_key()[..100])
                .is_err()
        );
        // An ML-KEM key with an out-of-range coefficient fails FIPS 203's modulus check.
        let mut bad = client.pub_key().to_vec();
        bad[..3].fill(0xff);
        assert!(X25519MLKEM768.start_and_complete(&bad).is_err());
        // A small-order X25519 point is refused on both sides.
        let mut zero_x = client.pub_key().to_vec();
        zero_x[MLKEM_EK_LEN..].fill(0);
        assert!(X25519MLKEM768.start_and_complete(&zero_x).is_err());
        let server = X25519MLKEM768.start_and_complete(client.pub_key()).unwrap();
        let mut zero_y = server.pub_key.clone();
        zero_y[MLKEM_CT_LEN..].fill(0);
        assert!(client.complete(&zero_y).is_err());
        let client = X25519MLKEM768.start().unwrap();
        assert!(client.complete(&[0u8; 10]).is_err());
    }
}
