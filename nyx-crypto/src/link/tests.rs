//! Unit tests of the link handshake.

use super::*;
use crate::kem::SEED_LEN;

const T0: Timestamp = Timestamp::ZERO;

struct Node {
    identity: IdentityKey,
    link: [LinkKey; 1],
}

fn node(byte: u8) -> Node {
    Node {
        identity: IdentityKey::from_seed(&[byte; 32]),
        link: [LinkKey::new(HybridSecretKey::from_seed(&[byte; SEED_LEN]))],
    }
}

fn hello(from: &Node, to: &Node) -> (LinkInitiatorSent, Box<[u8; HELLO_LEN]>) {
    LinkInitiator::new(
        &from.identity,
        to.identity.node_id(),
        to.link[0].public().clone(),
    )
    .start()
    .unwrap()
}

fn respond(
    to: &Node,
    msg: &[u8],
    cache: &mut ReplayCache,
) -> Result<(Session, [u8; WELCOME_LEN], IdentityPublic), Error> {
    LinkResponder::new(to.identity.node_id(), &to.link).respond(
        msg,
        cache,
        RekeyPolicy::default(),
        T0,
    )
}

#[test]
fn both_sides_authenticate_and_share_a_session() {
    let (alice, bob) = (node(1), node(2));
    let (sent, msg) = hello(&alice, &bob);
    let mut cache = ReplayCache::new(8);
    let (mut bob_session, welcome, initiator) = respond(&bob, &msg[..], &mut cache).unwrap();
    assert_eq!(
        initiator.node_id(),
        alice.identity.node_id(),
        "bob learns who connected"
    );
    let mut alice_session = sent.finish(&welcome, RekeyPolicy::default(), T0).unwrap();
    let mut buf = [0u8; 5 + crate::session::OVERHEAD];
    buf[crate::session::HEADER_LEN..][..5].copy_from_slice(b"hello");
    let n = alice_session.seal(T0, &mut buf, 5).unwrap();
    let r = bob_session.open(T0, &mut buf[..n]).unwrap();
    assert_eq!(&buf[r], b"hello");
}

#[test]
fn the_initiator_identity_is_not_visible_on_the_wire() {
    let (alice, bob) = (node(1), node(2));
    let (_, msg) = hello(&alice, &bob);
    let id = alice.identity.public().to_bytes();
    assert!(!msg.windows(id.len()).any(|w| w == id));
    let node_id = alice.identity.node_id();
    assert!(!msg.windows(32).any(|w| w == node_id.as_bytes()));
}

/// HELLO names neither its responder nor the link key it was made for (both used to be in
/// clear at bytes 1..41, telling an observer which node and which of its keys a dialler
/// meant); they are bound into the transcript instead.
#[test]
fn the_responder_and_its_link_key_are_not_visible_on_the_wire() {
    let (alice, bob) = (node(14), node(15));
    let (_, msg) = hello(&alice, &bob);
    let node_id = bob.identity.node_id();
    assert!(!msg.windows(32).any(|w| w == node_id.as_bytes()));
    let key_id = link_key_id(bob.link[0].public());
    assert!(!msg.windows(8).any(|w| w == key_id));
    assert_eq!(HELLO_LEN, 1 + 32 + CIPHERTEXT_LEN + SEALED_ID_LEN);
}

