//! A directory authority, sans-IO (docs/protocol.md, "Directory authorities"; after Tor's
//! dir-spec v3 voting and Katzenpost's voting PKI).
//!
//! An [`Authority`] holds the descriptors relays upload, asks its driver to test each relay's
//! reachability ([`AuthorityAction::Probe`]: a one-hop circuit to the relay at its advertised
//! address with its advertised keys, reported back with [`Authority::probed`]), and every
//! period votes, exchanges votes and signatures with the other authorities, computes the
//! consensus and publishes it once signatures by a majority of the configured authorities
//! cover it. For the period starting at `T` (a multiple of the configured period `p`, Unix
//! seconds), its round runs:
//!
//! ```text
//! T - p/2     probe every held relay not asked to be probed since T - p
//! T - p/4     vote: sign this authority's vote, send it to the other authorities
//! T - 3p/16   fetch the votes of the authorities not heard from
//! T - p/8     (and at least 1 s after the fetch ran) compute the consensus from the votes
//!             held, sign it, send the signature; publish once signatures by a majority
//!             are held
//! T           the consensus is served from here; fresh until T + p, valid until
//!             T + validity_periods·p
//! ```
//!
//! Driving it: pass every directory-stream request to [`respond`](Authority::respond); after
//! any call, take actions with [`poll_action`](Authority::poll_action) until it returns
//! `None`, and call it again at [`next_deadline`](Authority::next_deadline). For each action,
//! [`AuthorityAction::request`] says which authority to send which request; the answer to a
//! [`AuthorityAction::FetchVote`] goes to [`handle_vote`](Authority::handle_vote).
//!
//! With `p` ≥ [`MIN_PERIOD`] every step is at least a second after the one before. An
//! authority first votes for the first period whose vote time is at least `p/2` after its
//! start, so that every relay (they upload every `p/2`) could upload and be probed first.
//!
//! Everything a stranger can send is bounded: relays by `max_descriptors`, of which at most
//! `max_unprobed` without a successful probe (one failing a probe before passing one is
//! forgotten) and `max_relays_per_address` per IP address, each descriptor valid for at
//! most [`MAX_DESCRIPTOR_VALIDITY`] from its upload; votes to one per authority and period;
//! signatures to one per authority and period once checked, and up to
//! [`MAX_EARLY_SIGNATURES`] per authority before they can be; and only the round of the
//! upcoming period and the one just started are kept.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use nyx_core::NodeId;
use nyx_crypto::identity::{IdentityKey, SIGNATURE_LEN};

mod error;
mod relays;
mod round;
mod schedule;
mod steps;

pub use error::AuthorityError;
pub use relays::MAX_DESCRIPTOR_VALIDITY;
pub use round::MAX_EARLY_SIGNATURES;
pub use schedule::{AuthorityConfig, MIN_PERIOD};

use relays::{Limits, Relays};
use round::{Outcome, Published, Round};
use schedule::Schedule;

use super::Descriptor;
use super::consensus::Vote;
use super::request::{DirRequest, DirResponse, MAX_RESPONSE_LEN};

/// What the driver of an [`Authority`] should do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AuthorityAction {
    /// Test the relay's reachability: build a one-hop circuit to it at its advertised
    /// address with its advertised keys, and report with [`Authority::probed`].
    Probe {
        /// The descriptor to test.
        descriptor: Arc<Descriptor>,
    },
    /// Send [`DirRequest::PostVote`] with this authority's vote to another authority.
    SendVote {
        /// The authority.
        to: NodeId,
        /// The signed vote.
        vote: Vec<u8>,
    },
    /// Ask another authority for its vote ([`DirRequest::GetVote`]) and pass a
    /// [`DirResponse::Vote`] answer to [`Authority::handle_vote`].
    FetchVote {
        /// The authority.
        from: NodeId,
        /// The period's start.
        valid_after: u64,
    },
    /// Send [`DirRequest::PostSignature`] with this authority's signature to another one.
    SendSignature {
        /// The authority.
        to: NodeId,
        /// The period's start.
        valid_after: u64,
        /// SHA-256 of the signed body.
        body_digest: [u8; 32],
        /// This authority.
        signer: NodeId,
        /// The signature over the body.
        signature: [u8; SIGNATURE_LEN],
    },
    /// A consensus was published: [`Authority::consensus`] serves it from its start.
    Published {
        /// Its start.
        valid_after: u64,
    },
}

