//! What the driver carries out: the overlay's outputs (cells, control messages, dials,
//! disconnects), its events (payloads for circuit owners and exits, circuits ending) and the
//! build policy's outcomes (answers to circuit requests).

use bytes::Bytes;
use nyx_core::{NodeId, Timestamp};
use nyx_overlay::BuildOutcome;
use nyx_overlay::circuit::{CircuitHandle, Event, ExitHandle, Output};
use nyx_overlay::directory::ExitPolicy;
use nyx_transport::udp::UdpCommand;
use tokio::sync::mpsc;

use super::{Driver, OwnCircuit, push_task};
use crate::events::NodeEvent;
use crate::links::spawn_quic_dial;
use crate::{Circuit, CircuitMessage, ExitRequest, unix_now};

impl Driver {
    pub(super) fn output(&mut self, output: Output) {
        match output {
            Output::Cell { to, cell } => {
                self.cells_since_yield += 1;
                if !self.links.live.get(&to).is_some_and(|l| l.send_cell(cell)) {
                    self.send_failures += 1;
                }
            }
            Output::Control { to, msg } => {
                if !self
                    .links
                    .live
                    .get(&to)
                    .is_some_and(|l| l.send_control(msg))
                {
                    self.send_failures += 1;
                }
            }
            Output::Connect { peer } => self.dial(peer),
            Output::Disconnect { peer } => {
                if let Some(link) = self.links.live.remove(&peer) {
                    link.close();
                    self.peer_down(peer);
                }
                // A dead peer's spare links are dead too.
                for spare in self.links.quic_spare.remove(&peer).unwrap_or_default() {
                    spare.close("overlay: link dead");
                }
            }
        }
    }

    /// Dial `peer` for the overlay; a dial that cannot start fails the circuits waiting.
    pub(super) fn dial(&mut self, peer: NodeId) {
        if !self.dial_addr(peer) {
            let now = self.now();
            self.overlay.connect_failed(peer, now);
        }
    }

    /// Start a dial to `peer` at the address its owner named (while a directory circuit to
    /// it waits) or the directory lists; false if it could not start.
    pub(super) fn dial_addr(&mut self, peer: NodeId) -> bool {
        let transport = self.settings.transport;
        let named = || {
            self.direct
                .known(&peer)
                .map(|k| (k.addr, k.link_key.clone()))
        };
        let listed = || {
            self.directory.get(&peer).and_then(|desc| {
                desc.addr(transport)
                    .map(|addr| (addr, desc.link_key().clone()))
            })
        };
        // A directory circuit being built goes to the address its owner named.
        let known = if self.direct.building(&peer) {
            named().or_else(listed)
        } else {
            listed().or_else(named)
        };
        let Some((addr, link_key)) = known else {
            tracing::debug!("asked to reach a relay with no known address");
            return false;
        };
        if let Some(endpoint) = &self.quic {
            let task = spawn_quic_dial(endpoint.clone(), peer, addr, self.link_events_tx.clone());
            push_task(&self.aux, task);
        } else if let Some(udp) = &self.udp {
            let key = Box::new(link_key);
            self.links.udp_dials.insert(addr, peer);
            if udp
                .try_send(UdpCommand::Connect { peer, key, addr })
                .is_err()
            {
                self.links.udp_dials.remove(&addr);
                return false;
            }
        }
        true
    }

    pub(super) fn event(&mut self, event: Event) {
        // The policy's outcome for an event is acted on before the next event, so a circuit
        // built and destroyed within one batch is registered before its end is seen.
        let for_policy = matches!(
            event,
            Event::Built { .. } | Event::Failed { .. } | Event::Destroyed { .. }
        );
        let direct = match &event {
            Event::Built { circuit } => self.direct_built(*circuit),
            Event::Failed {
                circuit, reason, ..
            } => self.direct_failed(*circuit, *reason),
            _ => false,
        };
        if direct {
            return;
        }
        // A directory circuit that ends blames nobody either.
        let directory_circuit = matches!(
            &event,
            Event::Destroyed { circuit, .. } if self.direct.forget(*circuit)
        );
        if for_policy && !self.stopping && !directory_circuit {
            let now = self.now();
            self.policy
                .handle_event(&event, &mut self.overlay, &self.directory, now, unix_now());
            while let Some(outcome) = self.policy.poll_outcome() {
                self.build_outcome(outcome);
            }
        }
        match event {
            Event::Destroyed {
                circuit,
                reason,
                hop,
                ..
            } => {
                if let Some(own) = self.circuits.remove(&circuit) {
                    let _ = own.tx.try_send(CircuitMessage::Destroyed { reason, hop });
                    let _ = self
                        .events
                        .send(NodeEvent::CircuitClosed { circuit, reason });
                }
            }
            Event::Expiring { circuit } => {
                if let Some(own) = self.circuits.get(&circuit) {
                    let _ = own.tx.try_send(CircuitMessage::Expiring);
                }
            }
            Event::Data { circuit, payload } => self.deliver_to_owner(circuit, payload),
            Event::ExitData { exit, payload } => self.deliver_to_exit(exit, payload),
            Event::ExitClosed { exit, reason } => {
                if let Some(tx) = self.exit_circuits.remove(&exit) {
                    let _ = tx.try_send(CircuitMessage::Destroyed { reason, hop: None });
                }
            }
            // The build policy took these in above.
            Event::Built { .. } | Event::Failed { .. } => {}
        }
    }

