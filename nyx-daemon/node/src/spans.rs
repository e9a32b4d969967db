//! The node's `tracing` spans: one per circuit build and one per stream open, for whoever
//! exports spans (nyx-daemon sends them over OTLP; an embedder may install any subscriber).
//!
//! What it is for: naming the spans and their fields in one place, and recording how each
//! ended. Fields are privacy-safe by construction: counts, kinds and outcomes only, never a
//! target, an address, a relay's identity or an isolation group (a trace collector is a
//! place such data would leak to, and a circuit's path with its time is what an observer
//! needs to link a user to a destination).
//!
//! What it is not for: events (each module logs its own) or timing (the span's own start
//! and end are the timing).

use tracing::Span;
use tracing::field::Empty;

use crate::Error;
use nyx_overlay::path::ExitRequirement;

/// `circuit_build`: fields `exit` (`any` or `target`: the requirement's kind, not the
/// target), then `hops` and `outcome` (`built`, or the [`ErrorKind`](crate::ErrorKind)).
pub(crate) fn circuit_build(req: &ExitRequirement) -> Span {
    let exit = match req {
        ExitRequirement::Any => "any",
        ExitRequirement::Target(_) => "target",
    };
    tracing::info_span!(
        "circuit_build",
        exit,
        hops = Empty,
        outcome = Empty,
        otel.status_code = Empty
    )
}

/// `stream_open`: fields `attempts` (circuits tried, Tor's retry rule) and `outcome`
/// (`opened`, or the error's kind and reset reason). A build it waits for is a child span.
pub(crate) fn stream_open() -> Span {
    tracing::info_span!(
        "stream_open",
        attempts = Empty,
        outcome = Empty,
        otel.status_code = Empty
    )
}

/// Record on `span` how the work it covers ended: `ok` on success; on failure the error's
/// kind (and a stream reset's reason), and the OTel error status.
pub(crate) fn record_outcome<T>(span: &Span, result: &Result<T, Error>, ok: &'static str) {
    match result {
        Ok(_) => {
            span.record("outcome", ok);
        }
        Err(e) => {
            let outcome = match e.reset_reason() {
                Some(reason) => format!("{:?}: {reason:?}", e.kind()),
                None => format!("{:?}", e.kind()),
            };
            span.record("outcome", outcome.as_str());
            span.record("otel.status_code", "ERROR");
        }
    }
}
