//! Path selection: which relays a circuit goes through.
//!
//! Sans-IO and deterministic for a given directory, state, time and random number generator.
//! The rules (also in `docs/protocol.md`, "Directory"):
//!
//! * A relay is *usable* when it is not the local node, its descriptor is valid at `now`, it
//!   offers the transport in use and has an onion key valid at `now`. A relay marked
//!   unreachable is avoided until its retry time.
//! * The exit is chosen first, among usable relays whose exit policy allows the target (for
//!   [`ExitRequirement::Any`], whose policy is not reject-all), then the entry guard, then the
//!   middles. Every random choice is weighted by bandwidth.
//! * The entry is the first reachable guard of an ordered list of sampled guards (Tor's
//!   primary guards, three kept sampled). A guard is kept for `guard_lifetime` after it was
//!   sampled and dropped earlier if it stops being usable. The exit is never the guard; if
//!   the guard is the only possible exit (or every exit shares its subnet or family), the
//!   next guard is the entry instead.
//! * Hops are distinct, no two hops are one declared family (each lists the other:
//!   [`same_family`]; a one-sided claim excludes nothing), and with `distinct_subnets` no two
//!   hops share an IPv4 /16 or IPv6 /32 (comparing every address of their descriptors;
//!   loopback relays, a local test network, are exempt).
//! * With one hop the path is just the exit; guards are not used.
//! * The entry (a guard, or the exit of a one-hop path) must be reachable over the address
//!   families of the local socket ([`Reach`], set with [`PathSelector::with_reach`]): a node
//!   bound to IPv4 never picks an IPv6-only entry; the later hops are reached by relays.

mod guard;
#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::net::IpAddr;
use std::time::Duration;

use nyx_core::NodeId;
use nyx_core::config::TransportKind;
use rand::{Rng, RngExt};

use crate::directory::{Descriptor, Directory, ExitTarget, canonical, same_family};
use guard::{GuardList, MAX_GUARDS, PRIMARY_GUARDS};

/// Path selection settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathConfig {
    /// How long a guard is used after it was sampled. Default 60 days (as Tor).
    pub guard_lifetime: Duration,
    /// How long a guard marked unreachable is skipped. Default 10 minutes.
    pub guard_retry: Duration,
    /// How long another relay marked unreachable is avoided. Default 5 minutes.
    pub relay_retry: Duration,
    /// No two hops in the same IPv4 /16 or IPv6 /32. Default true; testnets on 127.0.0.x
    /// turn it off.
    pub distinct_subnets: bool,
    /// Hops per circuit, 1 to 3. Default 3.
    pub hops: usize,
}

impl Default for PathConfig {
    fn default() -> Self {
        PathConfig {
            guard_lifetime: Duration::from_secs(60 * 24 * 3600),
            guard_retry: Duration::from_secs(10 * 60),
            relay_retry: Duration::from_secs(5 * 60),
            distinct_subnets: true,
            hops: 3,
        }
    }
}

impl PathConfig {
    /// Most hops a circuit may have.
    pub const MAX_HOPS: usize = 3;

    /// Check the settings (the hop count).
    pub fn validate(&self) -> Result<(), PathError> {
        if (1..=Self::MAX_HOPS).contains(&self.hops) {
            Ok(())
        } else {
            Err(PathError::InvalidHops { hops: self.hops })
        }
    }
}

/// The address families over which this node can reach its entry: those of its socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Reach {
    /// IPv4 and IPv6 (a dual-stack `[::]` socket). The default.
    #[default]
    Any,
    /// IPv4 only (a socket bound to an IPv4 address, `0.0.0.0` included).
    Ipv4Only,
    /// IPv6 only (a socket bound to a specific IPv6 address).
    Ipv6Only,
}

impl Reach {
    /// The reach of a socket bound to `local`.
    pub fn of(local: std::net::SocketAddr) -> Self {
        match local.ip() {
            IpAddr::V4(_) => Reach::Ipv4Only,
            IpAddr::V6(v6) if v6.is_unspecified() => Reach::Any,
            IpAddr::V6(v6) if v6.to_ipv4_mapped().is_some() => Reach::Ipv4Only,
            IpAddr::V6(_) => Reach::Ipv6Only,
        }
    }

