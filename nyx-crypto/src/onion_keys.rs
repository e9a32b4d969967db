//! The relay's onion keys over time: a new key every rotation period, published before it is
//! needed, the old one kept for an overlap and then erased, so a key stolen later exposes
//! circuits of at most one period plus the overlap. Sans-IO: the caller passes the wall-clock
//! time (Unix seconds) and republishes its descriptor when [`OnionKeyRing::rotate`] reports a
//! change; persisting the keys is the daemon's job (`keyfile` kind 2).
//!
//! ```text
//!  key n     [n·P ................................ (n+1)·P + O)
//!  key n+1                          [(n+1)·P ............................ (n+2)·P + O)
//!                                   ^ created O before key n expires; both accepted until
//!                                     key n is erased at (n+1)·P + O
//! ```

use std::time::Duration;

use crate::Error;
use crate::hop::OnionKey;
use crate::identity::IdentityKey;
use crate::kem::HybridSecretKey;
use crate::onion_cert::OnionKeyCert;

/// How often onion keys rotate and how long consecutive keys overlap.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RotationPolicy {
    /// Time between new keys. Default 24 hours (as Tor's onion keys rotate weekly with a
    /// week of overlap, NyxNet keeps the exposure window shorter).
    pub period: Duration,
    /// How long before a key expires its successor is created and published, which is also
    /// how long both are accepted. Must be shorter than the period. Default 3 hours.
    pub overlap: Duration,
}

impl Default for RotationPolicy {
    fn default() -> Self {
        RotationPolicy {
            period: Duration::from_secs(24 * 3600),
            overlap: Duration::from_secs(3 * 3600),
        }
    }
}

/// What a call to [`OnionKeyRing::rotate`] changed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Rotation {
    /// Keys created (and certified).
    pub created: usize,
    /// Keys erased (their secrets are zeroized as they are dropped).
    pub erased: usize,
}

impl Rotation {
    /// Whether the published certificates changed.
    pub fn changed(&self) -> bool {
        self.created + self.erased > 0
    }
}

/// A relay's current (and, during an overlap, next) onion keys with their certificates.
pub struct OnionKeyRing {
    policy: RotationPolicy,
    keys: Vec<OnionKey>,
    certs: Vec<OnionKeyCert>,
}

impl OnionKeyRing {
    /// An empty ring; the first [`rotate`](Self::rotate) creates the first key.
    pub fn new(policy: RotationPolicy) -> Result<Self, Error> {
        if policy.overlap >= policy.period || policy.period.as_secs() == 0 {
            return Err(Error::BadRotationPolicy {
                period_secs: policy.period.as_secs(),
                overlap_secs: policy.overlap.as_secs(),
            });
        }
        Ok(OnionKeyRing {
            policy,
            keys: Vec::with_capacity(2),
            certs: Vec::with_capacity(2),
        })
    }

    /// Bring the ring up to date at `now` (Unix seconds): erase expired keys, make sure a key
    /// is valid now, and create the next one once within the overlap of the newest key's end.
    pub fn rotate(&mut self, identity: &IdentityKey, now: u64) -> Result<Rotation, Error> {
        let mut change = Rotation::default();
        let before = self.keys.len();
        let mut i = 0;
        while i < self.certs.len() {
            if now >= self.certs[i].valid_until() {
                self.certs.remove(i);
                drop(self.keys.remove(i)); // zeroized on drop
            } else {
                i += 1;
            }
        }
        change.erased = before - self.keys.len();
        let (period, overlap) = (self.policy.period.as_secs(), self.policy.overlap.as_secs());
        if self.certs.is_empty() {
            self.create(identity, now, now + period + overlap)?;
            change.created += 1;
        }
        if let Some(newest) = self.certs.last()
            && now >= newest.valid_until() - overlap
        {
            let start = newest.valid_until() - overlap;
            self.create(identity, start, start + period + overlap)?;
            change.created += 1;
        }
        Ok(change)
    }

    fn create(&mut self, identity: &IdentityKey, after: u64, until: u64) -> Result<(), Error> {
        let secret = HybridSecretKey::generate()?;
        let cert = OnionKeyCert::sign(identity, secret.public(), after, until)?;
        self.keys.push(OnionKey::new(secret));
        self.certs.push(cert);
        Ok(())
    }

    /// The keys to answer CREATE with ([`crate::hop::HopResponder::new`]).
    pub fn keys(&self) -> &[OnionKey] {
        &self.keys
    }

    /// The certificates to publish in the node's descriptor.
    pub fn certs(&self) -> &[OnionKeyCert] {
        &self.certs
    }

