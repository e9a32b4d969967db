//! A consensus with its signatures: as received ([`UnverifiedConsensus`]) and as accepted
//! ([`Consensus`]) after the client's checks.

use nyx_core::NodeId;
use nyx_crypto::identity::{IdentityKey, IdentityPublic, SIGNATURE_LEN};

use super::encoding::{end, malformed};
use super::{
    CONSENSUS_CONTEXT, ConsensusBody, ConsensusError, MAX_AUTHORITIES, MAX_CLOCK_SKEW,
    MAX_CONSENSUS_LIFETIME, Period, RelayStatus, majority,
};
use crate::directory::codec::Reader;

/// A consensus as received: decoded, nothing checked but its form.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnverifiedConsensus {
    pub(super) body: ConsensusBody,
    pub(super) body_bytes: Vec<u8>,
    pub(super) signatures: Vec<(NodeId, [u8; SIGNATURE_LEN])>,
}

/// A consensus a majority of the pinned authorities signed, valid when it was verified.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Consensus {
    inner: UnverifiedConsensus,
}

impl UnverifiedConsensus {
    /// A consensus of `body` with the authorities' `signatures` over its encoding (from
    /// [`sign_body`]).
    pub fn new(body: ConsensusBody, signatures: Vec<(NodeId, [u8; SIGNATURE_LEN])>) -> Self {
        let body_bytes = body.encode();
        UnverifiedConsensus {
            body,
            body_bytes,
            signatures,
        }
    }

    /// Decode (form only: see [`verify`](Self::verify)).
    pub fn decode(bytes: &[u8]) -> Result<UnverifiedConsensus, ConsensusError> {
        let mut r = Reader::new(bytes);
        let len = r.u32("body length")? as usize;
        let body_bytes = r.take(len, "body")?;
        let mut br = Reader::new(body_bytes);
        let body = ConsensusBody::decode(&mut br)?;
        end(&br)?;
        let count = usize::from(r.u8("signature count")?);
        if count > MAX_AUTHORITIES {
            return Err(malformed("signature count", format!("{count} signatures")));
        }
        let mut signatures = Vec::with_capacity(count);
        for _ in 0..count {
            let signer = NodeId::from_bytes(r.array("signer")?);
            signatures.push((signer, r.array("signature")?));
        }
        end(&r)?;
        Ok(UnverifiedConsensus {
            body,
            body_bytes: body_bytes.to_vec(),
            signatures,
        })
    }

    /// The body, as decoded (not verified).
    pub fn body(&self) -> &ConsensusBody {
        &self.body
    }

    /// The signatures it carries, as decoded: signer and signature (not verified).
    pub fn signatures(&self) -> &[(NodeId, [u8; SIGNATURE_LEN])] {
        &self.signatures
    }

    /// The encoding: body length, body, signatures.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(5 + self.body_bytes.len() + self.signatures.len() * 96);
        out.extend_from_slice(&(self.body_bytes.len() as u32).to_be_bytes());
        out.extend_from_slice(&self.body_bytes);
        out.push(self.signatures.len().min(MAX_AUTHORITIES) as u8);
        for (signer, sig) in self.signatures.iter().take(MAX_AUTHORITIES) {
            out.extend_from_slice(signer.as_bytes());
            out.extend_from_slice(sig);
        }
        out
    }

    /// Accept it if valid signatures by more than half of `authorities` (distinct, pinned)
    /// cover it, it is valid for at most [`MAX_CONSENSUS_LIFETIME`], `now_unix` is inside
    /// its period (allowing [`MAX_CLOCK_SKEW`] early), and it is not older than the one held
    /// (`held`, its `valid_after`).
    pub fn verify(
        self,
        authorities: &[IdentityPublic],
        now_unix: u64,
        held: Option<u64>,
    ) -> Result<Consensus, ConsensusError> {
        let p = self.body.period;
        if p.valid_until.saturating_sub(p.valid_after) > MAX_CONSENSUS_LIFETIME {
            return Err(ConsensusError::TooLong {
                valid_after: p.valid_after,
                valid_until: p.valid_until,
                max: MAX_CONSENSUS_LIFETIME,
            });
        }
        if now_unix.saturating_add(MAX_CLOCK_SKEW) < p.valid_after {
            return Err(ConsensusError::NotYetValid {
                valid_after: p.valid_after,
                now: now_unix,
            });
        }
        if now_unix >= p.valid_until {
            return Err(ConsensusError::Expired {
                valid_until: p.valid_until,
                now: now_unix,
            });
        }
        if let Some(held) = held
            && p.valid_after < held
        {
            return Err(ConsensusError::RolledBack {
                valid_after: p.valid_after,
                held,
            });
        }
        let mut signed_by: Vec<NodeId> = Vec::new();
        for (signer, sig) in &self.signatures {
            let Some(key) = authorities.iter().find(|a| a.node_id() == *signer) else {
                continue;
            };
            if !signed_by.contains(signer)
                && key.verify(CONSENSUS_CONTEXT, &self.body_bytes, sig).is_ok()
            {
                signed_by.push(*signer);
            }
        }
        let needed = majority(authorities.len());
        if signed_by.len() < needed {
            return Err(ConsensusError::NotEnoughSignatures {
                valid: signed_by.len(),
                needed,
            });
        }
        Ok(Consensus { inner: self })
    }
}

/// An authority's signature over `body` (its encoding, under [`CONSENSUS_CONTEXT`]).
pub fn sign_body(body: &ConsensusBody, identity: &IdentityKey) -> (NodeId, [u8; SIGNATURE_LEN]) {
    (
        identity.node_id(),
        identity.sign(CONSENSUS_CONTEXT, &body.encode()),
    )
}

impl Consensus {
    /// When it applies.
    pub fn period(&self) -> Period {
        self.inner.body.period
    }

    /// The relays, sorted by node id.
    pub fn relays(&self) -> &[RelayStatus] {
        &self.inner.body.relays
    }

    /// The relay `node`, if listed.
    pub fn relay(&self, node: &NodeId) -> Option<&RelayStatus> {
        let relays = self.relays();
        relays
            .binary_search_by(|r| r.node_id.cmp(node))
            .ok()
            .map(|i| &relays[i])
    }

    /// The encoding (to cache and serve it again).
    pub fn encode(&self) -> Vec<u8> {
        self.inner.encode()
    }
}
