//! Votes and the consensus: how directory authorities agree on the relay list, and how a
//! client decides to trust it (docs/protocol.md, "Consensus").
//!
//! Each authority signs a [`Vote`] for a period: the relays it lists, with the digest of the
//! descriptor it holds for each, flags and a weight. [`compute`] turns the votes of one
//! period into a [`ConsensusBody`] deterministically, so every authority computes the same
//! bytes and signs them; a [`Consensus`] is that body with the signatures. A client decodes
//! an [`UnverifiedConsensus`] and only [`verify`](UnverifiedConsensus::verify) makes it a
//! [`Consensus`]: valid signatures by a majority of the pinned authorities, inside its
//! validity, not older than the one the client holds.
//!
//! What a minority of authorities cannot do: list a relay (a relay needs more than half of
//! the votes), set a flag (likewise), move a relay's weight outside the range the honest
//! votes span (the weight is the low median), or make a consensus clients accept (signatures
//! from more than half of all pinned authorities are needed).

use std::collections::BTreeMap;

use nyx_core::NodeId;

mod encoding;
mod signed;

pub use signed::{Consensus, UnverifiedConsensus, sign_body};

use super::{Descriptor, DescriptorError};

/// The version byte of votes and consensus bodies.
pub const CONSENSUS_VERSION: u8 = 1;
/// Signature context of votes.
pub const VOTE_CONTEXT: &[u8] = b"nyx-vote-v1";
/// Signature context of consensus bodies.
pub const CONSENSUS_CONTEXT: &[u8] = b"nyx-consensus-v1";
/// Most relays one vote or consensus lists.
pub const MAX_RELAYS: usize = 1 << 16;
/// Most signatures one consensus carries (and most authorities a client pins).
pub const MAX_AUTHORITIES: usize = 32;
/// How far ahead of the client's clock a consensus may start and still be accepted.
pub const MAX_CLOCK_SKEW: u64 = super::MAX_CLOCK_SKEW;
/// Longest a consensus may be valid (`valid_until - valid_after`), seconds: three periods
/// of at most a day (authorities make it valid for three periods). Clients refuse longer.
pub const MAX_CONSENSUS_LIFETIME: u64 = 3 * 86_400;

/// Bytes of one relay entry: node id, descriptor digest, flags, weight.
const ENTRY_LEN: usize = 32 + 32 + 1 + 4;
/// Bytes of a body before its relays: version, three times, relay count.
const BODY_HEADER_LEN: usize = 1 + 3 * 8 + 4;
/// Longest vote: authority id, a body of [`MAX_RELAYS`] relays, signature.
pub const MAX_VOTE_LEN: usize = 32 + BODY_HEADER_LEN + MAX_RELAYS * ENTRY_LEN + 64;
/// Longest consensus encoding: body length, a body of [`MAX_RELAYS`] relays, signature
/// count, [`MAX_AUTHORITIES`] signatures.
pub const MAX_CONSENSUS_LEN: usize =
    4 + BODY_HEADER_LEN + MAX_RELAYS * ENTRY_LEN + 1 + MAX_AUTHORITIES * (32 + 64);

/// What the authorities say about a relay, as bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Flags(u8);

impl Flags {
    /// Answered the authority's reachability test at its advertised address.
    pub const RUNNING: Flags = Flags(1);
    /// Up long enough to carry long-lived circuits.
    pub const STABLE: Flags = Flags(2);
    /// Suitable as an entry guard.
    pub const GUARD: Flags = Flags(4);
    /// Its exit policy allows some traffic out.
    pub const EXIT: Flags = Flags(8);
    const ALL: u8 = 0x0f;

    /// The flags of `bits` (unknown bits are an error when decoding).
    pub const fn from_bits(bits: u8) -> Option<Flags> {
        if bits & !Flags::ALL == 0 {
            Some(Flags(bits))
        } else {
            None
        }
    }

    /// The bits.
    pub const fn bits(self) -> u8 {
        self.0
    }

    /// Whether every flag of `other` is set.
    pub const fn contains(self, other: Flags) -> bool {
        self.0 & other.0 == other.0
    }
}

impl std::ops::BitOr for Flags {
    type Output = Flags;
    fn bitor(self, rhs: Flags) -> Flags {
        Flags(self.0 | rhs.0)
    }
}

