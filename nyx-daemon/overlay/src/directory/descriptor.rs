//! Relay descriptors: what a relay publishes about itself, signed with its identity key.
//!
//! Encoding (version 2, integers big-endian; see `docs/protocol.md`, "Directory"; version 1
//! had no family field and is refused):
//!
//! ```text
//! version        1      = 2
//! identity       32     Ed25519 identity public key (NodeId = its hash)
//! nickname       1 + n  length n (1..=32), ASCII letters, digits, '-' and '_'
//! quic address   1 + …  kind 0 (none) | 4 (IPv4: 4 + port 2) | 6 (IPv6: 16 + port 2)
//! udp address    1 + …  same
//! link key       1216   hybrid public key for the UDP link handshake
//! bandwidth      4      relative weight, > 0
//! published      8      Unix seconds
//! valid until    8      Unix seconds, exclusive, > published
//! onion certs    1 + k  count k (1 or 2), then k onion-key certificates of 1329 bytes
//! exit policy    2 + …  rule count (≤ 256), each: action 1, kind 1, address 0/4/16 and
//!                       prefix 1 (absent for kind 0), first port 2, last port 2
//! family         1 + …  count k (≤ 32), then k NodeIds of 32 bytes, strictly ascending,
//!                       never the relay's own (see [`super::family`])
//! signature      64     Ed25519 over every byte before it, context "nyx/v1/descriptor"
//! ```

use std::fmt;
use std::net::SocketAddr;

use nyx_core::NodeId;
use nyx_core::config::TransportKind;
use nyx_crypto::identity::{IdentityKey, IdentityPublic, SIGNATURE_LEN};
use nyx_crypto::kem::{HybridPublicKey, PUBLIC_KEY_LEN};
use nyx_crypto::onion_cert::{CERT_LEN, OnionKeyCert};

use super::DescriptorError;
use super::codec::{Reader, check_addr, get_addr, get_policy, put_addr, put_policy};
use super::family::{check_family, get_family, put_family};
use super::policy::ExitPolicy;

/// The encoding version this code writes and reads.
pub const VERSION: u8 = 2;
/// The signature context of descriptors.
pub const SIGNATURE_CONTEXT: &[u8] = b"nyx/v1/descriptor";
/// How far in the future `published` may be (clock skew between relay and client), seconds.
pub const MAX_CLOCK_SKEW: u64 = 300;
/// Longest nickname.
pub const MAX_NICKNAME_LEN: usize = 32;
/// Longest validity a descriptor may claim, seconds (7 days): clients refuse longer ones,
/// and authorities refuse uploads valid for longer from their upload.
pub const MAX_DESCRIPTOR_VALIDITY: u64 = 7 * 86_400;
/// Longest an onion-key certificate may be valid, seconds (14 days: a rotation period of
/// at most 7 days plus an overlap shorter than it). Clients refuse descriptors with longer
/// ones, so a stolen onion key cannot be certified into use for long.
pub const MAX_ONION_KEY_LIFETIME: u64 = 14 * 86_400;
/// Most onion-key certificates in one descriptor (the current key and the next).
pub const MAX_ONION_CERTS: usize = 2;

/// A verified relay descriptor. Immutable; [`as_bytes`](Self::as_bytes) is what was signed
/// (plus the signature).
#[derive(Clone)]
pub struct Descriptor {
    identity: IdentityPublic,
    node_id: NodeId,
    nickname: String,
    quic_addr: Option<SocketAddr>,
    udp_addr: Option<SocketAddr>,
    link_key: HybridPublicKey,
    bandwidth: u32,
    published: u64,
    valid_until: u64,
    onion_certs: Vec<OnionKeyCert>,
    exit_policy: ExitPolicy,
    family: Vec<NodeId>,
    bytes: Vec<u8>,
}

