//! The ordered list of sampled entry guards.
//!
//! Like Tor's primary guards: the first reachable guard in the list is used, the ones after it
//! are fallbacks, and a guard that comes back (its retry time over) is preferred again. A
//! guard leaves the list when its lifetime ends or when it is no longer usable (gone from the
//! directory, expired, no longer offering the transport or an onion key).

use nyx_core::NodeId;

/// Guards kept sampled and ready (Tor's primary guards).
pub(super) const PRIMARY_GUARDS: usize = 3;
/// Most guards ever sampled at once, so that an unreachable network does not make the client
/// try every relay as a guard.
pub(super) const MAX_GUARDS: usize = 8;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Guard {
    id: NodeId,
    /// When it was sampled (Unix seconds).
    chosen_at: u64,
}

/// Sampled guards, in preference order.
#[derive(Debug, Clone, Default)]
pub(super) struct GuardList {
    guards: Vec<Guard>,
}

impl GuardList {
    /// Drop guards that are not `usable` any more or were chosen `lifetime_secs` or more
    /// before `now`.
    pub(super) fn prune(&mut self, now: u64, lifetime_secs: u64, usable: impl Fn(&NodeId) -> bool) {
        self.guards
            .retain(|g| usable(&g.id) && now < g.chosen_at.saturating_add(lifetime_secs));
    }

    /// Append a newly sampled guard.
    pub(super) fn push(&mut self, id: NodeId, now: u64) {
        if !self.contains(&id) {
            self.guards.push(Guard { id, chosen_at: now });
        }
    }

    pub(super) fn contains(&self, id: &NodeId) -> bool {
        self.guards.iter().any(|g| g.id == *id)
    }

    pub(super) fn len(&self) -> usize {
        self.guards.len()
    }

    /// The guards in preference order.
    pub(super) fn ids(&self) -> impl Iterator<Item = NodeId> + '_ {
        self.guards.iter().map(|g| g.id)
    }

    /// The guards with when each was sampled, in preference order.
    pub(super) fn sampled(&self) -> impl Iterator<Item = (NodeId, u64)> + '_ {
        self.guards.iter().map(|g| (g.id, g.chosen_at))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prune_drops_expired_and_unusable_guards_in_order() {
        let (a, b, c) = (
            NodeId::from_bytes([1; 32]),
            NodeId::from_bytes([2; 32]),
            NodeId::from_bytes([3; 32]),
        );
        let mut list = GuardList::default();
        list.push(a, 100);
        list.push(b, 200);
        list.push(c, 200);
        list.push(a, 300); // already there: keeps its first time
        assert_eq!(list.len(), 3);
        list.prune(199, 100, |_| true);
        assert_eq!(list.ids().collect::<Vec<_>>(), [a, b, c]);
        list.prune(200, 100, |_| true);
        assert_eq!(list.ids().collect::<Vec<_>>(), [b, c]);
        list.prune(200, 100, |id| *id != b);
        assert_eq!(list.ids().collect::<Vec<_>>(), [c]);
        assert!(list.contains(&c) && !list.contains(&a));
    }
}
