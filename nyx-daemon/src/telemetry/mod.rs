//! Telemetry of the node daemon: logs, traces and metrics.
//!
//! What it is for:
//!
//! * [`Telemetry::init`] installs the process's `tracing` subscriber: an `EnvFilter` that
//!   [`Telemetry::set_log_level`] can change while the daemon runs, human-readable or JSON
//!   lines on stderr (timestamps to the second unless `log.timestamps` asks for more),
//!   and, when `telemetry.otlp_endpoint` or the standard `OTEL_EXPORTER_OTLP_ENDPOINT`
//!   names a collector, spans and metrics exported to it over OTLP/gRPC. It also sets the [`nyx_core::redact`] switch
//!   from `log.log_sensitive`.
//! * [`metrics`]: [`MetricsSnapshot`] and its Prometheus text rendering;
//!   [`MetricsRecorder`] hands snapshots to the OTLP exporter.
//! * [`histogram`]: distributions (circuit build times, application streams).
//! * [`process_metrics`]: `nyx_build_info` and the standard `process_*` metrics.
//! * [`prometheus`]: the hyper server for `GET /metrics`.
//!
//! What it is not for: counting (the node, the transport and the stream muxes keep their own
//! counters; only the [`histogram`]s are filled here, from the daemon's streams and the
//! node's events) or deciding what is logged where (each module logs; this one routes and
//! filters). The metric names, log formats and privacy rules are described in
//! docs/telemetry.md.
//!
//! A process has one global subscriber: [`Telemetry::init`] can succeed once. Tests and
//! embedders that want the layers without installing them use [`Telemetry::build`] and
//! `tracing::dispatcher::with_default`.

mod families;
pub mod histogram;
mod log_filter;
mod log_time;
pub mod metrics;
mod otel;
mod process;
pub mod prometheus;
mod transport_families;

use std::io::IsTerminal as _;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use crate::daemon::config::{LogConfig, LogFormat, TelemetryConfig};
use opentelemetry::trace::TracerProvider as _;
use tracing::Dispatch;
use tracing_subscriber::fmt::writer::BoxMakeWriter;
use tracing_subscriber::layer::{Layered, SubscriberExt as _};
use tracing_subscriber::util::SubscriberInitExt as _;
use tracing_subscriber::{EnvFilter, Layer, Registry, filter, reload};

use crate::Error;
pub use histogram::{Histogram, HistogramMetric, StreamHistograms};
pub use log_filter::parse_log_filter;
pub use metrics::{
    ExtraMetric, Label, MetricKind, MetricsSnapshot, SnapshotFuture, SnapshotSource,
    render_prometheus, snapshot_source,
};
pub use otel::MetricsRecorder;
use otel::OtelPipeline;
pub use otel::outage::MAX_BACKOFF as OTLP_MAX_BACKOFF;
pub use otel::settings::{
    DEFAULT_EXPORT_INTERVAL, DEFAULT_SERVICE_NAME, MAX_EXPORT_INTERVAL, MIN_EXPORT_INTERVAL,
    OtlpSettings, check_endpoint, process_env,
};
pub use process::process_metrics;

/// How long [`Telemetry::shutdown`] waits for the exporters to flush.
pub const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(3);

/// Targets of the exporter's own machinery: never turned into exported spans, or every
/// export would produce spans to export.
const EXPORTER_TARGETS: [&str; 8] = [
    "h2",
    "hyper",
    "hyper_util",
    "tonic",
    "tower",
    "opentelemetry",
    "opentelemetry_sdk",
    "opentelemetry_otlp",
];

type Base = Layered<reload::Layer<EnvFilter, Registry>, Registry>;
type BoxedLayer = Box<dyn Layer<Base> + Send + Sync>;

/// The daemon's logging and telemetry, once set up. Call [`Telemetry::shutdown`] before the
/// process exits so that buffered spans and metrics are sent.
#[derive(Debug)]
pub struct Telemetry {
    filter: reload::Handle<EnvFilter, Registry>,
    level: Mutex<String>,
    otel: Option<OtelPipeline>,
    recorder: MetricsRecorder,
}

impl Telemetry {
    /// Set up logging (and OTLP export when configured) and install it as the process's
    /// global subscriber. Sets the [`nyx_core::redact`] switch from `log.log_sensitive`.
    ///
    /// With an OTLP endpoint this must be called inside a Tokio runtime; an unreachable
    /// collector is not an error (exports fail later, and are reported in the log).
    pub fn init(log: &LogConfig, telemetry: &TelemetryConfig) -> Result<Telemetry, Error> {
        let (dispatch, t) = Self::build(log, telemetry)?;
        if let Err(e) = dispatch.try_init() {
            let _ = t.shutdown();
            return Err(Error::Telemetry {
                what: "install subscriber",
                reason: e.to_string(),
            });
        }
        nyx_core::redact::set_sensitive_logging(log.log_sensitive);
        Ok(t)
    }