/// The contents of a descriptor to sign.
#[derive(Clone, Debug)]
pub struct DescriptorBuilder {
    /// ASCII letters, digits, `-` and `_`, 1 to 32 characters.
    pub nickname: String,
    /// Where the relay accepts QUIC links.
    pub quic_addr: Option<SocketAddr>,
    /// Where the relay accepts UDP links.
    pub udp_addr: Option<SocketAddr>,
    /// The relay's static link key ([`nyx_crypto::link::LinkKey::public`]).
    pub link_key: HybridPublicKey,
    /// Onion-key certificates signed by the same identity: 1 or 2 (current, next).
    pub onion_certs: Vec<OnionKeyCert>,
    /// Which destinations the relay exits to.
    pub exit_policy: ExitPolicy,
    /// The relays it declares as its family, in any order (signed sorted): at most
    /// [`MAX_FAMILY`](super::MAX_FAMILY), none twice, not its own id.
    pub family: Vec<NodeId>,
    /// Relative bandwidth weight, > 0.
    pub bandwidth: u32,
    /// Publication time (Unix seconds).
    pub published: u64,
    /// End of validity (Unix seconds, exclusive).
    pub valid_until: u64,
}

impl DescriptorBuilder {
    /// Encode and sign. The result is checked exactly as [`Descriptor::decode`] checks it at
    /// the time `published` (so at least one onion certificate must be valid then).
    pub fn sign(mut self, identity: &IdentityKey) -> Result<Descriptor, DescriptorError> {
        check_nickname(&self.nickname)?;
        self.family.sort_unstable();
        check_family(identity.node_id(), &self.family)?;
        for (addr, field) in [
            (self.quic_addr, "quic address"),
            (self.udp_addr, "udp address"),
        ] {
            if let Some(addr) = addr {
                check_addr(addr, field)?;
            }
        }
        if self.onion_certs.is_empty() || self.onion_certs.len() > MAX_ONION_CERTS {
            return Err(cert_count_error(self.onion_certs.len()));
        }
        let mut out = Vec::with_capacity(2048 + self.onion_certs.len() * CERT_LEN);
        out.push(VERSION);
        out.extend_from_slice(&identity.public().to_bytes());
        out.push(self.nickname.len() as u8); // ≤ 32, checked above
        out.extend_from_slice(self.nickname.as_bytes());
        put_addr(&mut out, self.quic_addr);
        put_addr(&mut out, self.udp_addr);
        out.extend_from_slice(self.link_key.to_bytes());
        out.extend_from_slice(&self.bandwidth.to_be_bytes());
        out.extend_from_slice(&self.published.to_be_bytes());
        out.extend_from_slice(&self.valid_until.to_be_bytes());
        out.push(self.onion_certs.len() as u8); // ≤ 2, checked above
        for cert in &self.onion_certs {
            out.extend_from_slice(cert.to_bytes());
        }
        put_policy(&mut out, &self.exit_policy);
        put_family(&mut out, &self.family);
        let signature = identity.sign(SIGNATURE_CONTEXT, &out);
        out.extend_from_slice(&signature);
        Descriptor::decode(&out, self.published)
    }
}

fn cert_count_error(count: usize) -> DescriptorError {
    DescriptorError::Malformed {
        field: "onion certs",
        reason: format!("{count} certificates, expected 1 to {MAX_ONION_CERTS}"),
    }
}

fn check_nickname(nickname: &str) -> Result<(), DescriptorError> {
    let ok = (1..=MAX_NICKNAME_LEN).contains(&nickname.len())
        && nickname
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if ok {
        Ok(())
    } else {
        Err(DescriptorError::Malformed {
            field: "nickname",
            reason: format!(
                "{:?}: 1 to {MAX_NICKNAME_LEN} ASCII letters, digits, '-' or '_'",
                nickname.chars().take(40).collect::<String>()
            ),
        })
    }
}

