//! One period's round of votes and signatures, and the consensuses an authority published.

use std::collections::BTreeMap;
use std::sync::Arc;

use nyx_core::NodeId;
use nyx_crypto::identity::{IdentityPublic, SIGNATURE_LEN};

use super::AuthorityError;
use super::schedule::Step;
use crate::directory::Descriptor;
use crate::directory::consensus::{
    CONSENSUS_CONTEXT, ConsensusBody, UnverifiedConsensus, Vote, majority,
};

/// An Ed25519 signature over a consensus body.
pub(super) type Signature = [u8; SIGNATURE_LEN];

/// Most distinct signatures kept per signer that arrive before this authority computed its
/// consensus body (they cannot be checked before): a forged one does not displace the real
/// one, and at most one of them counts.
pub const MAX_EARLY_SIGNATURES: usize = 4;

/// The state of the round for the period starting at `valid_after`.
#[derive(Debug)]
pub(super) struct Round {
    /// The next step of the schedule to run.
    pub(super) step: Step,
    /// When the fetch step ran (the signing waits a little after it).
    pub(super) fetched_at: Option<u64>,
    /// This authority's signed vote, once made (what GetVote serves).
    pub(super) own_vote: Option<Vec<u8>>,
    /// The votes held, one per authority (the first kept), this one's included; emptied
    /// when the consensus is computed.
    pub(super) votes: BTreeMap<NodeId, Vote>,
    /// The descriptors this authority voted for, by digest, to serve with the consensus.
    pub(super) voted: BTreeMap<[u8; 32], Arc<Descriptor>>,
    /// Signatures that arrived before this authority computed its body, with the digest
    /// they claim to cover: up to [`MAX_EARLY_SIGNATURES`] distinct ones per signer, in
    /// arrival order, checked once the body is known.
    pub(super) pending: BTreeMap<NodeId, Vec<([u8; 32], Signature)>>,
    /// How far the consensus got.
    pub(super) outcome: Outcome,
}

/// What became of a round's consensus.
#[derive(Debug)]
pub(super) enum Outcome {
    /// Not computed yet.
    Collecting,
    /// Computed and signed; collecting the other authorities' signatures.
    Signing(Signed),
    /// Too few votes: no consensus this period.
    Failed,
    /// Published (the signatures now go to the published consensus).
    Published,
}

impl Round {
    pub(super) fn new() -> Self {
        Round {
            step: Step::Probe,
            fetched_at: None,
            own_vote: None,
            votes: BTreeMap::new(),
            voted: BTreeMap::new(),
            pending: BTreeMap::new(),
            outcome: Outcome::Collecting,
        }
    }

    /// Hold a signature that arrived before the body was computed.
    pub(super) fn hold_early(
        &mut self,
        signer: NodeId,
        digest: [u8; 32],
        signature: &Signature,
    ) -> Result<(), AuthorityError> {
        let held = self.pending.entry(signer).or_default();
        if held.contains(&(digest, *signature)) {
            return Ok(());
        }
        if held.len() >= MAX_EARLY_SIGNATURES {
            return Err(AuthorityError::TooManyEarlySignatures { signer });
        }
        held.push((digest, *signature));
        Ok(())
    }
}

/// A consensus body this authority computed, with the verified signatures over it.
#[derive(Debug, Clone)]
pub(super) struct Signed {
    pub(super) body: ConsensusBody,
    body_bytes: Vec<u8>,
    pub(super) digest: [u8; 32],
    /// By signer, so that every authority encodes the signatures in the same order.
    pub(super) signatures: BTreeMap<NodeId, Signature>,
}

impl Signed {
    pub(super) fn new(body: ConsensusBody) -> Self {
        let body_bytes = body.encode();
        let digest = body.digest();
        Signed {
            body,
            body_bytes,
            digest,
            signatures: BTreeMap::new(),
        }
    }

    /// Add `signer`'s signature if it is over this body and verifies under its pinned key.
    pub(super) fn add(
        &mut self,
        authorities: &[IdentityPublic],
        signer: NodeId,
        digest: [u8; 32],
        signature: &Signature,
    ) -> Result<(), AuthorityError> {
        let valid_after = self.body.period.valid_after;
        if digest != self.digest {
            return Err(AuthorityError::WrongBody { valid_after });
        }
        if self.signatures.contains_key(&signer) {
            return Err(AuthorityError::DuplicateSignature { signer });
        }
        let key = authorities
            .iter()
            .find(|a| a.node_id() == signer)
            .ok_or(AuthorityError::UnknownSigner { signer })?;
        key.verify(CONSENSUS_CONTEXT, &self.body_bytes, signature)
            .map_err(|_| AuthorityError::BadSignature { signer })?;
        self.signatures.insert(signer, *signature);
        Ok(())
    }

    /// Whether signatures by a majority of `n` authorities are held.
    pub(super) fn has_majority(&self, n: usize) -> bool {
        self.signatures.len() >= majority(n)
    }

    /// The consensus of this body and the signatures held.
    pub(super) fn consensus(&self) -> UnverifiedConsensus {
        let sigs = self.signatures.iter().map(|(k, s)| (*k, *s)).collect();
        UnverifiedConsensus::new(self.body.clone(), sigs)
    }
}

/// A consensus this authority published: what GetConsensus serves from its `valid_after`
/// until its `valid_until`.
#[derive(Debug)]
pub(super) struct Published {
    pub(super) signed: Signed,
    /// The consensus encoding, with every signature held.
    pub(super) encoding: Vec<u8>,
    /// The descriptors it lists that this authority holds, in consensus order.
    pub(super) descriptors: Vec<Vec<u8>>,
}

impl Published {
    pub(super) fn new(signed: Signed, encoding: Vec<u8>, descriptors: Vec<Vec<u8>>) -> Self {
        Published {
            signed,
            encoding,
            descriptors,
        }
    }

    pub(super) fn valid_after(&self) -> u64 {
        self.signed.body.period.valid_after
    }

    pub(super) fn valid_until(&self) -> u64 {
        self.signed.body.period.valid_until
    }

    /// Add a late signature and encode again.
    pub(super) fn add(
        &mut self,
        authorities: &[IdentityPublic],
        signer: NodeId,
        digest: [u8; 32],
        signature: &Signature,
    ) -> Result<(), AuthorityError> {
        self.signed.add(authorities, signer, digest, signature)?;
        self.encoding = self.signed.consensus().encode();
        Ok(())
    }

    /// The length of the DirResponse::Consensus frame that serves it, after the length
    /// prefix (what MAX_RESPONSE_LEN bounds): type byte, consensus length and bytes,
    /// descriptor count, each descriptor's length and bytes.
    pub(super) fn response_len(&self) -> usize {
        let descriptors: usize = self.descriptors.iter().map(|d| 4 + d.len()).sum();
        1 + 4 + self.encoding.len() + 4 + descriptors
    }
}
