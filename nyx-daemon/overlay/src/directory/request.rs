//! The messages of a directory stream (docs/protocol.md, "Directory streams").
//!
//! A client opens a stream to a relay or an authority, writes one [`DirRequest`] frame and
//! reads one [`DirResponse`] frame. A frame is a u32 big-endian length of what follows, a
//! type byte, then the body. A reader takes the 4-byte prefix first and refuses an oversize
//! length with [`frame_len`] before reading the rest; [`DirRequest::decode`] and
//! [`DirResponse::decode`] take the bytes after the prefix. Every count is checked against
//! the bytes present before anything is allocated, and the encoding is canonical: a frame
//! that decodes encodes back to the same bytes.

use nyx_core::NodeId;
use nyx_crypto::identity::SIGNATURE_LEN;

use super::consensus::{MAX_CONSENSUS_LEN, MAX_RELAYS, MAX_VOTE_LEN};
use super::{MAX_FAMILY, MAX_NICKNAME_LEN, MAX_ONION_CERTS, MAX_RULES};
use bytes::{
    array, cut_reason, end, frame_end, frame_start, len_field, put_len, rest, split_type, take,
    too_long, u64_field,
};

/// Longest descriptor: the layout of docs/protocol.md with the longest nickname, two IPv6
/// addresses, two onion certificates, [`MAX_RULES`] IPv6 exit rules and [`MAX_FAMILY`]
/// family members.
pub const MAX_DESCRIPTOR_LEN: usize = 1
    + 32
    + 1
    + MAX_NICKNAME_LEN
    + 2 * 19
    + nyx_crypto::kem::PUBLIC_KEY_LEN
    + 4
    + 2 * 8
    + 1
    + MAX_ONION_CERTS * nyx_crypto::onion_cert::CERT_LEN
    + 2
    + MAX_RULES * 23
    + 1
    + MAX_FAMILY * NodeId::LEN
    + SIGNATURE_LEN;
/// Longest request frame (after the length prefix): a vote listing [`MAX_RELAYS`] relays,
/// plus slack.
pub const MAX_REQUEST_LEN: usize = 1 + MAX_VOTE_LEN + 4096;
/// Longest response frame (after the length prefix): 64 MiB.
pub const MAX_RESPONSE_LEN: usize = 64 << 20;
/// Longest refusal reason, bytes of UTF-8.
pub const MAX_REASON_LEN: usize = 512;

// The largest vote fits a request and the largest consensus a response.
const _: () = assert!(MAX_REQUEST_LEN > MAX_VOTE_LEN && MAX_RESPONSE_LEN > MAX_CONSENSUS_LEN);

const GET_CONSENSUS: u8 = 0x01;
const POST_DESCRIPTOR: u8 = 0x02;
const POST_VOTE: u8 = 0x03;
const GET_VOTE: u8 = 0x04;
const POST_SIGNATURE: u8 = 0x05;

const OK: u8 = 0x81;
const CONSENSUS: u8 = 0x82;
const VOTE: u8 = 0x83;
const NOT_MODIFIED: u8 = 0x84;
const NOT_FOUND: u8 = 0x85;
const REFUSED: u8 = 0x86;

/// What a client asks of a directory server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DirRequest {
    /// The newest consensus, unless it is not newer than the one the client holds.
    GetConsensus {
        /// `valid_after` of the consensus the client holds (0: none).
        newer_than: u64,
    },
    /// A relay's signed descriptor, for an authority to hold and test.
    PostDescriptor {
        /// The descriptor's bytes.
        descriptor: Vec<u8>,
    },
    /// Another authority's signed vote ([`Vote::sign`](super::consensus::Vote::sign)).
    PostVote {
        /// The vote's bytes.
        vote: Vec<u8>,
    },
    /// The server authority's own vote for a period.
    GetVote {
        /// The period's start.
        valid_after: u64,
    },
    /// Another authority's signature over the consensus body it computed.
    PostSignature {
        /// The period's start.
        valid_after: u64,
        /// SHA-256 of the signed body ([`ConsensusBody::digest`](super::consensus::ConsensusBody::digest)).
        body_digest: [u8; 32],
        /// The signing authority.
        signer: NodeId,
        /// Its signature over the body ([`sign_body`](super::consensus::sign_body)).
        signature: [u8; SIGNATURE_LEN],
    },
}