impl Descriptor {
    /// Parse and verify `bytes` at `now_unix`: the layout (no trailing bytes), the signature,
    /// the validity period (published at most [`MAX_CLOCK_SKEW`] ahead of `now`, not expired),
    /// every onion certificate (by this identity, at least one valid at `now`), bandwidth > 0,
    /// at least one address and the family (sorted, no duplicates, not the relay itself). The
    /// signature is checked before any key or certificate is parsed.
    pub fn decode(bytes: &[u8], now_unix: u64) -> Result<Descriptor, DescriptorError> {
        let mut r = Reader::new(bytes);
        let version = r.u8("version")?;
        if version != VERSION {
            return Err(DescriptorError::UnsupportedVersion { version });
        }
        let identity_bytes = r.array::<32>("identity")?;
        let nickname_len = usize::from(r.u8("nickname")?);
        let nickname = r.take(nickname_len, "nickname")?;
        let quic_addr = get_addr(&mut r, "quic address")?;
        let udp_addr = get_addr(&mut r, "udp address")?;
        let link_key = r.take(PUBLIC_KEY_LEN, "link key")?;
        let bandwidth = r.u32("bandwidth")?;
        let published = r.u64("published")?;
        let valid_until = r.u64("valid until")?;
        let cert_count = usize::from(r.u8("onion certs")?);
        if cert_count == 0 || cert_count > MAX_ONION_CERTS {
            return Err(cert_count_error(cert_count));
        }
        let certs = r.take(cert_count * CERT_LEN, "onion certs")?;
        let exit_policy = get_policy(&mut r)?;
        let family = get_family(&mut r)?;
        let signed_len = r.pos();
        let signature = r.array::<SIGNATURE_LEN>("signature")?;
        if r.remaining() > 0 {
            return Err(DescriptorError::TrailingBytes {
                count: r.remaining(),
            });
        }

        let identity = IdentityPublic::from_bytes(&identity_bytes).map_err(|reason| {
            DescriptorError::BadKey {
                field: "identity key",
                reason,
            }
        })?;
        identity
            .verify(SIGNATURE_CONTEXT, &bytes[..signed_len], &signature)
            .map_err(|_| DescriptorError::BadSignature)?;

        let nickname = std::str::from_utf8(nickname)
            .map_err(|_| DescriptorError::Malformed {
                field: "nickname",
                reason: "not ASCII".into(),
            })?
            .to_owned();
        check_nickname(&nickname)?;
        let node_id = identity.node_id();
        check_family(node_id, &family)?;
        if quic_addr.is_none() && udp_addr.is_none() {
            return Err(DescriptorError::NoAddress);
        }
        if bandwidth == 0 {
            return Err(DescriptorError::ZeroBandwidth);
        }
        if valid_until <= published {
            return Err(DescriptorError::BadValidity {
                published,
                valid_until,
            });
        }
        if valid_until - published > MAX_DESCRIPTOR_VALIDITY {
            return Err(DescriptorError::ValidityTooLong {
                published,
                valid_until,
                max: MAX_DESCRIPTOR_VALIDITY,
            });
        }
        if published > now_unix.saturating_add(MAX_CLOCK_SKEW) {
            return Err(DescriptorError::NotYetValid {
                published,
                now: now_unix,
            });
        }
        if now_unix >= valid_until {
            return Err(DescriptorError::Expired {
                valid_until,
                now: now_unix,
            });
        }
        let link_key =
            HybridPublicKey::from_bytes(link_key).map_err(|reason| DescriptorError::BadKey {
                field: "link key",
                reason,
            })?;
        let onion_certs = certs
            .chunks_exact(CERT_LEN)
            .enumerate()
            .map(|(index, c)| {
                OnionKeyCert::verify(c, &identity)
                    .map_err(|reason| DescriptorError::BadOnionCert { index, reason })
            })
            .collect::<Result<Vec<_>, _>>()?;
        for (index, c) in onion_certs.iter().enumerate() {
            let lifetime = c.valid_until() - c.valid_after();
            if lifetime > MAX_ONION_KEY_LIFETIME {
                return Err(DescriptorError::OnionKeyTooLong {
                    index,
                    lifetime,
                    max: MAX_ONION_KEY_LIFETIME,
                });
            }
        }
        if !onion_certs.iter().any(|c| c.is_valid_at(now_unix)) {
            return Err(DescriptorError::NoValidOnionKey { now: now_unix });
        }
        Ok(Descriptor {
            node_id,
            identity,
            nickname,
            quic_addr,
            udp_addr,
            link_key,
            bandwidth,
            published,
            valid_until,
            onion_certs,
            exit_policy,
            family,
            bytes: bytes.to_vec(),
        })
    }

