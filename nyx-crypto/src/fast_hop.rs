//! The one-hop handshake of directory circuits (Tor's CREATE_FAST): a node that knows a relay
//! only by its identity, link key and address (a pinned directory authority) keys a one-hop
//! circuit to it without its onion key.
//!
//! ```text
//! CREATE_FAST  (client → relay, 65 bytes)
//!   0   version   u8 = 1
//!   1   relay     NodeId (32)       the relay the client means
//!   33  X         32                random
//! CREATED_FAST (relay → client, 65 bytes)
//!   0   version   u8 = 1
//!   1   Y         32                random
//!   33  confirm   32
//!
//! th      = SHA-256("nyx/v1/fast-hop" || CREATE_FAST || Y)
//! prk     = HKDF-Extract(salt = th, ikm = X || Y)
//! confirm = HKDF-Expand(prk, "nyx/v1/fast-hop/confirm", 32)
//! secret  = HKDF-Expand(prk, "nyx/v1/fast-hop/session", 32) → onion layer keys (crate::onion)
//! ```
//!
//! The handshake adds no key exchange of its own: its secrecy and the relay's authentication
//! are the link's (the messages travel on the link's encrypted control channel, whose
//! handshake proved the relay's identity and link key, post-quantum through the link's
//! hybrid KEM). That is enough for the first hop only, which already sees the link; a relay
//! never accepts it for a later hop, because it only arrives on a link. `confirm` catches a
//! relay that did not see the client's `X`. Each step consumes its state.

use hkdf::Hkdf;
use nyx_core::NodeId;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;
use zeroize::Zeroizing;

use crate::Error;
use crate::hop::check_message;
use crate::onion::{ClientHop, RelayHop};
use crate::session::SessionSecret;

const VERSION: u8 = 1;
/// Length of a CREATE_FAST message.
pub const FAST_CREATE_LEN: usize = 1 + 32 + 32;
/// Length of a CREATED_FAST message.
pub const FAST_CREATED_LEN: usize = 1 + 32 + 32;

const LABEL_BASE: &[u8] = b"nyx/v1/fast-hop";
const LABEL_CONFIRM: &[u8] = b"nyx/v1/fast-hop/confirm";
const LABEL_SESSION: &[u8] = b"nyx/v1/fast-hop/session";

/// The client after sending CREATE_FAST, waiting for CREATED_FAST.
pub struct FastInitiatorSent {
    create: Zeroizing<[u8; FAST_CREATE_LEN]>,
}

impl std::fmt::Debug for FastInitiatorSent {
    /// Names the relay; the secret is not shown.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FastInitiatorSent")
            .field("relay", &NodeId::from_slice(&self.create[1..33]).ok())
            .finish_non_exhaustive()
    }
}

/// Start a fast handshake with `relay`: the state to finish it and the CREATE_FAST to send
/// on the link to that relay (and nowhere else: it must stay inside the link's encryption).
pub fn start(
    relay: NodeId,
) -> Result<(FastInitiatorSent, Zeroizing<[u8; FAST_CREATE_LEN]>), Error> {
    let mut x = Zeroizing::new([0u8; 32]);
    getrandom::fill(x.as_mut_slice()).map_err(|e| Error::Random {
        reason: e.to_string(),
    })?;
    Ok(start_from(relay, &x))
}

fn start_from(
    relay: NodeId,
    x: &[u8; 32],
) -> (FastInitiatorSent, Zeroizing<[u8; FAST_CREATE_LEN]>) {
    let mut create = Zeroizing::new([0u8; FAST_CREATE_LEN]);
    create[0] = VERSION;
    create[1..33].copy_from_slice(relay.as_bytes());
    create[33..].copy_from_slice(x);
    let sent = FastInitiatorSent {
        create: create.clone(),
    };
    (sent, create)
}

impl FastInitiatorSent {
    /// Check CREATED_FAST and become the client's side of the hop's onion layer; a reply
    /// that does not confirm this CREATE_FAST is [`Error::HandshakeFailed`].
    pub fn finish(self, created: &[u8]) -> Result<ClientHop, Error> {
        check_message(created, "CREATED_FAST", FAST_CREATED_LEN)?;
        let mut y = [0u8; 32];
        y.copy_from_slice(&created[1..33]);
        let (confirm, session) = derive(&self.create[..], &y);
        if !bool::from(confirm.ct_eq(&created[33..])) {
            return Err(Error::HandshakeFailed);
        }
        Ok(ClientHop::new(&session))
    }
}

/// The relay's side: answer a CREATE_FAST that arrived on the link from the client, with
/// fresh randomness.
pub fn respond(relay: NodeId, create: &[u8]) -> Result<(RelayHop, [u8; FAST_CREATED_LEN]), Error> {
    let mut y = Zeroizing::new([0u8; 32]);
    getrandom::fill(y.as_mut_slice()).map_err(|e| Error::Random {
        reason: e.to_string(),
    })?;
    respond_from(relay, create, &y)
}

fn respond_from(
    relay: NodeId,
    create: &[u8],
    y: &[u8; 32],
) -> Result<(RelayHop, [u8; FAST_CREATED_LEN]), Error> {
    check_message(create, "CREATE_FAST", FAST_CREATE_LEN)?;
    if create[1..33] != relay.as_bytes()[..] {
        return Err(Error::WrongRelay);
    }
    let (confirm, session) = derive(create, y);
    let mut created = [0u8; FAST_CREATED_LEN];
    created[0] = VERSION;
    created[1..33].copy_from_slice(y);
    created[33..].copy_from_slice(&confirm[..]);
    Ok((RelayHop::new(&session), created))
}

