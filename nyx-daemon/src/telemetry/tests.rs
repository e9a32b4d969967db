//! Log layers built without installing them: every test runs its own subscriber with
//! `tracing::dispatcher::with_default` and reads what it wrote.

use std::io::Write;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use nyx_core::redact::Redacted;

use super::*;

#[derive(Clone, Default)]
struct Capture(Arc<Mutex<Vec<u8>>>);

impl Write for Capture {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Capture {
    fn take(&self) -> String {
        String::from_utf8(std::mem::take(&mut *self.0.lock().unwrap())).unwrap()
    }
}

fn logs(level: &str, format: LogFormat) -> (Dispatch, Telemetry, Capture) {
    logs_with(LogConfig {
        level: level.to_owned(),
        format,
        ..LogConfig::default()
    })
}

fn logs_with(log: LogConfig) -> (Dispatch, Telemetry, Capture) {
    let capture = Capture::default();
    let writer = capture.clone();
    let (dispatch, t) = Telemetry::build_with_writer(
        &log,
        &TelemetryConfig::default(),
        BoxMakeWriter::new(move || writer.clone()),
        false,
    )
    .unwrap();
    (dispatch, t, capture)
}

fn emit() {
    tracing::debug!(target: "nyx_daemon::overlay", "debug line");
    tracing::info!(target: "nyx_daemon::overlay", "info line");
    tracing::warn!(target: "nyx_transport::quic", "warn line");
}

// Levels are changed inside `with_default`: with no global subscriber, tracing rebuilds its
// callsite cache against the current thread's default only.
#[test]
fn set_log_level_changes_the_filter_live() {
    let (dispatch, t, out) = logs("info", LogFormat::Text);
    tracing::dispatcher::with_default(&dispatch, || changes_the_filter_live(&t, &out));
}

fn changes_the_filter_live(t: &Telemetry, out: &Capture) {
    emit();
    let text = out.take();
    assert!(
        text.contains("info line") && text.contains("warn line"),
        "{text}"
    );
    assert!(!text.contains("debug line"), "{text}");

    t.set_log_level("debug").unwrap();
    assert_eq!(t.log_level(), "debug");
    emit();
    assert!(out.take().contains("debug line"));

    // Per-target directives.
    t.set_log_level("warn, nyx_daemon::overlay=debug").unwrap();
    emit();
    let text = out.take();
    assert!(
        text.contains("debug line") && text.contains("warn line"),
        "{text}"
    );

    t.set_log_level("nyx_transport=error,nyx_daemon=info")
        .unwrap();
    emit();
    let text = out.take();
    assert!(text.contains("info line"), "{text}");
    assert!(
        !text.contains("debug line") && !text.contains("warn line"),
        "{text}"
    );
}

#[test]
fn set_log_level_refuses_garbage_and_keeps_the_old_filter() {
    let (dispatch, t, out) = logs("warn", LogFormat::Text);
    let _default = tracing::dispatcher::set_default(&dispatch);
    emit();
    assert!(out.take().contains("warn line"));
    for bad in [
        "",
        "  ",
        "garbage",
        "verbose",
        "info,nyx_daemon=loud",
        "nyx daemon=info",
        "=info",
        "[span]=info",
    ] {
        match t.set_log_level(bad) {
            Err(Error::Telemetry { what, reason }) => {
                assert_eq!(what, "log level");
                assert!(!reason.is_empty());
            }
            other => panic!("{bad:?} was not refused: {other:?}"),
        }
        assert_eq!(t.log_level(), "warn", "after {bad:?}");
    }
    emit();
    let text = out.take();
    assert!(text.contains("warn line"), "{text}");
    assert!(!text.contains("info line"), "old filter kept: {text}");
}

#[test]
fn an_invalid_configured_level_is_refused_at_build() {
    let log = LogConfig {
        level: "chatty".to_owned(),
        ..LogConfig::default()
    };
    let err = Telemetry::build(&log, &TelemetryConfig::default()).unwrap_err();
    assert!(err.to_string().contains("chatty"), "{err}");
}

#[test]
fn json_format_writes_one_object_per_line() {
    let (dispatch, _t, out) = logs("info", LogFormat::Json);
    tracing::dispatcher::with_default(&dispatch, || {
        tracing::info!(cells = 3u32, "json line");
        tracing::info!("second");
    });
    let text = out.take();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2, "{text}");
    for line in &lines {
        assert!(line.starts_with('{') && line.ends_with('}'), "{line}");
        assert!(line.contains("\"level\":\"INFO\""), "{line}");
    }
    assert!(lines[0].contains("\"message\":\"json line\""), "{text}");
    assert!(lines[0].contains("\"cells\":3"), "{text}");
}

#[test]
fn text_format_is_plain_lines() {
    let (dispatch, _t, out) = logs("info", LogFormat::Text);
    tracing::dispatcher::with_default(&dispatch, || tracing::info!(cells = 3u32, "text line"));
    let text = out.take();
    assert_eq!(text.lines().count(), 1, "{text}");
    assert!(
        text.contains("INFO") && text.contains("text line cells=3"),
        "{text}"
    );
    assert!(
        !text.contains('\x1b'),
        "no colours when asked for none: {text:?}"
    );
}