/// One relay in a vote or a consensus.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RelayStatus {
    /// The relay.
    pub node_id: NodeId,
    /// SHA-256 of the descriptor's bytes ([`Descriptor::digest`](super::Descriptor::digest)).
    pub digest: [u8; 32],
    /// Its flags.
    pub flags: Flags,
    /// Its path-selection weight.
    pub weight: u32,
}

/// When a consensus (or the vote for it) applies, in Unix seconds: it is the newest from
/// `valid_after`, should be replaced after `fresh_until`, and is unusable from `valid_until`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Period {
    /// Start.
    pub valid_after: u64,
    /// Fetch the next one after this.
    pub fresh_until: u64,
    /// End (exclusive).
    pub valid_until: u64,
}

/// The relays of one period as one authority or the consensus sees them: sorted by node id,
/// each listed once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsensusBody {
    /// When it applies.
    pub period: Period,
    /// The relays, sorted by node id.
    pub relays: Vec<RelayStatus>,
}

/// One authority's signed view of a period.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Vote {
    /// The authority.
    pub authority: NodeId,
    /// What it lists.
    pub body: ConsensusBody,
}

/// Why a vote or consensus was refused, or no consensus could be made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConsensusError {
    /// The bytes do not decode.
    #[error("malformed: {0}")]
    Decode(#[from] DescriptorError),
    /// Times out of order (`valid_after < fresh_until <= valid_until` is required).
    #[error("period out of order: {period:?}")]
    BadPeriod {
        /// The period.
        period: Period,
    },
    /// Relays not sorted by node id, or one listed twice.
    #[error("relays not sorted or listed twice (at {node_id:?})")]
    Unsorted {
        /// The first relay out of order.
        node_id: NodeId,
    },
    /// Signed by no pinned authority, or the signature does not verify.
    #[error("vote signature invalid or its signer {signer:?} not a known authority")]
    BadVoteSignature {
        /// Who it claims to be from.
        signer: NodeId,
    },
    /// Valid for longer than [`MAX_CONSENSUS_LIFETIME`]: a client caps what it accepts, so
    /// that authorities' keys misused once cannot freeze it on one list of relays for long.
    #[error("valid from {valid_after} until {valid_until}: longer than {max} s")]
    TooLong {
        /// Its start.
        valid_after: u64,
        /// Its end.
        valid_until: u64,
        /// The cap, seconds.
        max: u64,
    },
    /// Not valid yet at the client's time.
    #[error("not valid before {valid_after} (now {now})")]
    NotYetValid {
        /// Its start.
        valid_after: u64,
        /// The client's time.
        now: u64,
    },
    /// Past its end.
    #[error("expired at {valid_until} (now {now})")]
    Expired {
        /// Its end.
        valid_until: u64,
        /// The client's time.
        now: u64,
    },
    /// Older than the consensus the client already holds (a rollback).
    #[error("starts at {valid_after}, older than the consensus held (from {held})")]
    RolledBack {
        /// Its start.
        valid_after: u64,
        /// The start of the one held.
        held: u64,
    },
    /// Too few valid signatures by distinct pinned authorities.
    #[error("{valid} valid authority signatures, {needed} needed")]
    NotEnoughSignatures {
        /// Valid signatures by distinct pinned authorities.
        valid: usize,
        /// A majority of the pinned authorities.
        needed: usize,
    },
    /// Too few votes for the period to make a consensus.
    #[error("{votes} votes for the period, {needed} needed")]
    NotEnoughVotes {
        /// Votes for the period, one per authority.
        votes: usize,
        /// A majority of the authorities.
        needed: usize,
    },
}

/// Until relays' bandwidth is measured, the most weight an authority gives a relay: the
/// bandwidth a relay claims by default (1000 KB/s), so that a larger claim buys nothing.
pub const UNMEASURED_WEIGHT_CAP: u32 = 1000;

/// What an authority votes for a relay whose descriptor it holds (and which it found
/// reachable): Running; Exit if its exit policy lets anything out; its claimed bandwidth
/// capped at [`UNMEASURED_WEIGHT_CAP`]. Stable and Guard need measured uptime: this never
/// sets them (see [`vote_status_with_uptime`]).
pub fn vote_status(descriptor: &Descriptor) -> RelayStatus {
    vote_status_with_uptime(descriptor, Flags::default())
}

