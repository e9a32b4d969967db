//! The circuit-hop handshake: an anonymous client and a relay agree on the keys of one onion
//! layer ([`ClientHop`] / [`RelayHop`]) in one round trip, the relay proving it holds its onion
//! key.
//!
//! ```text
//! CREATE  (client → relay, 1193 bytes)
//!   0   version   u8 = 1
//!   1   relay     NodeId (32)       the relay the client means
//!   33  key id    8 bytes           SHA-256("nyx/v1/onion-key-id" || onion public key)[..8]
//!   41  X         32                client's ephemeral X25519 key
//!   73  ct        1120              hybrid KEM ciphertext to the relay's onion key
//! CREATED (relay → client, 65 bytes)
//!   0   version   u8 = 1
//!   1   Y         32                relay's ephemeral X25519 key
//!   33  confirm   32                proves the relay derived the same keys
//!
//! th      = SHA-256("nyx/v1/hop" || CREATE || Y)
//! K       = kem_secrets.combine("nyx/v1/hop", th)      ML-KEM + X25519 secrets, keys, ciphertexts
//! prk     = HKDF-Extract(salt = K, ikm = X25519(x, Y))  ephemeral-ephemeral: forward secrecy
//! confirm = HKDF-Expand(prk, "nyx/v1/hop/confirm", 32)
//! secret  = HKDF-Expand(prk, "nyx/v1/hop/session", 32) → onion layer keys (crate::onion)
//! ```
//!
//! Only the holder of the onion key can decapsulate `ct`, so only it can compute `confirm`;
//! the client compares in constant time. Post-quantum confidentiality comes from ML-KEM-768,
//! forward secrecy from the ephemeral X25519 pair, and the keys depend on every byte of both
//! messages. The relay refuses a CREATE it has already answered ([`ReplayCache`]).
//! Each step consumes its state, so a handshake cannot be finished twice:
//!
//! ```compile_fail,E0382
//! # use nyx_crypto::hop::HopInitiatorSent;
//! # fn twice(sent: HopInitiatorSent, created: &[u8]) {
//! let _ = sent.finish(created);
//! let _ = sent.finish(created); // moved
//! # }
//! ```

use std::collections::{HashSet, VecDeque};
use std::fmt;

use hkdf::Hkdf;
use nyx_core::NodeId;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;
use x25519_dalek::{PublicKey, StaticSecret};
use zeroize::Zeroizing;

use crate::Error;
use crate::kem::{CIPHERTEXT_LEN, HybridPublicKey, HybridSecretKey, SharedSecrets};

/// Length of the ML-KEM-768 part of the hybrid ciphertext.
const MLKEM_CT_LEN: usize = CIPHERTEXT_LEN - 32;
use crate::onion::{ClientHop, RelayHop};
use crate::session::SessionSecret;

const VERSION: u8 = 1;
/// Length of a CREATE message.
pub const CREATE_LEN: usize = 1 + 32 + 8 + 32 + CIPHERTEXT_LEN;
/// Length of a CREATED message.
pub const CREATED_LEN: usize = 1 + 32 + 32;

const LABEL_KEY_ID: &[u8] = b"nyx/v1/onion-key-id";
const LABELS: Labels = Labels {
    base: b"nyx/v1/hop",
    confirm: b"nyx/v1/hop/confirm",
    session: b"nyx/v1/hop/session",
};

/// Domain-separation labels of one handshake's key schedule.
pub(crate) struct Labels {
    pub(crate) base: &'static [u8],
    pub(crate) confirm: &'static [u8],
    pub(crate) session: &'static [u8],
}

/// The 8-byte id by which a CREATE names the onion key it was made for.
pub fn onion_key_id(onion: &HybridPublicKey) -> [u8; 8] {
    let digest = Sha256::new()
        .chain_update(LABEL_KEY_ID)
        .chain_update(&onion.to_bytes()[..])
        .finalize();
    let mut id = [0u8; 8];
    id.copy_from_slice(&digest[..8]);
    id
}

/// The client's first step: it knows the relay's id and current onion key (from the directory,
/// where the relay's identity key signs it).
pub struct HopInitiator {
    relay: NodeId,
    onion: HybridPublicKey,
}

/// The client after sending CREATE, waiting for CREATED.
pub struct HopInitiatorSent {
    x: StaticSecret,
    kem: SharedSecrets,
    create: Box<[u8; CREATE_LEN]>,
}