impl AuthorityAction {
    /// The authority to send a request to and the request, for the actions that are one.
    pub fn request(&self) -> Option<(NodeId, DirRequest)> {
        match self {
            AuthorityAction::SendVote { to, vote } => {
                Some((*to, DirRequest::PostVote { vote: vote.clone() }))
            }
            AuthorityAction::FetchVote { from, valid_after } => Some((
                *from,
                DirRequest::GetVote {
                    valid_after: *valid_after,
                },
            )),
            AuthorityAction::SendSignature {
                to,
                valid_after,
                body_digest,
                signer,
                signature,
            } => Some((
                *to,
                DirRequest::PostSignature {
                    valid_after: *valid_after,
                    body_digest: *body_digest,
                    signer: *signer,
                    signature: *signature,
                },
            )),
            AuthorityAction::Probe { .. } | AuthorityAction::Published { .. } => None,
        }
    }
}

/// A directory authority: see the [module documentation](self).
#[derive(Debug)]
pub struct Authority {
    identity: Arc<IdentityKey>,
    me: NodeId,
    config: AuthorityConfig,
    schedule: Schedule,
    /// The first period this authority votes for.
    first_round: u64,
    relays: Relays,
    /// The rounds of the upcoming period and the one just started, by period start.
    rounds: BTreeMap<u64, Round>,
    /// Published consensuses, oldest first: the one in force and the next.
    published: Vec<Published>,
    actions: VecDeque<AuthorityAction>,
}

impl Authority {
    /// An authority signing with `identity`, started at `now_unix`: it first votes for the
    /// first period whose vote time is at least half a period after `now_unix`.
    pub fn new(
        identity: Arc<IdentityKey>,
        config: AuthorityConfig,
        now_unix: u64,
    ) -> Result<Self, AuthorityError> {
        let me = identity.node_id();
        config.check(me)?;
        let schedule = config.schedule();
        Ok(Authority {
            identity,
            me,
            first_round: schedule.first_round(now_unix),
            relays: Relays::new(Limits {
                max: config.max_descriptors,
                max_unprobed: config.max_unprobed,
                per_address: config.max_relays_per_address,
                reprobe_after: schedule.period / 8,
            }),
            schedule,
            config,
            rounds: BTreeMap::new(),
            published: Vec::new(),
            actions: VecDeque::new(),
        })
    }

    /// This authority's node id.
    pub fn node_id(&self) -> NodeId {
        self.me
    }

    /// Its settings.
    pub fn config(&self) -> &AuthorityConfig {
        &self.config
    }

    /// How many relays it holds a descriptor of.
    pub fn relay_count(&self) -> usize {
        self.relays.len()
    }

    /// Answer one request of a directory stream.
    pub fn respond(&mut self, request: DirRequest, now_unix: u64) -> DirResponse {
        self.discard(now_unix);
        let done = match request {
            DirRequest::GetConsensus { newer_than } => {
                return self.serve_consensus(newer_than, now_unix);
            }
            DirRequest::GetVote { valid_after } => {
                return match self
                    .rounds
                    .get(&valid_after)
                    .and_then(|r| r.own_vote.clone())
                {
                    Some(vote) => DirResponse::Vote { vote },
                    None => DirResponse::NotFound,
                };
            }
            DirRequest::PostDescriptor { descriptor } => {
                self.post_descriptor(&descriptor, now_unix)
            }
            DirRequest::PostVote { vote } => self.handle_vote(&vote, now_unix),
            DirRequest::PostSignature {
                valid_after,
                body_digest,
                signer,
                signature,
            } => self.handle_signature(valid_after, body_digest, signer, &signature, now_unix),
        };
        match done {
            Ok(()) => DirResponse::Ok,
            Err(e) => {
                tracing::debug!(error = %e, "directory request refused");
                DirResponse::refused(e)
            }
        }
    }

    /// Hold a relay's descriptor (what [`DirRequest::PostDescriptor`] does): refused when
    /// it does not decode or verify at `now_unix`, is valid until more than
    /// [`MAX_DESCRIPTOR_VALIDITY`] after `now_unix`, is not newer than the one held, or would
    /// put more than `max_relays_per_address` relays at one of its IP addresses; and, for a
    /// new relay, when `max_unprobed` relays wait for their first successful probe, or
    /// `max_descriptors` are held after dropping the expired ones and those not reachable
    /// at their last probe or never. A new relay or a new descriptor is probed at once
    /// (unless the relay was probed less than an eighth of a period ago: then at the next
    /// scheduled probe).
    pub fn post_descriptor(&mut self, bytes: &[u8], now_unix: u64) -> Result<(), AuthorityError> {
        if let Some(descriptor) = self.relays.post(bytes, now_unix)? {
            self.actions
                .push_back(AuthorityAction::Probe { descriptor });
        }
        Ok(())
    }

    /// The result of a reachability test of the descriptor `digest` of relay `node`; it
    /// counts only if that is still the descriptor held. A relay that fails its test
    /// without ever having passed one is forgotten.
    pub fn probed(&mut self, node: NodeId, digest: [u8; 32], reachable: bool, now_unix: u64) {
        self.relays.probed(node, digest, reachable, now_unix);
    }

