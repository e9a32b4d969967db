//! A tiny OpenTelemetry collector on 127.0.0.1: both OTLP/gRPC services on one port,
//! keeping every request it receives.
#![allow(dead_code, clippy::unwrap_used)]

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

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
use opentelemetry_proto::tonic::trace::v1::Span;
use tonic::codegen::{BoxFuture, Context, Poll, Service, http};

/// What the collector received.
#[derive(Clone, Default)]
pub(crate) struct Store {
    pub(crate) traces: Arc<Mutex<Vec<ExportTraceServiceRequest>>>,
    pub(crate) metrics: Arc<Mutex<Vec<ExportMetricsServiceRequest>>>,
}

impl Store {
    /// Every span received, with its resource's attributes.
    pub(crate) fn spans(&self) -> Vec<(Vec<KeyValue>, Span)> {
        let traces = self.traces.lock().unwrap();
        let mut out = Vec::new();
        for rs in traces.iter().flat_map(|r| &r.resource_spans) {
            let resource = rs
                .resource
                .as_ref()
                .map(|r| r.attributes.clone())
                .unwrap_or_default();
            for span in rs.scope_spans.iter().flat_map(|s| &s.spans) {
                out.push((resource.clone(), span.clone()));
            }
        }
        out
    }

    /// How many metric export requests arrived.
    pub(crate) fn metric_exports(&self) -> usize {
        self.metrics.lock().unwrap().len()
    }
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
struct Router {
    traces: TraceServiceServer<Store>,
    metrics: MetricsServiceServer<Store>,
}

impl Service<http::Request<tonic::body::Body>> for Router {
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

/// A running collector; stopped when dropped.
pub(crate) struct Collector {
    pub(crate) addr: SocketAddr,
    pub(crate) store: Store,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    server: Option<tokio::task::JoinHandle<Result<(), tonic::transport::Error>>>,
}

impl Collector {
    /// Serve on `addr` (port 0 for any free port); inside a Tokio runtime.
    pub(crate) async fn start(addr: &str) -> Collector {
        let listener = tokio::net::TcpListener::bind(addr).await.unwrap();
        let addr = listener.local_addr().unwrap();
        let store = Store::default();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let router = Router {
            traces: TraceServiceServer::new(store.clone()),
            metrics: MetricsServiceServer::new(store.clone()),
        };
        let server = tokio::spawn(
            tonic::transport::Server::builder().serve_with_incoming_shutdown(
                router,
                tonic::transport::server::TcpIncoming::from(listener),
                async move {
                    let _ = stopped.await;
                },
            ),
        );
        Collector {
            addr,
            store,
            stop: Some(stop),
            server: Some(server),
        }
    }

    /// `http://ADDR`, for `telemetry.otlp_endpoint` or `OTEL_EXPORTER_OTLP_ENDPOINT`.
    pub(crate) fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Stop serving and wait for the server to end.
    pub(crate) async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(server) = self.server.take() {
            server.await.unwrap().unwrap();
        }
    }
}

impl Drop for Collector {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

/// The string value of attribute `key`.
pub(crate) fn text(kv: &[KeyValue], key: &str) -> Option<String> {
    kv.iter()
        .find(|kv| kv.key == key)
        .and_then(|kv| kv.value.as_ref())
        .and_then(|v: &AnyValue| match &v.value {
            Some(any_value::Value::StringValue(s)) => Some(s.clone()),
            _ => None,
        })
}

/// Every attribute value of `kv` as text (for checks that nothing private is in them).
pub(crate) fn values(kv: &[KeyValue]) -> Vec<String> {
    kv.iter()
        .filter_map(|kv| kv.value.as_ref())
        .map(|v| match &v.value {
            Some(any_value::Value::StringValue(s)) => s.clone(),
            Some(any_value::Value::IntValue(i)) => i.to_string(),
            Some(any_value::Value::BoolValue(b)) => b.to_string(),
            Some(any_value::Value::DoubleValue(d)) => d.to_string(),
            other => format!("{other:?}"),
        })
        .collect()
}
