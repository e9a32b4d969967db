//! Histograms: how long circuit builds take, and how application streams went (time to
//! first byte, bytes each way, duration).
//!
//! What it is for: [`Histogram`], a live distribution with fixed bucket bounds that tasks
//! observe into; [`HistogramMetric`], its copy in a [`MetricsSnapshot`](super::MetricsSnapshot),
//! rendered in the Prometheus format as `_bucket{le=...}`, `_sum` and `_count` lines;
//! [`StreamHistograms`], the set the daemon's stream registry keeps; and
//! [`record_circuit_builds`], which observes the build time of every circuit the node
//! reports built.
//!
//! What it is not for: OTLP (histograms are served to Prometheus only for now), or anything
//! per stream or per circuit (one observation is one number: no label says whose).

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use nyx_node::NodeEvent;
use tokio::sync::broadcast::{self, error::RecvError};

use super::metrics::{Label, families_of, header, sample, sample_le};

/// Bucket bounds for circuit build times and times to first byte, in seconds.
pub const LATENCY_SECONDS: &[f64] = &[0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0];
/// Bucket bounds for stream durations, in seconds.
pub const DURATION_SECONDS: &[f64] = &[0.1, 1.0, 5.0, 15.0, 60.0, 300.0, 900.0, 3600.0];
/// Bucket bounds for the bytes of one stream: 1 KiB to 1 GiB, every factor of 8.
pub const STREAM_BYTES: &[f64] = &[
    1024.0,
    8192.0,
    65536.0,
    524_288.0,
    4_194_304.0,
    33_554_432.0,
    268_435_456.0,
    1_073_741_824.0,
];

/// A live distribution: counts per bucket, their sum and count. Cheap to observe into from
/// any task (a short lock per observation; observations are per stream or per circuit, not
/// per cell).
#[derive(Debug)]
pub struct Histogram {
    bounds: &'static [f64],
    counts: Mutex<Counts>,
}

#[derive(Debug, Clone, Default)]
struct Counts {
    /// Observations per bucket (not cumulative), the last one for values above every bound.
    buckets: Vec<u64>,
    sum: f64,
}

impl Histogram {
    /// An empty histogram with these upper bounds (ascending; `+Inf` is implicit).
    pub fn new(bounds: &'static [f64]) -> Self {
        Histogram {
            bounds,
            counts: Mutex::new(Counts {
                buckets: vec![0; bounds.len() + 1],
                sum: 0.0,
            }),
        }
    }

    /// Count one value (NaN is ignored).
    pub fn observe(&self, value: f64) {
        if value.is_nan() {
            return;
        }
        let i = self.bounds.partition_point(|&b| b < value);
        let mut c = self.counts.lock().unwrap_or_else(PoisonError::into_inner);
        c.buckets[i] += 1;
        c.sum += value;
    }

    /// Count a duration, in seconds.
    pub fn observe_duration(&self, d: Duration) {
        self.observe(d.as_secs_f64());
    }

    /// The distribution now, as the family `name`.
    pub fn snapshot(&self, name: &'static str, help: &'static str) -> HistogramMetric {
        let c = self
            .counts
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let mut cumulative = Vec::with_capacity(c.buckets.len());
        let mut total = 0;
        for n in c.buckets {
            total += n;
            cumulative.push(total);
        }
        HistogramMetric {
            name,
            help,
            labels: Vec::new(),
            bounds: self.bounds,
            cumulative,
            sum: c.sum,
        }
    }
}

/// A histogram in a snapshot. Samples sharing a name form one family (its help comes from
/// the first); names follow the rules of [`ExtraMetric`](super::ExtraMetric) and must not
/// end in `_total`.
#[derive(Debug, Clone, PartialEq)]
pub struct HistogramMetric {
    /// Prometheus name (without `_bucket`, `_sum`, `_count`).
    pub name: &'static str,
    /// Help text.
    pub help: &'static str,
    /// Labels: fixed strings only (never `le`).
    pub labels: Vec<Label>,
    /// Upper bounds of the buckets, ascending.
    pub bounds: &'static [f64],
    /// Observations at or below each bound, then in all (the `+Inf` bucket): one more
    /// entry than `bounds`.
    pub cumulative: Vec<u64>,
    /// Sum of the observations.
    pub sum: f64,
}

