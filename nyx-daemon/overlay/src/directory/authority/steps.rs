//! The time-driven steps of a round (probe, vote, fetch, sign) and the signatures that lead
//! to publishing.

use nyx_core::NodeId;

use super::round::{Outcome, Published, Signature, Signed};
use super::schedule::Step;
use super::{Authority, AuthorityAction, AuthorityError};
use crate::directory::consensus::{ConsensusBody, Vote, compute, sign_body};

impl Authority {
    /// Run the due steps of the upcoming period's round, in order, while no action is
    /// queued: a step waits until the actions of the one before were taken, and the signing
    /// also until [`FETCH_TO_SIGN`](super::schedule::FETCH_TO_SIGN) after the fetch ran (so
    /// that the votes a driver fetches, at once or asynchronously, arrive before the
    /// consensus is computed).
    pub(super) fn run_due_steps(&mut self, now: u64) {
        let schedule = self.schedule;
        let t = schedule.upcoming(now);
        while self.actions.is_empty() {
            if self.open_round(t, now).is_err() {
                return;
            }
            let Ok(round) = self.round(t) else {
                return;
            };
            let step = round.step;
            match schedule.due(t, step, round.fetched_at) {
                Some(at) if at <= now => {}
                _ => return,
            }
            round.step = match step {
                Step::Probe => Step::Vote,
                Step::Vote => Step::Fetch,
                Step::Fetch => Step::Sign,
                Step::Sign | Step::Done => Step::Done,
            };
            match step {
                Step::Probe => self.probe_step(t, now),
                Step::Vote => self.vote_step(t, now),
                Step::Fetch => self.fetch_step(t, now),
                Step::Sign => self.sign_step(t, now),
                Step::Done => {}
            }
        }
    }

    /// Probe every relay not asked to be probed since the previous period began.
    fn probe_step(&mut self, t: u64, now: u64) {
        self.relays.drop_expired(now);
        let since = t.saturating_sub(self.schedule.period);
        for descriptor in self.relays.due_probes(since, now) {
            self.actions
                .push_back(AuthorityAction::Probe { descriptor });
        }
    }

    /// Sign this authority's vote and send it to every other authority.
    fn vote_step(&mut self, t: u64, now: u64) {
        self.relays.drop_expired(now);
        let uptime = super::relays::Uptime {
            period: self.schedule.period,
            stable_after: self.config.stable_after,
            guard_after: self.config.guard_after,
        };
        let (relays, voted) = self.relays.vote(t, now, uptime);
        let vote = Vote {
            authority: self.me,
            body: ConsensusBody {
                period: self.schedule.period(t),
                relays,
            },
        };
        let bytes = vote.sign(&self.identity);
        let others: Vec<NodeId> = self.others().collect();
        let Some(round) = self.rounds.get_mut(&t) else {
            return;
        };
        round.votes.insert(self.me, vote);
        round.voted = voted;
        for to in others {
            self.actions.push_back(AuthorityAction::SendVote {
                to,
                vote: bytes.clone(),
            });
        }
        round.own_vote = Some(bytes);
    }

    /// Ask every authority not heard from for its vote.
    fn fetch_step(&mut self, t: u64, now: u64) {
        let others: Vec<NodeId> = self.others().collect();
        let Some(round) = self.rounds.get_mut(&t) else {
            return;
        };
        round.fetched_at = Some(now);
        for from in others {
            if !round.votes.contains_key(&from) {
                self.actions.push_back(AuthorityAction::FetchVote {
                    from,
                    valid_after: t,
                });
            }
        }
    }

