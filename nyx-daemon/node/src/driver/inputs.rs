//! What the driver takes in: cells and control messages from links, link changes, and the
//! commands of the node's handles.

use nyx_core::NodeId;
use nyx_overlay::circuit::{CircuitHandle, DestroyReason};
use nyx_transport::link::{Inbound, Message, UdpLink};
use nyx_transport::udp::{UdpCommand, UdpEvent};
use tokio::sync::{mpsc, oneshot};

use super::{Driver, depth, push_task, rotation_deadline};
use crate::events::{CircuitInfo, NodeEvent, PeerInfo};
use crate::handle::Command;
use crate::links::{LinkEvent, LinkRef};
use crate::{Error, NodeStats, unix_now};
use tokio::time::Instant;

impl Driver {
    /// Rotate the onion keys when due (a new key ahead of the current one's end, the
    /// expired one erased) and report new certificates, so the descriptor can follow.
    pub(super) fn rotate_onion_keys(&mut self) {
        let identity = self.identity.clone();
        match self.overlay.onion_keys_mut().rotate(&identity, unix_now()) {
            Ok(rotation) => {
                if rotation.changed() {
                    let certs = self.overlay.onion_keys().certs().to_vec();
                    tracing::info!(keys = certs.len(), "onion keys rotated");
                    let _ = self.events.send(NodeEvent::OnionKeysRotated { certs });
                }
                self.rotate_at = Some(rotation_deadline(self.overlay.onion_keys().next_rotation()));
            }
            Err(e) => {
                tracing::warn!(error = %e, "onion key rotation failed; retrying in a minute");
                let _ = self.events.send(NodeEvent::Error {
                    message: format!("onion key rotation failed: {e}"),
                });
                self.rotate_at = Some(Instant::now() + std::time::Duration::from_secs(60));
            }
        }
    }

    pub(super) fn inbound(&mut self, inbound: Inbound) {
        let now = self.now();
        match inbound.message {
            Message::Cell(cell) => self.overlay.handle_cell(inbound.peer, &cell, now),
            Message::Control(msg) => self.overlay.handle_control(inbound.peer, &msg, now),
        }
    }

    pub(super) fn udp_event(&mut self, event: UdpEvent) {
        let now = self.now();
        match event {
            UdpEvent::Connected { peer, addr } => {
                self.links.udp_dials.remove(&addr);
                self.udp_link_up(peer, addr);
            }
            UdpEvent::Replaced { old, peer, addr } => {
                self.udp_link_down(old, addr);
                self.udp_link_up(peer, addr);
            }
            UdpEvent::Closed { peer, addr } => self.udp_link_down(peer, addr),
            UdpEvent::Cell { peer, data } => self.overlay.handle_cell(peer, &data, now),
            UdpEvent::Control { peer, data } => self.overlay.handle_control(peer, &data, now),
            UdpEvent::Failed { addr, reason } => {
                tracing::debug!(%reason, "UDP dial failed");
                if let Some(peer) = self.links.udp_dials.remove(&addr) {
                    self.dial_failed(peer);
                }
            }
        }
    }

    /// The UDP link to `peer` at `addr` is gone (if it is still the peer's live link).
    fn udp_link_down(&mut self, peer: NodeId, addr: std::net::SocketAddr) {
        if matches!(self.links.live.get(&peer), Some(LinkRef::Udp(l)) if l.addr() == addr) {
            self.links.live.remove(&peer);
            self.peer_down(peer);
            let now = self.now();
            self.overlay.link_down(peer, now);
        }
    }

    /// A UDP link to `peer` at `addr` is up: the overlay may use it.
    fn udp_link_up(&mut self, peer: NodeId, addr: std::net::SocketAddr) {
        if let Some(tx) = &self.udp {
            let link = UdpLink::new(peer, addr, tx.clone());
            self.links.live.insert(peer, LinkRef::Udp(link));
        }
        self.peer_up(peer);
        let now = self.now();
        self.overlay.link_up(peer, now);
        self.probe_link_up(peer);
    }

    /// A dial to `peer` failed. A dial to a relay's advertised address while another link
    /// to it is up concerns only the directory circuits waiting for it.
    fn dial_failed(&mut self, peer: NodeId) {
        if self.probe_failed(peer) && self.links.live.contains_key(&peer) {
            return;
        }
        let now = self.now();
        self.overlay.connect_failed(peer, now);
    }

    pub(super) fn link_event(&mut self, event: LinkEvent) {
        match event {
            LinkEvent::QuicUp(link) => self.quic_up(link),
            LinkEvent::QuicClosed(link) => self.quic_closed(&link),
            LinkEvent::DialFailed(peer) => self.dial_failed(peer),
        }
    }