/// [`vote_status`] plus the flags an authority derived from the relay's measured uptime:
/// only [`Flags::STABLE`] and [`Flags::GUARD`] of `uptime_flags` are taken.
pub fn vote_status_with_uptime(descriptor: &Descriptor, uptime_flags: Flags) -> RelayStatus {
    let mut flags = Flags::RUNNING | Flags(uptime_flags.0 & (Flags::STABLE.0 | Flags::GUARD.0));
    if !descriptor.exit_policy().is_reject_all() {
        flags = flags | Flags::EXIT;
    }
    RelayStatus {
        node_id: descriptor.node_id(),
        digest: descriptor.digest(),
        flags,
        weight: descriptor.bandwidth().min(UNMEASURED_WEIGHT_CAP),
    }
}

/// More than half of `n`.
pub fn majority(n: usize) -> usize {
    n / 2 + 1
}

/// The consensus of `votes` among `authorities` authorities, the same whatever the order of
/// the votes: the period most authorities voted for (the later one on a tie; one vote per
/// authority and period counts, the first), and every relay listed by more than half of
/// those votes, with the descriptor digest most of them list (the smallest on a tie), each
/// flag more than half of them set, and the low median of their weights.
pub fn compute(votes: &[Vote], authorities: usize) -> Result<ConsensusBody, ConsensusError> {
    let needed = majority(authorities);
    let mut by_period: BTreeMap<Period, Vec<&Vote>> = BTreeMap::new();
    for v in votes {
        let list = by_period.entry(v.body.period).or_default();
        if !list.iter().any(|w| w.authority == v.authority) {
            list.push(v);
        }
    }
    // Most votes; BTreeMap order makes the later period win a tie.
    let best =
        by_period
            .into_iter()
            .fold(None::<(Period, Vec<&Vote>)>, |best, (p, list)| match best {
                Some((_, ref b)) if b.len() > list.len() => best,
                _ => Some((p, list)),
            });
    let Some((period, counted)) = best else {
        return Err(ConsensusError::NotEnoughVotes { votes: 0, needed });
    };
    if counted.len() < needed {
        return Err(ConsensusError::NotEnoughVotes {
            votes: counted.len(),
            needed,
        });
    }
    let mut by_relay: BTreeMap<NodeId, Vec<&RelayStatus>> = BTreeMap::new();
    for v in &counted {
        for r in &v.body.relays {
            by_relay.entry(r.node_id).or_default().push(r);
        }
    }
    let listing = majority(counted.len());
    let relays = by_relay
        .into_iter()
        .filter(|(_, statuses)| statuses.len() >= listing)
        .map(|(node_id, statuses)| agree(node_id, &statuses))
        .collect();
    Ok(ConsensusBody { period, relays })
}

/// What more than half of `statuses` say about one relay.
fn agree(node_id: NodeId, statuses: &[&RelayStatus]) -> RelayStatus {
    let mut digests: BTreeMap<[u8; 32], usize> = BTreeMap::new();
    for s in statuses {
        *digests.entry(s.digest).or_default() += 1;
    }
    // The most listed; BTreeMap order makes the smallest win a tie.
    let digest = digests
        .iter()
        .fold(None::<(&[u8; 32], usize)>, |best, (d, n)| match best {
            Some((_, m)) if m >= *n => best,
            _ => Some((d, *n)),
        })
        .map(|(d, _)| *d)
        .unwrap_or_default();
    let half = statuses.len() / 2;
    let mut bits = 0u8;
    for flag in [Flags::RUNNING, Flags::STABLE, Flags::GUARD, Flags::EXIT] {
        if statuses.iter().filter(|s| s.flags.contains(flag)).count() > half {
            bits |= flag.bits();
        }
    }
    let mut weights: Vec<u32> = statuses.iter().map(|s| s.weight).collect();
    weights.sort_unstable();
    // `statuses` is never empty (a relay is agreed on only when a majority lists it).
    let weight = weights
        .get(weights.len().saturating_sub(1) / 2)
        .copied()
        .unwrap_or(0);
    RelayStatus {
        node_id,
        digest,
        flags: Flags(bits),
        weight,
    }
}

#[cfg(test)]
mod tests;