    /// Whether an address of this family can be dialled.
    pub fn reaches(self, addr: std::net::SocketAddr) -> bool {
        match self {
            Reach::Any => true,
            Reach::Ipv4Only => addr.ip().to_canonical().is_ipv4(),
            Reach::Ipv6Only => addr.ip().to_canonical().is_ipv6(),
        }
    }
}

/// What the exit must allow.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExitRequirement {
    /// Any relay that exits at all (policy not reject-all).
    Any,
    /// A relay whose policy allows (or, for a host name, might allow) this target.
    Target(ExitTarget),
}

impl ExitRequirement {
    fn allowed_by(&self, d: &Descriptor) -> bool {
        match self {
            ExitRequirement::Any => !d.exit_policy().is_reject_all(),
            ExitRequirement::Target(t) => d.exit_policy().allows(t),
        }
    }
}

/// A selected path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Path {
    /// The relays, entry first, exit last.
    pub hops: Vec<NodeId>,
}

impl Path {
    /// The first hop (`None` only for an empty path, which selection never returns).
    pub fn entry(&self) -> Option<NodeId> {
        self.hops.first().copied()
    }

    /// The last hop (`None` only for an empty path, which selection never returns).
    pub fn exit(&self) -> Option<NodeId> {
        self.hops.last().copied()
    }
}

/// Why no path could be selected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PathError {
    /// No usable, reachable relay's exit policy allows the target.
    #[error("no usable exit allows {target}")]
    NoExit {
        /// The target (`any` for [`ExitRequirement::Any`]).
        target: String,
    },
    /// Fewer usable, reachable relays than a path needs (counting the subnet and family
    /// rules).
    #[error("a {needed}-hop path needs more relays than the {usable} usable ones allow")]
    NotEnoughRelays {
        /// Hops wanted.
        needed: usize,
        /// Usable, reachable relays.
        usable: usize,
    },
    /// Every guard is marked unreachable and no new one may be sampled.
    #[error("no reachable entry guard")]
    NoGuard,
    /// [`PathConfig::hops`] is outside 1 to 3.
    #[error("{hops} hops configured, 1 to 3 are allowed")]
    InvalidHops {
        /// The configured count.
        hops: usize,
    },
}

/// An entry guard and when it was sampled (Unix seconds).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SampledGuard {
    /// The relay.
    pub node: NodeId,
    /// When it became a guard.
    pub sampled_at: u64,
}

/// Chooses paths and keeps the guard state between circuits.
#[derive(Debug, Clone)]
pub struct PathSelector {
    local: NodeId,
    transport: TransportKind,
    config: PathConfig,
    /// Which entries the local socket can reach.
    reach: Reach,
    guards: GuardList,
    /// Relay → Unix second until which it is avoided.
    unreachable: HashMap<NodeId, u64>,
    /// The latest time passed in, for [`guard`](Self::guard).
    last_now: u64,
}

impl PathSelector {
    /// A selector for the node `local` (never chosen) linking over `transport`.
    pub fn new(local: NodeId, transport: TransportKind, config: PathConfig) -> Self {
        PathSelector {
            local,
            transport,
            config,
            reach: Reach::Any,
            guards: GuardList::default(),
            unreachable: HashMap::new(),
            last_now: 0,
        }
    }

    /// Only entries reachable over `reach` (the node's socket's families). Default
    /// [`Reach::Any`].
    pub fn with_reach(mut self, reach: Reach) -> Self {
        self.reach = reach;
        self
    }

    /// The settings.
    pub fn config(&self) -> &PathConfig {
        &self.config
    }