/// `2026-11-22T01:35:01Z` by default, `2026-11-22T01:35:01.103343Z` when asked; the same
/// timer stamps JSON lines.
#[test]
fn timestamps_are_whole_seconds_unless_micros_are_asked_for() {
    use crate::daemon::config::LogTimestamps;
    // YYYY-MM-DDTHH:MM:SS, then `Z` or a fraction of `digits` digits and `Z`.
    let stamped = |text: &str, digits: usize| {
        let (date, rest) = text.split_at(19);
        let shape = date.char_indices().all(|(i, c)| match i {
            4 | 7 => c == '-',
            10 => c == 'T',
            13 | 16 => c == ':',
            _ => c.is_ascii_digit(),
        });
        let fraction = match digits {
            0 => rest.starts_with('Z'),
            n => {
                rest.starts_with('.')
                    && rest[1..=n].chars().all(|c| c.is_ascii_digit())
                    && rest[n + 1..].starts_with('Z')
            }
        };
        shape && fraction
    };
    for (timestamps, digits) in [(LogTimestamps::Seconds, 0), (LogTimestamps::Micros, 6)] {
        for format in [LogFormat::Text, LogFormat::Json] {
            let (dispatch, _t, out) = logs_with(LogConfig {
                timestamps,
                format,
                ..LogConfig::default()
            });
            tracing::dispatcher::with_default(&dispatch, || tracing::info!("stamped"));
            let text = out.take();
            let time = match format {
                LogFormat::Text => text.as_str(),
                LogFormat::Json => text
                    .split_once("\"timestamp\":\"")
                    .map(|(_, t)| t)
                    .unwrap_or_default(),
            };
            assert!(stamped(time, digits), "{timestamps:?} {format:?}: {text}");
        }
    }
}

/// A bare `debug` leaves out the HTTP/2 and gRPC crates' per-frame events; `trace`, or a
/// directive that names the crate, lets them through. Their warnings always pass.
#[test]
fn http2_and_grpc_frames_only_at_trace() {
    let frames = || {
        tracing::debug!(target: "h2::codec::framed_write", "send frame");
        tracing::debug!(target: "tonic::transport::server", "tonic call");
        tracing::debug!(target: "hyper_util::client", "hyper pool");
        tracing::debug!(target: "tower::buffer::worker", "tower poll");
        tracing::warn!(target: "h2::proto", "h2 warning");
        tracing::debug!(target: "nyx_daemon::control", "own debug");
    };
    let run = |level: &str| {
        let (dispatch, _t, out) = logs(level, LogFormat::Text);
        tracing::dispatcher::with_default(&dispatch, frames);
        out.take()
    };
    let debug = run("debug");
    assert!(
        debug.contains("own debug") && debug.contains("h2 warning"),
        "{debug}"
    );
    for quiet in ["send frame", "tonic call", "hyper pool", "tower poll"] {
        assert!(!debug.contains(quiet), "{quiet} at debug: {debug}");
    }
    let trace = run("trace");
    for loud in [
        "send frame",
        "tonic call",
        "hyper pool",
        "tower poll",
        "own debug",
    ] {
        assert!(trace.contains(loud), "{loud} missing at trace: {trace}");
    }
    let named = run("debug,h2=debug");
    assert!(named.contains("send frame"), "{named}");
    assert!(!named.contains("tonic call"), "{named}");
}

/// The switch is off in this test binary (only `Telemetry::init` turns it on, and no unit
/// test calls it): a wrapped address never reaches the log.
#[test]
fn redacted_addresses_are_scrubbed_in_the_log() {
    let (dispatch, _t, out) = logs("debug", LogFormat::Json);
    let addr: SocketAddr = "198.51.100.23:4433".parse().unwrap();
    tracing::dispatcher::with_default(&dispatch, || {
        tracing::debug!(peer = %Redacted(addr), "link up");
    });
    let text = out.take();
    assert!(text.contains("[scrubbed]"), "{text}");
    assert!(!text.contains("198.51.100.23"), "{text}");
}

#[test]
fn exporter_targets_are_recognised_by_path() {
    assert!(is_exporter_target("h2"));
    assert!(is_exporter_target("h2::codec"));
    assert!(is_exporter_target("opentelemetry_sdk::trace"));
    assert!(is_exporter_target("tonic::transport"));
    assert!(!is_exporter_target("h2o"));
    assert!(!is_exporter_target("nyx_daemon::overlay"));
    assert!(!is_exporter_target("towering"));
}

#[test]
fn without_otlp_nothing_is_exported_and_shutdown_is_immediate() {
    let (_dispatch, t, _out) = logs("info", LogFormat::Text);
    assert!(!t.otlp_enabled());
    assert!(!t.metrics_recorder().is_enabled());
    t.metrics_recorder().record(MetricsSnapshot::default());
    t.shutdown().unwrap();
}

#[test]
fn otlp_outside_a_runtime_is_a_clear_error() {
    let telemetry = TelemetryConfig {
        otlp_endpoint: Some("http://127.0.0.1:9".to_owned()),
        ..TelemetryConfig::default()
    };
    let err = Telemetry::build(&LogConfig::default(), &telemetry).unwrap_err();
    assert!(err.to_string().contains("Tokio runtime"), "{err}");
}
