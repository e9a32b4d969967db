//! The relays an authority holds: the newest descriptor of each, when it was last asked to
//! be probed, and its measured reachability (Running, and uptime for Stable and Guard).

use std::collections::BTreeMap;
use std::sync::Arc;

use nyx_core::NodeId;

use super::AuthorityError;
use crate::directory::Descriptor;
use crate::directory::consensus::{Flags, RelayStatus, vote_status_with_uptime};

/// One relay as the authority knows it.
#[derive(Debug)]
struct Relay {
    descriptor: Arc<Descriptor>,
    digest: [u8; 32],
    /// When a probe was last requested, and of which descriptor.
    requested: Option<(u64, [u8; 32])>,
    /// When a probe of the current descriptor last succeeded (cleared by a failure).
    last_success: Option<u64>,
    /// Start of the current run of successful probes (cleared by a failure).
    running_since: Option<u64>,
}

/// Thresholds for the flags a relay's uptime earns.
#[derive(Debug, Clone, Copy)]
pub(super) struct Uptime {
    /// Running needs a successful probe at most this long ago (one period).
    pub(super) period: u64,
    pub(super) stable_after: u64,
    pub(super) guard_after: u64,
}

/// The relay table, bounded by `max` relays.
#[derive(Debug)]
pub(super) struct Relays {
    relays: BTreeMap<NodeId, Relay>,
    max: usize,
    /// A new descriptor of a relay probed less than this long ago waits for the next
    /// scheduled probe, so that re-uploads cannot make the authority probe at will.
    reprobe_after: u64,
}

impl Relays {
    pub(super) fn new(max: usize, reprobe_after: u64) -> Self {
        Relays {
            relays: BTreeMap::new(),
            max,
            reprobe_after,
        }
    }

    pub(super) fn len(&self) -> usize {
        self.relays.len()
    }

    /// Hold a relay's descriptor (decoded and verified at `now`) if it is new or newer than
    /// the one held. Returns the descriptor to probe now, if any.
    pub(super) fn post(
        &mut self,
        bytes: &[u8],
        now: u64,
    ) -> Result<Option<Arc<Descriptor>>, AuthorityError> {
        let descriptor = Arc::new(Descriptor::decode(bytes, now)?);
        let node_id = descriptor.node_id();
        let digest = descriptor.digest();
        if !self.relays.contains_key(&node_id) && self.relays.len() >= self.max {
            self.drop_expired(now);
            if self.relays.len() >= self.max {
                return Err(AuthorityError::TooManyRelays { max: self.max });
            }
        }
        let relay = self.relays.entry(node_id).or_insert_with(|| Relay {
            descriptor: Arc::clone(&descriptor),
            digest,
            requested: None,
            last_success: None,
            running_since: None,
        });
        if relay.digest != digest {
            if descriptor.published() <= relay.descriptor.published() {
                return Err(AuthorityError::NotNewer {
                    node_id,
                    published: descriptor.published(),
                    held: relay.descriptor.published(),
                });
            }
            relay.descriptor = Arc::clone(&descriptor);
            relay.digest = digest;
            // No result for this descriptor yet; the uptime of the relay carries over.
            relay.last_success = None;
        }
        let probe_now = match relay.requested {
            None => true,
            Some((at, requested)) => {
                requested != digest && now >= at.saturating_add(self.reprobe_after)
            }
        };
        if probe_now {
            relay.requested = Some((now, digest));
            return Ok(Some(descriptor));
        }
        Ok(None)
    }

    /// Record a probe result; ignored unless `digest` is the descriptor held for `node`.
    pub(super) fn probed(&mut self, node: NodeId, digest: [u8; 32], reachable: bool, now: u64) {
        let Some(relay) = self.relays.get_mut(&node) else {
            return;
        };
        if relay.digest != digest {
            return;
        }
        if reachable {
            relay.last_success = Some(now);
            relay.running_since.get_or_insert(now);
        } else {
            relay.last_success = None;
            relay.running_since = None;
        }
    }

    /// The descriptors to probe now: every relay whose current descriptor was not asked to
    /// be probed since `since`. Marks them asked.
    pub(super) fn due_probes(&mut self, since: u64, now: u64) -> Vec<Arc<Descriptor>> {
        let mut due = Vec::new();
        for relay in self.relays.values_mut() {
            let fresh =
                matches!(relay.requested, Some((at, d)) if at >= since && d == relay.digest);
            if !fresh {
                relay.requested = Some((now, relay.digest));
                due.push(Arc::clone(&relay.descriptor));
            }
        }
        due
    }

    /// Forget the relays whose descriptor expired.
    pub(super) fn drop_expired(&mut self, now: u64) {
        self.relays.retain(|_, r| now < r.descriptor.valid_until());
    }

    /// What this authority votes at `now` for the period starting at `valid_after`: every
    /// relay whose descriptor is valid then and that is Running (a successful probe of its
    /// current descriptor within the last period), with Stable and Guard from its uptime,
    /// sorted by node id; and the descriptors voted for, by digest.
    pub(super) fn vote(
        &self,
        valid_after: u64,
        now: u64,
        uptime: Uptime,
    ) -> (Vec<RelayStatus>, BTreeMap<[u8; 32], Arc<Descriptor>>) {
        let mut statuses = Vec::new();
        let mut voted = BTreeMap::new();
        for relay in self.relays.values() {
            let running = relay
                .last_success
                .is_some_and(|at| now < at.saturating_add(uptime.period));
            if !running || !relay.descriptor.is_valid_at(valid_after) {
                continue;
            }
            let up = relay.running_since.map_or(0, |s| now.saturating_sub(s));
            let mut flags = Flags::default();
            if up >= uptime.stable_after {
                flags = flags | Flags::STABLE;
                if up >= uptime.guard_after {
                    flags = flags | Flags::GUARD;
                }
            }
            statuses.push(vote_status_with_uptime(&relay.descriptor, flags));
            voted.insert(relay.digest, Arc::clone(&relay.descriptor));
        }
        (statuses, voted)
    }

    /// The descriptor of `node` held now, if its digest is `digest`.
    pub(super) fn get(&self, node: &NodeId, digest: &[u8; 32]) -> Option<&Arc<Descriptor>> {
        self.relays
            .get(node)
            .filter(|r| &r.digest == digest)
            .map(|r| &r.descriptor)
    }
}