/// What a directory server answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DirResponse {
    /// Accepted.
    Ok,
    /// A consensus and the descriptors it lists.
    Consensus {
        /// Its encoding ([`UnverifiedConsensus::encode`](super::consensus::UnverifiedConsensus::encode)).
        consensus: Vec<u8>,
        /// The descriptors it lists, in its order.
        descriptors: Vec<Vec<u8>>,
    },
    /// The server's own vote.
    Vote {
        /// The vote's bytes.
        vote: Vec<u8>,
    },
    /// Nothing newer than what the client holds.
    NotModified,
    /// Nothing to serve.
    NotFound,
    /// The request was refused.
    Refused {
        /// Why (at most [`MAX_REASON_LEN`] bytes; see [`DirResponse::refused`]).
        reason: String,
    },
}

/// Why a directory-stream frame was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RequestError {
    /// The length prefix is 0 or above the limit.
    #[error("frame of {len} bytes: must be 1 to {max}")]
    FrameLength {
        /// The length announced (or present).
        len: usize,
        /// The limit.
        max: usize,
    },
    /// The frame ends inside a field.
    #[error("truncated in {field}: needs {needed} bytes, {remaining} left")]
    Truncated {
        /// The field being read.
        field: &'static str,
        /// Bytes the field needs.
        needed: usize,
        /// Bytes that were left.
        remaining: usize,
    },
    /// A type byte this code does not know.
    #[error("unknown {kind} type {type_byte:#04x}")]
    UnknownType {
        /// `"request"` or `"response"`.
        kind: &'static str,
        /// The type byte.
        type_byte: u8,
    },
    /// A field longer than its limit.
    #[error("{field} of {len} bytes exceeds {max}")]
    TooLong {
        /// The field.
        field: &'static str,
        /// Its length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// A count that the bytes present cannot hold, or above its limit.
    #[error("{count} {field} do not fit ({remaining} bytes left, at most {max})")]
    BadCount {
        /// What is counted.
        field: &'static str,
        /// The count.
        count: usize,
        /// Bytes left after the count.
        remaining: usize,
        /// The limit.
        max: usize,
    },
    /// Bytes after the last field.
    #[error("{count} bytes after the message")]
    TrailingBytes {
        /// How many.
        count: usize,
    },
    /// A refusal reason that is not UTF-8.
    #[error("refusal reason is not UTF-8")]
    NotUtf8,
}

/// The length a frame's 4-byte `prefix` announces, if it is 1 to `max` bytes (read the
/// prefix, call this, then read that many bytes).
pub fn frame_len(prefix: [u8; 4], max: usize) -> Result<usize, RequestError> {
    let len = usize::try_from(u32::from_be_bytes(prefix)).unwrap_or(usize::MAX);
    if len == 0 || len > max {
        return Err(RequestError::FrameLength { len, max });
    }
    Ok(len)
}

impl DirRequest {
    /// The whole frame: length prefix, type byte, body.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = frame_start(match self {
            DirRequest::GetConsensus { .. } => GET_CONSENSUS,
            DirRequest::PostDescriptor { .. } => POST_DESCRIPTOR,
            DirRequest::PostVote { .. } => POST_VOTE,
            DirRequest::GetVote { .. } => GET_VOTE,
            DirRequest::PostSignature { .. } => POST_SIGNATURE,
        });
        match self {
            DirRequest::GetConsensus { newer_than: t } | DirRequest::GetVote { valid_after: t } => {
                out.extend_from_slice(&t.to_be_bytes())
            }
            DirRequest::PostDescriptor { descriptor: b } | DirRequest::PostVote { vote: b } => {
                out.extend_from_slice(b)
            }
            DirRequest::PostSignature {
                valid_after,
                body_digest,
                signer,
                signature,
            } => {
                out.extend_from_slice(&valid_after.to_be_bytes());
                out.extend_from_slice(body_digest);
                out.extend_from_slice(signer.as_bytes());
                out.extend_from_slice(signature);
            }
        }
        frame_end(out)
    }

    /// Decode the bytes after the length prefix.
    pub fn decode(frame: &[u8]) -> Result<DirRequest, RequestError> {
        let (type_byte, mut body) = split_type(frame, MAX_REQUEST_LEN)?;
        let b = &mut body;
        let request = match type_byte {
            GET_CONSENSUS => DirRequest::GetConsensus {
                newer_than: u64_field(b, "newer-than")?,
            },
            POST_DESCRIPTOR => DirRequest::PostDescriptor {
                descriptor: rest(b, "descriptor", MAX_DESCRIPTOR_LEN)?.to_vec(),
            },
            POST_VOTE => DirRequest::PostVote {
                vote: rest(b, "vote", MAX_VOTE_LEN)?.to_vec(),
            },
            GET_VOTE => DirRequest::GetVote {
                valid_after: u64_field(b, "valid-after")?,
            },
            POST_SIGNATURE => DirRequest::PostSignature {
                valid_after: u64_field(b, "valid-after")?,
                body_digest: array(b, "body digest")?,
                signer: NodeId::from_bytes(array(b, "signer")?),
                signature: array(b, "signature")?,
            },
            type_byte => {
                return Err(RequestError::UnknownType {
                    kind: "request",
                    type_byte,
                });
            }
        };
        end(body)?;
        Ok(request)
    }
}