    /// Compute the consensus from the votes held, sign it, send the signature to every
    /// other authority, and check the signatures that came early.
    fn sign_step(&mut self, t: u64, now: u64) {
        let n = self.config.authorities.len();
        let others: Vec<NodeId> = self.others().collect();
        let Some(round) = self.rounds.get_mut(&t) else {
            return;
        };
        let votes: Vec<Vote> = std::mem::take(&mut round.votes).into_values().collect();
        let body = match compute(&votes, n) {
            Ok(body) => body,
            Err(e) => {
                tracing::warn!(error = %e, valid_after = t, "no consensus this period");
                round.outcome = Outcome::Failed;
                round.pending.clear();
                return;
            }
        };
        let mut signed = Signed::new(body);
        let (me, signature) = sign_body(&signed.body, &self.identity);
        signed.signatures.insert(me, signature);
        for (signer, held) in std::mem::take(&mut round.pending) {
            // At most one counts: the first that verifies.
            for (digest, sig) in held {
                match signed.add(&self.config.authorities, signer, digest, &sig) {
                    Ok(()) => break,
                    Err(e) => tracing::debug!(error = %e, "early signature refused"),
                }
            }
        }
        for to in others {
            self.actions.push_back(AuthorityAction::SendSignature {
                to,
                valid_after: t,
                body_digest: signed.digest,
                signer: me,
                signature,
            });
        }
        round.outcome = Outcome::Signing(signed);
        self.try_publish(t, now);
    }

    /// Take another authority's signature over its consensus body for the period starting
    /// at `valid_after`.
    pub(super) fn handle_signature(
        &mut self,
        valid_after: u64,
        digest: [u8; 32],
        signer: NodeId,
        signature: &Signature,
        now: u64,
    ) -> Result<(), AuthorityError> {
        let authorities = &self.config.authorities;
        if !authorities.iter().any(|a| a.node_id() == signer) {
            return Err(AuthorityError::UnknownSigner { signer });
        }
        if let Some(p) = self
            .published
            .iter_mut()
            .find(|p| p.valid_after() == valid_after)
        {
            return p.add(authorities, signer, digest, signature);
        }
        self.open_round(valid_after, now)?;
        let Some(round) = self.rounds.get_mut(&valid_after) else {
            return Err(AuthorityError::RoundClosed { valid_after });
        };
        match &mut round.outcome {
            // Checked once the body is known.
            Outcome::Collecting => round.hold_early(signer, digest, signature),
            Outcome::Signing(signed) => {
                signed.add(&self.config.authorities, signer, digest, signature)?;
                self.try_publish(valid_after, now);
                Ok(())
            }
            Outcome::Failed => Err(AuthorityError::NoConsensus { valid_after }),
            Outcome::Published => Err(AuthorityError::RoundClosed { valid_after }),
        }
    }

    /// Publish the round's consensus if signatures by a majority cover it and it verifies
    /// as a client would check it (at its start: it is published before it applies).
    fn try_publish(&mut self, t: u64, now: u64) {
        let n = self.config.authorities.len();
        let Some(round) = self.rounds.get_mut(&t) else {
            return;
        };
        let Outcome::Signing(signed) = &round.outcome else {
            return;
        };
        if !signed.has_majority(n) {
            return;
        }
        let held = self.published.last().map(Published::valid_after);
        let consensus = match signed
            .consensus()
            .verify(&self.config.authorities, now.max(t), held)
        {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(error = %e, valid_after = t, "own consensus does not verify");
                return;
            }
        };
        let descriptors = signed
            .body
            .relays
            .iter()
            .filter_map(|r| {
                round
                    .voted
                    .get(&r.digest)
                    .or_else(|| self.relays.get(&r.node_id, &r.digest))
                    .map(|d| d.as_bytes().to_vec())
            })
            .collect();
        let Outcome::Signing(signed) = std::mem::replace(&mut round.outcome, Outcome::Published)
        else {
            return;
        };
        self.published
            .push(Published::new(signed, consensus.encode(), descriptors));
        tracing::info!(valid_after = t, "consensus published");
        self.actions
            .push_back(AuthorityAction::Published { valid_after: t });
    }

    /// The other configured authorities.
    fn others(&self) -> impl Iterator<Item = NodeId> + '_ {
        self.config
            .authorities
            .iter()
            .map(|a| a.node_id())
            .filter(move |id| *id != self.me)
    }
}