    /// The subscriber [`Telemetry::init`] would install, without installing it (nor
    /// touching the redaction switch): for tests, and for embedders that run it with
    /// `tracing::dispatcher::with_default`. While no global subscriber is installed, call
    /// [`set_log_level`](Self::set_log_level) inside that scope: `tracing` then rebuilds its
    /// callsite cache against the current thread's subscriber only.
    pub fn build(
        log: &LogConfig,
        telemetry: &TelemetryConfig,
    ) -> Result<(Dispatch, Telemetry), Error> {
        let ansi = std::io::stderr().is_terminal();
        Self::build_with_writer(log, telemetry, BoxMakeWriter::new(std::io::stderr), ansi)
    }

    fn build_with_writer(
        log: &LogConfig,
        telemetry: &TelemetryConfig,
        writer: BoxMakeWriter,
        ansi: bool,
    ) -> Result<(Dispatch, Telemetry), Error> {
        let (filter_layer, filter) = reload::Layer::new(parse_filter(&log.level)?);
        let mut layers: Vec<BoxedLayer> = Vec::with_capacity(2);
        let clock = log_time::LogClock(log.timestamps);
        layers.push(match log.format {
            LogFormat::Json => tracing_subscriber::fmt::layer()
                .json()
                .with_timer(clock)
                .with_writer(writer)
                .boxed(),
            LogFormat::Text => tracing_subscriber::fmt::layer()
                .with_ansi(ansi)
                .with_timer(clock)
                .with_writer(writer)
                .boxed(),
        });
        let mut otel = None;
        let mut recorder = MetricsRecorder::disabled();
        let settings =
            OtlpSettings::resolve(telemetry, &process_env).map_err(|reason| Error::Telemetry {
                what: "otlp",
                reason,
            })?;
        if let Some(settings) = &settings {
            let pipeline = OtelPipeline::new(settings)?;
            let tracer = pipeline.tracer_provider.tracer(otel::SCOPE);
            let not_exporter = filter::filter_fn(|meta| !is_exporter_target(meta.target()));
            layers.push(
                tracing_opentelemetry::layer()
                    .with_tracer(tracer)
                    .with_filter(not_exporter)
                    .boxed(),
            );
            recorder = MetricsRecorder::new(otel::meter(&pipeline.meter_provider));
            otel = Some(pipeline);
        }
        let subscriber = Registry::default().with(filter_layer).with(layers);
        let t = Telemetry {
            filter,
            level: Mutex::new(log.level.clone()),
            otel,
            recorder,
        };
        Ok((Dispatch::new(subscriber), t))
    }

    /// Replace the log filter with `directives` (the syntax of `log.level`: a level or
    /// `target=level` items). Invalid directives are refused with the reason, and the
    /// current filter stays.
    pub fn set_log_level(&self, directives: &str) -> Result<(), Error> {
        let new = parse_filter(directives)?;
        let mut level = self.level.lock().unwrap_or_else(PoisonError::into_inner);
        self.filter.reload(new).map_err(|e| Error::Telemetry {
            what: "log level",
            reason: e.to_string(),
        })?;
        *level = directives.to_owned();
        Ok(())
    }

    /// The filter directives in force.
    pub fn log_level(&self) -> String {
        self.level
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Whether spans and metrics are exported over OTLP.
    pub fn otlp_enabled(&self) -> bool {
        self.otel.is_some()
    }

    /// How often metrics are exported over OTLP, when they are.
    pub fn otlp_interval(&self) -> Option<Duration> {
        self.otel.as_ref().map(|o| o.interval)
    }

    /// The handle through which the daemon feeds metric snapshots to the OTLP exporter
    /// (disabled, and free, without OTLP).
    pub fn metrics_recorder(&self) -> MetricsRecorder {
        self.recorder.clone()
    }

    /// Flush and stop the exporters, waiting at most [`SHUTDOWN_TIMEOUT`].
    pub fn shutdown(self) -> Result<(), Error> {
        self.shutdown_within(SHUTDOWN_TIMEOUT)
    }

    /// Flush and stop the exporters, waiting at most `bound` (an unreachable collector is
    /// given up on then). Blocks the calling thread: in async code use a multi-threaded
    /// runtime or `spawn_blocking`, since the gRPC connection is driven by the runtime.
    pub fn shutdown_within(self, bound: Duration) -> Result<(), Error> {
        let Some(otel) = self.otel else {
            return Ok(());
        };
        let failed = |reason: String| Error::Telemetry {
            what: "shutdown",
            reason,
        };
        let (tx, rx) = std::sync::mpsc::channel();
        // The SDK's own waits are not all bounded: shut down on a thread of its own and
        // leave it behind if it takes too long.
        std::thread::Builder::new()
            .name("nyx-telemetry-shutdown".to_owned())
            .spawn(move || {
                let _ = tx.send(otel.shutdown(bound));
            })
            .map_err(|e| failed(e.to_string()))?;
        match rx.recv_timeout(bound) {
            Ok(result) => result.map_err(failed),
            Err(_) => Err(failed(format!(
                "exporters still busy after {bound:?}; abandoned"
            ))),
        }
    }
}

/// [`parse_log_filter`], failing as a telemetry error.
fn parse_filter(directives: &str) -> Result<EnvFilter, Error> {
    parse_log_filter(directives).map_err(|reason| Error::Telemetry {
        what: "log level",
        reason,
    })
}

fn is_exporter_target(target: &str) -> bool {
    EXPORTER_TARGETS.iter().any(|t| {
        target
            .strip_prefix(t)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with("::"))
    })
}

#[cfg(test)]
mod tests;
