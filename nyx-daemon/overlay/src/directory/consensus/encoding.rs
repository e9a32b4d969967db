//! The bytes of votes and consensus bodies: encoding, and decoding that checks every length
//! and the order of the relays before it allocates.

use nyx_core::NodeId;
use nyx_crypto::identity::{IdentityKey, IdentityPublic, SIGNATURE_LEN};

use super::{
    BODY_HEADER_LEN, CONSENSUS_VERSION, ConsensusBody, ConsensusError, ENTRY_LEN, Flags,
    MAX_RELAYS, Period, RelayStatus, VOTE_CONTEXT, Vote,
};
use crate::directory::DescriptorError;
use crate::directory::codec::Reader;

impl Period {
    fn check(self) -> Result<Period, ConsensusError> {
        if self.valid_after < self.fresh_until && self.fresh_until <= self.valid_until {
            Ok(self)
        } else {
            Err(ConsensusError::BadPeriod { period: self })
        }
    }
}

impl ConsensusBody {
    /// The canonical encoding (what authorities sign).
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(BODY_HEADER_LEN + self.relays.len() * ENTRY_LEN);
        out.push(CONSENSUS_VERSION);
        for t in [
            self.period.valid_after,
            self.period.fresh_until,
            self.period.valid_until,
        ] {
            out.extend_from_slice(&t.to_be_bytes());
        }
        out.extend_from_slice(&(self.relays.len() as u32).to_be_bytes());
        for r in &self.relays {
            out.extend_from_slice(r.node_id.as_bytes());
            out.extend_from_slice(&r.digest);
            out.push(r.flags.bits());
            out.extend_from_slice(&r.weight.to_be_bytes());
        }
        out
    }

    /// SHA-256 of [`encode`](Self::encode): how authorities name the body they signed.
    pub fn digest(&self) -> [u8; 32] {
        use sha2::Digest as _;
        sha2::Sha256::digest(self.encode()).into()
    }

    pub(super) fn decode(r: &mut Reader<'_>) -> Result<ConsensusBody, ConsensusError> {
        let version = r.u8("version")?;
        if version != CONSENSUS_VERSION {
            return Err(DescriptorError::UnsupportedVersion { version }.into());
        }
        let period = Period {
            valid_after: r.u64("valid-after")?,
            fresh_until: r.u64("fresh-until")?,
            valid_until: r.u64("valid-until")?,
        }
        .check()?;
        let count = r.u32("relay count")? as usize;
        if count > MAX_RELAYS || count.saturating_mul(ENTRY_LEN) > r.remaining() {
            return Err(malformed("relay count", format!("{count} relays")));
        }
        let mut relays: Vec<RelayStatus> = Vec::with_capacity(count);
        for _ in 0..count {
            let node_id = NodeId::from_bytes(r.array("node id")?);
            let digest = r.array("digest")?;
            let bits = r.u8("flags")?;
            let flags = Flags::from_bits(bits)
                .ok_or_else(|| malformed("flags", format!("unknown bits {bits:#04x}")))?;
            let weight = r.u32("weight")?;
            if relays.last().is_some_and(|last| last.node_id >= node_id) {
                return Err(ConsensusError::Unsorted { node_id });
            }
            relays.push(RelayStatus {
                node_id,
                digest,
                flags,
                weight,
            });
        }
        Ok(ConsensusBody { period, relays })
    }
}

pub(super) fn malformed(field: &'static str, reason: impl Into<String>) -> ConsensusError {
    DescriptorError::Malformed {
        field,
        reason: reason.into(),
    }
    .into()
}

pub(super) fn end(r: &Reader<'_>) -> Result<(), ConsensusError> {
    match r.remaining() {
        0 => Ok(()),
        count => Err(DescriptorError::TrailingBytes { count }.into()),
    }
}

impl Vote {
    /// Encode and sign with the authority's identity (which must be `self.authority`'s).
    pub fn sign(&self, identity: &IdentityKey) -> Vec<u8> {
        let mut out = Vec::with_capacity(32 + 29 + self.body.relays.len() * ENTRY_LEN + 64);
        out.extend_from_slice(self.authority.as_bytes());
        out.extend_from_slice(&self.body.encode());
        let signature = identity.sign(VOTE_CONTEXT, &out);
        out.extend_from_slice(&signature);
        out
    }

    /// Decode a vote and check its signature against the pinned `authorities`.
    pub fn decode(bytes: &[u8], authorities: &[IdentityPublic]) -> Result<Vote, ConsensusError> {
        let signed_len = bytes
            .len()
            .checked_sub(SIGNATURE_LEN)
            .ok_or_else(|| malformed("vote", "shorter than a signature"))?;
        let (signed, signature) = bytes.split_at(signed_len);
        let mut r = Reader::new(signed);
        let authority = NodeId::from_bytes(r.array("authority")?);
        let body = ConsensusBody::decode(&mut r)?;
        end(&r)?;
        let mut sig = [0u8; SIGNATURE_LEN];
        sig.copy_from_slice(signature);
        let signer = authorities.iter().find(|a| a.node_id() == authority);
        match signer {
            Some(key) if key.verify(VOTE_CONTEXT, signed, &sig).is_ok() => {
                Ok(Vote { authority, body })
            }
            _ => Err(ConsensusError::BadVoteSignature { signer: authority }),
        }
    }
}
