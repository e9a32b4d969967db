//! OTLP export end to end: a tiny gRPC collector on 127.0.0.1 receives the spans and metrics
//! that `Telemetry` flushes at shutdown.
#![allow(clippy::unwrap_used)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use nyx_core::redact::Redacted;
use nyx_daemon::daemon::config::{LogConfig, TelemetryConfig};
use nyx_daemon::telemetry::{ExtraMetric, MetricsSnapshot, Telemetry};
use opentelemetry_proto::tonic::collector::metrics::v1::metrics_service_server::{
    MetricsService, MetricsServiceServer,
};
use opentelemetry_proto::tonic::collector::metrics::v1::{
    ExportMetricsServiceRequest, ExportMetricsServiceResponse,
};
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use opentelemetry_proto::tonic::metrics::v1::{metric, number_data_point};
use tonic::codegen::{BoxFuture, Context, Poll, Service, http};

/// Guards against a hang; never reached when export works.
const GUARD: Duration = Duration::from_secs(30);

#[derive(Clone, Default)]
struct Store {
    traces: Arc<Mutex<Vec<ExportTraceServiceRequest>>>,
    metrics: Arc<Mutex<Vec<ExportMetricsServiceRequest>>>,
}

#[tonic::async_trait]
impl TraceService for Store {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        self.traces.lock().unwrap().push(request.into_inner());
        Ok(tonic::Response::new(ExportTraceServiceResponse::default()))
    }
}

#[tonic::async_trait]
impl MetricsService for Store {
    async fn export(
        &self,
        request: tonic::Request<ExportMetricsServiceRequest>,
    ) -> Result<tonic::Response<ExportMetricsServiceResponse>, tonic::Status> {
        self.metrics.lock().unwrap().push(request.into_inner());
        Ok(tonic::Response::new(ExportMetricsServiceResponse::default()))
    }
}

/// Both collector services on one port, routed by the gRPC path.
#[derive(Clone)]
struct Collector {
    traces: TraceServiceServer<Store>,
    metrics: MetricsServiceServer<Store>,
}

impl Service<http::Request<tonic::body::Body>> for Collector {
    type Response = http::Response<tonic::body::Body>;
    type Error = std::convert::Infallible;
    type Future = BoxFuture<Self::Response, Self::Error>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<tonic::body::Body>) -> Self::Future {
        if req.uri().path().contains(".collector.trace.") {
            self.traces.call(req)
        } else {
            self.metrics.call(req)
        }
    }
}

fn text(kv: &[KeyValue], key: &str) -> Option<String> {
    kv.iter()
        .find(|kv| kv.key == key)
        .and_then(|kv| kv.value.as_ref())
        .and_then(|v: &AnyValue| match &v.value {
            Some(any_value::Value::StringValue(s)) => Some(s.clone()),
            _ => None,
        })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spans_and_metrics_reach_the_collector_with_the_service_name() {
    let store = Store::default();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let collector = Collector {
        traces: TraceServiceServer::new(store.clone()),
        metrics: MetricsServiceServer::new(store.clone()),
    };
    let server = tokio::spawn(
        tonic::transport::Server::builder().serve_with_incoming_shutdown(
            collector,
            tonic::transport::server::TcpIncoming::from(listener),
            async move {
                let _ = stopped.await;
            },
        ),
    );

    let telemetry = TelemetryConfig {
        otlp_endpoint: Some(format!("http://{addr}")),
        service_name: "nyx-otlp-test".to_owned(),
        // Nothing is exported before shutdown's flush.
        export_interval: Duration::from_secs(60),
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

    stop.send(()).unwrap();
    tokio::time::timeout(GUARD, server)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
}