    /// Take a vote (posted, or fetched after [`AuthorityAction::FetchVote`]): it must be
    /// signed by another configured authority, for the upcoming period with this
    /// authority's period times, arrive before this authority computed the consensus, and
    /// be the first from its authority.
    pub fn handle_vote(&mut self, bytes: &[u8], now_unix: u64) -> Result<(), AuthorityError> {
        let vote =
            Vote::decode(bytes, &self.config.authorities).map_err(AuthorityError::BadVote)?;
        if vote.authority == self.me {
            return Err(AuthorityError::OwnVote);
        }
        let t = self.schedule.upcoming(now_unix);
        if vote.body.period != self.schedule.period(t) {
            return Err(AuthorityError::WrongPeriod {
                valid_after: vote.body.period.valid_after,
                expected: t,
            });
        }
        self.open_round(t, now_unix)?;
        let round = self.round(t)?;
        if !matches!(round.outcome, Outcome::Collecting) {
            return Err(AuthorityError::RoundClosed { valid_after: t });
        }
        if round.votes.contains_key(&vote.authority) {
            return Err(AuthorityError::DuplicateVote {
                authority: vote.authority,
            });
        }
        round.votes.insert(vote.authority, vote);
        Ok(())
    }

    /// The next action, running the steps of the schedule that are due at `now_unix` once
    /// the actions queued before have been taken.
    pub fn poll_action(&mut self, now_unix: u64) -> Option<AuthorityAction> {
        self.discard(now_unix);
        self.run_due_steps(now_unix);
        self.actions.pop_front()
    }

    /// When the next step of the schedule is due (Unix seconds; may be past if the driver
    /// was late: then poll at once).
    pub fn next_deadline(&self) -> Option<u64> {
        let (t, step, fetched_at) = match self.rounds.last_key_value() {
            Some((&t, round)) => (t, round.step, round.fetched_at),
            None => (self.first_round, schedule::Step::Probe, None),
        };
        self.schedule.due(t, step, fetched_at).or_else(|| {
            let next = t.saturating_add(self.schedule.period);
            self.schedule.at(next, schedule::Step::Probe)
        })
    }

    /// What [`DirRequest::GetConsensus`] serves at `now_unix`: the newest published
    /// consensus that has started and not expired, its encoding and the descriptors it
    /// lists (those this authority holds), in consensus order.
    pub fn consensus(&self, now_unix: u64) -> Option<(&[u8], &[Vec<u8>])> {
        self.serving(now_unix)
            .map(|p| (p.encoding.as_slice(), p.descriptors.as_slice()))
    }

    fn serving(&self, now: u64) -> Option<&Published> {
        self.published
            .iter()
            .rev()
            .find(|p| p.valid_after() <= now && now < p.valid_until())
    }

    fn serve_consensus(&self, newer_than: u64, now: u64) -> DirResponse {
        match self.serving(now) {
            None => DirResponse::NotFound,
            Some(p) if p.valid_after() <= newer_than => DirResponse::NotModified,
            Some(p) if p.response_len() > MAX_RESPONSE_LEN => DirResponse::refused(format!(
                "the consensus and its descriptors take {} bytes, more than a response carries",
                p.response_len()
            )),
            Some(p) => DirResponse::Consensus {
                consensus: p.encoding.clone(),
                descriptors: p.descriptors.clone(),
            },
        }
    }

    /// Open the round for the period starting at `t` if it is not open yet, it is the
    /// upcoming one and this authority takes part in it.
    fn open_round(&mut self, t: u64, now: u64) -> Result<(), AuthorityError> {
        if !self.rounds.contains_key(&t) {
            if t != self.schedule.upcoming(now) || t < self.first_round {
                return Err(AuthorityError::RoundClosed { valid_after: t });
            }
            self.rounds.insert(t, Round::new());
        }
        Ok(())
    }

    /// The open round for the period starting at `t` (see [`open_round`](Self::open_round)).
    fn round(&mut self, t: u64) -> Result<&mut Round, AuthorityError> {
        self.rounds
            .get_mut(&t)
            .ok_or(AuthorityError::RoundClosed { valid_after: t })
    }

    /// Forget rounds whose period is over, and consensuses expired or superseded by a newer
    /// one in force.
    fn discard(&mut self, now: u64) {
        let period = self.schedule.period;
        self.rounds.retain(|&t, _| now < t.saturating_add(period));
        self.published.retain(|p| now < p.valid_until());
        if let Some(in_force) = self.published.iter().rposition(|p| p.valid_after() <= now) {
            self.published.drain(..in_force);
        }
    }
}

#[cfg(test)]
mod tests;