    /// Select a path through `dir` at `now_unix` for `req` (see the module documentation).
    pub fn select<R: Rng + ?Sized>(
        &mut self,
        dir: &Directory,
        req: &ExitRequirement,
        now_unix: u64,
        rng: &mut R,
    ) -> Result<Path, PathError> {
        self.config.validate()?;
        let now = now_unix;
        self.last_now = self.last_now.max(now);
        self.unreachable.retain(|_, until| *until > now);
        let usable: Vec<&Descriptor> = dir
            .iter()
            .filter(|d| {
                d.node_id() != self.local
                    && d.is_valid_at(now)
                    && d.offers(self.transport)
                    && d.onion_key(now).is_some()
            })
            .collect();
        let reachable: Vec<&Descriptor> = usable
            .iter()
            .copied()
            .filter(|d| !self.unreachable.contains_key(&d.node_id()))
            .collect();
        let exits: Vec<&Descriptor> = reachable
            .iter()
            .copied()
            .filter(|d| req.allowed_by(d))
            .collect();
        if exits.is_empty() {
            let target = match req {
                ExitRequirement::Any => "any".to_owned(),
                ExitRequirement::Target(t) => t.to_string(),
            };
            return Err(PathError::NoExit { target });
        }
        let hops = self.config.hops;
        let not_enough = PathError::NotEnoughRelays {
            needed: hops,
            usable: reachable.len(),
        };
        if hops == 1 {
            let entries: Vec<&Descriptor> = exits
                .iter()
                .copied()
                .filter(|d| self.can_enter(d))
                .collect();
            let exit = weighted(dir, &entries, rng).ok_or(not_enough)?;
            return Ok(Path {
                hops: vec![exit.node_id()],
            });
        }

        let lifetime = self.config.guard_lifetime.as_secs();
        let enterable: Vec<NodeId> = usable
            .iter()
            .filter(|d| self.can_enter(d))
            .map(|d| d.node_id())
            .collect();
        self.guards
            .prune(now, lifetime, |id| enterable.contains(id));
        while self.guards.len() < PRIMARY_GUARDS && self.sample_guard(dir, &reachable, now, rng) {}
        let (entry, exit) = loop {
            match self.entry_and_exit(dir, &exits, rng) {
                Some(pair) => break pair,
                None if self.guards.len() < MAX_GUARDS
                    && self.sample_guard(dir, &reachable, now, rng) => {}
                None if self.guards.ids().any(|g| self.is_reachable(&g)) => return Err(not_enough),
                None => return Err(PathError::NoGuard),
            }
        };

        let mut path = vec![entry, exit];
        for _ in 2..hops {
            let candidates: Vec<&Descriptor> = reachable
                .iter()
                .copied()
                .filter(|d| path.iter().all(|p| self.compatible(d, p)))
                .collect();
            let middle = weighted(dir, &candidates, rng).ok_or_else(|| not_enough.clone())?;
            path.insert(path.len() - 1, middle);
        }
        Ok(Path {
            hops: path.iter().map(|d| d.node_id()).collect(),
        })
    }

    /// The first reachable guard with a compatible exit, and that exit.
    fn entry_and_exit<'d, R: Rng + ?Sized>(
        &self,
        dir: &'d Directory,
        exits: &[&'d Descriptor],
        rng: &mut R,
    ) -> Option<(&'d Descriptor, &'d Descriptor)> {
        for id in self.guards.ids().filter(|g| self.is_reachable(g)) {
            let Some(guard) = dir.get(&id) else { continue };
            let candidates: Vec<&Descriptor> = exits
                .iter()
                .copied()
                .filter(|e| self.compatible(e, guard))
                .collect();
            if let Some(exit) = weighted(dir, &candidates, rng) {
                return Some((guard, exit));
            }
        }
        None
    }

    /// Sample one more guard from the reachable relays not already guards that the directory
    /// lets be guards ([`Directory::may_guard`]); false if none.
    fn sample_guard<R: Rng + ?Sized>(
        &mut self,
        dir: &Directory,
        reachable: &[&Descriptor],
        now: u64,
        rng: &mut R,
    ) -> bool {
        let candidates: Vec<&Descriptor> = reachable
            .iter()
            .copied()
            .filter(|d| {
                !self.guards.contains(&d.node_id())
                    && dir.may_guard(&d.node_id())
                    && self.can_enter(d)
            })
            .collect();
        match weighted(dir, &candidates, rng) {
            Some(d) => {
                self.guards.push(d.node_id(), now);
                true
            }
            None => false,
        }
    }

    /// Whether the local socket can dial `d` (the entry's address family).
    fn can_enter(&self, d: &Descriptor) -> bool {
        d.addr(self.transport)
            .is_some_and(|a| self.reach.reaches(a))
    }

    fn is_reachable(&self, id: &NodeId) -> bool {
        !self.unreachable.contains_key(id)
    }

    /// Whether `a` and `b` may be in one path: distinct, not one family, and in distinct
    /// subnets if required.
    fn compatible(&self, a: &Descriptor, b: &Descriptor) -> bool {
        a.node_id() != b.node_id()
            && !same_family(a, b)
            && !(self.config.distinct_subnets && same_subnet(a, b))
    }