impl std::fmt::Debug for HopInitiatorSent {
    /// Names the relay the CREATE addresses; the secrets are not shown.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HopInitiatorSent")
            .field("relay", &NodeId::from_slice(&self.create[1..33]).ok())
            .finish_non_exhaustive()
    }
}

impl HopInitiator {
    /// Prepare a handshake with `relay` through its onion key.
    pub fn new(relay: NodeId, onion: HybridPublicKey) -> Self {
        HopInitiator { relay, onion }
    }

    /// Build CREATE with fresh randomness.
    pub fn start(self) -> Result<(HopInitiatorSent, Box<[u8; CREATE_LEN]>), Error> {
        let [x, m, e] = random_triple()?;
        self.start_from(&x, &m, &e)
    }

    /// [`start`](Self::start) from explicit randomness (the client's ephemeral X25519 secret,
    /// then the KEM's).
    fn start_from(
        self,
        x: &[u8; 32],
        kem_m: &[u8; 32],
        kem_ephemeral: &[u8; 32],
    ) -> Result<(HopInitiatorSent, Box<[u8; CREATE_LEN]>), Error> {
        let (ct, kem) = self.onion.encapsulate_from(kem_m, kem_ephemeral)?;
        let x = StaticSecret::from(*x);
        let mut create = Box::new([0u8; CREATE_LEN]);
        create[0] = VERSION;
        create[1..33].copy_from_slice(self.relay.as_bytes());
        create[33..41].copy_from_slice(&onion_key_id(&self.onion));
        create[41..73].copy_from_slice(PublicKey::from(&x).as_bytes());
        create[73..].copy_from_slice(&ct);
        let sent = HopInitiatorSent {
            x,
            kem,
            create: create.clone(),
        };
        Ok((sent, create))
    }
}

#[cfg(any(test, feature = "test-vectors"))]
impl HopInitiator {
    /// [`start`](Self::start) with explicit randomness, for reproducible test vectors (feature
    /// `test-vectors`). Reusing randomness breaks security.
    pub fn start_with(
        self,
        x: &[u8; 32],
        kem_m: &[u8; 32],
        kem_ephemeral: &[u8; 32],
    ) -> Result<(HopInitiatorSent, Box<[u8; CREATE_LEN]>), Error> {
        self.start_from(x, kem_m, kem_ephemeral)
    }
}

impl HopInitiatorSent {
    /// Check CREATED and become the client's side of the hop's onion layer. A relay without
    /// the onion key or a modified message fails key confirmation
    /// ([`Error::HandshakeFailed`]); a non-canonical or low-order `Y` is
    /// [`Error::InvalidPublicKey`].
    pub fn finish(self, created: &[u8]) -> Result<ClientHop, Error> {
        let reply = Reply {
            what: "CREATED",
            len: CREATED_LEN,
        };
        let secret = finish_handshake(
            &LABELS,
            &self.kem,
            &self.x,
            &self.create[..],
            created,
            reply,
        )?;
        Ok(ClientHop::new(&secret))
    }
}

/// A relay's onion key with the id CREATE messages name it by.
pub struct OnionKey {
    secret: HybridSecretKey,
    id: [u8; 8],
}

impl OnionKey {
    /// Wrap a hybrid secret key as an onion key.
    pub fn new(secret: HybridSecretKey) -> Self {
        let id = onion_key_id(secret.public());
        OnionKey { secret, id }
    }

    /// The public key to publish (signed by the identity key, in the directory).
    pub fn public(&self) -> &HybridPublicKey {
        self.secret.public()
    }
}

impl fmt::Debug for OnionKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "OnionKey(id {:02x?})", self.id)
    }
}

/// The relay's side: one step from CREATE to CREATED and the relay's side of the layer.
pub struct HopResponder<'a> {
    relay: NodeId,
    /// Current and next onion keys (the overlap of a rotation).
    keys: &'a [OnionKey],
}

impl<'a> HopResponder<'a> {
    /// A responder for relay `relay` holding `keys`.
    pub fn new(relay: NodeId, keys: &'a [OnionKey]) -> Self {
        HopResponder { relay, keys }
    }

    /// Answer CREATE with fresh randomness; returns the relay's side of the layer and CREATED.
    pub fn respond(
        self,
        create: &[u8],
        replay: &mut ReplayCache,
    ) -> Result<(RelayHop, [u8; CREATED_LEN]), Error> {
        let mut y = Zeroizing::new([0u8; 32]);
        getrandom::fill(y.as_mut_slice()).map_err(|e| Error::Random {
            reason: e.to_string(),
        })?;
        self.respond_from(create, replay, &y)
    }

