//! The build policy against real overlays exchanging messages in memory: a generated
//! directory of relays, a client that is not in it, and relays the test can make
//! unreachable.

use std::collections::{HashSet, VecDeque};
use std::time::Duration;

use nyx_core::config::TransportKind;
use nyx_core::{NodeId, Timestamp};
use nyx_crypto::identity::IdentityKey;
use nyx_crypto::onion_keys::{OnionKeyRing, RotationPolicy};

use super::*;
use crate::circuit::{Output, OverlayConfig};
use crate::directory::testnet::{self, TestnetSpec};
use crate::path::PathConfig;

const UNIX_NOW: u64 = 1_800_000_000;

struct Sim {
    client: Overlay,
    relays: Vec<Overlay>,
    directory: Directory,
    policy: BuildPolicy,
    /// Relays that accept no link.
    dead: HashSet<NodeId>,
    outcomes: Vec<BuildOutcome>,
    now: Timestamp,
}

fn config() -> OverlayConfig {
    OverlayConfig {
        build_timeout: Duration::from_secs(2),
        timer_granularity: Duration::from_millis(50),
        ..OverlayConfig::default()
    }
}

fn sim(relays: usize, max_attempts: usize) -> Sim {
    let spec = TestnetSpec {
        nodes: relays,
        ..TestnetSpec::default()
    };
    let (nodes, directory) = testnet::generate(&spec, UNIX_NOW).unwrap();
    let relays = nodes
        .into_iter()
        .enumerate()
        .map(|(i, n)| {
            let id = n.identity.node_id();
            Overlay::new(
                id,
                n.onion_keys,
                config(),
                [i as u8 + 2; 32],
                Timestamp::ZERO,
            )
            .unwrap()
        })
        .collect();
    let identity = IdentityKey::from_seed(&[0xc1; 32]);
    let mut ring = OnionKeyRing::new(RotationPolicy::default()).unwrap();
    ring.rotate(&identity, UNIX_NOW).unwrap();
    let me = identity.node_id();
    let client = Overlay::new(me, ring, config(), [1; 32], Timestamp::ZERO).unwrap();
    let selector = PathSelector::new(me, TransportKind::Quic, PathConfig::default());
    Sim {
        client,
        relays,
        directory,
        policy: BuildPolicy::new(selector, max_attempts, [7; 32]),
        dead: HashSet::new(),
        outcomes: Vec::new(),
        now: Timestamp::ZERO,
    }
}

impl Sim {
    fn overlay(&mut self, id: NodeId) -> &mut Overlay {
        if id == self.client.node_id() {
            return &mut self.client;
        }
        self.relays.iter_mut().find(|r| r.node_id() == id).unwrap()
    }

    fn ids(&self) -> Vec<NodeId> {
        let mut ids = vec![self.client.node_id()];
        ids.extend(self.relays.iter().map(Overlay::node_id));
        ids
    }

    fn request(&mut self, req: ExitRequirement) -> BuildId {
        let (now, now_unix) = (self.now, UNIX_NOW);
        let id = self
            .policy
            .request(req, &mut self.client, &self.directory, now, now_unix);
        self.settle();
        id
    }

    /// Move messages, links and events until nothing is left to do.
    fn settle(&mut self) {
        let now = self.now;
        for _ in 0..10_000 {
            while let Some(outcome) = self.policy.poll_outcome() {
                self.outcomes.push(outcome);
            }
            let mut wire = VecDeque::new();
            for from in self.ids() {
                while let Some(out) = self.overlay(from).poll_output() {
                    wire.push_back((from, out));
                }
            }
            let mut events = Vec::new();
            while let Some(ev) = self.client.poll_event() {
                events.push(ev);
            }
            if wire.is_empty() && events.is_empty() {
                return;
            }
            for (from, out) in wire {
                match out {
                    Output::Cell { to, cell } => self.overlay(to).handle_cell(from, &cell, now),
                    Output::Control { to, msg } => {
                        self.overlay(to).handle_control(from, &msg, now);
                    }
                    Output::Connect { peer } if self.dead.contains(&peer) => {
                        self.overlay(from).connect_failed(peer, now);
                    }
                    Output::Connect { peer } => {
                        self.overlay(from).link_up(peer, now);
                        self.overlay(peer).link_up(from, now);
                    }
                    Output::Disconnect { .. } => {}
                }
            }
            for ev in events {
                self.policy
                    .handle_event(&ev, &mut self.client, &self.directory, now, UNIX_NOW);
            }
        }
        panic!("the simulation did not settle");
    }
}

