//! Our pure-Rust X25519MLKEM768 (on rustls' ring provider) against aws-lc-rs's, the reference
//! implementation rustls ships, in both directions: a full TLS 1.3 handshake in memory must
//! negotiate the hybrid group and carry application data both ways. aws-lc-rs is a
//! dev-dependency only.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::io::{Read, Write};
use std::sync::Arc;

use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};
use rustls::{
    ClientConfig, ClientConnection, NamedGroup, RootCertStore, ServerConfig, ServerConnection,
};

/// aws-lc-rs's provider offering only its X25519MLKEM768.
fn aws_lc_hybrid() -> Arc<CryptoProvider> {
    Arc::new(CryptoProvider {
        kx_groups: vec![rustls::crypto::aws_lc_rs::kx_group::X25519MLKEM768],
        ..rustls::crypto::aws_lc_rs::default_provider()
    })
}

fn certificate() -> (CertificateDer<'static>, PrivateKeyDer<'static>) {
    let ck = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
    let cert = ck.cert.der().clone();
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(ck.signing_key.serialize_der()));
    (cert, key)
}

fn client(provider: Arc<CryptoProvider>, cert: &CertificateDer<'static>) -> ClientConnection {
    let mut roots = RootCertStore::empty();
    roots.add(cert.clone()).unwrap();
    let config = ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    ClientConnection::new(Arc::new(config), ServerName::try_from("localhost").unwrap()).unwrap()
}

fn server(
    provider: Arc<CryptoProvider>,
    cert: CertificateDer<'static>,
    key: PrivateKeyDer<'static>,
) -> ServerConnection {
    let config = ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![cert], key)
        .unwrap();
    ServerConnection::new(Arc::new(config)).unwrap()
}

/// Move TLS records between the two until neither has anything to send.
fn pump(c: &mut ClientConnection, s: &mut ServerConnection) {
    for _ in 0..20 {
        let mut buf = Vec::new();
        c.write_tls(&mut buf).unwrap();
        let moved_c = !buf.is_empty();
        if moved_c {
            s.read_tls(&mut &buf[..]).unwrap();
            s.process_new_packets().unwrap();
        }
        let mut buf = Vec::new();
        s.write_tls(&mut buf).unwrap();
        let moved_s = !buf.is_empty();
        if moved_s {
            c.read_tls(&mut &buf[..]).unwrap();
            c.process_new_packets().unwrap();
        }
        if !moved_c && !moved_s {
            return;
        }
    }
}

fn handshake_and_talk(client_provider: Arc<CryptoProvider>, server_provider: Arc<CryptoProvider>) {
    let (cert, key) = certificate();
    let mut c = client(client_provider, &cert);
    let mut s = server(server_provider, cert, key);
    pump(&mut c, &mut s);
    assert!(!c.is_handshaking() && !s.is_handshaking());
    for side in [
        c.negotiated_key_exchange_group(),
        s.negotiated_key_exchange_group(),
    ] {
        assert_eq!(side.unwrap().name(), NamedGroup::X25519MLKEM768);
    }
    c.writer().write_all(b"from the client").unwrap();
    s.writer().write_all(b"from the server").unwrap();
    pump(&mut c, &mut s);
    let mut got = [0u8; 15];
    s.reader().read_exact(&mut got).unwrap();
    assert_eq!(&got, b"from the client");
    c.reader().read_exact(&mut got).unwrap();
    assert_eq!(&got, b"from the server");
}

#[test]
fn our_client_with_an_aws_lc_rs_server() {
    handshake_and_talk(nyx_transport::crypto_provider(), aws_lc_hybrid());
}

#[test]
fn an_aws_lc_rs_client_with_our_server() {
    handshake_and_talk(aws_lc_hybrid(), nyx_transport::crypto_provider());
}

#[test]
fn ours_with_ours() {
    handshake_and_talk(
        nyx_transport::crypto_provider(),
        nyx_transport::crypto_provider(),
    );
}

#[test]
fn a_classical_only_peer_is_refused() {
    // Our provider offers no classical group, so a peer that only has X25519 cannot agree.
    let classical = Arc::new(CryptoProvider {
        kx_groups: vec![rustls::crypto::ring::kx_group::X25519],
        ..rustls::crypto::ring::default_provider()
    });
    let (cert, key) = certificate();
    let mut c = client(classical, &cert);
    let mut s = server(nyx_transport::crypto_provider(), cert, key);
    let mut buf = Vec::new();
    c.write_tls(&mut buf).unwrap();
    s.read_tls(&mut &buf[..]).unwrap();
    let err = s.process_new_packets().unwrap_err();
    assert!(matches!(err, rustls::Error::PeerIncompatible(_)), "{err:?}");
}