/// A responder in a rotation overlap holds its new and its previous link key and answers
/// HELLOs made to either, whichever order it holds them in; a key it does not hold, or a
/// HELLO for another node, gets no session (and no WELCOME).
#[test]
fn the_responder_finds_the_key_a_hello_was_made_for() {
    let alice = node(16);
    let bob = IdentityKey::from_seed(&[17; 32]);
    let new = LinkKey::new(HybridSecretKey::from_seed(&[18; SEED_LEN]));
    let old = LinkKey::new(HybridSecretKey::from_seed(&[19; SEED_LEN]));
    let gone = LinkKey::new(HybridSecretKey::from_seed(&[20; SEED_LEN]));
    let dial = |to: NodeId, key: &LinkKey| {
        LinkInitiator::new(&alice.identity, to, key.public().clone())
            .start()
            .unwrap()
    };
    let answer = |node: NodeId, keys: &[LinkKey], msg: &[u8]| {
        LinkResponder::new(node, keys).respond(
            msg,
            &mut ReplayCache::new(4),
            RekeyPolicy::default(),
            T0,
        )
    };
    for held in [[&new, &old], [&old, &new]] {
        let keys = held.map(|k| LinkKey::new(HybridSecretKey::from_seed(k.secret.seed())));
        for key in [&new, &old] {
            let (sent, msg) = dial(bob.node_id(), key);
            let (mut theirs, welcome, who) = answer(bob.node_id(), &keys, &msg[..]).unwrap();
            assert_eq!(who.node_id(), alice.identity.node_id());
            let mut ours = sent.finish(&welcome, RekeyPolicy::default(), T0).unwrap();
            let mut buf = [0u8; 2 + crate::session::OVERHEAD];
            let n = ours.seal(T0, &mut buf, 2).unwrap();
            assert!(theirs.open(T0, &mut buf[..n]).is_ok(), "same session");
        }
        let (_, msg) = dial(bob.node_id(), &gone);
        assert_eq!(
            answer(bob.node_id(), &keys, &msg[..]).err(),
            Some(Error::HandshakeFailed),
            "a key it does not hold"
        );
    }
    // Carol holds Bob's very key (say, one operator's two nodes): a HELLO meant for Bob still
    // fails at Carol, because Bob's node id is in what the initiator sealed and signed.
    let carol = IdentityKey::from_seed(&[21; 32]);
    let (_, msg) = dial(bob.node_id(), &new);
    let bobs_key = [LinkKey::new(HybridSecretKey::from_seed(new.secret.seed()))];
    assert_eq!(
        answer(carol.node_id(), &bobs_key, &msg[..]).err(),
        Some(Error::HandshakeFailed),
        "a HELLO for Bob answered by Carol"
    );
    assert!(answer(bob.node_id(), &bobs_key, &msg[..]).is_ok());
}

#[test]
fn modified_hello_or_welcome_never_yields_a_session() {
    let (alice, bob) = (node(3), node(4));
    // HELLO: every sampled flipped bit is refused by the responder itself (version, or the
    // sealed identity, whose key and AAD cover everything else).
    let (_, msg) = hello(&alice, &bob);
    for bit in (0..HELLO_LEN * 8).step_by(11) {
        let mut bad = msg.clone();
        bad[bit / 8] ^= 1 << (bit % 8);
        assert!(
            respond(&bob, &bad[..], &mut ReplayCache::new(4)).is_err(),
            "bit {bit}"
        );
    }
    assert!(respond(&bob, &msg[..], &mut ReplayCache::new(4)).is_ok());
    // WELCOME: each flipped bit is checked against an initiator in exactly the state that
    // produced the HELLO it answers (fixed randomness recreates it); the unmodified WELCOME
    // is accepted by the same state, so the refusals are due to the flips.
    let fixed = |from: &Node| {
        LinkInitiator::new(
            &from.identity,
            bob.identity.node_id(),
            bob.link[0].public().clone(),
        )
        .start_with(&[1; 32], &[2; 32], &[3; 32])
        .unwrap()
    };
    let (_, msg) = fixed(&alice);
    let (_, welcome, _) = respond(&bob, &msg[..], &mut ReplayCache::new(4)).unwrap();
    for bit in 0..WELCOME_LEN * 8 {
        let mut bad = welcome;
        bad[bit / 8] ^= 1 << (bit % 8);
        let (sent, again) = fixed(&alice);
        assert_eq!(again, msg, "the fixed initiator reproduces its HELLO");
        assert!(
            sent.finish(&bad, RekeyPolicy::default(), T0).is_err(),
            "bit {bit}"
        );
    }
    let (sent, _) = fixed(&alice);
    assert!(sent.finish(&welcome, RekeyPolicy::default(), T0).is_ok());
}

