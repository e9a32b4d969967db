//! One-hop directory circuits: built at the owner's request to a relay it names, outside
//! path selection and the build policy (a failed build blames nobody; it is tried once
//! more only if the link under it went down, see [`Driver::direct_failed`]), and the
//! addresses of relays the directory does not list (pinned authorities, relays an authority
//! tests) so the driver can dial them.
//!
//! A circuit to a relay named by its descriptor counts only if the relay is at the address
//! the descriptor advertises: while such a build waits, a dial to the relay goes to that
//! address (not the one the directory may hold), and once built, the link it runs over must
//! come from that address. A relay that already has a link to this node from elsewhere
//! (it dialled first, from another local address or through a NAT) is dialled at its
//! advertised address first, and the build starts once that link is up: the new link
//! replaces the old one for the peer on both ends. If that dial fails, or the circuit ends
//! up over a link from another address, the build fails: the relay has not shown that it
//! answers at the address it publishes.

use std::collections::HashMap;
use std::net::SocketAddr;

use nyx_core::{NodeId, Timestamp};
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

/// A directory circuit being built.
#[derive(Debug)]
struct Pending {
    reply: oneshot::Sender<Result<Circuit, Error>>,
    /// What was asked for, to try again over a new link.
    peer: DirectoryPeer,
    /// This is the second attempt.
    retried: bool,
    relay: NodeId,
    /// The address the relay must be at (a build by descriptor).
    advertised: Option<SocketAddr>,
    /// When the build started.
    started: Timestamp,
}

/// A directory circuit that waits for a link to its relay's advertised address.
#[derive(Debug)]
struct Probe {
    reply: oneshot::Sender<Result<Circuit, Error>>,
    peer: DirectoryPeer,
    retried: bool,
    /// When the first attempt started.
    started: Timestamp,
    hop: HopSpec,
    advertised: SocketAddr,
}

/// Directory circuits being built, and addresses learnt from the owner.
#[derive(Debug, Default)]
pub(super) struct Direct {
    builds: HashMap<CircuitHandle, Pending>,
    /// Builds waiting for a dial to the relay's advertised address, by relay.
    probes: HashMap<NodeId, Vec<Probe>>,
    /// Directory circuits built and not yet ended.
    built: std::collections::HashSet<CircuitHandle>,
    known: HashMap<NodeId, KnownPeer>,
}

impl Direct {
    /// Where to dial `peer` if the owner named it: before the directory's address while a
    /// directory circuit to it is being built (`building`), else after it.
    pub(super) fn known(&self, peer: &NodeId) -> Option<&KnownPeer> {
        self.known.get(peer)
    }

    /// Forget a directory circuit that ended; false if `circuit` is not one.
    pub(super) fn forget(&mut self, circuit: CircuitHandle) -> bool {
        self.built.remove(&circuit)
    }

    /// Whether a directory circuit to `peer` is being built.
    pub(super) fn building(&self, peer: &NodeId) -> bool {
        self.probes.contains_key(peer) || self.builds.values().any(|p| p.relay == *peer)
    }