    /// [`respond`](Self::respond) from an explicit ephemeral secret.
    fn respond_from(
        self,
        create: &[u8],
        replay: &mut ReplayCache,
        y: &[u8; 32],
    ) -> Result<(RelayHop, [u8; CREATED_LEN]), Error> {
        check_message(create, "CREATE", CREATE_LEN)?;
        if create[1..33] != self.relay.as_bytes()[..] {
            return Err(Error::WrongRelay);
        }
        let key = self
            .keys
            .iter()
            .find(|k| k.id[..] == create[33..41])
            .ok_or(Error::UnknownOnionKey)?;
        canonical_x25519(&create[41..73])?;
        canonical_x25519(&create[73 + MLKEM_CT_LEN..])?;
        // Keyed on the ML-KEM ciphertext: it cannot be altered without changing the secret,
        // unlike the X25519 keys, whose top bit the curve ignores.
        let replay_id = &create[73..73 + MLKEM_CT_LEN];
        replay.check(replay_id)?;
        let kem = key.secret.decapsulate(&create[73..])?;
        let y = StaticSecret::from(*y);
        let y_pub = PublicKey::from(&y);
        let keys = derive(&LABELS, &kem, create, y_pub.as_bytes(), |_| {
            let mut x = [0u8; 32];
            x.copy_from_slice(&create[41..73]);
            y.diffie_hellman(&PublicKey::from(x))
        })?;
        replay.insert(replay_id);
        let mut created = [0u8; CREATED_LEN];
        created[0] = VERSION;
        created[1..33].copy_from_slice(y_pub.as_bytes());
        created[33..].copy_from_slice(&keys.confirm[..]);
        Ok((RelayHop::new(&keys.session), created))
    }
}

/// Three fresh 32-byte secrets from the operating system (an initiator's ephemeral X25519
/// secret and the KEM's two), or a typed error if the RNG fails.
pub(crate) fn random_triple() -> Result<[Zeroizing<[u8; 32]>; 3], Error> {
    let mut coins = Zeroizing::new([0u8; 96]);
    getrandom::fill(coins.as_mut_slice()).map_err(|e| Error::Random {
        reason: e.to_string(),
    })?;
    Ok(std::array::from_fn(|i| {
        let mut b = Zeroizing::new([0u8; 32]);
        b.copy_from_slice(&coins[32 * i..32 * (i + 1)]);
        b
    }))
}

/// What an initiator expects back: the message's name (for errors) and length.
pub(crate) struct Reply {
    pub(crate) what: &'static str,
    pub(crate) len: usize,
}

/// The initiator's last step, shared by both handshakes: check the reply (`version || Y ||
/// confirm`), derive the keys over `first` and `Y`, compare `confirm` in constant time, and
/// return the agreed secret.
pub(crate) fn finish_handshake(
    labels: &Labels,
    kem: &SharedSecrets,
    x: &StaticSecret,
    first: &[u8],
    reply: &[u8],
    expect: Reply,
) -> Result<SessionSecret, Error> {
    check_message(reply, expect.what, expect.len)?;
    canonical_x25519(&reply[1..33])?;
    let mut y = [0u8; 32];
    y.copy_from_slice(&reply[1..33]);
    let keys = derive(labels, kem, first, &y, |y| {
        x.diffie_hellman(&PublicKey::from(*y))
    })?;
    if !bool::from(keys.confirm.ct_eq(&reply[33..])) {
        return Err(Error::HandshakeFailed);
    }
    Ok(keys.session)
}

/// X25519 public keys on the wire must have the top bit clear: the curve ignores it, so a set
/// bit would give two encodings of one key. (Unreduced values in [p, 2^255) are still
/// accepted; they are harmless here because the replay cache is keyed on the ML-KEM
/// ciphertext and X is covered by the transcript and, in the link handshake, the signature.)
pub(crate) fn canonical_x25519(key: &[u8]) -> Result<(), Error> {
    if key.len() == 32 && key[31] & 0x80 == 0 {
        Ok(())
    } else {
        Err(Error::InvalidPublicKey)
    }
}

