//! The one error type of nyx-node, and the [`ErrorKind`] an application matches on.

use nyx_overlay::path::PathError;
use nyx_overlay::stream::ResetReason;

/// Everything that can go wrong in a node. Match on [`kind`](Self::kind) to decide what to
/// do; the variants say where it went wrong and keep the cause as their source.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The overlay refused or failed an operation (no path, every build attempt failed, a
    /// stream reset, a bad target, a payload too large, ...).
    #[error(transparent)]
    Overlay(#[from] nyx_overlay::Error),
    /// A link transport failed (bind, dial, socket).
    #[error(transparent)]
    Transport(#[from] nyx_transport::Error),
    /// A cryptographic operation failed (key generation, signing).
    #[error(transparent)]
    Crypto(#[from] nyx_crypto::Error),
    /// Settings the node cannot run with.
    #[error("node settings: {reason}")]
    Settings {
        /// What is wrong.
        reason: String,
    },
    /// The operating system gave no randomness to seed the node's choices.
    #[error("no randomness from the operating system")]
    Randomness(#[source] getrandom::Error),
    /// The node is not running any more.
    #[error("the node has stopped")]
    NodeStopped,
}

/// What kind of failure an [`Error`] is: the categories an application can act on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The caller passed something unusable: a target that is not `host:port`, a payload
    /// larger than a cell, a descriptor that cannot be signed.
    InvalidInput,
    /// Settings (the node's, its streams', its path selection's) that cannot work.
    BadConfig,
    /// No exit's policy allows the target, or the exit refused it by policy.
    NotAllowed,
    /// No path could be chosen: too few usable relays or no reachable guard. A newer
    /// directory may help.
    NoPath,
    /// Every attempt to build a circuit failed.
    CircuitFailed,
    /// The exit reached the target, which refused the connection.
    TargetRefused,
    /// The exit could not resolve or reach the target.
    TargetUnreachable,
    /// The target (or the exit, opening the stream) did not answer in time.
    Timeout,
    /// A limit was reached: streams per circuit, a full queue, the exit's connections.
    ResourceLimit,
    /// The stream or circuit is gone: closed, lost with its circuit, reset by the other end
    /// or for breaking the protocol.
    Closed,
    /// A link transport failed locally (bind, dial, socket).
    Transport,
    /// The node has stopped.
    NodeStopped,
    /// A failure that should not happen (cryptography, error correction): a bug, or a
    /// broken environment.
    Internal,
}

impl Error {
    /// What kind of failure this is.
    pub fn kind(&self) -> ErrorKind {
        use nyx_overlay::Error as O;
        match self {
            Error::Overlay(e) => match e {
                O::BadTarget { .. } | O::PayloadTooLarge { .. } | O::Descriptor(_) => {
                    ErrorKind::InvalidInput
                }
                O::OverlayConfig { .. } | O::StreamConfig { .. } | O::Testnet { .. } => {
                    ErrorKind::BadConfig
                }
                O::Path(PathError::NoExit { .. }) => ErrorKind::NotAllowed,
                O::Path(PathError::InvalidHops { .. }) => ErrorKind::BadConfig,
                O::Path(_) | O::BadPath { .. } => ErrorKind::NoPath,
                O::BuildFailed { .. } => ErrorKind::CircuitFailed,
                O::StreamReset { reason } => reset_kind(*reason),
                O::TooManyStreams { .. } | O::QueueFull => ErrorKind::ResourceLimit,
                O::NoSuchCircuit
                | O::CircuitNotOpen
                | O::NoSuchStream
                | O::StreamFinished
                | O::StreamState { .. }
                | O::StreamWire(_) => ErrorKind::Closed,
                O::Crypto(_) | O::Fec(_) => ErrorKind::Internal,
                _ => ErrorKind::Internal,
            },
            Error::Transport(_) => ErrorKind::Transport,
            Error::Crypto(_) | Error::Randomness(_) => ErrorKind::Internal,
            Error::Settings { .. } => ErrorKind::BadConfig,
            Error::NodeStopped => ErrorKind::NodeStopped,
        }
    }

    /// Why the stream was reset, if this is a stream reset.
    pub fn reset_reason(&self) -> Option<ResetReason> {
        match self {
            Error::Overlay(nyx_overlay::Error::StreamReset { reason }) => Some(*reason),
            _ => None,
        }
    }

    /// A stream reset for `reason`.
    pub(crate) fn reset(reason: ResetReason) -> Self {
        Error::Overlay(nyx_overlay::Error::StreamReset { reason })
    }
}

fn reset_kind(reason: ResetReason) -> ErrorKind {
    match reason {
        ResetReason::Policy => ErrorKind::NotAllowed,
        ResetReason::Refused => ErrorKind::TargetRefused,
        ResetReason::Unreachable => ErrorKind::TargetUnreachable,
        ResetReason::Timeout => ErrorKind::Timeout,
        ResetReason::ResourceLimit => ErrorKind::ResourceLimit,
        _ => ErrorKind::Closed,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nyx_overlay::DestroyReason;

    #[test]
    fn kinds_follow_the_cause() {
        let cases: Vec<(Error, ErrorKind)> = vec![
            (Error::reset(ResetReason::Policy), ErrorKind::NotAllowed),
            (Error::reset(ResetReason::Refused), ErrorKind::TargetRefused),
            (
                Error::reset(ResetReason::Unreachable),
                ErrorKind::TargetUnreachable,
            ),
            (Error::reset(ResetReason::Timeout), ErrorKind::Timeout),
            (Error::reset(ResetReason::CircuitLost), ErrorKind::Closed),
            (
                nyx_overlay::Error::Path(PathError::NoExit {
                    target: "x:1".into(),
                })
                .into(),
                ErrorKind::NotAllowed,
            ),
            (
                nyx_overlay::Error::Path(PathError::NoGuard).into(),
                ErrorKind::NoPath,
            ),
            (
                nyx_overlay::Error::BuildFailed {
                    attempts: 3,
                    reason: DestroyReason::Timeout,
                }
                .into(),
                ErrorKind::CircuitFailed,
            ),
            (
                nyx_overlay::Error::BadTarget {
                    target: "x".into(),
                    reason: "no port",
                }
                .into(),
                ErrorKind::InvalidInput,
            ),
            (
                nyx_overlay::Error::TooManyStreams { max: 1 }.into(),
                ErrorKind::ResourceLimit,
            ),
            (Error::NodeStopped, ErrorKind::NodeStopped),
            (
                Error::Settings {
                    reason: "no directory".into(),
                },
                ErrorKind::BadConfig,
            ),
        ];
        for (error, kind) in cases {
            assert_eq!(error.kind(), kind, "{error}");
        }
        assert_eq!(
            Error::reset(ResetReason::Refused).reset_reason(),
            Some(ResetReason::Refused)
        );
        assert_eq!(Error::NodeStopped.reset_reason(), None);
    }
}
