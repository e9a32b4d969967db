//! OTLP export end to end: a tiny gRPC collector on 127.0.0.1 receives the spans and metrics
//! that `Telemetry` flushes at shutdown, and the daemon rides out a collector that is down.
#![allow(clippy::unwrap_used)]

#[path = "support/collector.rs"]
mod collector;
mod support;

use std::time::Duration;

use collector::{Collector, text};
use nyx_core::redact::Redacted;
use nyx_daemon::daemon::config::{LogConfig, TelemetryConfig};
use nyx_daemon::telemetry::{ExtraMetric, MetricsSnapshot, Telemetry};
use opentelemetry_proto::tonic::metrics::v1::{metric, number_data_point};

/// Guards against a hang; never reached when export works.
const GUARD: Duration = Duration::from_secs(30);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spans_and_metrics_reach_the_collector_with_the_service_name() {
    let collector = Collector::start("127.0.0.1:0").await;
    let store = collector.store.clone();

    let telemetry = TelemetryConfig {
        otlp_endpoint: Some(collector.endpoint()),
        service_name: Some("nyx-otlp-test".to_owned()),
        // Nothing is exported before shutdown's flush.
        export_interval: Some(Duration::from_secs(60)),
        ..TelemetryConfig::default()
    };
    let (dispatch, t) = Telemetry::build(&LogConfig::default(), &telemetry).unwrap();
    tracing::dispatcher::with_default(&dispatch, || {
        let span = tracing::info_span!("circuit_build", hops = 3);
        let _entered = span.enter();
        tracing::info!(peer = %Redacted("192.0.2.1:443"), "extending");
    });
    let mut snapshot = MetricsSnapshot::default();
    snapshot.node.overlay.relayed_forward = 7;
    snapshot.node.links = 2;
    snapshot.extra.push(ExtraMetric::counter(
        "nyx_socks_connections_total",
        "SOCKS.",
        4,
    ));
    t.metrics_recorder().record(snapshot);

    let shutdown = tokio::task::spawn_blocking(move || t.shutdown_within(Duration::from_secs(10)));
    tokio::time::timeout(GUARD, shutdown)
        .await
        .unwrap()
        .unwrap()
        .unwrap();

    let traces = store.traces.lock().unwrap().clone();
    let resource_spans: Vec<_> = traces.iter().flat_map(|r| &r.resource_spans).collect();
    let rs = resource_spans
        .iter()
        .find(|rs| {
            rs.scope_spans
                .iter()
                .flat_map(|s| &s.spans)
                .any(|s| s.name == "circuit_build")
        })
        .unwrap_or_else(|| panic!("no circuit_build span in {traces:#?}"));
    let resource = rs.resource.as_ref().unwrap();
    assert_eq!(
        text(&resource.attributes, "service.name").as_deref(),
        Some("nyx-otlp-test")
    );
    let span = rs
        .scope_spans
        .iter()
        .flat_map(|s| &s.spans)
        .find(|s| s.name == "circuit_build");
    let event = span
        .unwrap()
        .events
        .iter()
        .find(|e| e.name == "extending")
        .unwrap();
    // Exported events are as scrubbed as the log.
    assert_eq!(
        text(&event.attributes, "peer").as_deref(),
        Some("[scrubbed]")
    );

    let metrics = store.metrics.lock().unwrap().clone();
    let mut found = Vec::new();
    for rm in metrics.iter().flat_map(|r| &r.resource_metrics) {
        let resource = rm.resource.as_ref().unwrap();
        assert_eq!(
            text(&resource.attributes, "service.name").as_deref(),
            Some("nyx-otlp-test")
        );
        for m in rm.scope_metrics.iter().flat_map(|s| &s.metrics) {
            let points = match &m.data {
                Some(metric::Data::Sum(s)) => &s.data_points,
                Some(metric::Data::Gauge(g)) => &g.data_points,
                _ => continue,
            };
            for p in points {
                let value = match p.value {
                    Some(number_data_point::Value::AsDouble(v)) => v,
                    Some(number_data_point::Value::AsInt(v)) => v as f64,
                    None => continue,
                };
                let direction = text(&p.attributes, "direction").unwrap_or_default();
                found.push(format!("{} {direction} {value}", m.name));
            }
        }
    }
    for want in [
        "nyx_cells_relayed forward 7",
        "nyx_cells_relayed backward 0",
        "nyx_links  2",
        "nyx_socks_connections  4",
    ] {
        assert!(
            found.iter().any(|f| f == want),
            "missing {want:?} in {found:#?}"
        );
    }

    tokio::time::timeout(GUARD, collector.stop()).await.unwrap();
}

/// The daemon itself, told by the standard variables to export to a collector that is not
/// listening yet: one warning however many exports fail, then, once the collector listens,
/// exports resume (with the service name from `OTEL_SERVICE_NAME`) and one line says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_collector_outage_is_logged_once_and_export_resumes() {
    use std::io::BufRead as _;
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let dir = support::temp_dir("otlp-outage");
    let config = support::loopback_config(&dir);
    let mut cmd = support::daemon_command();
    cmd.arg("--config")
        .arg(&config)
        .env(
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            format!("http://127.0.0.1:{port}"),
        )
        .env("OTEL_METRIC_EXPORT_INTERVAL", "200")
        .env("OTEL_SERVICE_NAME", "nyx-outage-test")
        .env_remove("OTEL_SDK_DISABLED")
        .stderr(std::process::Stdio::piped());
    let mut daemon = support::DaemonProcess::spawn(cmd);
    let stderr = daemon.child.stderr.take().unwrap();
    let (tx, lines) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || {
        for line in std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
        {
            let _ = tx.send(line);
        }
    });
    // Exports every 200 ms: at least a few fail (at 0.2, 0.4, 0.8 and 1.6 s) meanwhile.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let collector = Collector::start(&format!("127.0.0.1:{port}")).await;
    let deadline = tokio::time::Instant::now() + GUARD;
    while collector.store.metric_exports() == 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "no export reached the collector once it listened"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let metrics = collector.store.metrics.lock().unwrap().clone();
    let resource = metrics[0].resource_metrics[0].resource.as_ref().unwrap();
    assert_eq!(
        text(&resource.attributes, "service.name").as_deref(),
        Some("nyx-outage-test")
    );
    assert_eq!(daemon.stop_with("-TERM"), Some(0));
    reader.join().unwrap();
    let log: Vec<String> = lines.iter().collect();
    let count = |what: &str| log.iter().filter(|l| l.contains(what)).count();
    assert_eq!(count("OTLP export failed"), 1, "{log:#?}");
    assert_eq!(count("OTLP collector answers again"), 1, "{log:#?}");
    assert_eq!(count("ERROR"), 0, "{log:#?}");
    collector.stop().await;
    std::fs::remove_dir_all(&dir).unwrap();
}
