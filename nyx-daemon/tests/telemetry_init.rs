//! `Telemetry::init` for real: the global subscriber, with OTLP export to a collector that
//! is not there. A file of its own because a process has one global subscriber.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use nyx_core::redact::{Redacted, sensitive_logging};
use nyx_daemon::Error;
use nyx_daemon::daemon::config::{LogConfig, LogFormat, TelemetryConfig};
use nyx_daemon::telemetry::{ExtraMetric, MetricsSnapshot, Telemetry};

/// Guards against a hang; never reached when shutdown keeps its bound.
const GUARD: Duration = Duration::from_secs(30);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_collector_neither_fails_init_nor_hangs_shutdown() {
    // A port that was free a moment ago: nothing listens there.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let telemetry = TelemetryConfig {
        otlp_endpoint: Some(format!("http://127.0.0.1:{port}")),
        export_interval: Some(Duration::from_millis(100)),
        ..TelemetryConfig::default()
    };
    let log = LogConfig {
        level: "warn".to_owned(),
        format: LogFormat::Json,
        log_sensitive: true,
        ..LogConfig::default()
    };
    assert!(!sensitive_logging());
    let t = Telemetry::init(&log, &telemetry).unwrap();
    assert!(t.otlp_enabled());
    assert!(sensitive_logging(), "init applies log.log_sensitive");

    // A second global subscriber is refused, and leaves the switch alone.
    let again = LogConfig {
        log_sensitive: false,
        ..LogConfig::default()
    };
    match Telemetry::init(&again, &TelemetryConfig::default()) {
        Err(Error::Telemetry { what, .. }) => assert_eq!(what, "install subscriber"),
        other => panic!("second init: {other:?}"),
    }
    assert!(sensitive_logging());

    // Spans, events and metrics flow towards the missing collector.
    {
        let span = tracing::info_span!("circuit_build", hops = 3);
        let _entered = span.enter();
        tracing::warn!(peer = %Redacted("192.0.2.1:443"), "inside a span");
    }
    let mut snapshot = MetricsSnapshot::default();
    snapshot.node.overlay.relayed_forward = 9;
    snapshot.extra.push(ExtraMetric::gauge(
        "nyx_socks_active",
        "SOCKS connections open.",
        1.0,
    ));
    t.metrics_recorder().record(snapshot);
    assert!(t.metrics_recorder().is_enabled());

    // The live level works on the global subscriber too.
    t.set_log_level("error,nyx_daemon=info").unwrap();
    assert!(t.set_log_level("loud").is_err());
    assert_eq!(t.log_level(), "error,nyx_daemon=info");

    // Let a few exports fail.
    tokio::time::sleep(Duration::from_millis(350)).await;

    let bound = Duration::from_secs(2);
    let shutdown = tokio::task::spawn_blocking(move || t.shutdown_within(bound));
    // Ok or an error naming the failed export: either way it returned.
    let result = tokio::time::timeout(GUARD, shutdown)
        .await
        .unwrap()
        .unwrap();
    if let Err(e) = result {
        assert!(
            matches!(
                e,
                Error::Telemetry {
                    what: "shutdown",
                    ..
                }
            ),
            "{e}"
        );
    }
}

/// A collector that accepts connections and never answers: the final export cannot finish,
/// and shutdown gives up at its bound instead of waiting for the exporter's timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_collector_cannot_hold_shutdown_past_its_bound() {
    // Never accepted: the kernel completes the handshakes, nobody speaks HTTP/2.
    let blackhole = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let telemetry = TelemetryConfig {
        otlp_endpoint: Some(format!("http://{}", blackhole.local_addr().unwrap())),
        export_interval: Some(Duration::from_secs(5)),
        ..TelemetryConfig::default()
    };
    // Built, not installed: the other test in this process owns the global subscriber.
    let (dispatch, t) = Telemetry::build(&LogConfig::default(), &telemetry).unwrap();
    tracing::dispatcher::with_default(&dispatch, || {
        let span = tracing::info_span!("exported");
        let _entered = span.enter();
        tracing::info!("an event in an exported span");
    });
    t.metrics_recorder().record(MetricsSnapshot::default());

    let bound = Duration::from_millis(500);
    let shutdown = tokio::task::spawn_blocking(move || t.shutdown_within(bound));
    let result = tokio::time::timeout(GUARD, shutdown)
        .await
        .unwrap()
        .unwrap();
    match result {
        Err(Error::Telemetry { what, reason }) => {
            assert_eq!(what, "shutdown");
            assert!(reason.contains("abandoned"), "{reason}");
        }
        other => panic!("the export cannot have finished: {other:?}"),
    }
    drop(blackhole);
}