/// The key schedule both sides run over the whole CREATE_FAST and `Y`.
fn derive(create: &[u8], y: &[u8; 32]) -> (Zeroizing<[u8; 32]>, SessionSecret) {
    let th: [u8; 32] = Sha256::new()
        .chain_update(LABEL_BASE)
        .chain_update(create)
        .chain_update(y)
        .finalize()
        .into();
    let mut ikm = Zeroizing::new([0u8; 64]);
    ikm[..32].copy_from_slice(&create[33..65]);
    ikm[32..].copy_from_slice(y);
    let (_, hk) = Hkdf::<Sha256>::extract(Some(&th), &ikm[..]);
    let mut confirm = Zeroizing::new([0u8; 32]);
    let mut secret = Zeroizing::new([0u8; 32]);
    // 32-byte outputs are always within HKDF's limit.
    let _ = hk.expand(LABEL_CONFIRM, confirm.as_mut_slice());
    let _ = hk.expand(LABEL_SESSION, secret.as_mut_slice());
    (confirm, SessionSecret::from_bytes(*secret))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::onion::{CELL_LEN, ClientCircuit, Peeled};

    fn relay() -> NodeId {
        NodeId::from_bytes([7; 32])
    }

    /// A circuit keyed by the fast handshake carries a cell both ways.
    #[test]
    fn both_sides_agree() {
        let (sent, create) = start(relay()).unwrap();
        let (mut hop, created) = respond(relay(), &create[..]).unwrap();
        let mut circuit = ClientCircuit::new().unwrap();
        circuit.push(sent.finish(&created).unwrap()).unwrap();

        let mut cell = vec![0u8; CELL_LEN];
        cell[crate::onion::FORWARD_PAYLOAD_OFFSET] = 42;
        circuit.wrap(0, &mut cell).unwrap();
        match hop.peel(&mut cell).unwrap() {
            Peeled::Deliver(range) => assert_eq!(cell[range.start], 42),
            Peeled::Forward => panic!("a one-hop circuit's cell is for its hop"),
        }

        let mut back = vec![0u8; CELL_LEN];
        back[crate::onion::BACKWARD_PAYLOAD_OFFSET] = 9;
        hop.seal_backward(&mut back).unwrap();
        let delivered = circuit.unwrap(&mut back).unwrap();
        assert_eq!(delivered.hop, 0);
        assert_eq!(back[delivered.payload.start], 9);
    }

    /// Fixed inputs give the confirmation an independent implementation of the documented
    /// schedule computes (this handshake is NyxNet's own: no published vectors exist).
    #[test]
    fn deterministic_from_inputs() {
        let (sent_a, create_a) = start_from(relay(), &[1; 32]);
        let (sent_b, create_b) = start_from(relay(), &[1; 32]);
        assert_eq!(create_a[..], create_b[..]);
        let (_, created_a) = respond_from(relay(), &create_a[..], &[2; 32]).unwrap();
        let (_, created_b) = respond_from(relay(), &create_b[..], &[2; 32]).unwrap();
        assert_eq!(created_a, created_b);
        // Computed independently with Python's hashlib and hmac (HKDF-SHA256 by hand, as in
        // the module documentation) from these inputs: relay [7; 32], X [1; 32], Y [2; 32].
        let expected: [u8; 32] = [
            0x8f, 0x21, 0x91, 0xa6, 0xfa, 0x99, 0x0d, 0x79, 0xa7, 0xee, 0x62, 0xb4, 0xbe, 0x01,
            0x48, 0x47, 0x5a, 0xee, 0xb4, 0xdf, 0x90, 0x07, 0xd3, 0x1e, 0x24, 0x63, 0x1f, 0x55,
            0xab, 0xb3, 0x85, 0x70,
        ];
        assert_eq!(created_a[33..], expected);
        assert!(sent_a.finish(&created_a).is_ok());
        // Another Y gives another confirm.
        let (_, other) = respond_from(relay(), &create_b[..], &[3; 32]).unwrap();
        assert_ne!(other[33..], created_b[33..]);
        assert!(sent_b.finish(&created_a).is_ok());
    }

    #[test]
    fn refuses_the_wrong_relay_and_bad_lengths() {
        let (_, create) = start(relay()).unwrap();
        assert!(matches!(
            respond(NodeId::from_bytes([8; 32]), &create[..]),
            Err(Error::WrongRelay)
        ));
        assert!(matches!(
            respond(relay(), &create[..64]),
            Err(Error::BadLength { .. })
        ));
        let mut bad_version = *create;
        bad_version[0] = 2;
        assert!(matches!(
            respond(relay(), &bad_version),
            Err(Error::UnsupportedVersion { version: 2 })
        ));
    }

    /// A CREATED_FAST for another CREATE_FAST, or altered, fails confirmation.
    #[test]
    fn refuses_a_reply_that_does_not_confirm() {
        let (sent, _) = start(relay()).unwrap();
        let (_, other_create) = start(relay()).unwrap();
        let (_, created) = respond(relay(), &other_create[..]).unwrap();
        assert!(matches!(sent.finish(&created), Err(Error::HandshakeFailed)));

        let (sent, create) = start(relay()).unwrap();
        let (_, mut created) = respond(relay(), &create[..]).unwrap();
        created[5] ^= 1;
        assert!(matches!(sent.finish(&created), Err(Error::HandshakeFailed)));
    }
}
