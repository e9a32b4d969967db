//! The relays an authority holds: the newest descriptor of each, when it was last asked to
//! be probed, and its measured reachability (Running, and uptime for Stable and Guard).
//!
//! What a stranger can make it hold is bounded: `max` relays, of which at most
//! `max_unprobed` without a successful probe yet (one whose first result is a failure is
//! forgotten at once), at most `per_address` at any IP address, each valid for at most
//! [`MAX_DESCRIPTOR_VALIDITY`] from its upload.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::sync::Arc;

use nyx_core::NodeId;

use super::AuthorityError;
use crate::directory::Descriptor;
use crate::directory::consensus::{Flags, RelayStatus, vote_status_with_uptime};

/// Longest a descriptor may stay valid after it is uploaded, seconds (7 days, the cap
/// clients apply too): one with a later `valid_until` is refused, so that an uploaded
/// descriptor is held 7 days at most.
pub use crate::directory::descriptor::MAX_DESCRIPTOR_VALIDITY;

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

/// The bounds of the relay table.
#[derive(Debug, Clone, Copy)]
pub(super) struct Limits {
    /// Most relays held.
    pub(super) max: usize,
    /// Most relays held without a successful probe.
    pub(super) max_unprobed: usize,
    /// Most relays held at one IP address.
    pub(super) per_address: usize,
    /// A new descriptor of a relay probed less than this long ago waits for the next
    /// scheduled probe, so that re-uploads cannot make the authority probe at will.
    pub(super) reprobe_after: u64,
}

/// The relay table.
#[derive(Debug)]
pub(super) struct Relays {
    relays: BTreeMap<NodeId, Relay>,
    /// The held relays no probe of which succeeded yet.
    unproven: BTreeSet<NodeId>,
    /// The held relays that passed a probe once and failed their last one.
    failing: BTreeSet<NodeId>,
    /// How many held relays advertise each IP address.
    per_address: BTreeMap<IpAddr, usize>,
    /// No held descriptor expires before this.
    next_expiry: u64,
    limits: Limits,
}

/// The IP addresses a descriptor advertises (IPv4-mapped IPv6 as IPv4), each once.
fn addresses(descriptor: &Descriptor) -> Vec<IpAddr> {
    let mut ips: Vec<IpAddr> = [descriptor.quic_addr(), descriptor.udp_addr()]
        .into_iter()
        .flatten()
        .map(|a| a.ip().to_canonical())
        .collect();
    ips.dedup();
    ips
}

impl Relays {
    pub(super) fn new(limits: Limits) -> Self {
        Relays {
            relays: BTreeMap::new(),
            unproven: BTreeSet::new(),
            failing: BTreeSet::new(),
            per_address: BTreeMap::new(),
            next_expiry: u64::MAX,
            limits,
        }
    }

    pub(super) fn len(&self) -> usize {
        self.relays.len()
    }

    /// Hold a relay's descriptor (decoded and verified at `now`) if it is new or newer than
    /// the one held and within the bounds. Returns the descriptor to probe now, if any.
    pub(super) fn post(
        &mut self,
        bytes: &[u8],
        now: u64,
    ) -> Result<Option<Arc<Descriptor>>, AuthorityError> {
        let descriptor = Arc::new(Descriptor::decode(bytes, now)?);
        let latest = now.saturating_add(MAX_DESCRIPTOR_VALIDITY);
        if descriptor.valid_until() > latest {
            return Err(AuthorityError::ValidityTooLong {
                valid_until: descriptor.valid_until(),
                latest,
            });
        }
        let node_id = descriptor.node_id();
        let digest = descriptor.digest();
        match self.relays.get(&node_id) {
            None => self.admit(&descriptor, now)?,
            Some(held) if held.digest == digest => {}
            Some(held) => {
                if descriptor.published() <= held.descriptor.published() {
                    return Err(AuthorityError::NotNewer {
                        node_id,
                        published: descriptor.published(),
                        held: held.descriptor.published(),
                    });
                }
                let held = Arc::clone(&held.descriptor);
                self.check_addresses(&descriptor, Some(&held))?;
                self.count_addresses(&held, false);
                self.count_addresses(&descriptor, true);
            }
        }
        self.next_expiry = self.next_expiry.min(descriptor.valid_until());
        let relay = self.relays.entry(node_id).or_insert_with(|| Relay {
            descriptor: Arc::clone(&descriptor),
            digest,
            requested: None,
            last_success: None,
            running_since: None,
        });
        if relay.digest != digest {
            // A new descriptor at the same addresses with the same link key (new onion keys,
            // a renewal) keeps the relay's reachability until its next probe: it was shown
            // at those addresses with that key, and a relay that rotates its onion keys must
            // not drop out of the next vote while its new descriptor waits for the probe
            // schedule. Any other change needs a probe of the new descriptor first. The
            // uptime of the relay carries over either way.
            let same_place = relay.descriptor.quic_addr() == descriptor.quic_addr()
                && relay.descriptor.udp_addr() == descriptor.udp_addr()
                && relay.descriptor.link_key() == descriptor.link_key();
            relay.descriptor = Arc::clone(&descriptor);
            relay.digest = digest;
            if !same_place {
                relay.last_success = None;
            }
        }
        let probe_now = match relay.requested {
            None => true,
            Some((at, requested)) => {
                requested != digest && now >= at.saturating_add(self.limits.reprobe_after)
            }
        };
        if probe_now {
            relay.requested = Some((now, digest));
            return Ok(Some(descriptor));
        }
        Ok(None)
    }

