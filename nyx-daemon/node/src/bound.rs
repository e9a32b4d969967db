//! [`BoundNode`]: a node whose socket is bound, before it runs: the step where a relay
//! learns its address and signs the descriptor it publishes.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use nyx_core::NodeId;
use nyx_core::config::TransportKind;
use nyx_crypto::identity::IdentityKey;
use nyx_crypto::kem::HybridPublicKey;
use nyx_crypto::onion_keys::OnionKeyRing;
use nyx_overlay::directory::{Descriptor, DescriptorBuilder, Directory};
use nyx_transport::fault::FaultConfig;
use nyx_transport::quic::QuicEndpoint;
use nyx_transport::udp::UdpTransport;

use crate::{Error, Node, NodeKeys, NodeSettings, driver};

/// The transport of a bound node.
#[derive(Debug)]
pub(crate) enum Bound {
    Quic(QuicEndpoint),
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
    /// Bind the transport (needs a tokio runtime).
    pub fn bind(keys: NodeKeys, settings: NodeSettings) -> Result<Self, Error> {
        let NodeKeys {
            identity,
            link_key,
            onion_keys,
        } = keys;
        let link_public = link_key.public().clone();
        let bound = match settings.transport {
            TransportKind::Quic => {
                let (endpoint, shim) = QuicEndpoint::bind_with_faults(
                    settings.listen,
                    identity.clone(),
                    settings.quic.clone(),
                    settings.faults.clone(),
                )?;
                if let Some(tap) = &settings.tap {
                    shim.set_tap(tap.clone());
                }
                Bound::Quic(endpoint)
            }
            TransportKind::Udp => {
                let mut udp = UdpTransport::bind(
                    settings.listen,
                    identity.clone(),
                    vec![link_key],
                    settings.udp.clone(),
                )?;
                if let Some(tap) = &settings.tap {
                    udp.set_tap(tap.clone())?;
                }
                if settings.faults != FaultConfig::default() {
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

    /// This node's id.
    pub fn node_id(&self) -> NodeId {
        self.identity.node_id()
    }

    /// This node's descriptor, signed, valid for `validity` from `now_unix`; it publishes
    /// the exit policy and the family of the node's settings (without the node's own id).
    pub fn descriptor(
        &self,
        nickname: &str,
        bandwidth: u32,
        now_unix: u64,
        validity: Duration,
    ) -> Result<Descriptor, Error> {
        let builder = self.descriptor_builder(nickname, bandwidth, now_unix, validity);
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
    ) -> DescriptorBuilder {
        let own = self.identity.node_id();
        // An operator may give every relay of a family the same list, each one's own id in it.
        let family = (self.settings.family.iter().copied())
            .filter(|id| *id != own)
            .collect();
        let (quic_addr, udp_addr) = match self.settings.transport {
            TransportKind::Quic => (Some(self.addr), None),
            TransportKind::Udp => (None, Some(self.addr)),
        };
        DescriptorBuilder {
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
        }
    }

    /// Run the node with `directory` (spawns its tasks).
    pub fn start(self, directory: Directory) -> Result<Node, Error> {
        driver::start(self, directory)
    }
}
