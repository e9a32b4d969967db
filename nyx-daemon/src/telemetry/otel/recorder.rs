//! The observable OTel instruments that report the latest [`MetricsSnapshot`].
//!
//! What it is for: the [`MetricsRecorder`] through which the daemon hands snapshots to the
//! OTLP metric pipeline, one instrument per metric family.
//!
//! What it is not for: the export itself (see [`super`]), or Prometheus, which renders
//! snapshots as text (see [`crate::telemetry::prometheus`]).

use std::collections::HashSet;
use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use opentelemetry::KeyValue;
use opentelemetry::metrics::{Meter, MeterProvider as _};
use opentelemetry_sdk::metrics::SdkMeterProvider;

use super::SCOPE;
use crate::telemetry::families;
use crate::telemetry::metrics::{ExtraMetric, Label, MetricKind, MetricsSnapshot, SnapshotSource};

/// Hands metric snapshots to the OTLP exporter, which reads the latest one at every export
/// interval. Cheap to clone; does nothing when OTLP export is off.
#[derive(Clone, Default)]
pub struct MetricsRecorder {
    inner: Option<Arc<Recorder>>,
}

struct Recorder {
    latest: Arc<Mutex<MetricsSnapshot>>,
    meter: Meter,
    /// Extra families that have an instrument already.
    extra_names: Mutex<HashSet<&'static str>>,
}

impl std::fmt::Debug for MetricsRecorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MetricsRecorder")
            .field("enabled", &self.is_enabled())
            .finish()
    }
}

impl MetricsRecorder {
    /// A recorder whose instruments live on `meter` (one per built-in family, created now).
    pub(in crate::telemetry) fn new(meter: Meter) -> Self {
        let latest = Arc::new(Mutex::new(MetricsSnapshot::default()));
        for f in families::all() {
            let snapshot = Arc::clone(&latest);
            register(&meter, f.name, f.help, f.kind, move |observe| {
                let s = snapshot.lock().unwrap_or_else(PoisonError::into_inner);
                (f.samples)(&s, &mut |labels, value| observe(labels, value));
            });
        }
        MetricsRecorder {
            inner: Some(Arc::new(Recorder {
                latest,
                meter,
                extra_names: Mutex::new(HashSet::new()),
            })),
        }
    }

    /// A recorder for a daemon without OTLP export.
    pub fn disabled() -> Self {
        MetricsRecorder { inner: None }
    }

    /// Whether snapshots go anywhere.
    pub fn is_enabled(&self) -> bool {
        self.inner.is_some()
    }

    /// Make `snapshot` the one the next export reports. Extra families seen for the first
    /// time get an instrument now.
    pub fn record(&self, snapshot: MetricsSnapshot) {
        let Some(r) = &self.inner else { return };
        {
            let mut names = r.extra_names.lock().unwrap_or_else(PoisonError::into_inner);
            for m in &snapshot.extra {
                if m.is_valid() && names.insert(m.name) {
                    register_extra(&r.meter, &r.latest, m);
                }
            }
        }
        *r.latest.lock().unwrap_or_else(PoisonError::into_inner) = snapshot;
    }

    /// Record a fresh snapshot from `source` every `every` until `shutdown` completes
    /// (returns at once when disabled). Spawn it next to the node.
    pub async fn run(
        self,
        source: SnapshotSource,
        every: Duration,
        shutdown: impl Future<Output = ()> + Send,
    ) {
        if !self.is_enabled() {
            return;
        }
        let mut ticks = tokio::time::interval(every.max(Duration::from_millis(10)));
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tokio::pin!(shutdown);
        loop {
            // A source that hangs must not hold up the shutdown either.
            let snapshot = tokio::select! {
                () = &mut shutdown => return,
                snapshot = async {
                    ticks.tick().await;
                    source().await
                } => snapshot,
            };
            self.record(snapshot);
        }
    }
}

