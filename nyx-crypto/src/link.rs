//! The link handshake: two nodes authenticate each other and agree on a [`Session`] in one
//! round trip. The responder proves it holds its static link key (published in its
//! descriptor); the initiator signs the transcript with its identity key and sends that
//! identity encrypted, so a passive observer does not learn who is connecting.
//!
//! ```text
//! HELLO (initiator → responder, 1305 bytes)
//!   0     version     u8 = 1
//!   1     responder   NodeId (32)
//!   33    key id      8 bytes     SHA-256("nyx/v1/link-key-id" || link public key)[..8]
//!   41    X           32          initiator's ephemeral X25519 key
//!   73    ct          1120        hybrid KEM ciphertext to the responder's link key
//!   1193  sealed id   112         ChaCha20-Poly1305(k_id, nonce 0, aad = bytes 0..1193,
//!                                 initiator identity public key (32) || signature (64))
//! WELCOME (responder → initiator, 65 bytes)
//!   0  version u8 = 1;  1  Y (32);  33  confirm (32)
//!
//! th1     = SHA-256("nyx/v1/link" || HELLO[0..1193])
//! k_id    = kem_secrets.combine("nyx/v1/link/id", th1)     (used once: nonce 0 is safe)
//! sig     = Ed25519(initiator identity, "nyx/v1/link/initiator" || 0 || th1)
//! then the key schedule of the hop handshake over the whole HELLO and Y, with the labels
//! "nyx/v1/link", "nyx/v1/link/confirm", "nyx/v1/link/session".
//! ```
//!
//! Authentication: only the holder of the responder's link key can decapsulate and so compute
//! `confirm`; only the holder of the initiator's identity key can make `sig`, which covers the
//! KEM ciphertext and `X` (so it cannot be moved to another handshake). The responder returns
//! the initiator's verified identity; whether that peer is welcome is the caller's decision.
//!
//! Caveats the caller must respect:
//! * The returned identity proves that peer *made* this HELLO, not that it is present now: a
//!   HELLO replayed after it left the [`ReplayCache`] (or after a restart) is answered again.
//!   The replayer cannot use the session (it lacks the initiator's ephemeral secret), so treat
//!   the peer as connected only once the first packet of the new session opens, and keep the
//!   link cache apart from the hop cache, rate-limited per source.
//! * Identity hiding is not forward-secret: whoever later obtains the responder's link key can
//!   decrypt recorded HELLOs' initiator identities.
//! * The signature is a transferable proof that the initiator connected to this responder (no
//!   deniability).
//! * `finish` consumes the initiator's state, so over a datagram transport a spoofed WELCOME
//!   arriving first ends the attempt; the transport retries with a new HELLO.

use std::fmt;

use nyx_core::{NodeId, Timestamp};
use sha2::{Digest, Sha256};
use x25519_dalek::{PublicKey, StaticSecret};
use zeroize::Zeroizing;

use crate::Error;
use crate::aead::{ChaCha20Poly1305, NONCE_LEN};
use crate::hop::{
    Labels, ReplayCache, Reply, canonical_x25519, check_message, derive, finish_handshake,
    random_triple,
};
use crate::identity::{IdentityKey, IdentityPublic, PUBLIC_KEY_LEN, SIGNATURE_LEN};
use crate::kem::{CIPHERTEXT_LEN, HybridPublicKey, HybridSecretKey, SharedSecrets};
use crate::session::{RekeyPolicy, Role, Session};

const VERSION: u8 = 1;
const CLEAR_LEN: usize = 1 + 32 + 8 + 32 + CIPHERTEXT_LEN;
const SEALED_ID_LEN: usize = PUBLIC_KEY_LEN + SIGNATURE_LEN + 16;
/// Length of a HELLO message.
pub const HELLO_LEN: usize = CLEAR_LEN + SEALED_ID_LEN;
/// Length of a WELCOME message.
pub const WELCOME_LEN: usize = 1 + 32 + 32;

const MLKEM_CT_LEN: usize = CIPHERTEXT_LEN - 32;
const LABEL_KEY_ID: &[u8] = b"nyx/v1/link-key-id";
const LABEL_TH1: &[u8] = b"nyx/v1/link";
const LABEL_ID: &[u8] = b"nyx/v1/link/id";
const SIGN_CONTEXT: &[u8] = b"nyx/v1/link/initiator";
const LABELS: Labels = Labels {
    base: b"nyx/v1/link",
    confirm: b"nyx/v1/link/confirm",
    session: b"nyx/v1/link/session",
};