/// The length and version every handshake message must have.
pub(crate) fn check_message(msg: &[u8], what: &'static str, len: usize) -> Result<(), Error> {
    if msg.len() != len {
        return Err(Error::BadLength {
            what,
            expected: len,
            got: msg.len(),
        });
    }
    if msg[0] != VERSION {
        return Err(Error::UnsupportedVersion { version: msg[0] });
    }
    Ok(())
}

#[cfg(any(test, feature = "test-vectors"))]
impl HopResponder<'_> {
    /// [`respond`](Self::respond) with an explicit ephemeral secret, for reproducible test
    /// vectors (feature `test-vectors`). Answering two CREATEs with one secret reuses keys.
    pub fn respond_with(
        self,
        create: &[u8],
        replay: &mut ReplayCache,
        y: &[u8; 32],
    ) -> Result<(RelayHop, [u8; CREATED_LEN]), Error> {
        self.respond_from(create, replay, y)
    }
}

pub(crate) struct HandshakeKeys {
    pub(crate) confirm: Zeroizing<[u8; 32]>,
    pub(crate) session: SessionSecret,
}

/// The key schedule shared by both sides (and by the link handshake, with its own labels):
/// `first` is the whole first message, `y` the responder's ephemeral key, `dh` computes the
/// ephemeral-ephemeral X25519.
pub(crate) fn derive(
    labels: &Labels,
    kem: &SharedSecrets,
    create: &[u8],
    y: &[u8; 32],
    dh: impl FnOnce(&[u8; 32]) -> x25519_dalek::SharedSecret,
) -> Result<HandshakeKeys, Error> {
    let th: [u8; 32] = Sha256::new()
        .chain_update(labels.base)
        .chain_update(create)
        .chain_update(y)
        .finalize()
        .into();
    let k = kem.combine(labels.base, &th);
    let ee = dh(y);
    if !ee.was_contributory() {
        return Err(Error::InvalidPublicKey);
    }
    let (_, hk) = Hkdf::<Sha256>::extract(Some(&k[..]), ee.as_bytes());
    let mut confirm = Zeroizing::new([0u8; 32]);
    let mut secret = Zeroizing::new([0u8; 32]);
    // 32-byte outputs are always within HKDF's limit.
    let _ = hk.expand(labels.confirm, confirm.as_mut_slice());
    let _ = hk.expand(labels.session, secret.as_mut_slice());
    Ok(HandshakeKeys {
        confirm,
        session: SessionSecret::from_bytes(*secret),
    })
}

/// The CREATE messages a relay has answered recently, so a replayed one is refused. Bounded:
/// it remembers the ML-KEM ciphertexts of the last `capacity` CREATEs (by a 16-byte hash) and
/// forgets the oldest first, so a replay older than that is answered again (with a session the
/// replayer cannot use, at the cost of one decapsulation). Size it for the CREATEs a relay
/// accepts over an onion key's lifetime; per-peer rate limits on CREATE (nyx-core) bound how
/// fast a stranger can push entries out.
pub struct ReplayCache {
    capacity: usize,
    seen: HashSet<[u8; 16]>,
    order: VecDeque<[u8; 16]>,
}

impl ReplayCache {
    /// A cache remembering up to `capacity` messages (at least 1).
    pub fn new(capacity: usize) -> Self {
        let capacity = capacity.max(1);
        ReplayCache {
            capacity,
            seen: HashSet::with_capacity(capacity),
            order: VecDeque::with_capacity(capacity),
        }
    }

    fn fingerprint(msg: &[u8]) -> [u8; 16] {
        let d = Sha256::digest(msg);
        let mut f = [0u8; 16];
        f.copy_from_slice(&d[..16]);
        f
    }

    pub(crate) fn check(&self, msg: &[u8]) -> Result<(), Error> {
        if self.seen.contains(&Self::fingerprint(msg)) {
            Err(Error::ReplayedHandshake)
        } else {
            Ok(())
        }
    }

    pub(crate) fn insert(&mut self, msg: &[u8]) {
        let f = Self::fingerprint(msg);
        if self.seen.insert(f) {
            if self.order.len() == self.capacity
                && let Some(old) = self.order.pop_front()
            {
                self.seen.remove(&old);
            }
            self.order.push_back(f);
        }
    }
}

impl fmt::Debug for ReplayCache {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReplayCache")
            .field("len", &self.order.len())
            .field("capacity", &self.capacity)
            .finish()
    }
}

#[cfg(test)]
mod tests;
