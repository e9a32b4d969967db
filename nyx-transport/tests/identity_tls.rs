//! TLS between two node identities: the dialler gets the node it asked for or a clear
//! refusal; both learn each other's NodeId; the key exchange is the post-quantum hybrid.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::sync::Arc;

use nyx_crypto::identity::IdentityKey;
use nyx_transport::Error;
use nyx_transport::identity_tls::{client_config, peer_node_id, server_config};
use rustls::pki_types::ServerName;
use rustls::{ClientConnection, NamedGroup, ServerConnection};

fn node(seed: u8) -> IdentityKey {
    IdentityKey::from_seed(&[seed; 32])
}

/// Run a handshake in memory; returns the first error either side reports.
fn handshake(c: &mut ClientConnection, s: &mut ServerConnection) -> Result<(), rustls::Error> {
    for _ in 0..20 {
        let mut buf = Vec::new();
        c.write_tls(&mut buf).unwrap();
        if !buf.is_empty() {
            s.read_tls(&mut &buf[..]).unwrap();
            s.process_new_packets()?;
        }
        let mut back = Vec::new();
        s.write_tls(&mut back).unwrap();
        if !back.is_empty() {
            c.read_tls(&mut &back[..]).unwrap();
            c.process_new_packets()?;
        }
        if buf.is_empty() && back.is_empty() {
            break;
        }
    }
    Ok(())
}

fn connect(
    dialler: &IdentityKey,
    listener: &IdentityKey,
    expected: nyx_core::NodeId,
) -> (
    ClientConnection,
    ServerConnection,
    Result<(), rustls::Error>,
) {
    let name = ServerName::try_from("nyx").unwrap();
    let mut c =
        ClientConnection::new(Arc::new(client_config(dialler, expected).unwrap()), name).unwrap();
    let mut s = ServerConnection::new(Arc::new(server_config(listener).unwrap())).unwrap();
    let r = handshake(&mut c, &mut s);
    (c, s, r)
}

#[test]
fn both_sides_learn_the_other_node_over_the_hybrid_group() {
    let (a, b) = (node(1), node(2));
    let (c, s, r) = connect(&a, &b, b.node_id());
    r.unwrap();
    assert!(!c.is_handshaking() && !s.is_handshaking());
    let server_cert = &c.peer_certificates().unwrap()[0];
    let client_cert = &s.peer_certificates().unwrap()[0];
    assert_eq!(peer_node_id(server_cert).unwrap(), b.node_id());
    assert_eq!(peer_node_id(client_cert).unwrap(), a.node_id());
    assert_eq!(
        c.negotiated_key_exchange_group().unwrap().name(),
        NamedGroup::X25519MLKEM768
    );
    assert_eq!(c.alpn_protocol(), Some(&b"nyx/1"[..]));
}

#[test]
fn a_peer_with_another_identity_is_refused_with_both_ids() {
    let (a, b, mallory) = (node(1), node(2), node(3));
    // A dials B, but Mallory answers.
    let (_, _, r) = connect(&a, &mallory, b.node_id());
    let err = r.unwrap_err();
    assert!(err.to_string().contains("WrongPeer"), "{err}");
    match err {
        rustls::Error::InvalidCertificate(rustls::CertificateError::Other(other)) => {
            let inner = other.0.downcast_ref::<Error>().unwrap();
            assert!(
                matches!(
                    inner,
                    Error::WrongPeer { expected, got }
                        if *expected == b.node_id() && *got == mallory.node_id()
                ),
                "{inner:?}"
            );
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_certificate_that_is_not_an_identity_is_refused() {
    // A P-256 certificate (what a web server would have) carries no Ed25519 identity.
    let ck = rcgen::generate_simple_self_signed(vec!["nyx".to_string()]).unwrap();
    let err = peer_node_id(ck.cert.der()).unwrap_err();
    assert!(matches!(err, Error::BadCertificate { .. }), "{err:?}");
    assert!(peer_node_id(&rustls::pki_types::CertificateDer::from(vec![1, 2, 3])).is_err());
}