#[test]
fn a_request_is_built_on_the_first_path_when_every_relay_answers() {
    let mut s = sim(5, 3);
    let id = s.request(ExitRequirement::Any);
    assert!(
        matches!(
            s.outcomes.as_slice(),
            [BuildOutcome::Built { id: got, attempts: 1, .. }] if *got == id
        ),
        "{:?}",
        s.outcomes
    );
    assert_eq!(s.policy.in_progress(), 0);
}

#[test]
fn an_unreachable_guard_is_blamed_and_the_next_path_avoids_it() {
    let mut s = sim(5, 3);
    // Sample the guards first: every path of the request starts at the primary guard
    // until it is blamed.
    let mut rng = StdRng::from_seed([1; 32]);
    let first = s
        .policy
        .selector
        .select(&s.directory, &ExitRequirement::Any, UNIX_NOW, &mut rng)
        .unwrap();
    let guard = first.hops[0];
    assert_eq!(s.policy.selector().guard(), Some(guard));
    s.dead.insert(guard);

    let id = s.request(ExitRequirement::Any);
    assert!(s.policy.selector().is_unreachable(&guard, UNIX_NOW));
    match s.outcomes.as_slice() {
        [
            BuildOutcome::Retrying {
                id: a,
                attempt: 1,
                reason: DestroyReason::ConnectFailed,
            },
            BuildOutcome::Built {
                id: b,
                attempts: 2,
                circuit,
            },
        ] if *a == id && *b == id => {
            let path = s.client.path(*circuit).unwrap();
            assert!(
                !path.contains(&guard),
                "the new path avoids the blamed guard"
            );
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn every_attempt_failing_reports_build_failed_with_the_last_reason() {
    let mut s = sim(5, 3);
    s.dead = s.relays.iter().map(Overlay::node_id).collect();
    let id = s.request(ExitRequirement::Any);
    let retries = s
        .outcomes
        .iter()
        .filter(|o| matches!(o, BuildOutcome::Retrying { id: x, .. } if *x == id))
        .count();
    assert_eq!(retries, 2, "{:?}", s.outcomes);
    assert!(
        matches!(
            s.outcomes.last(),
            Some(BuildOutcome::Failed {
                error: Error::BuildFailed {
                    attempts: 3,
                    reason: DestroyReason::ConnectFailed
                },
                ..
            })
        ),
        "{:?}",
        s.outcomes
    );
    assert_eq!(s.policy.in_progress(), 0);
}

#[test]
fn marks_that_leave_too_few_relays_are_forgotten_instead_of_failing_selection() {
    // Four relays, every one dead: after two guards are blamed only two relays are left,
    // too few for three hops. Without the fallback the third attempt would fail with a
    // path error; with it, every attempt gets a path and the request ends as BuildFailed.
    let mut s = sim(4, 6);
    s.dead = s.relays.iter().map(Overlay::node_id).collect();
    s.request(ExitRequirement::Any);
    assert!(
        matches!(
            s.outcomes.last(),
            Some(BuildOutcome::Failed {
                error: Error::BuildFailed { attempts: 6, .. },
                ..
            })
        ),
        "{:?}",
        s.outcomes
    );
}

#[test]
fn no_path_at_all_fails_at_once_with_the_selection_error() {
    let mut s = sim(2, 3);
    let id = s.request(ExitRequirement::Any);
    assert!(
        matches!(
            s.outcomes.as_slice(),
            [BuildOutcome::Failed { id: x, error: Error::Path(PathError::NotEnoughRelays { .. }) }]
                if *x == id
        ),
        "{:?}",
        s.outcomes
    );
}

#[test]
fn a_built_circuit_lost_to_a_dead_link_blames_the_relay_named() {
    let mut s = sim(5, 3);
    let relay = s.relays[0].node_id();
    let event = Event::Destroyed {
        circuit: CircuitHandle::from_id(99),
        reason: DestroyReason::LinkLost,
        hop: Some(1),
        relay: Some(relay),
    };
    let now = s.now;
    s.policy
        .handle_event(&event, &mut s.client, &s.directory, now, UNIX_NOW);
    assert!(s.policy.selector().is_unreachable(&relay, UNIX_NOW));
    // A refusal says nothing about reachability.
    let other = s.relays[1].node_id();
    let refused = Event::Destroyed {
        circuit: CircuitHandle::from_id(98),
        reason: DestroyReason::Protocol,
        hop: Some(2),
        relay: Some(other),
    };
    s.policy
        .handle_event(&refused, &mut s.client, &s.directory, now, UNIX_NOW);
    assert!(!s.policy.selector().is_unreachable(&other, UNIX_NOW));
}