impl HistogramMetric {
    /// The same histogram with one more label.
    pub fn with_label(mut self, key: &'static str, value: &'static str) -> Self {
        self.labels.push((key, value));
        self
    }

    /// Observations in all.
    pub fn count(&self) -> u64 {
        self.cumulative.last().copied().unwrap_or(0)
    }

    fn is_valid(&self) -> bool {
        let as_extra = super::ExtraMetric {
            name: self.name,
            help: self.help,
            kind: super::MetricKind::Gauge,
            labels: self.labels.clone(),
            value: 0.0,
        };
        as_extra.is_valid()
            && !self.name.ends_with("_total")
            && self.labels.iter().all(|(k, _)| *k != "le")
            && self.cumulative.len() == self.bounds.len() + 1
    }
}

/// Append the histograms to `out` in the text format (invalid ones are left out and logged).
pub(super) fn render_histograms(out: &mut String, histograms: &[HistogramMetric]) {
    for (first, all) in families_of(histograms, |h| h.name) {
        if !first.is_valid() {
            tracing::warn!(
                name = first.name,
                "histogram left out: invalid name or labels"
            );
            continue;
        }
        header(out, first.name, first.help, "histogram");
        for h in all.filter(|h| h.is_valid()) {
            render_one(out, h);
        }
    }
}

fn render_one(out: &mut String, h: &HistogramMetric) {
    let bucket = format!("{}_bucket", h.name);
    for (i, &n) in h.cumulative.iter().enumerate() {
        let le = match h.bounds.get(i) {
            Some(bound) => format!("{bound}"),
            None => "+Inf".to_owned(),
        };
        sample_le(out, &bucket, &h.labels, Some(&le), n as f64);
    }
    sample(out, &format!("{}_sum", h.name), &h.labels, h.sum);
    sample(
        out,
        &format!("{}_count", h.name),
        &h.labels,
        h.count() as f64,
    );
}

/// The distributions of the daemon's application streams (SOCKS and control API), kept by
/// its stream registry.
#[derive(Debug)]
pub struct StreamHistograms {
    /// From the stream being open to its first byte from the network.
    pub first_byte: Histogram,
    /// Bytes sent into the network, per stream.
    pub sent: Histogram,
    /// Bytes received from the network, per stream.
    pub received: Histogram,
    /// From open to close, per stream.
    pub duration: Histogram,
}

impl Default for StreamHistograms {
    fn default() -> Self {
        StreamHistograms {
            first_byte: Histogram::new(LATENCY_SECONDS),
            sent: Histogram::new(STREAM_BYTES),
            received: Histogram::new(STREAM_BYTES),
            duration: Histogram::new(DURATION_SECONDS),
        }
    }
}

impl StreamHistograms {
    /// The four families now.
    pub fn snapshot(&self) -> Vec<HistogramMetric> {
        let bytes = "Bytes one application stream carried, by direction.";
        vec![
            self.first_byte.snapshot(
                "nyx_stream_first_byte_seconds",
                "Time from an application stream being open to its first byte from the network.",
            ),
            self.sent
                .snapshot("nyx_stream_bytes", bytes)
                .with_label("direction", "sent"),
            self.received
                .snapshot("nyx_stream_bytes", bytes)
                .with_label("direction", "received"),
            self.duration.snapshot(
                "nyx_stream_duration_seconds",
                "Time application streams stayed open.",
            ),
        ]
    }
}

/// The family name of circuit build times.
pub const CIRCUIT_BUILD_SECONDS: &str = "nyx_circuit_build_seconds";
/// Its help text.
pub const CIRCUIT_BUILD_HELP: &str = "Time from a circuit request to the circuit being built, every attempt included (circuits of more than one hop).";

/// Observe the build time of every circuit of more than one hop that `events` reports
/// built (one-hop directory circuits are left out), until the node stops. Events a lagging
/// subscription missed are not counted.
pub async fn record_circuit_builds(
    mut events: broadcast::Receiver<NodeEvent>,
    builds: Arc<Histogram>,
) {
    loop {
        match events.recv().await {
            Ok(NodeEvent::CircuitBuilt {
                path, build_time, ..
            }) if path.len() > 1 => builds.observe_duration(build_time),
            Ok(_) | Err(RecvError::Lagged(_)) => {}
            Err(RecvError::Closed) => return,
        }
    }
}

#[cfg(test)]
#[path = "histogram_tests.rs"]
mod tests;