    /// Make room for a new relay, or say why there is none; counts it as held if there is.
    fn admit(&mut self, descriptor: &Descriptor, now: u64) -> Result<(), AuthorityError> {
        self.check_addresses(descriptor, None)?;
        if self.unproven.len() >= self.limits.max_unprobed {
            return Err(AuthorityError::Busy {
                waiting: self.unproven.len(),
            });
        }
        if self.relays.len() >= self.limits.max {
            self.drop_expired(now);
        }
        if self.relays.len() >= self.limits.max {
            // Relays not reachable at their last probe, or never: they would not be voted.
            let unreachable: Vec<NodeId> = self.unproven.union(&self.failing).copied().collect();
            for node in unreachable {
                self.remove(&node);
            }
        }
        if self.relays.len() >= self.limits.max {
            return Err(AuthorityError::TooManyRelays {
                max: self.limits.max,
            });
        }
        self.unproven.insert(descriptor.node_id());
        self.count_addresses(descriptor, true);
        Ok(())
    }

    /// Refuse `descriptor` if one of its addresses has `per_address` relays other than the
    /// one whose descriptor `held` it replaces.
    fn check_addresses(
        &self,
        descriptor: &Descriptor,
        held: Option<&Descriptor>,
    ) -> Result<(), AuthorityError> {
        let held = held.map(addresses).unwrap_or_default();
        for address in addresses(descriptor) {
            let mut others = self.per_address.get(&address).copied().unwrap_or(0);
            if held.contains(&address) {
                others = others.saturating_sub(1);
            }
            if others >= self.limits.per_address {
                return Err(AuthorityError::TooManyAtAddress {
                    address,
                    max: self.limits.per_address,
                });
            }
        }
        Ok(())
    }

    fn count_addresses(&mut self, descriptor: &Descriptor, add: bool) {
        for address in addresses(descriptor) {
            let count = self.per_address.entry(address).or_insert(0);
            *count = if add {
                count.saturating_add(1)
            } else {
                count.saturating_sub(1)
            };
            if *count == 0 {
                self.per_address.remove(&address);
            }
        }
    }

    /// Forget a relay.
    fn remove(&mut self, node: &NodeId) {
        if let Some(relay) = self.relays.remove(node) {
            self.unproven.remove(node);
            self.failing.remove(node);
            self.count_addresses(&relay.descriptor, false);
        }
    }

    /// Record a probe result; ignored unless `digest` is the descriptor held for `node`. A
    /// relay whose first result is a failure is forgotten.
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
            self.unproven.remove(&node);
            self.failing.remove(&node);
        } else if self.unproven.contains(&node) {
            tracing::debug!(relay = %node, "relay never reachable: forgotten");
            self.remove(&node);
        } else {
            relay.last_success = None;
            relay.running_since = None;
            self.failing.insert(node);
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
        if now < self.next_expiry {
            return;
        }
        let expired: Vec<NodeId> = self
            .relays
            .iter()
            .filter(|(_, r)| now >= r.descriptor.valid_until())
            .map(|(id, _)| *id)
            .collect();
        for node in expired {
            self.remove(&node);
        }
        self.next_expiry = self
            .relays
            .values()
            .map(|r| r.descriptor.valid_until())
            .min()
            .unwrap_or(u64::MAX);
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

#[cfg(test)]
impl Relays {
    /// Panics unless the indexes agree with the table and every bound holds.
    pub(super) fn check_invariants(&self) {
        let mut per_address = BTreeMap::new();
        for relay in self.relays.values() {
            for address in addresses(&relay.descriptor) {
                *per_address.entry(address).or_insert(0) += 1;
            }
        }
        assert_eq!(per_address, self.per_address);
        assert!(per_address.values().all(|&n| n <= self.limits.per_address));
        assert!(self.relays.len() <= self.limits.max);
        assert!(self.unproven.len() <= self.limits.max_unprobed);
        assert!(self.unproven.is_disjoint(&self.failing));
        let mut indexed = self.unproven.iter().chain(&self.failing);
        assert!(indexed.all(|id| self.relays.contains_key(id)));
        let mut expiry = self.relays.values().map(|r| r.descriptor.valid_until());
        assert!(expiry.all(|until| until >= self.next_expiry));
    }
}