impl DirResponse {
    /// A refusal saying `reason`, cut to at most [`MAX_REASON_LEN`] bytes (at a character
    /// boundary).
    pub fn refused(reason: impl std::fmt::Display) -> DirResponse {
        DirResponse::Refused {
            reason: cut_reason(&reason.to_string()).to_owned(),
        }
    }

    /// The whole frame: length prefix, type byte, body. A refusal reason longer than
    /// [`MAX_REASON_LEN`] is cut as [`refused`](Self::refused) cuts it.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = frame_start(match self {
            DirResponse::Ok => OK,
            DirResponse::Consensus { .. } => CONSENSUS,
            DirResponse::Vote { .. } => VOTE,
            DirResponse::NotModified => NOT_MODIFIED,
            DirResponse::NotFound => NOT_FOUND,
            DirResponse::Refused { .. } => REFUSED,
        });
        match self {
            DirResponse::Ok | DirResponse::NotModified | DirResponse::NotFound => {}
            DirResponse::Consensus {
                consensus,
                descriptors,
            } => {
                put_len(&mut out, consensus.len());
                out.extend_from_slice(consensus);
                put_len(&mut out, descriptors.len());
                for d in descriptors {
                    put_len(&mut out, d.len());
                    out.extend_from_slice(d);
                }
            }
            DirResponse::Vote { vote } => out.extend_from_slice(vote),
            DirResponse::Refused { reason } => out.extend_from_slice(cut_reason(reason).as_bytes()),
        }
        frame_end(out)
    }

    /// Decode the bytes after the length prefix.
    pub fn decode(frame: &[u8]) -> Result<DirResponse, RequestError> {
        let (type_byte, mut body) = split_type(frame, MAX_RESPONSE_LEN)?;
        let b = &mut body;
        let response = match type_byte {
            OK => DirResponse::Ok,
            NOT_MODIFIED => DirResponse::NotModified,
            NOT_FOUND => DirResponse::NotFound,
            CONSENSUS => {
                let len = len_field(b, "consensus length")?;
                if len > MAX_CONSENSUS_LEN {
                    return Err(too_long("consensus", len, MAX_CONSENSUS_LEN));
                }
                let consensus = take(b, len, "consensus")?.to_vec();
                let count = len_field(b, "descriptor count")?;
                // Each descriptor takes at least its 4-byte length.
                if count > MAX_RELAYS || count.saturating_mul(4) > b.len() {
                    return Err(RequestError::BadCount {
                        field: "descriptors",
                        count,
                        remaining: b.len(),
                        max: MAX_RELAYS,
                    });
                }
                let mut descriptors = Vec::with_capacity(count);
                for _ in 0..count {
                    let len = len_field(b, "descriptor length")?;
                    if len > MAX_DESCRIPTOR_LEN {
                        return Err(too_long("descriptor", len, MAX_DESCRIPTOR_LEN));
                    }
                    descriptors.push(take(b, len, "descriptor")?.to_vec());
                }
                DirResponse::Consensus {
                    consensus,
                    descriptors,
                }
            }
            VOTE => DirResponse::Vote {
                vote: rest(b, "vote", MAX_VOTE_LEN)?.to_vec(),
            },
            REFUSED => {
                let reason = rest(b, "reason", MAX_REASON_LEN)?;
                let reason = std::str::from_utf8(reason).map_err(|_| RequestError::NotUtf8)?;
                DirResponse::Refused {
                    reason: reason.to_owned(),
                }
            }
            type_byte => {
                return Err(RequestError::UnknownType {
                    kind: "response",
                    type_byte,
                });
            }
        };
        end(body)?;
        Ok(response)
    }
}

mod bytes;

#[cfg(test)]
mod tests;