#[test]
fn a_sealed_identity_cannot_be_moved_to_another_hello() {
    let (alice, mallory, bob) = (node(5), node(6), node(7));
    let (_, from_alice) = hello(&alice, &bob);
    let (_, from_mallory) = hello(&mallory, &bob);
    let mut spliced = from_mallory.clone();
    spliced[CLEAR_LEN..].copy_from_slice(&from_alice[CLEAR_LEN..]);
    assert_eq!(
        respond(&bob, &spliced[..], &mut ReplayCache::new(4)).err(),
        Some(Error::HandshakeFailed)
    );
}

#[test]
fn replay_and_addressing_errors() {
    let (alice, bob, carol) = (node(8), node(9), node(10));
    let (_, msg) = hello(&alice, &bob);
    let mut cache = ReplayCache::new(8);
    assert!(respond(&bob, &msg[..], &mut cache).is_ok());
    assert_eq!(
        respond(&bob, &msg[..], &mut cache).err(),
        Some(Error::ReplayedHandshake)
    );
    // Another node, and this node with another key: HELLO names neither, so both show as a
    // sealed identity that does not open.
    assert_eq!(
        respond(&carol, &msg[..], &mut ReplayCache::new(4)).err(),
        Some(Error::HandshakeFailed)
    );
    let other_key = [LinkKey::new(HybridSecretKey::from_seed(&[99; SEED_LEN]))];
    let got = LinkResponder::new(bob.identity.node_id(), &other_key).respond(
        &msg[..],
        &mut ReplayCache::new(4),
        RekeyPolicy::default(),
        T0,
    );
    assert_eq!(got.err(), Some(Error::HandshakeFailed));
    assert_eq!(
        respond(&bob, &msg[..10], &mut ReplayCache::new(4)).err(),
        Some(Error::BadLength {
            what: "HELLO",
            expected: HELLO_LEN,
            got: 10
        })
    );
}

/// Mallory knows the key that seals her own HELLO's identity part, so she can seal Alice's
/// public key with a signature Alice made for another HELLO. Only the signature check over
/// this HELLO's transcript stops her.
#[test]
fn a_resealed_signature_from_another_handshake_is_refused() {
    let (alice, mallory, bob) = (node(11), node(12), node(13));
    let (alice_sent, from_alice) = hello(&alice, &bob);
    // Alice's signature, recovered as Bob would: decrypt with that HELLO's key.
    const BODY: usize = PUBLIC_KEY_LEN + SIGNATURE_LEN;
    let mut body = [0u8; BODY];
    body.copy_from_slice(&from_alice[CLEAR_LEN..CLEAR_LEN + BODY]);
    let th_alice = th1(&bob.identity.node_id(), &from_alice[..CLEAR_LEN]);
    id_cipher(&alice_sent.kem, &th_alice)
        .open_in_place(
            &[0; NONCE_LEN],
            &from_alice[..CLEAR_LEN],
            &mut body,
            &from_alice[CLEAR_LEN + BODY..],
        )
        .unwrap();
    assert_eq!(&body[..PUBLIC_KEY_LEN], &alice.identity.public().to_bytes());
    // Mallory's own HELLO, resealed under her key with Alice's identity and signature.
    let (mallory_sent, from_mallory) = hello(&mallory, &bob);
    let mut forged = from_mallory.clone();
    let th_mallory = th1(&bob.identity.node_id(), &forged[..CLEAR_LEN]);
    let (clear, sealed) = forged.split_at_mut(CLEAR_LEN);
    let (plain, tag_out) = sealed.split_at_mut(PUBLIC_KEY_LEN + SIGNATURE_LEN);
    plain.copy_from_slice(&body);
    let tag = id_cipher(&mallory_sent.kem, &th_mallory)
        .seal_in_place(&[0; NONCE_LEN], clear, plain)
        .unwrap();
    tag_out.copy_from_slice(&tag);
    assert_eq!(
        respond(&bob, &forged[..], &mut ReplayCache::new(4)).err(),
        Some(Error::BadSignature)
    );
}
