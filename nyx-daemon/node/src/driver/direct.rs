//! One-hop directory circuits: built at the owner's request to a relay it names, outside
//! path selection and the build policy (one attempt, no blame, no guards), and the
//! addresses of relays the directory does not list (pinned authorities, relays an authority
//! tests) so the driver can dial them.

use std::collections::HashMap;
use std::net::SocketAddr;

use nyx_core::NodeId;
use nyx_crypto::kem::HybridPublicKey;
use nyx_overlay::circuit::{CircuitHandle, DestroyReason, HopSpec};
use tokio::sync::oneshot;

use super::Driver;
use crate::directory::DirectoryPeer;
use crate::{Circuit, Error, unix_now};

/// Relays the directory does not list that the driver keeps addresses of, at most (the
/// oldest entry is not tracked: an arbitrary one makes room).
const MAX_KNOWN: usize = 4096;

/// Where to dial a relay the directory does not list.
#[derive(Debug, Clone)]
pub(super) struct KnownPeer {
    pub(super) addr: SocketAddr,
    pub(super) link_key: HybridPublicKey,
}

/// Directory circuits being built, and addresses learnt from the owner.
#[derive(Debug, Default)]
pub(super) struct Direct {
    builds: HashMap<CircuitHandle, oneshot::Sender<Result<Circuit, Error>>>,
    known: HashMap<NodeId, KnownPeer>,
}

impl Direct {
    /// Where to dial `peer`, if the owner named it.
    pub(super) fn known(&self, peer: &NodeId) -> Option<&KnownPeer> {
        self.known.get(peer)
    }

    fn remember(&mut self, node: NodeId, peer: KnownPeer) {
        if self.known.len() >= MAX_KNOWN
            && !self.known.contains_key(&node)
            && let Some(old) = self.known.keys().next().copied()
        {
            self.known.remove(&old);
        }
        self.known.insert(node, peer);
    }
}

impl Driver {
    /// Start a one-hop circuit to `peer`; `reply` gets it when built.
    pub(super) fn build_directory(
        &mut self,
        peer: DirectoryPeer,
        reply: oneshot::Sender<Result<Circuit, Error>>,
    ) {
        let now = self.now();
        let started = match peer {
            DirectoryPeer::Relay(desc) => {
                let node = desc.node_id();
                let addr = desc.addr(self.settings.transport);
                let onion_key = desc.onion_key(unix_now()).cloned();
                match (addr, onion_key) {
                    (Some(addr), Some(onion_key)) => {
                        let link_key = desc.link_key().clone();
                        self.direct.remember(node, KnownPeer { addr, link_key });
                        self.overlay.build(vec![HopSpec { node, onion_key }], now)
                    }
                    (None, _) => Err(bad_peer("it has no address for this node's transport")),
                    (_, None) => Err(bad_peer("it has no onion key valid now")),
                }
            }
            DirectoryPeer::Pinned(p) => {
                let known = KnownPeer {
                    addr: p.addr,
                    link_key: p.link_key,
                };
                self.direct.remember(p.node_id, known);
                self.overlay.build_directory(p.node_id, now)
            }
        };
        match started {
            Ok(circuit) => {
                self.direct.builds.insert(circuit, reply);
            }
            Err(e) => {
                let _ = reply.send(Err(e.into()));
            }
        }
    }

    /// A directory circuit was built: hand it to its requester. False if `circuit` is not
    /// one.
    pub(super) fn direct_built(&mut self, circuit: CircuitHandle) -> bool {
        let Some(reply) = self.direct.builds.remove(&circuit) else {
            return false;
        };
        let handle = self.own_circuit(circuit);
        if let Err(Ok(unwanted)) = reply.send(Ok(handle)) {
            drop(unwanted); // the requester left: closing it tears it down
        }
        true
    }

    /// A directory circuit failed: tell its requester. False if `circuit` is not one.
    pub(super) fn direct_failed(&mut self, circuit: CircuitHandle, reason: DestroyReason) -> bool {
        let Some(reply) = self.direct.builds.remove(&circuit) else {
            return false;
        };
        let error = nyx_overlay::Error::BuildFailed {
            attempts: 1,
            reason,
        };
        let _ = reply.send(Err(error.into()));
        true
    }
}

fn bad_peer(reason: &str) -> nyx_overlay::Error {
    nyx_overlay::Error::BadPath {
        reason: format!("cannot reach that relay: {reason}"),
    }
}
