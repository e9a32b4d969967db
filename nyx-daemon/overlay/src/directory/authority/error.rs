//! Why an authority refused a descriptor, a vote or a signature, or could not start.

use std::net::IpAddr;

use nyx_core::NodeId;

use crate::directory::DescriptorError;
use crate::directory::consensus::ConsensusError;

/// Why an authority refused something (the reason a
/// [`DirResponse::Refused`](crate::directory::request::DirResponse::Refused) carries).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AuthorityError {
    /// Settings that cannot work.
    #[error("authority configuration: {reason}")]
    Config {
        /// What is wrong.
        reason: String,
    },
    /// A descriptor that does not decode or verify (malformed, bad signature, expired).
    #[error("descriptor refused: {0}")]
    Descriptor(#[from] DescriptorError),
    /// A descriptor not newer than the one held for the relay.
    #[error(
        "descriptor of {node_id} published at {published}, not newer than the one held ({held})"
    )]
    NotNewer {
        /// The relay.
        node_id: NodeId,
        /// Its publication time.
        published: u64,
        /// The publication time of the one held.
        held: u64,
    },
    /// A descriptor valid until later than
    /// [`MAX_DESCRIPTOR_VALIDITY`](super::MAX_DESCRIPTOR_VALIDITY) after its upload.
    #[error("descriptor valid until {valid_until}, later than {latest} (at most {max} s ahead)", max = super::MAX_DESCRIPTOR_VALIDITY)]
    ValidityTooLong {
        /// The descriptor's `valid_until`.
        valid_until: u64,
        /// The latest `valid_until` accepted now.
        latest: u64,
    },
    /// As many relays as configured are held, none of them expired, failing its last
    /// probe or without a successful probe.
    #[error("already holding the most relays allowed ({max})")]
    TooManyRelays {
        /// The limit.
        max: usize,
    },
    /// As many new relays as configured (`max_unprobed`) wait for their first probe result.
    #[error("busy: {waiting} new relays wait for their first reachability test; retry later")]
    Busy {
        /// How many wait.
        waiting: usize,
    },
    /// The relay would be one more than allowed (`max_relays_per_address`) at one of its
    /// advertised IP addresses.
    #[error("already holding {max} relays at {address}")]
    TooManyAtAddress {
        /// The address.
        address: IpAddr,
        /// The limit.
        max: usize,
    },
    /// A vote that does not decode, or is not signed by a configured authority.
    #[error("vote refused: {0}")]
    BadVote(ConsensusError),
    /// A vote in this authority's own name, posted by someone else.
    #[error("vote in this authority's own name")]
    OwnVote,
    /// A vote for another period than the upcoming one (or with other period times).
    #[error("vote for the period starting at {valid_after}; collecting for {expected}")]
    WrongPeriod {
        /// The vote's period start.
        valid_after: u64,
        /// The upcoming period's start.
        expected: u64,
    },
    /// This authority does not (or no longer) collect votes or signatures for that period.
    #[error("not collecting for the period starting at {valid_after}")]
    RoundClosed {
        /// The period's start.
        valid_after: u64,
    },
    /// A second vote by one authority for one period (the first is kept).
    #[error("already holding a vote by {authority}")]
    DuplicateVote {
        /// The authority.
        authority: NodeId,
    },
    /// A signature by a key that is not a configured authority.
    #[error("signer {signer} is not a configured authority")]
    UnknownSigner {
        /// The claimed signer.
        signer: NodeId,
    },
    /// A signature over another body than the one this authority computed.
    #[error("signature over another consensus body than this authority's for {valid_after}")]
    WrongBody {
        /// The period's start.
        valid_after: u64,
    },
    /// A signature that does not verify under the signer's key.
    #[error("signature by {signer} does not verify")]
    BadSignature {
        /// The claimed signer.
        signer: NodeId,
    },
    /// A second signature by one authority over one consensus.
    #[error("already holding a signature by {signer}")]
    DuplicateSignature {
        /// The signer.
        signer: NodeId,
    },
    /// As many distinct signatures by one signer as are kept
    /// ([`MAX_EARLY_SIGNATURES`](super::MAX_EARLY_SIGNATURES)) arrived before this
    /// authority computed its consensus body.
    #[error(
        "already holding {max} unchecked signatures by {signer}; retry once the consensus is computed",
        max = super::MAX_EARLY_SIGNATURES
    )]
    TooManyEarlySignatures {
        /// The claimed signer.
        signer: NodeId,
    },
    /// Too few votes made no consensus for that period.
    #[error("no consensus for the period starting at {valid_after}")]
    NoConsensus {
        /// The period's start.
        valid_after: u64,
    },
}
