//! The circuit-building policy, sans-IO: which path to try for a request, how many paths to
//! try, which relay to blame when a circuit fails, and what to do when blame has left too
//! few relays.
//!
//! The [`Overlay`] builds one circuit on one given path; [`BuildPolicy`] turns a request
//! ("a circuit whose exit allows this target") into up to `max_attempts` such builds:
//!
//! * Each attempt selects a fresh path with the [`PathSelector`], which avoids relays marked
//!   unreachable.
//! * A relay the overlay names as the cause of a failure (a link that was lost or could not
//!   be made, a hop that timed out, a relay shutting down) is marked unreachable, for a build
//!   and for a built circuit alike. Failures that say nothing about reachability (a refused
//!   CREATE, a protocol error) blame no one.
//! * When marks leave too few relays for any path, every mark is forgotten and selection
//!   runs once more, as Tor resets its failure marks when nothing is usable: a mark is a
//!   guess from one failure.
//! * A request that cannot get a path at all fails at once with the selection error; one
//!   whose every attempt failed reports [`Error::BuildFailed`] with the last reason.
//!
//! The caller feeds it the overlay's [`Event`]s and collects [`BuildOutcome`]s; it passes in
//! the time, the wall-clock time (descriptor and onion-key validity) and the directory.

use std::collections::{HashMap, VecDeque};

use nyx_core::{NodeId, Timestamp};
use rand::SeedableRng;
use rand::rngs::StdRng;

use crate::Error;
use crate::circuit::{CircuitHandle, DestroyReason, Event, HopSpec, Overlay};
use crate::directory::Directory;
use crate::path::{ExitRequirement, PathError, PathSelector};

/// Identifies one circuit request from [`BuildPolicy::request`] to its outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BuildId(u64);

/// What became of a request (or of one attempt at it).
#[derive(Debug)]
#[non_exhaustive]
pub enum BuildOutcome {
    /// The request's circuit is built.
    Built {
        /// The request.
        id: BuildId,
        /// Its circuit.
        circuit: CircuitHandle,
        /// Paths tried, this one included.
        attempts: usize,
    },
    /// One attempt failed; another path is being tried.
    Retrying {
        /// The request.
        id: BuildId,
        /// The attempt that failed (1 for the first).
        attempt: usize,
        /// Why it failed.
        reason: DestroyReason,
    },
    /// The request failed for good: no path could be chosen, or every attempt failed.
    Failed {
        /// The request.
        id: BuildId,
        /// Why ([`Error::BuildFailed`], [`Error::Path`], [`Error::BadPath`], ...).
        error: Error,
    },
}

/// A request being served: its current attempt.
#[derive(Debug)]
struct Pending {
    id: BuildId,
    req: ExitRequirement,
    attempt: usize,
}

/// Serves circuit requests on top of an [`Overlay`] (see the module documentation).
#[derive(Debug)]
pub struct BuildPolicy {
    selector: PathSelector,
    max_attempts: usize,
    rng: StdRng,
    next_id: u64,
    pending: HashMap<CircuitHandle, Pending>,
    outcomes: VecDeque<BuildOutcome>,
}

impl BuildPolicy {
    /// A policy choosing paths with `selector`, trying up to `max_attempts` paths per request
    /// (at least 1). `seed` seeds the random path choices.
    pub fn new(selector: PathSelector, max_attempts: usize, seed: [u8; 32]) -> Self {
        BuildPolicy {
            selector,
            max_attempts: max_attempts.max(1),
            rng: StdRng::from_seed(seed),
            next_id: 0,
            pending: HashMap::new(),
            outcomes: VecDeque::new(),
        }
    }

    /// The path selector (guards, unreachable marks).
    pub fn selector(&self) -> &PathSelector {
        &self.selector
    }

    /// Requests being built now.
    pub fn in_progress(&self) -> usize {
        self.pending.len()
    }

    /// Start serving a request: its outcome comes from [`poll_outcome`](Self::poll_outcome),
    /// at once if no path can be chosen.
    pub fn request(
        &mut self,
        req: ExitRequirement,
        overlay: &mut Overlay,
        directory: &Directory,
        now: Timestamp,
        now_unix: u64,
    ) -> BuildId {
        self.next_id += 1;
        let id = BuildId(self.next_id);
        self.attempt(id, req, 1, overlay, directory, now, now_unix);
        id
    }