    /// When [`rotate`](Self::rotate) next has something to do (Unix seconds), if any key exists.
    pub fn next_rotation(&self) -> Option<u64> {
        let overlap = self.policy.overlap.as_secs();
        let oldest_end = self.certs.first().map(|c| c.valid_until());
        let newest_due = self.certs.last().map(|c| c.valid_until() - overlap);
        // With two keys the next event is the older one's expiry (it comes before the newer
        // one's successor is due, since the overlap is shorter than the period); with one
        // key, its successor.
        if self.certs.len() > 1 {
            oldest_end
        } else {
            newest_due
        }
    }
}

impl std::fmt::Debug for OnionKeyRing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OnionKeyRing")
            .field("policy", &self.policy)
            .field(
                "certs",
                &self
                    .certs
                    .iter()
                    .map(|c| (c.valid_after(), c.valid_until()))
                    .collect::<Vec<_>>(),
            )
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use nyx_core::NodeId;

    use super::*;
    use crate::hop::{HopInitiator, HopResponder, ReplayCache};

    const P: u64 = 24 * 3600;
    const O: u64 = 3 * 3600;
    const T0: u64 = 1_800_000_000;

    fn identity() -> IdentityKey {
        IdentityKey::from_seed(&[4; 32])
    }

    /// A CREATE for `key` answered by the ring's keys.
    fn answers(
        ring: &OnionKeyRing,
        relay: NodeId,
        key: &crate::kem::HybridPublicKey,
    ) -> Result<(), Error> {
        let (_, create) = HopInitiator::new(relay, key.clone()).start()?;
        HopResponder::new(relay, ring.keys())
            .respond(&create[..], &mut ReplayCache::new(4))
            .map(|_| ())
    }

    #[test]
    fn keys_rotate_with_an_overlap_and_are_erased_after_it() {
        let id = identity();
        let relay = id.node_id();
        let mut ring = OnionKeyRing::new(RotationPolicy::default()).unwrap();
        assert_eq!(
            ring.rotate(&id, T0).unwrap(),
            Rotation {
                created: 1,
                erased: 0
            }
        );
        let first = ring.certs()[0].clone();
        assert_eq!((first.valid_after(), first.valid_until()), (T0, T0 + P + O));
        OnionKeyCert::verify(first.to_bytes(), &id.public()).unwrap();
        assert_eq!(ring.next_rotation(), Some(T0 + P));
        // Nothing to do before then.
        assert!(!ring.rotate(&id, T0 + P - 1).unwrap().changed());

        // The successor is created O before the first expires; both are answered.
        assert_eq!(
            ring.rotate(&id, T0 + P).unwrap(),
            Rotation {
                created: 1,
                erased: 0
            }
        );
        let second = ring.certs()[1].clone();
        assert_eq!(
            (second.valid_after(), second.valid_until()),
            (T0 + P, T0 + 2 * P + O)
        );
        assert_eq!(ring.next_rotation(), Some(T0 + P + O));
        answers(&ring, relay, first.onion_key()).unwrap();
        answers(&ring, relay, second.onion_key()).unwrap();

        // At the first key's end it is erased: a client still using it is refused.
        assert_eq!(
            ring.rotate(&id, T0 + P + O).unwrap(),
            Rotation {
                created: 0,
                erased: 1
            }
        );
        assert_eq!(ring.keys().len(), 1);
        assert_eq!(
            answers(&ring, relay, first.onion_key()),
            Err(Error::UnknownOnionKey)
        );
        answers(&ring, relay, second.onion_key()).unwrap();
        assert_eq!(ring.next_rotation(), Some(T0 + 2 * P));
    }

    #[test]
    fn a_node_back_from_a_long_absence_erases_everything_old() {
        let id = identity();
        let mut ring = OnionKeyRing::new(RotationPolicy::default()).unwrap();
        ring.rotate(&id, T0).unwrap();
        let change = ring.rotate(&id, T0 + 10 * P).unwrap();
        assert_eq!(
            change,
            Rotation {
                created: 1,
                erased: 1
            }
        );
        assert_eq!(ring.certs().len(), 1);
        assert!(ring.certs()[0].is_valid_at(T0 + 10 * P));
    }

    #[test]
    fn at_most_two_keys_are_ever_held() {
        let id = identity();
        let mut ring = OnionKeyRing::new(RotationPolicy {
            period: Duration::from_secs(100),
            overlap: Duration::from_secs(10),
        })
        .unwrap();
        for t in (0..2000).step_by(7) {
            ring.rotate(&id, T0 + t).unwrap();
            assert!(ring.keys().len() <= 2, "{t}");
            assert!(ring.certs().iter().any(|c| c.is_valid_at(T0 + t)), "{t}");
        }
    }

    #[test]
    fn overlap_must_be_shorter_than_the_period() {
        let bad = RotationPolicy {
            period: Duration::from_secs(10),
            overlap: Duration::from_secs(10),
        };
        assert!(matches!(
            OnionKeyRing::new(bad),
            Err(Error::BadRotationPolicy { .. })
        ));
    }
}
