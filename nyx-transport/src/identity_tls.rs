//! TLS certificates bound to node identities, and verifiers that check the peer's `NodeId`
//! instead of the web PKI.
//!
//! A node's certificate is self-signed with its Ed25519 identity key itself, so the TLS 1.3
//! handshake signature (CertificateVerify) proves possession of the identity key, and the
//! `NodeId` is computed from the certificate's public key. No certificate authority, name or
//! validity date is involved: the dialler knows the `NodeId` it wants (from the directory) and
//! the verifier refuses any other with [`Error::WrongPeer`]. TLS signs a context string
//! starting with 64 spaces, nyx-crypto signs "nyx/v1/…": the two uses of the key cannot be
//! confused. Both sides present certificates; the accepting side learns the dialler's
//! `NodeId` from its certificate. Links between relays are so mutually authenticated; a
//! client-only node dials with the certificate of an identity made for that link alone
//! ([`crate::quic::QuicEndpoint::bind_client`]), so the relay learns no lasting key of it.

use std::sync::{Arc, Mutex};

use nyx_core::NodeId;
use nyx_crypto::identity::{IdentityKey, IdentityPublic};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{WebPkiSupportedAlgorithms, verify_tls13_signature};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::{
    CertificateError, ClientConfig, DigitallySignedStruct, DistinguishedName, ServerConfig,
    SignatureScheme,
};

use crate::Error;
use crate::crypto_provider;

/// The ALPN protocol NyxNet links speak.
pub const ALPN: &[u8] = b"nyx/1";
/// DER prefix of an Ed25519 SubjectPublicKeyInfo (RFC 8410); the 32-byte key follows.
const ED25519_SPKI_PREFIX: [u8; 12] = [
    0x30, 0x2a, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x03, 0x21, 0x00,
];

/// This node's self-signed certificate and its key (the identity key) for rustls.
pub fn certificate(
    identity: &IdentityKey,
) -> Result<(CertificateDer<'static>, PrivateKeyDer<'static>), Error> {
    let fail = |e: rcgen::Error| Error::Certificate {
        reason: e.to_string(),
    };
    // The identity seed as PKCS#8, in a buffer wiped on drop (also on the error paths). rcgen
    // reads it through a borrow; its own KeyPair (a copy, and ring's key pair) is not wiped,
    // which is beyond our reach.
    let pkcs8 = identity.to_pkcs8_der();
    let key_pair = rcgen::KeyPair::try_from(&PrivatePkcs8KeyDer::from(&pkcs8[..])).map_err(fail)?;
    // The name is not checked by anyone; the NodeId in hex makes certificates readable.
    let params =
        rcgen::CertificateParams::new(vec![identity.node_id().to_string()]).map_err(fail)?;
    let cert = params.self_signed(&key_pair).map_err(fail)?;
    // The one owned copy goes to the caller, who hands it to rustls: its ring provider loads
    // it through `Zeroizing`, so that copy is wiped too.
    let key_der = PrivatePkcs8KeyDer::from(pkcs8.to_vec());
    Ok((cert.der().clone(), PrivateKeyDer::Pkcs8(key_der)))
}

/// The `NodeId` a certificate proves (its Ed25519 public key's id).
pub fn peer_node_id(cert: &CertificateDer<'_>) -> Result<NodeId, Error> {
    let bad = |reason: &str| Error::BadCertificate {
        reason: reason.to_string(),
    };
    let parsed = webpki::EndEntityCert::try_from(cert).map_err(|_| bad("not X.509 DER"))?;
    let spki = parsed.subject_public_key_info();
    let spki = spki.as_ref();
    if spki.len() != ED25519_SPKI_PREFIX.len() + 32 || spki[..12] != ED25519_SPKI_PREFIX {
        return Err(bad("its key is not Ed25519"));
    }
    let mut key = [0u8; 32];
    key.copy_from_slice(&spki[12..]);
    let public = IdentityPublic::from_bytes(&key).map_err(|_| bad("invalid Ed25519 key"))?;
    Ok(public.node_id())
}

/// Where a verifier records why it refused a peer, so the transport can return the typed
/// error (TLS itself only carries a string).
pub type Refusal = Arc<Mutex<Option<Error>>>;

/// Client configuration for dialling the node `expected`, presenting `identity`.
pub fn client_config(identity: &IdentityKey, expected: NodeId) -> Result<ClientConfig, Error> {
    client_config_reporting(identity, expected, Refusal::default())
}

/// [`client_config`] that also records a refusal of the peer in `refusal`.
pub fn client_config_reporting(
    identity: &IdentityKey,
    expected: NodeId,
    refusal: Refusal,
) -> Result<ClientConfig, Error> {
    let (cert, key) = certificate(identity)?;
    let provider = crypto_provider();
    let verifier = Arc::new(PeerVerifier {
        expected: Some(expected),
        algorithms: provider.signature_verification_algorithms,
        refusal,
    });
    let mut config = ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(tls)?
        .dangerous()
        .with_custom_certificate_verifier(verifier)
        .with_client_auth_cert(vec![cert], key)
        .map_err(tls)?;
    config.alpn_protocols = vec![ALPN.to_vec()];
    Ok(config)
}

/// Server configuration for accepting links as `identity`; every dialler must present an
/// identity certificate (its `NodeId` is then [`peer_node_id`] of it).
pub fn server_config(identity: &IdentityKey) -> Result<ServerConfig, Error> {
    let (cert, key) = certificate(identity)?;
    let provider = crypto_provider();
    let verifier = Arc::new(PeerVerifier {
        expected: None,
        algorithms: provider.signature_verification_algorithms,
        refusal: Refusal::default(),
    });
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(tls)?
        .with_client_cert_verifier(verifier)
        .with_single_cert(vec![cert], key)
        .map_err(tls)?;
    config.alpn_protocols = vec![ALPN.to_vec()];
    Ok(config)
}

fn tls(e: rustls::Error) -> Error {
    Error::TlsConfig {
        reason: e.to_string(),
    }
}

/// Accepts a peer certificate iff it is an identity certificate (and, when dialling, of the
/// expected node); the handshake signature is then checked against its key.
#[derive(Debug)]
struct PeerVerifier {
    expected: Option<NodeId>,
    algorithms: WebPkiSupportedAlgorithms,
    refusal: Refusal,
}

impl PeerVerifier {
    fn check(&self, cert: &CertificateDer<'_>) -> Result<(), rustls::Error> {
        let refused = match peer_node_id(cert) {
            Err(e) => e,
            Ok(got) => match self.expected {
                Some(expected) if expected != got => Error::WrongPeer { expected, got },
                _ => return Ok(()),
            },
        };
        if let Ok(mut slot) = self.refusal.lock() {
            *slot = Some(refused.clone());
        }
        Err(rustls::Error::InvalidCertificate(CertificateError::Other(
            rustls::OtherError(Arc::new(refused)),
        )))
    }
}

impl ServerCertVerifier for PeerVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        self.check(end_entity)?;
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        _message: &[u8],
        _cert: &CertificateDer<'_>,
        _dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        Err(rustls::Error::PeerIncompatible(
            rustls::PeerIncompatible::Tls12NotOffered,
        ))
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        vec![SignatureScheme::ED25519]
    }
}

impl ClientCertVerifier for PeerVerifier {
    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        &[]
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        self.check(end_entity)?;
        Ok(ClientCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        ServerCertVerifier::verify_tls12_signature(self, message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        vec![SignatureScheme::ED25519]
    }
}