/// A node's static link key: the hybrid key it publishes for link handshakes, with its id.
pub struct LinkKey {
    secret: HybridSecretKey,
    id: [u8; 8],
}

impl LinkKey {
    /// Wrap a hybrid secret key as a link key.
    pub fn new(secret: HybridSecretKey) -> Self {
        let id = link_key_id(secret.public());
        LinkKey { secret, id }
    }

    /// The public key to publish (in the node's signed descriptor).
    pub fn public(&self) -> &HybridPublicKey {
        self.secret.public()
    }
}

impl fmt::Debug for LinkKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "LinkKey(id {:02x?})", self.id)
    }
}

/// The 8-byte id by which a HELLO names the link key it was made for.
pub fn link_key_id(key: &HybridPublicKey) -> [u8; 8] {
    let d = Sha256::new()
        .chain_update(LABEL_KEY_ID)
        .chain_update(&key.to_bytes()[..])
        .finalize();
    let mut id = [0u8; 8];
    id.copy_from_slice(&d[..8]);
    id
}

/// The initiator before sending HELLO.
pub struct LinkInitiator<'a> {
    identity: &'a IdentityKey,
    peer: NodeId,
    peer_key: HybridPublicKey,
}

/// The initiator after sending HELLO, waiting for WELCOME.
pub struct LinkInitiatorSent {
    x: StaticSecret,
    kem: SharedSecrets,
    hello: Box<[u8; HELLO_LEN]>,
}

impl<'a> LinkInitiator<'a> {
    /// A handshake from `identity` to node `peer`, whose link key is `peer_key` (from its
    /// descriptor, where `peer`'s identity signs it).
    pub fn new(identity: &'a IdentityKey, peer: NodeId, peer_key: HybridPublicKey) -> Self {
        LinkInitiator {
            identity,
            peer,
            peer_key,
        }
    }

    /// Build HELLO with fresh randomness.
    pub fn start(self) -> Result<(LinkInitiatorSent, Box<[u8; HELLO_LEN]>), Error> {
        let [x, m, e] = random_triple()?;
        self.start_from(&x, &m, &e)
    }

    /// [`start`](Self::start) from explicit randomness (ephemeral X25519 secret, then the KEM's).
    fn start_from(
        self,
        x: &[u8; 32],
        kem_m: &[u8; 32],
        kem_ephemeral: &[u8; 32],
    ) -> Result<(LinkInitiatorSent, Box<[u8; HELLO_LEN]>), Error> {
        let (ct, kem) = self.peer_key.encapsulate_from(kem_m, kem_ephemeral)?;
        let x = StaticSecret::from(*x);
        let mut hello = Box::new([0u8; HELLO_LEN]);
        hello[0] = VERSION;
        hello[1..33].copy_from_slice(self.peer.as_bytes());
        hello[33..41].copy_from_slice(&link_key_id(&self.peer_key));
        hello[41..73].copy_from_slice(PublicKey::from(&x).as_bytes());
        hello[73..CLEAR_LEN].copy_from_slice(&ct);
        let th1 = th1(&hello[..CLEAR_LEN]);
        let sealed = &mut hello[CLEAR_LEN..];
        sealed[..PUBLIC_KEY_LEN].copy_from_slice(&self.identity.public().to_bytes());
        sealed[PUBLIC_KEY_LEN..PUBLIC_KEY_LEN + SIGNATURE_LEN]
            .copy_from_slice(&self.identity.sign(SIGN_CONTEXT, &th1));
        let (clear, sealed) = hello.split_at_mut(CLEAR_LEN);
        let (body, tag_out) = sealed.split_at_mut(PUBLIC_KEY_LEN + SIGNATURE_LEN);
        let tag = id_cipher(&kem, &th1).seal_in_place(&[0; NONCE_LEN], clear, body)?;
        tag_out.copy_from_slice(&tag);
        let sent = LinkInitiatorSent {
            x,
            kem,
            hello: hello.clone(),
        };
        Ok((sent, hello))
    }
}

#[cfg(any(test, feature = "test-vectors"))]
impl LinkInitiator<'_> {
    /// [`start`](Self::start) with explicit randomness, for reproducible test vectors (feature
    /// `test-vectors`). Reusing randomness breaks security.
    pub fn start_with(
        self,
        x: &[u8; 32],
        kem_m: &[u8; 32],
        kem_ephemeral: &[u8; 32],
    ) -> Result<(LinkInitiatorSent, Box<[u8; HELLO_LEN]>), Error> {
        self.start_from(x, kem_m, kem_ephemeral)
    }
}