    /// Answer a circuit request (or report an attempt that failed).
    pub(super) fn build_outcome(&mut self, outcome: BuildOutcome) {
        match outcome {
            BuildOutcome::Built { id, circuit, .. } => {
                let Some((reply, requested)) = self.requests.remove(&id) else {
                    return;
                };
                let handle = self.own_circuit(circuit, requested);
                if let Err(Ok(unwanted)) = reply.send(Ok(handle)) {
                    drop(unwanted); // the requester left: closing it tears it down
                }
            }
            BuildOutcome::Retrying {
                attempt, reason, ..
            } => {
                let _ = self
                    .events
                    .send(NodeEvent::CircuitFailed { attempt, reason });
            }
            BuildOutcome::Failed { id, error } => {
                if let nyx_overlay::Error::BuildFailed { attempts, reason } = &error {
                    let _ = self.events.send(NodeEvent::CircuitFailed {
                        attempt: *attempts,
                        reason: *reason,
                    });
                }
                if let Some((reply, _)) = self.requests.remove(&id) {
                    let _ = reply.send(Err(error.into()));
                }
            }
            _ => {}
        }
    }

    /// Start keeping a circuit just built for a request made at `requested`; the handle
    /// goes to the requester.
    pub(super) fn own_circuit(&mut self, circuit: CircuitHandle, requested: Timestamp) -> Circuit {
        let (tx, rx) = mpsc::channel(self.settings.circuit_queue);
        let path = self.overlay.path(circuit).unwrap_or_default();
        let now = self.now();
        self.circuits.insert(
            circuit,
            OwnCircuit {
                tx,
                built_at: now,
                path: path.clone(),
            },
        );
        let _ = self.events.send(NodeEvent::CircuitBuilt {
            circuit,
            path: path.clone(),
            build_time: now.saturating_duration_since(requested),
        });
        let exit_policy = path
            .last()
            .and_then(|exit| self.directory.get(exit))
            .map(|d| d.exit_policy().clone())
            .unwrap_or_else(ExitPolicy::reject_all);
        Circuit {
            handle: circuit,
            path,
            exit_policy,
            rtt: self.overlay.circuit_rtt(circuit),
            commands: self.commands_tx.clone(),
            messages: rx,
            closed: false,
        }
    }

    /// A payload for a circuit this node exits: to its stream endpoint (started on the
    /// first payload), or raw to whoever took the exit requests.
    pub(super) fn deliver_to_exit(&mut self, exit: ExitHandle, payload: Bytes) {
        let Some(service) = &self.exit_service else {
            if self
                .exits_tx
                .try_send(ExitRequest { exit, payload })
                .is_err()
            {
                self.owner_drops += 1;
            }
            return;
        };
        if !self.exit_circuits.contains_key(&exit) {
            let started =
                service.spawn_circuit(exit, self.commands_tx.clone(), self.settings.circuit_queue);
            match started {
                Some((tx, task)) => {
                    push_task(&self.aux, task);
                    self.exit_circuits.insert(exit, tx);
                }
                None => {
                    self.owner_drops += 1;
                    return;
                }
            }
        }
        match self.exit_circuits.get(&exit) {
            Some(tx) if tx.try_send(CircuitMessage::Data(payload)).is_ok() => {}
            _ => self.owner_drops += 1,
        }
    }

    pub(super) fn deliver_to_owner(&mut self, circuit: CircuitHandle, payload: Bytes) {
        match self.circuits.get(&circuit) {
            Some(own) if own.tx.try_send(CircuitMessage::Data(payload)).is_ok() => {}
            _ => self.owner_drops += 1,
        }
    }
}
