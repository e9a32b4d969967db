//! Local test networks: fresh keys for N relays and the directory that lists them.
//!
//! Every node gets a new identity key, link key and onion-key ring (one ML-KEM key
//! generation each for the link key and the first onion key), and a descriptor signed at
//! `now`. The onion-key rotation period is the descriptor validity, so the first onion key
//! covers the whole validity of the descriptor.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use nyx_crypto::identity::IdentityKey;
use nyx_crypto::kem::HybridSecretKey;
use nyx_crypto::link::LinkKey;
use nyx_crypto::onion_keys::{OnionKeyRing, RotationPolicy};

use super::{DescriptorBuilder, Directory, ExitPolicy};
use crate::Error;
use crate::directory::Descriptor;

/// Shortest descriptor validity a testnet accepts.
pub const MIN_VALIDITY: Duration = Duration::from_secs(60);

/// One generated relay: its secrets and its descriptor. `Debug` shows no secrets.
pub struct TestnetNode {
    /// The long-term identity key.
    pub identity: IdentityKey,
    /// The static link key published for UDP links.
    pub link_key: LinkKey,
    /// The onion keys, already rotated at the generation time.
    pub onion_keys: OnionKeyRing,
    /// The signed descriptor (also in the generated directory).
    pub descriptor: Descriptor,
}

impl fmt::Debug for TestnetNode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TestnetNode")
            .field("node_id", &self.descriptor.node_id())
            .field("nickname", &self.descriptor.nickname())
            .finish_non_exhaustive()
    }
}

/// The shape of a generated test network.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TestnetSpec {
    /// Number of relays. Default 5.
    pub nodes: usize,
    /// Address of node 0; node `i` gets `first_ip + i` when `vary_ip` is set (127.0.0.1,
    /// 127.0.0.2, ...), else `first_ip`. Default 127.0.0.1.
    pub first_ip: Ipv4Addr,
    /// Whether each node gets its own IP (otherwise they differ by port only). Default true.
    pub vary_ip: bool,
    /// QUIC port of node 0; node `i` listens on `quic_base_port + i`. `None`: no QUIC.
    /// Default `Some(7100)`.
    pub quic_base_port: Option<u16>,
    /// UDP port of node 0; node `i` listens on `udp_base_port + i`. `None`: no UDP.
    /// Default `Some(7200)`.
    pub udp_base_port: Option<u16>,
    /// Every node's exit policy. Default [`ExitPolicy::loopback_only`].
    pub exit_policy: ExitPolicy,
    /// Every node's bandwidth weight. Default 1000.
    pub bandwidth: u32,
    /// How long the descriptors are valid. Default 24 hours; at least [`MIN_VALIDITY`].
    pub validity: Duration,
}

impl Default for TestnetSpec {
    fn default() -> Self {
        TestnetSpec {
            nodes: 5,
            first_ip: Ipv4Addr::new(127, 0, 0, 1),
            vary_ip: true,
            quic_base_port: Some(7100),
            udp_base_port: Some(7200),
            exit_policy: ExitPolicy::loopback_only(),
            bandwidth: 1000,
            validity: Duration::from_secs(24 * 3600),
        }
    }
}

fn spec_error(reason: String) -> Error {
    Error::Testnet { reason }
}

/// Generate the nodes described by `spec` and their directory, signed at `now_unix`.
pub fn generate(spec: &TestnetSpec, now_unix: u64) -> Result<(Vec<TestnetNode>, Directory), Error> {
    let mut addrs = Vec::with_capacity(spec.nodes);
    for i in 0..spec.nodes {
        let offset = u16::try_from(i)
            .map_err(|_| spec_error(format!("{} nodes is too many", spec.nodes)))?;
        let ip = if spec.vary_ip {
            u32::from(spec.first_ip)
                .checked_add(u32::from(offset))
                .map(Ipv4Addr::from)
                .ok_or_else(|| spec_error(format!("node {i}: IP address overflows")))?
        } else {
            spec.first_ip
        };
        let port = |base: Option<u16>| -> Result<Option<SocketAddr>, Error> {
            base.map(|b| {
                b.checked_add(offset)
                    .map(|p| SocketAddr::new(IpAddr::V4(ip), p))
                    .ok_or_else(|| spec_error(format!("node {i}: port overflows")))
            })
            .transpose()
        };
        addrs.push((port(spec.quic_base_port)?, port(spec.udp_base_port)?));
    }
    build(&addrs, spec, now_unix)
}

