//! OpenTelemetry export over OTLP/gRPC: the span and metric pipelines.
//!
//! What it is for: building the SDK providers [`super::Telemetry`] owns (a batch span
//! processor and a periodic metric reader, each with a tonic exporter to the collector that
//! [`settings`] resolves from the configuration and the `OTEL_*` variables, each guarded by
//! one shared [`outage::Outage`] so that a collector that is down is reported once and
//! tried less and less often), and the [`MetricsRecorder`] through which the daemon hands
//! snapshots to them.
//!
//! What it is not for: logs (they go to stderr through `tracing-subscriber`), or
//! Prometheus (see [`super::prometheus`]). The spans themselves are made where the work is
//! (circuit builds and stream opens in nyx-node, directory fetches in the daemon).

pub(super) mod outage;
mod recorder;
pub(super) mod settings;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use opentelemetry_otlp::WithExportConfig as _;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::metrics::{PeriodicReader, SdkMeterProvider};
use opentelemetry_sdk::trace::SdkTracerProvider;

use crate::Error;
pub use recorder::MetricsRecorder;
pub(super) use recorder::meter;
use settings::OtlpSettings;

/// The instrumentation scope of every span and instrument.
pub(super) const SCOPE: &str = "nyx-daemon";

/// The SDK providers of a running OTLP export.
#[derive(Debug)]
pub(super) struct OtelPipeline {
    pub(super) tracer_provider: SdkTracerProvider,
    pub(super) meter_provider: SdkMeterProvider,
    pub(super) interval: Duration,
}

impl OtelPipeline {
    /// Exporters as `s` says; must run inside a Tokio runtime (the gRPC channel spawns its
    /// connection task there).
    pub(super) fn new(s: &OtlpSettings) -> Result<Self, Error> {
        let fail = |e: &dyn std::fmt::Display| Error::Telemetry {
            what: "otlp",
            reason: e.to_string(),
        };
        if tokio::runtime::Handle::try_current().is_err() {
            return Err(fail(&"OTLP export must be set up inside a Tokio runtime"));
        }
        // The builder's detectors read OTEL_RESOURCE_ATTRIBUTES and OTEL_SERVICE_NAME.
        let mut resource = Resource::builder();
        if s.set_service_name {
            resource = resource.with_service_name(s.service_name.clone());
        }
        let resource = resource.build();
        let outage = Arc::new(Mutex::new(outage::Outage::new(s.interval)));

        let mut spans = opentelemetry_otlp::SpanExporter::builder().with_tonic();
        if let Some(endpoint) = &s.endpoint {
            spans = spans.with_endpoint(endpoint);
        }
        if let Some(timeout) = s.timeout {
            spans = spans.with_timeout(timeout);
        }
        let spans = outage::Guarded::new(spans.build().map_err(|e| fail(&e))?, outage.clone());
        let tracer_provider = SdkTracerProvider::builder()
            .with_batch_exporter(spans)
            .with_resource(resource.clone())
            .build();

        let mut metrics = opentelemetry_otlp::MetricExporter::builder().with_tonic();
        if let Some(endpoint) = &s.endpoint {
            metrics = metrics.with_endpoint(endpoint);
        }
        if let Some(timeout) = s.timeout {
            metrics = metrics.with_timeout(timeout);
        }
        let metrics = outage::Guarded::new(metrics.build().map_err(|e| fail(&e))?, outage);
        let reader = PeriodicReader::builder(metrics)
            .with_interval(s.interval)
            .build();
        let meter_provider = SdkMeterProvider::builder()
            .with_reader(reader)
            .with_resource(resource)
            .build();
        Ok(OtelPipeline {
            tracer_provider,
            meter_provider,
            interval: s.interval,
        })
    }

    /// Flush and stop both providers (each waits for its exporter, bounded by the SDK).
    pub(super) fn shutdown(&self, timeout: Duration) -> Result<(), String> {
        let spans = self.tracer_provider.shutdown_with_timeout(timeout);
        let metrics = self.meter_provider.shutdown_with_timeout(timeout);
        match (spans, metrics) {
            (Ok(()), Ok(())) => Ok(()),
            (Err(e), _) => Err(format!("spans: {e}")),
            (_, Err(e)) => Err(format!("metrics: {e}")),
        }
    }
}