    fn remember(&mut self, node: NodeId, peer: KnownPeer) {
        if self.known.len() >= MAX_KNOWN && !self.known.contains_key(&node) {
            // Keep the addresses builds in flight still need.
            let spare = self.known.keys().find(|k| !self.building(k)).copied();
            if let Some(old) = spare {
                self.known.remove(&old);
            }
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
        self.start_directory(peer, reply, false, now);
    }

    /// [`build_directory`](Self::build_directory): its first attempt, or the second
    /// (`retried`) of a build first started at `first`.
    fn start_directory(
        &mut self,
        peer: DirectoryPeer,
        reply: oneshot::Sender<Result<Circuit, Error>>,
        retried: bool,
        first: Timestamp,
    ) {
        let now = self.now();
        let relay = peer.node_id();
        let mut advertised = None;
        let started = match &peer {
            DirectoryPeer::Relay(desc) => {
                let addr = desc.addr(self.settings.transport);
                let onion_key = desc.onion_key(unix_now()).cloned();
                match (addr, onion_key) {
                    (Some(addr), Some(onion_key)) => {
                        let link_key = desc.link_key().clone();
                        self.direct.remember(relay, KnownPeer { addr, link_key });
                        advertised = Some(addr);
                        let hop = HopSpec {
                            node: relay,
                            onion_key,
                        };
                        let elsewhere = self
                            .links
                            .live
                            .get(&relay)
                            .is_some_and(|l| l.remote_addr() != addr);
                        if elsewhere {
                            let probe = Probe {
                                reply,
                                peer,
                                retried,
                                started: first,
                                hop,
                                advertised: addr,
                            };
                            return self.probe(relay, probe);
                        }
                        self.overlay.build(vec![hop], now)
                    }
                    (None, _) => Err(bad_peer("it has no address for this node's transport")),
                    (_, None) => Err(bad_peer("it has no onion key valid now")),
                }
            }
            DirectoryPeer::Pinned(p) => {
                let known = KnownPeer {
                    addr: p.addr,
                    link_key: p.link_key.clone(),
                };
                self.direct.remember(relay, known);
                self.overlay.build_directory(relay, now)
            }
        };
        match started {
            Ok(circuit) => {
                let pending = Pending {
                    reply,
                    peer,
                    retried,
                    relay,
                    advertised,
                    started: first,
                };
                self.direct.builds.insert(circuit, pending);
            }
            Err(e) => {
                let _ = reply.send(Err(e.into()));
            }
        }
    }

    /// Dial `relay` at the probe's advertised address (a link to it from elsewhere is up);
    /// the build waits.
    fn probe(&mut self, relay: NodeId, probe: Probe) {
        let advertised = probe.advertised;
        let waiting = self.direct.probes.entry(relay).or_default();
        // One dial per address waited for (a newer descriptor may name another; the dial
        // goes to the address remembered last, this one).
        let dialling = waiting.iter().any(|p| p.advertised == advertised);
        waiting.push(probe);
        if !dialling && !self.dial_addr(relay) {
            self.probe_failed(relay);
        }
    }

    /// A link to `peer` came up: builds waiting for one at its advertised address start.
    pub(super) fn probe_link_up(&mut self, peer: NodeId) {
        let Some(from) = self.links.live.get(&peer).map(|l| l.remote_addr()) else {
            return;
        };
        let Some(waiting) = self.direct.probes.remove(&peer) else {
            return;
        };
        let (ready, still): (Vec<_>, Vec<_>) =
            waiting.into_iter().partition(|p| p.advertised == from);
        if !still.is_empty() {
            // A link from elsewhere (the relay dialled again): the dial is still under way.
            self.direct.probes.insert(peer, still);
        }
        let now = self.now();
        for probe in ready {
            match self.overlay.build(vec![probe.hop], now) {
                Ok(circuit) => {
                    let pending = Pending {
                        reply: probe.reply,
                        peer: probe.peer,
                        retried: probe.retried,
                        relay: peer,
                        advertised: Some(probe.advertised),
                        started: probe.started,
                    };
                    self.direct.builds.insert(circuit, pending);
                }
                Err(e) => {
                    let _ = probe.reply.send(Err(e.into()));
                }
            }
        }
    }

    /// The dial to `peer`'s advertised address failed: builds waiting for it fail. False
    /// if none waited.
    pub(super) fn probe_failed(&mut self, peer: NodeId) -> bool {
        let Some(waiting) = self.direct.probes.remove(&peer) else {
            return false;
        };
        for probe in waiting {
            let error = bad_peer("it does not answer at the address it advertises");
            let _ = probe.reply.send(Err(error.into()));
        }
        true
    }

    /// A directory circuit was built: hand it to its requester. False if `circuit` is not
    /// one.
    pub(super) fn direct_built(&mut self, circuit: CircuitHandle) -> bool {
        let Some(pending) = self.direct.builds.remove(&circuit) else {
            return false;
        };
        let from = self.links.live.get(&pending.relay).map(|l| l.remote_addr());
        if let Some(advertised) = pending.advertised
            && from != Some(advertised)
        {
            let _ = self.overlay.close(circuit, self.now());
            let error = bad_peer("its link does not come from the address it advertises");
            let _ = pending.reply.send(Err(error.into()));
            return true;
        }
        let handle = self.own_circuit(circuit, pending.started);
        self.direct.built.insert(circuit);
        if let Err(Ok(mut unwanted)) = pending.reply.send(Ok(handle)) {
            // The requester left: close it here (dropping the handle would queue a close
            // on the driver's own command channel, which may be full).
            unwanted.closed = true;
            self.close_own(circuit);
        }
        true
    }

    /// A directory circuit failed: tell its requester, unless the link under it went down
    /// and this was the first attempt. That link may have been dropped by the relay before
    /// this node learnt of it (a relay whose link table is full drops its quietest link to
    /// make room), and a build started on it just then fails through no fault of either
    /// side: it is tried once more, over a new link. False if `circuit` is not one.
    pub(super) fn direct_failed(&mut self, circuit: CircuitHandle, reason: DestroyReason) -> bool {
        let Some(pending) = self.direct.builds.remove(&circuit) else {
            return false;
        };
        if reason == DestroyReason::LinkLost && !pending.retried {
            tracing::debug!("a directory circuit's link went down while it was built; once more");
            self.start_directory(pending.peer, pending.reply, true, pending.started);
            return true;
        }
        let error = nyx_overlay::Error::BuildFailed {
            attempts: 1 + usize::from(pending.retried),
            reason,
        };
        let _ = pending.reply.send(Err(error.into()));
        true
    }
}

fn bad_peer(reason: &str) -> nyx_overlay::Error {
    nyx_overlay::Error::BadPath {
        reason: format!("cannot reach that relay: {reason}"),
    }
}
