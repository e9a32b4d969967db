//! [`BoundNode`]: a node whose socket is bound, before it runs: the step where a relay
//! learns its address and signs the descriptor it publishes. A client-only node binds
//! without accepting links and has no descriptor.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use nyx_core::NodeId;
use nyx_core::config::TransportKind;
use nyx_crypto::identity::IdentityKey;
use nyx_crypto::kem::HybridPublicKey;
use nyx_crypto::onion_keys::{OnionKeyRing, RotationPolicy};
use nyx_overlay::directory::{Descriptor, DescriptorBuilder, Directory};
use nyx_transport::quic::QuicEndpoint;
use nyx_transport::udp::UdpTransport;

use crate::{Error, Node, NodeKeys, NodeSettings, driver};

/// The transport of a bound node.
#[derive(Debug)]
pub(crate) enum Bound {
    Quic(std::sync::Arc<QuicEndpoint>),
    Udp(Box<UdpTransport>),
}

/// A node with its socket bound, not yet running: publish its descriptor, then
/// [`start`](Self::start) it with the directory.
#[derive(Debug)]
pub struct BoundNode {
    pub(crate) identity: Arc<IdentityKey>,
    pub(crate) onion_keys: OnionKeyRing,
    pub(crate) link_public: HybridPublicKey,
    pub(crate) settings: NodeSettings,
    pub(crate) bound: Bound,
    pub(crate) addr: SocketAddr,
}

impl BoundNode {
    /// Bind the transport (needs a tokio runtime). A relay accepts links as its identity; a
    /// client-only node ([`NodeRole::Client`](crate::NodeRole::Client)) binds a socket that
    /// accepts none and drops its link and onion keys here: it never uses them.
    pub fn bind(keys: NodeKeys, settings: NodeSettings) -> Result<Self, Error> {
        let NodeKeys {
            identity,
            link_key,
            onion_keys,
        } = keys;
        let relay = settings.role.is_relay();
        let link_public = link_key.public().clone();
        let onion_keys = match relay {
            true => onion_keys,
            // No onion key: a client answers no CREATE (its overlay refuses them too).
            false => OnionKeyRing::new(RotationPolicy::default())?,
        };
        let bound = match settings.transport {
            // The fault shim (one datagram per send, no GSO) only where a test asks for it.
            TransportKind::Quic if settings.faults.injects_faults() || settings.tap.is_some() => {
                let (endpoint, shim) = QuicEndpoint::bind_with_faults(
                    settings.listen,
                    relay.then(|| identity.clone()),
                    settings.quic.clone(),
                    settings.faults.clone(),
                )?;
                if let Some(tap) = &settings.tap {
                    shim.set_tap(tap.clone());
                }
                Bound::Quic(std::sync::Arc::new(endpoint))
            }
            TransportKind::Quic => {
                let endpoint = match relay {
                    true => QuicEndpoint::bind(
                        settings.listen,
                        identity.clone(),
                        settings.quic.clone(),
                    )?,
                    false => QuicEndpoint::bind_client(settings.listen, settings.quic.clone())?,
                };
                Bound::Quic(std::sync::Arc::new(endpoint))
            }
            TransportKind::Udp => {
                let mut udp = match relay {
                    true => UdpTransport::bind(
                        settings.listen,
                        identity.clone(),
                        vec![link_key],
                        settings.udp.clone(),
                    )?,
                    false => UdpTransport::bind_client(settings.listen, settings.udp.clone())?,
                };
                if let Some(tap) = &settings.tap {
                    udp.set_tap(tap.clone())?;
                }
                if settings.faults.injects_faults() {
                    let _counters = udp.set_faults(settings.faults.clone());
                }
                Bound::Udp(Box::new(udp))
            }
        };
        let addr = match &bound {
            Bound::Quic(e) => e.local_addr()?,
            Bound::Udp(u) => u.local_addr()?,
        };
        Ok(BoundNode {
            identity,
            onion_keys,
            link_public,
            settings,
            bound,
            addr,
        })
    }

    /// The bound address.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// The address a relay publishes: `advertise` from the settings (its port 0 standing
    /// for the bound port), else the bound address. Refused when it is unspecified (`0.0.0.0`
    /// or `[::]` reach nobody: set `advertise`).
    pub fn advertised_addr(&self) -> Result<SocketAddr, Error> {
        let addr = match self.settings.advertise {
            Some(a) if a.port() == 0 => SocketAddr::new(a.ip(), self.addr.port()),
            Some(a) => a,
            None => self.addr,
        };
        // An IPv4-mapped address is published as the IPv4 address it is (what peers see).
        let addr = SocketAddr::new(addr.ip().to_canonical(), addr.port());
        if addr.ip().is_unspecified() {
            return Err(Error::Settings {
                reason: format!(
                    "a relay bound to {} must say where others reach it (advertise)",
                    self.addr.ip()
                ),
            });
        }
        Ok(addr)
    }

    /// This node's id.
    pub fn node_id(&self) -> NodeId {
        self.identity.node_id()
    }

    /// This node's descriptor, signed, valid for `validity` from `now_unix`; it publishes
    /// the exit policy and the family of the node's settings (without the node's own id) and
    /// its [`advertised_addr`](Self::advertised_addr). Refused for a client-only node, and
    /// for a relay with no address others can reach.
    pub fn descriptor(
        &self,
        nickname: &str,
        bandwidth: u32,
        now_unix: u64,
        validity: Duration,
    ) -> Result<Descriptor, Error> {
        let builder = self.descriptor_builder(nickname, bandwidth, now_unix, validity)?;
        Ok(builder
            .sign(&self.identity)
            .map_err(nyx_overlay::Error::from)?)
    }

    /// The contents of [`descriptor`](Self::descriptor), unsigned: a daemon keeps it to
    /// publish again later (a new exit policy, a renewal) with the same keys and address.
    pub fn descriptor_builder(
        &self,
        nickname: &str,
        bandwidth: u32,
        now_unix: u64,
        validity: Duration,
    ) -> Result<DescriptorBuilder, Error> {
        if !self.settings.role.is_relay() {
            return Err(Error::Settings {
                reason: "a client-only node publishes no descriptor (NodeRole::Relay does)".into(),
            });
        }
        let addr = self.advertised_addr()?;
        let own = self.identity.node_id();
        // An operator may give every relay of a family the same list, each one's own id in it.
        let family = (self.settings.family.iter().copied())
            .filter(|id| *id != own)
            .collect();
        let (quic_addr, udp_addr) = match self.settings.transport {
            TransportKind::Quic => (Some(addr), None),
            TransportKind::Udp => (None, Some(addr)),
        };
        Ok(DescriptorBuilder {
            nickname: nickname.to_string(),
            quic_addr,
            udp_addr,
            link_key: self.link_public.clone(),
            onion_certs: self.onion_keys.certs().to_vec(),
            exit_policy: self.settings.exit_policy.clone(),
            family,
            bandwidth,
            published: now_unix,
            valid_until: now_unix + validity.as_secs(),
        })
    }

    /// Run the node with `directory` (spawns its tasks).
    pub fn start(self, directory: Directory) -> Result<Node, Error> {
        driver::start(self, directory)
    }
}