    /// Execute a command; `Some` asks the loop to shut down.
    pub(super) fn command(&mut self, command: Command) -> Option<oneshot::Sender<()>> {
        let now = self.now();
        match command {
            Command::Build { req, reply } => {
                let id =
                    self.policy
                        .request(req, &mut self.overlay, &self.directory, now, unix_now());
                self.requests.insert(id, (reply, now));
            }
            Command::BuildDirectory { peer, reply } => self.build_directory(*peer, reply),
            Command::Send { circuit, payload } => {
                if self.overlay.send(circuit, &payload).is_err() {
                    self.send_failures += 1;
                }
            }
            Command::Close { circuit } => {
                self.close_own(circuit);
            }
            Command::CloseCircuit { circuit, reply } => {
                let _ = reply.send(self.close_own(circuit));
            }
            Command::Circuits(reply) => {
                let mut list: Vec<CircuitInfo> = self
                    .circuits
                    .iter()
                    .map(|(handle, c)| CircuitInfo {
                        circuit: *handle,
                        path: c.path.clone(),
                        age: now.saturating_duration_since(c.built_at),
                    })
                    .collect();
                list.sort_by_key(|c| std::cmp::Reverse(c.age));
                let _ = reply.send(list);
            }
            Command::Peers(reply) => {
                let mut list: Vec<PeerInfo> = self
                    .links
                    .live
                    .keys()
                    .map(|peer| PeerInfo {
                        peer: *peer,
                        age: self
                            .peers_since
                            .get(peer)
                            .map(|since| now.saturating_duration_since(*since))
                            .unwrap_or_default(),
                        in_directory: self.directory.contains(peer),
                    })
                    .collect();
                list.sort_by_key(|p| p.peer);
                let _ = reply.send(list);
            }
            Command::SetDirectory(directory) => {
                let relays = directory.len();
                self.directory = directory;
                tracing::info!(relays, "directory replaced");
                let _ = self.events.send(NodeEvent::DirectoryChanged { relays });
            }
            Command::SetExitPolicy(policy) => {
                if let Some(service) = &self.exit_service {
                    service.set_policy(policy.clone());
                }
                self.settings.exit_policy = policy;
            }
            Command::SetLinkKeys(keys) => {
                if let Some(udp) = self.udp.clone() {
                    tracing::info!(keys = keys.len(), "link keys replaced");
                    // In order with the other commands; only a full queue defers it to a
                    // task (the driver never waits on the transport).
                    if let Err(mpsc::error::TrySendError::Full(command)) =
                        udp.try_send(UdpCommand::SetLinkKeys(keys))
                    {
                        let task = tokio::spawn(async move {
                            let _ = udp.send(command).await;
                        });
                        push_task(&self.aux, task);
                    }
                }
            }
            Command::SetLimits { limits, reply } => {
                let _ = reply.send(self.overlay.set_limits(&limits).map_err(Error::from));
            }
            Command::Reply { exit, payload } => {
                if self.overlay.send_backward(exit, &payload, now).is_err() {
                    self.send_failures += 1;
                }
            }
            Command::Stats(reply) => {
                let stats = NodeStats {
                    overlay: self.overlay.stats(),
                    links: self.links.live.len(),
                    relay_circuits: self.overlay.relay_circuits(),
                    own_circuits: self.overlay.own_circuits(),
                    send_failures: self.send_failures,
                    owner_drops: self.owner_drops,
                    inbound_queue: depth(&self.inbound_tx),
                    command_queue: depth(&self.commands_tx),
                    udp_send_queue: self.udp.as_ref().map_or(0, depth),
                    quic_admission: self
                        .quic
                        .as_ref()
                        .map(|q| q.admission_stats())
                        .unwrap_or_default(),
                    quic_links: self
                        .quic
                        .as_ref()
                        .map(|q| q.link_stats())
                        .unwrap_or_default(),
                    quic_links_retired: self.quic_retired,
                    udp: None,
                    udp_socket: None,
                };
                // The UDP transport's counters live in its task: ask it, and answer when it
                // does (without them if its queue is full or it stopped).
                let (tx, rx) = tokio::sync::oneshot::channel();
                match self.udp.as_ref().map(|u| u.try_send(UdpCommand::Stats(tx))) {
                    Some(Ok(())) => {
                        tokio::spawn(async move {
                            let snapshot = rx.await.ok();
                            let _ = reply.send(NodeStats {
                                udp: snapshot.as_ref().map(|s| s.transport),
                                udp_socket: snapshot.map(|s| s.socket),
                                ..stats
                            });
                        });
                    }
                    _ => {
                        let _ = reply.send(stats);
                    }
                }
            }
            Command::OnionCerts(reply) => {
                let _ = reply.send(self.overlay.onion_keys().certs().to_vec());
            }
            Command::Guards(reply) => {
                let _ = reply.send(self.policy.selector().sampled_guards());
            }
            Command::CircuitIds(reply) => {
                let _ = reply.send(self.overlay.link_circuit_ids());
            }
            Command::Shutdown(done) => return Some(done),
        }
        None
    }

    /// Close one of this node's circuits; false if it has none by that handle.
    pub(super) fn close_own(&mut self, circuit: CircuitHandle) -> bool {
        let known = self.circuits.remove(&circuit).is_some();
        self.direct.forget(circuit);
        let _ = self.overlay.close(circuit, self.now());
        if known {
            let _ = self.events.send(NodeEvent::CircuitClosed {
                circuit,
                reason: DestroyReason::Requested,
            });
        }
        known
    }

    pub(super) fn peer_up(&mut self, peer: NodeId) {
        let now = self.now();
        self.peers_since.insert(peer, now);
        let _ = self.events.send(NodeEvent::PeerUp { peer });
    }

    pub(super) fn peer_down(&mut self, peer: NodeId) {
        if self.peers_since.remove(&peer).is_some() {
            let _ = self.events.send(NodeEvent::PeerDown { peer });
        }
    }
}
