//! The link handshake: two nodes authenticate each other and agree on a [`Session`] in one
//! round trip. The responder proves it holds its static link key (published in its
//! descriptor); the initiator signs the transcript with its identity key and sends that
//! identity encrypted, so a passive observer does not learn who is connecting.
//!
//! ```text
//! HELLO (initiator → responder, 1265 bytes)
//!   0     version     u8 = 1
//!   1     X           32          initiator's ephemeral X25519 key
//!   33    ct          1120        hybrid KEM ciphertext to the responder's link key
//!   1153  sealed id   112         ChaCha20-Poly1305(k_id, nonce 0, aad = bytes 0..1153,
//!                                 initiator identity public key (32) || signature (64))
//! WELCOME (responder → initiator, 65 bytes)
//!   0  version u8 = 1;  1  Y (32);  33  confirm (32)
//!
//! th1     = SHA-256("nyx/v1/link" || responder NodeId (32) || HELLO[0..1153])
//! k_id    = kem_secrets.combine("nyx/v1/link/id", th1)     (used once: nonce 0 is safe)
//! sig     = Ed25519(initiator identity, "nyx/v1/link/initiator" || 0 || th1)
//! then the key schedule of the hop handshake over responder NodeId || HELLO and Y, with the
//! labels "nyx/v1/link", "nyx/v1/link/confirm", "nyx/v1/link/session".
//! ```
//!
//! Neither the responder's node id nor which of its link keys the HELLO was made for is on
//! the wire: both are bound into the transcript instead. The responder tries each link key
//! it holds (the current one, and the previous one during a rotation overlap) until the
//! sealed identity opens, so an overlap costs a second decapsulation for HELLOs made to the
//! previous key (and for HELLOs that open under no key). A HELLO made for another node, or
//! for a key the responder does not hold, opens under none of them ([`Error::HandshakeFailed`]).
//!
//! Authentication: only the holder of the responder's link key can decapsulate and so compute
//! `confirm`; only the holder of the initiator's identity key can make `sig`, which covers the
//! KEM ciphertext, `X` and the responder's node id (so it cannot be moved to another handshake
//! or presented to another node). The responder returns the initiator's verified identity;
//! whether that peer is welcome is the caller's decision.
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
const CLEAR_LEN: usize = 1 + 32 + CIPHERTEXT_LEN;
/// Where the ephemeral X25519 key and the KEM ciphertext start.
const X_AT: usize = 1;
const CT_AT: usize = X_AT + 32;
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

/// A node's static link key: the hybrid key it publishes for link handshakes, with its id
/// (for logs; HELLO does not carry it).
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

/// An 8-byte id of a link key, for logs and operators. HELLO does not carry it (the
/// responder finds its key by trying each).
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
    /// The responder's node id followed by the HELLO: what the key schedule covers.
    transcript: Box<[u8; TRANSCRIPT_LEN]>,
}

/// The responder's node id and the HELLO.
const TRANSCRIPT_LEN: usize = 32 + HELLO_LEN;

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
        hello[X_AT..CT_AT].copy_from_slice(PublicKey::from(&x).as_bytes());
        hello[CT_AT..CLEAR_LEN].copy_from_slice(&ct);
        let th1 = th1(&self.peer, &hello[..CLEAR_LEN]);
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
            transcript: transcript(&self.peer, &hello[..]),
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
        let secret = finish_handshake(
            &LABELS,
            &self.kem,
            &self.x,
            &self.transcript[..],
            welcome,
            reply,
        )?;
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
    /// identity. A HELLO already answered is refused (see [`ReplayCache`]); one made for
    /// another node or for a link key not held here is [`Error::HandshakeFailed`], after one
    /// decapsulation per key held.
    pub fn respond(
        self,
        hello: &[u8],
        replay: &mut ReplayCache,
        policy: RekeyPolicy,
        now: Timestamp,
    ) -> Result<(Session, [u8; WELCOME_LEN], IdentityPublic), Error> {
        check_message(hello, "HELLO", HELLO_LEN)?;
        canonical_x25519(&hello[X_AT..CT_AT])?;
        canonical_x25519(&hello[CT_AT + MLKEM_CT_LEN..CLEAR_LEN])?;
        let replay_id = &hello[CT_AT..CT_AT + MLKEM_CT_LEN];
        replay.check(replay_id)?;

        // th1 binds this node's id: a HELLO made for another node opens under no key here.
        let th1 = th1(&self.node, &hello[..CLEAR_LEN]);
        // The key the HELLO was made for is the one under which the initiator's identity
        // opens; with any other, ML-KEM's implicit rejection and the other X25519 key give
        // unrelated secrets and the tag fails. Try each key held, in order (a node holds its
        // current key and, during a rotation overlap, the previous one).
        let mut sealed = [0u8; SEALED_ID_LEN];
        let mut opened = None;
        for key in self.keys {
            let kem = key.secret.decapsulate(&hello[CT_AT..CLEAR_LEN])?;
            sealed.copy_from_slice(&hello[CLEAR_LEN..]);
            let (body, tag) = sealed.split_at_mut(PUBLIC_KEY_LEN + SIGNATURE_LEN);
            if id_cipher(&kem, &th1)
                .open_in_place(&[0; NONCE_LEN], &hello[..CLEAR_LEN], body, tag)
                .is_ok()
            {
                opened = Some(kem);
                break;
            }
        }
        let kem = opened.ok_or(Error::HandshakeFailed)?;

        // The initiator's identity, and its signature over th1.
        let body = &sealed[..PUBLIC_KEY_LEN + SIGNATURE_LEN];
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
        let transcript = transcript(&self.node, hello);
        let keys = derive(&LABELS, &kem, &transcript[..], y_pub.as_bytes(), |_| {
            let mut x = [0u8; 32];
            x.copy_from_slice(&hello[X_AT..CT_AT]);
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

/// The hash the initiator signs and the identity key is derived from: the responder's node
/// id (not sent) and the clear part of HELLO.
fn th1(responder: &NodeId, clear: &[u8]) -> [u8; 32] {
    Sha256::new()
        .chain_update(LABEL_TH1)
        .chain_update(responder.as_bytes())
        .chain_update(clear)
        .finalize()
        .into()
}

/// What the session key schedule covers: the responder's node id, then the whole HELLO.
fn transcript(responder: &NodeId, hello: &[u8]) -> Box<[u8; TRANSCRIPT_LEN]> {
    let mut t = Box::new([0u8; TRANSCRIPT_LEN]);
    t[..32].copy_from_slice(responder.as_bytes());
    t[32..].copy_from_slice(hello);
    t
}

fn id_cipher(kem: &SharedSecrets, th1: &[u8; 32]) -> ChaCha20Poly1305 {
    let k = kem.combine(LABEL_ID, th1);
    ChaCha20Poly1305::new(&k)
}

#[cfg(test)]
mod tests;