/// Generate one node per `(quic address, udp address)` pair with `exit_policy` and the
/// defaults of [`TestnetSpec`] otherwise (bandwidth 1000, 24 hours validity). For callers
/// that bind their sockets first (on port 0) and describe the bound addresses.
pub fn generate_with_addrs(
    addrs: &[(Option<SocketAddr>, Option<SocketAddr>)],
    exit_policy: &ExitPolicy,
    now_unix: u64,
) -> Result<(Vec<TestnetNode>, Directory), Error> {
    let spec = TestnetSpec {
        nodes: addrs.len(),
        exit_policy: exit_policy.clone(),
        ..TestnetSpec::default()
    };
    build(addrs, &spec, now_unix)
}

fn build(
    addrs: &[(Option<SocketAddr>, Option<SocketAddr>)],
    spec: &TestnetSpec,
    now_unix: u64,
) -> Result<(Vec<TestnetNode>, Directory), Error> {
    if spec.validity < MIN_VALIDITY {
        return Err(spec_error(format!(
            "validity {:?} is shorter than {MIN_VALIDITY:?}",
            spec.validity
        )));
    }
    let crypto = |what: &str, e: nyx_crypto::Error| spec_error(format!("{what}: {e}"));
    let policy = RotationPolicy {
        period: spec.validity,
        overlap: (spec.validity / 8).min(Duration::from_secs(3 * 3600)),
    };
    let mut nodes = Vec::with_capacity(addrs.len());
    for (i, &(quic_addr, udp_addr)) in addrs.iter().enumerate() {
        let identity = IdentityKey::generate().map_err(|e| crypto("identity key", e))?;
        let link_key =
            LinkKey::new(HybridSecretKey::generate().map_err(|e| crypto("link key", e))?);
        let mut onion_keys = OnionKeyRing::new(policy).map_err(|e| crypto("onion keys", e))?;
        onion_keys
            .rotate(&identity, now_unix)
            .map_err(|e| crypto("onion keys", e))?;
        let descriptor = DescriptorBuilder {
            nickname: format!("testnet{i}"),
            quic_addr,
            udp_addr,
            link_key: link_key.public().clone(),
            onion_certs: onion_keys.certs().to_vec(),
            exit_policy: spec.exit_policy.clone(),
            family: Vec::new(),
            bandwidth: spec.bandwidth,
            published: now_unix,
            valid_until: now_unix.saturating_add(spec.validity.as_secs()),
        }
        .sign(&identity)
        .map_err(|e| spec_error(format!("node {i}: {e}")))?;
        nodes.push(TestnetNode {
            identity,
            link_key,
            onion_keys,
            descriptor,
        });
    }
    let directory =
        Directory::from_descriptors(nodes.iter().map(|n| n.descriptor.clone()).collect())
            .map_err(|e| spec_error(e.to_string()))?;
    Ok((nodes, directory))
}

#[cfg(test)]
mod tests {
    use nyx_core::config::TransportKind;

    use super::*;

    const T0: u64 = 1_800_000_000;

    #[test]
    fn a_default_testnet_lists_every_node_on_its_own_address() {
        let spec = TestnetSpec {
            nodes: 3,
            ..TestnetSpec::default()
        };
        let (nodes, dir) = generate(&spec, T0).unwrap();
        assert_eq!((nodes.len(), dir.len()), (3, 3));
        for (i, node) in nodes.iter().enumerate() {
            let d = dir.get(&node.identity.node_id()).unwrap();
            assert_eq!(d, &node.descriptor);
            let ip = Ipv4Addr::new(127, 0, 0, 1 + i as u8);
            assert_eq!(
                d.quic_addr(),
                Some(SocketAddr::new(ip.into(), 7100 + i as u16))
            );
            assert_eq!(
                d.addr(TransportKind::Udp),
                Some(SocketAddr::new(ip.into(), 7200 + i as u16))
            );
            assert_eq!(d.link_key(), node.link_key.public());
            // The onion key outlives the descriptor.
            assert!(d.onion_key(d.valid_until() - 1).is_some());
            let text = format!("{node:?}");
            assert!(
                text.contains("node_id") && !text.contains("identity:"),
                "{text}"
            );
        }
    }

    #[test]
    fn bad_specs_are_refused() {
        let short = TestnetSpec {
            validity: Duration::from_secs(59),
            ..TestnetSpec::default()
        };
        assert!(matches!(generate(&short, T0), Err(Error::Testnet { .. })));
        let overflow = TestnetSpec {
            nodes: 2,
            quic_base_port: Some(u16::MAX),
            ..TestnetSpec::default()
        };
        assert!(matches!(
            generate(&overflow, T0),
            Err(Error::Testnet { .. })
        ));
        let unbound = [(Some("0.0.0.0:5".parse().unwrap()), None)];
        assert!(matches!(
            generate_with_addrs(&unbound, &ExitPolicy::accept_all(), T0),
            Err(Error::Testnet { .. })
        ));
    }
}