/// The OTel name of a family: the Prometheus name without `_total` (an OTel-to-Prometheus
/// bridge adds it back for monotonic sums).
fn otel_name(name: &'static str) -> &'static str {
    name.strip_suffix("_total").unwrap_or(name)
}

fn attributes(labels: &[Label]) -> Vec<KeyValue> {
    labels.iter().map(|&(k, v)| KeyValue::new(k, v)).collect()
}

/// An observable counter or gauge whose callback emits samples through `samples`.
fn register<F>(meter: &Meter, name: &'static str, help: &'static str, kind: MetricKind, samples: F)
where
    F: Fn(&mut dyn FnMut(&[Label], f64)) + Send + Sync + 'static,
{
    // The instruments stay registered with the provider after the handles are dropped.
    match kind {
        MetricKind::Counter => {
            meter
                .f64_observable_counter(otel_name(name))
                .with_description(help)
                .with_callback(move |o| samples(&mut |l, v| o.observe(v, &attributes(l))))
                .build();
        }
        MetricKind::Gauge => {
            meter
                .f64_observable_gauge(otel_name(name))
                .with_description(help)
                .with_callback(move |o| samples(&mut |l, v| o.observe(v, &attributes(l))))
                .build();
        }
    }
}

fn register_extra(meter: &Meter, latest: &Arc<Mutex<MetricsSnapshot>>, m: &ExtraMetric) {
    let (name, kind) = (m.name, m.kind);
    let snapshot = Arc::clone(latest);
    register(meter, name, m.help, kind, move |observe| {
        let s = snapshot.lock().unwrap_or_else(PoisonError::into_inner);
        for m in s.extra.iter().filter(|m| m.name == name && m.kind == kind) {
            if m.is_valid() {
                observe(&m.labels, m.value);
            }
        }
    });
}

/// The meter the recorder's instruments use.
pub(in crate::telemetry) fn meter(provider: &SdkMeterProvider) -> Meter {
    provider.meter(SCOPE)
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry_sdk::metrics::data::{AggregatedMetrics, MetricData};
    use opentelemetry_sdk::metrics::{InMemoryMetricExporter, PeriodicReader};

    /// The OTel instruments report the recorded snapshot's numbers, with the same labels.
    #[test]
    fn instruments_report_the_latest_snapshot() {
        let exporter = InMemoryMetricExporter::default();
        let provider = SdkMeterProvider::builder()
            .with_reader(PeriodicReader::builder(exporter.clone()).build())
            .build();
        let recorder = MetricsRecorder::new(meter(&provider));
        let mut s = MetricsSnapshot::default();
        s.node.overlay.relayed_forward = 7;
        s.node.links = 4;
        s.extra = vec![ExtraMetric::counter("nyx_socks_total", "SOCKS.", 3)];
        recorder.record(s);
        provider.force_flush().unwrap();

        let mut found = Vec::new();
        for rm in exporter.get_finished_metrics().unwrap() {
            for m in rm.scope_metrics().flat_map(|s| s.metrics()) {
                match m.data() {
                    AggregatedMetrics::F64(MetricData::Sum(sum)) => {
                        for p in sum.data_points() {
                            let attrs: Vec<String> = p
                                .attributes()
                                .map(|kv| format!("{}={}", kv.key, kv.value))
                                .collect();
                            found.push(format!("{} {:?} {}", m.name(), attrs, p.value()));
                        }
                    }
                    AggregatedMetrics::F64(MetricData::Gauge(g)) => {
                        for p in g.data_points() {
                            found.push(format!("{} {}", m.name(), p.value()));
                        }
                    }
                    _ => {}
                }
            }
        }
        for want in [
            "nyx_cells_relayed [\"direction=forward\"] 7",
            "nyx_cells_relayed [\"direction=backward\"] 0",
            "nyx_links 4",
            "nyx_socks [] 3",
        ] {
            assert!(
                found.iter().any(|f| f == want),
                "missing {want:?} in {found:#?}"
            );
        }
        provider.shutdown().unwrap();
    }

    fn relayed_forward(exporter: &InMemoryMetricExporter) -> Vec<f64> {
        let mut values = Vec::new();
        for rm in exporter.get_finished_metrics().unwrap() {
            for m in rm.scope_metrics().flat_map(|s| s.metrics()) {
                if let AggregatedMetrics::F64(MetricData::Sum(sum)) = m.data()
                    && m.name() == "nyx_cells_relayed"
                {
                    // Data points come in no particular order: pick the forward one.
                    values.extend(
                        sum.data_points()
                            .filter(|p| p.attributes().any(|kv| kv.value.as_str() == "forward"))
                            .map(|p| p.value()),
                    );
                }
            }
        }
        values
    }

    /// `run` records what the source returns, and stops on the signal even while the
    /// source never answers.
    #[tokio::test]
    async fn run_refreshes_from_the_source_until_shutdown() {
        let exporter = InMemoryMetricExporter::default();
        let provider = SdkMeterProvider::builder()
            .with_reader(PeriodicReader::builder(exporter.clone()).build())
            .build();
        let recorder = MetricsRecorder::new(meter(&provider));
        let (called_tx, mut called) = tokio::sync::mpsc::unbounded_channel();
        let calls = std::sync::atomic::AtomicUsize::new(0);
        let source = crate::telemetry::snapshot_source(move || {
            let first = calls.fetch_add(1, std::sync::atomic::Ordering::Relaxed) == 0;
            let _ = called_tx.send(());
            async move {
                if !first {
                    // The second call hangs: shutdown must still end the loop.
                    std::future::pending::<()>().await;
                }
                let mut s = MetricsSnapshot::default();
                s.node.overlay.relayed_forward = 5;
                s
            }
        });
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(recorder.clone().run(
            source,
            Duration::from_millis(10),
            async move {
                let _ = stopped.await;
            },
        ));
        called.recv().await.unwrap();
        called.recv().await.unwrap();
        stop.send(()).unwrap();
        task.await.unwrap();
        provider.force_flush().unwrap();
        assert_eq!(relayed_forward(&exporter).last(), Some(&5.0));
        provider.shutdown().unwrap();
    }
}