    /// Take in an event of the overlay: blame for failures, the next attempt or the outcome
    /// of a request. Events about circuits this policy did not start are used for blame only.
    pub fn handle_event(
        &mut self,
        event: &Event,
        overlay: &mut Overlay,
        directory: &Directory,
        now: Timestamp,
        now_unix: u64,
    ) {
        match *event {
            Event::Built { circuit } => {
                if let Some(p) = self.pending.remove(&circuit) {
                    self.outcomes.push_back(BuildOutcome::Built {
                        id: p.id,
                        circuit,
                        attempts: p.attempt,
                    });
                }
            }
            Event::Failed {
                circuit,
                reason,
                relay,
                ..
            } => {
                self.blame(relay, reason, now_unix);
                let Some(p) = self.pending.remove(&circuit) else {
                    return;
                };
                if p.attempt < self.max_attempts {
                    self.outcomes.push_back(BuildOutcome::Retrying {
                        id: p.id,
                        attempt: p.attempt,
                        reason,
                    });
                    self.attempt(
                        p.id,
                        p.req,
                        p.attempt + 1,
                        overlay,
                        directory,
                        now,
                        now_unix,
                    );
                } else {
                    self.outcomes.push_back(BuildOutcome::Failed {
                        id: p.id,
                        error: Error::BuildFailed {
                            attempts: p.attempt,
                            reason,
                        },
                    });
                }
            }
            Event::Destroyed { reason, relay, .. } => self.blame(relay, reason, now_unix),
            _ => {}
        }
    }

    /// The next outcome, oldest first.
    pub fn poll_outcome(&mut self) -> Option<BuildOutcome> {
        self.outcomes.pop_front()
    }

    /// Select a path and hand it to the overlay, or report the request failed.
    #[allow(clippy::too_many_arguments)]
    fn attempt(
        &mut self,
        id: BuildId,
        req: ExitRequirement,
        attempt: usize,
        overlay: &mut Overlay,
        directory: &Directory,
        now: Timestamp,
        now_unix: u64,
    ) {
        let started = self
            .select(&req, directory, now_unix)
            .and_then(|specs| overlay.build(specs, now));
        match started {
            Ok(circuit) => {
                self.pending.insert(circuit, Pending { id, req, attempt });
            }
            Err(error) => self.outcomes.push_back(BuildOutcome::Failed { id, error }),
        }
    }

    /// A path for `req` with each hop's onion key, forgetting every unreachable mark once if
    /// they leave too few relays.
    fn select(
        &mut self,
        req: &ExitRequirement,
        directory: &Directory,
        now_unix: u64,
    ) -> Result<Vec<HopSpec>, Error> {
        let mut selected = self
            .selector
            .select(directory, req, now_unix, &mut self.rng);
        if matches!(
            selected,
            Err(PathError::NotEnoughRelays { .. } | PathError::NoGuard)
        ) && self.selector.clear_unreachable() > 0
        {
            tracing::info!("every usable relay was marked unreachable; marks cleared");
            selected = self
                .selector
                .select(directory, req, now_unix, &mut self.rng);
        }
        let path = selected?;
        path.hops
            .iter()
            .map(|node| {
                let onion_key = directory
                    .get(node)
                    .and_then(|d| d.onion_key(now_unix).cloned())
                    .ok_or_else(|| Error::BadPath {
                        reason: "a chosen relay has no valid onion key".into(),
                    })?;
                Ok(HopSpec {
                    node: *node,
                    onion_key,
                })
            })
            .collect()
    }

    /// Mark the relay a failure is blamed on unreachable, if the failure says it may be.
    fn blame(&mut self, relay: Option<NodeId>, reason: DestroyReason, now_unix: u64) {
        if let Some(node) = relay
            && blames_reachability(reason)
        {
            self.selector.mark_unreachable(node, now_unix);
        }
    }
}

/// Whether a circuit failing for `reason` suggests that the relay it names cannot be reached.
fn blames_reachability(reason: DestroyReason) -> bool {
    matches!(
        reason,
        DestroyReason::LinkLost
            | DestroyReason::ConnectFailed
            | DestroyReason::Timeout
            | DestroyReason::Shutdown
    )
}

#[cfg(test)]
mod tests;