    /// The relay's id.
    pub fn node_id(&self) -> NodeId {
        self.node_id
    }

    /// The relay's identity key.
    pub fn identity(&self) -> &IdentityPublic {
        &self.identity
    }

    /// The relay's nickname (not unique; for people only).
    pub fn nickname(&self) -> &str {
        &self.nickname
    }

    /// Where the relay accepts QUIC links.
    pub fn quic_addr(&self) -> Option<SocketAddr> {
        self.quic_addr
    }

    /// Where the relay accepts UDP links.
    pub fn udp_addr(&self) -> Option<SocketAddr> {
        self.udp_addr
    }

    /// The address for `transport`, if the relay offers it.
    pub fn addr(&self, transport: TransportKind) -> Option<SocketAddr> {
        match transport {
            TransportKind::Quic => self.quic_addr,
            TransportKind::Udp => self.udp_addr,
        }
    }

    /// Whether the relay accepts links over `transport`.
    pub fn offers(&self, transport: TransportKind) -> bool {
        self.addr(transport).is_some()
    }

    /// The static key for the UDP transport's link handshake.
    pub fn link_key(&self) -> &HybridPublicKey {
        &self.link_key
    }

    /// The verified onion-key certificates (1 or 2: current and next).
    pub fn onion_certs(&self) -> &[OnionKeyCert] {
        &self.onion_certs
    }

    /// The onion key to use at `now_unix`: of the keys valid then, the newest (latest
    /// valid-after).
    pub fn onion_key(&self, now_unix: u64) -> Option<&HybridPublicKey> {
        self.onion_certs
            .iter()
            .filter(|c| c.is_valid_at(now_unix))
            .max_by_key(|c| c.valid_after())
            .map(OnionKeyCert::onion_key)
    }

    /// The relay's exit policy.
    pub fn exit_policy(&self) -> &ExitPolicy {
        &self.exit_policy
    }

    /// The relays this one declares as its family, sorted ascending. Declaring is one-sided;
    /// [`same_family`](super::same_family) is the relation path selection uses.
    pub fn family(&self) -> &[NodeId] {
        &self.family
    }

    /// Whether this relay declares `node` as family.
    pub fn declares(&self, node: &NodeId) -> bool {
        self.family.binary_search(node).is_ok()
    }

    /// Relative bandwidth weight (> 0).
    pub fn bandwidth(&self) -> u32 {
        self.bandwidth
    }

    /// Publication time (Unix seconds).
    pub fn published(&self) -> u64 {
        self.published
    }

    /// End of validity (Unix seconds, exclusive).
    pub fn valid_until(&self) -> u64 {
        self.valid_until
    }

    /// Whether the descriptor may be used at `now_unix`: published at most
    /// [`MAX_CLOCK_SKEW`] ahead of it and not expired.
    pub fn is_valid_at(&self, now_unix: u64) -> bool {
        self.published <= now_unix.saturating_add(MAX_CLOCK_SKEW) && now_unix < self.valid_until
    }

    /// The signed encoding.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// SHA-256 of [`as_bytes`](Self::as_bytes): how votes and the consensus name this exact
    /// descriptor.
    pub fn digest(&self) -> [u8; 32] {
        use sha2::Digest as _;
        sha2::Sha256::digest(&self.bytes).into()
    }
}

impl PartialEq for Descriptor {
    fn eq(&self, other: &Self) -> bool {
        self.bytes == other.bytes
    }
}

impl Eq for Descriptor {}

impl fmt::Debug for Descriptor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Descriptor")
            .field("node_id", &self.node_id)
            .field("nickname", &self.nickname)
            .field("quic_addr", &self.quic_addr)
            .field("udp_addr", &self.udp_addr)
            .field("bandwidth", &self.bandwidth)
            .field("published", &self.published)
            .field("valid_until", &self.valid_until)
            .field("exit_policy", &self.exit_policy.to_string())
            .field("family", &self.family)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests;