impl LinkInitiatorSent {
    /// Check WELCOME and become a session (initiator). A responder without the link key or a
    /// modified message fails key confirmation ([`Error::HandshakeFailed`]).
    pub fn finish(
        self,
        welcome: &[u8],
        policy: RekeyPolicy,
        now: Timestamp,
    ) -> Result<Session, Error> {
        let reply = Reply {
            what: "WELCOME",
            len: WELCOME_LEN,
        };
        let secret =
            finish_handshake(&LABELS, &self.kem, &self.x, &self.hello[..], welcome, reply)?;
        Ok(Session::new(&secret, Role::Initiator, policy, now))
    }
}

/// The responder: one step from HELLO to WELCOME, a session and the initiator's identity.
pub struct LinkResponder<'a> {
    node: NodeId,
    keys: &'a [LinkKey],
}

impl<'a> LinkResponder<'a> {
    /// A responder for node `node` holding its link key(s).
    pub fn new(node: NodeId, keys: &'a [LinkKey]) -> Self {
        LinkResponder { node, keys }
    }

    /// Answer HELLO: returns the session (responder), WELCOME and the initiator's verified
    /// identity. A HELLO already answered is refused (see [`ReplayCache`]).
    pub fn respond(
        self,
        hello: &[u8],
        replay: &mut ReplayCache,
        policy: RekeyPolicy,
        now: Timestamp,
    ) -> Result<(Session, [u8; WELCOME_LEN], IdentityPublic), Error> {
        check_message(hello, "HELLO", HELLO_LEN)?;
        if hello[1..33] != self.node.as_bytes()[..] {
            return Err(Error::WrongPeer);
        }
        let key = self
            .keys
            .iter()
            .find(|k| k.id[..] == hello[33..41])
            .ok_or(Error::UnknownLinkKey)?;
        canonical_x25519(&hello[41..73])?;
        canonical_x25519(&hello[73 + MLKEM_CT_LEN..CLEAR_LEN])?;
        let replay_id = &hello[73..73 + MLKEM_CT_LEN];
        replay.check(replay_id)?;
        let kem = key.secret.decapsulate(&hello[73..CLEAR_LEN])?;

        // Open the initiator's identity and check its signature over th1.
        let th1 = th1(&hello[..CLEAR_LEN]);
        let mut sealed = [0u8; SEALED_ID_LEN];
        sealed.copy_from_slice(&hello[CLEAR_LEN..]);
        let (body, tag) = sealed.split_at_mut(PUBLIC_KEY_LEN + SIGNATURE_LEN);
        id_cipher(&kem, &th1)
            .open_in_place(&[0; NONCE_LEN], &hello[..CLEAR_LEN], body, tag)
            .map_err(|_| Error::HandshakeFailed)?;
        let mut id_bytes = [0u8; PUBLIC_KEY_LEN];
        id_bytes.copy_from_slice(&body[..PUBLIC_KEY_LEN]);
        let initiator = IdentityPublic::from_bytes(&id_bytes)?;
        let mut sig = [0u8; SIGNATURE_LEN];
        sig.copy_from_slice(&body[PUBLIC_KEY_LEN..]);
        initiator.verify(SIGN_CONTEXT, &th1, &sig)?;

        let mut y = Zeroizing::new([0u8; 32]);
        getrandom::fill(y.as_mut_slice()).map_err(|e| Error::Random {
            reason: e.to_string(),
        })?;
        let y = StaticSecret::from(*y);
        let y_pub = PublicKey::from(&y);
        let keys = derive(&LABELS, &kem, hello, y_pub.as_bytes(), |_| {
            let mut x = [0u8; 32];
            x.copy_from_slice(&hello[41..73]);
            y.diffie_hellman(&PublicKey::from(x))
        })?;
        replay.insert(replay_id);
        let mut welcome = [0u8; WELCOME_LEN];
        welcome[0] = VERSION;
        welcome[1..33].copy_from_slice(y_pub.as_bytes());
        welcome[33..].copy_from_slice(&keys.confirm[..]);
        Ok((
            Session::new(&keys.session, Role::Responder, policy, now),
            welcome,
            initiator,
        ))
    }
}

fn th1(clear: &[u8]) -> [u8; 32] {
    Sha256::new()
        .chain_update(LABEL_TH1)
        .chain_update(clear)
        .finalize()
        .into()
}

fn id_cipher(kem: &SharedSecrets, th1: &[u8; 32]) -> ChaCha20Poly1305 {
    let k = kem.combine(LABEL_ID, th1);
    ChaCha20Poly1305::new(&k)
}

#[cfg(test)]
mod tests;