    /// Avoid `node` from `now_unix`: for `guard_retry` if it is a guard, else `relay_retry`.
    pub fn mark_unreachable(&mut self, node: NodeId, now_unix: u64) {
        let retry = if self.guards.contains(&node) {
            self.config.guard_retry
        } else {
            self.config.relay_retry
        };
        self.last_now = self.last_now.max(now_unix);
        self.unreachable
            .insert(node, now_unix.saturating_add(retry.as_secs()));
    }

    /// Whether `node` is marked unreachable at `now_unix`.
    pub fn is_unreachable(&self, node: &NodeId, now_unix: u64) -> bool {
        self.unreachable
            .get(node)
            .is_some_and(|until| *until > now_unix)
    }

    /// Forget every unreachable mark (guards and relays). The node does this when marks
    /// leave too few relays for any path, as Tor resets its failure marks when none is
    /// usable: a mark is a guess from one failure, and guessing wrong about all of them
    /// should not stop the node for `relay_retry`.
    pub fn clear_unreachable(&mut self) -> usize {
        let n = self.unreachable.len();
        self.unreachable.clear();
        n
    }

    /// The current primary guard: the first sampled guard not marked unreachable at the latest
    /// time passed to [`select`](Self::select) or [`mark_unreachable`](Self::mark_unreachable).
    pub fn guard(&self) -> Option<NodeId> {
        self.guards.ids().find(|g| {
            self.unreachable
                .get(g)
                .is_none_or(|until| *until <= self.last_now)
        })
    }

    /// Every sampled guard, in preference order.
    pub fn guards(&self) -> Vec<NodeId> {
        self.guards.ids().collect()
    }

    /// The sampled guards with when each was sampled, in preference order: what a node
    /// saves so that it keeps its guards across restarts.
    pub fn sampled_guards(&self) -> Vec<SampledGuard> {
        self.guards
            .sampled()
            .map(|(node, sampled_at)| SampledGuard { node, sampled_at })
            .collect()
    }

    /// Take up guards saved by [`sampled_guards`](Self::sampled_guards), in their order,
    /// after any already sampled, at most 8 in all. The usual
    /// rules apply from the next selection: a guard past its lifetime or no longer usable is
    /// dropped then.
    pub fn restore_guards(&mut self, saved: &[SampledGuard]) {
        for g in saved {
            if self.guards.len() >= MAX_GUARDS {
                break;
            }
            if g.node != self.local {
                self.guards.push(g.node, g.sampled_at);
            }
        }
    }
}

/// A random choice weighted by [`Directory::weight`] (the consensus weight, or the bandwidth
/// a descriptor claims when there is no consensus).
fn weighted<'d, R: Rng + ?Sized>(
    dir: &Directory,
    candidates: &[&'d Descriptor],
    rng: &mut R,
) -> Option<&'d Descriptor> {
    let total: u64 = candidates.iter().map(|d| u64::from(dir.weight(d))).sum();
    if total == 0 {
        return None;
    }
    let mut point = rng.random_range(0..total);
    for d in candidates {
        let w = u64::from(dir.weight(d));
        if point < w {
            return Some(d);
        }
        point -= w;
    }
    None
}

/// The IPv4 /16 or IPv6 /32 an address is in.
fn subnet(ip: IpAddr) -> (bool, u32) {
    match canonical(ip) {
        IpAddr::V4(v4) => (true, u32::from(v4) >> 16),
        IpAddr::V6(v6) => (false, (u128::from(v6) >> 96) as u32),
    }
}

/// Whether any address of `a` shares a subnet with any address of `b`.
fn same_subnet(a: &Descriptor, b: &Descriptor) -> bool {
    let addrs = |d: &Descriptor| [d.quic_addr(), d.udp_addr()].into_iter().flatten();
    // Loopback relays are a local test network by construction: the rule cannot mean
    // anything there (Tor turns it off for test networks too).
    let apart = |x: std::net::SocketAddr, y: std::net::SocketAddr| {
        canonical(x.ip()).is_loopback() && canonical(y.ip()).is_loopback()
    };
    addrs(a).any(|x| addrs(b).any(|y| !apart(x, y) && subnet(x.ip()) == subnet(y.ip())))
}
