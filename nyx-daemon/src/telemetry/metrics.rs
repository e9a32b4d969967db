//! Metric snapshots and their rendering in the Prometheus text exposition format 0.0.4.
//!
//! What it is for: [`MetricsSnapshot`], one consistent copy of every counter the node keeps
//! (overlay, transport, streams, uptime, plus daemon-level [`ExtraMetric`]s such as SOCKS
//! connections and [`HistogramMetric`]s), and [`render_prometheus`], which turns it into the
//! text a Prometheus server scrapes. The same families, histograms excepted, feed the
//! OpenTelemetry instruments when OTLP export is on.
//!
//! What it is not for: collecting the numbers (the node and the stream muxes count; the
//! daemon asks them through a [`SnapshotSource`]) or serving them (see
//! [`super::prometheus`]).
//!
//! Privacy: label values are `&'static str` everywhere (a histogram bucket's `le` is one of
//! its fixed bounds), so no metric can be labelled with a node id, an address or a circuit
//! id; the built-in families use only the values listed in docs/telemetry.md.

use std::fmt::Write as _;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use super::families::{all as all_families, family};
use super::histogram::{HistogramMetric, render_histograms};
use nyx_node::NodeStats;
use nyx_overlay::stream::MuxStats;

/// A label: key and value, both fixed strings.
pub type Label = (&'static str, &'static str);

/// Whether a metric only goes up (counter) or goes up and down (gauge).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum MetricKind {
    /// A total since start; its name ends in `_total`.
    Counter,
    /// A level now.
    Gauge,
}

impl MetricKind {
    fn as_str(self) -> &'static str {
        match self {
            MetricKind::Counter => "counter",
            MetricKind::Gauge => "gauge",
        }
    }
}

/// A daemon-level number exported next to the built-in families (SOCKS connections, control
/// requests, ...). Samples sharing a name form one family; its help and kind come from the
/// first one.
///
/// Names must match `[a-zA-Z_:][a-zA-Z0-9_:]*`, counters must end in `_total`, and a name
/// may not be one of the built-in families; label keys must match `[a-zA-Z_][a-zA-Z0-9_]*`.
/// Samples that break these rules are left out of the output (and logged at `warn`).
#[derive(Debug, Clone, PartialEq)]
pub struct ExtraMetric {
    /// Prometheus name.
    pub name: &'static str,
    /// Help text.
    pub help: &'static str,
    /// Counter or gauge.
    pub kind: MetricKind,
    /// Labels: fixed strings only, never anything per peer.
    pub labels: Vec<Label>,
    /// The value.
    pub value: f64,
}

impl ExtraMetric {
    /// A counter sample.
    pub fn counter(name: &'static str, help: &'static str, value: u64) -> Self {
        ExtraMetric {
            name,
            help,
            kind: MetricKind::Counter,
            labels: Vec::new(),
            value: value as f64,
        }
    }

    /// A gauge sample.
    pub fn gauge(name: &'static str, help: &'static str, value: f64) -> Self {
        ExtraMetric {
            name,
            help,
            kind: MetricKind::Gauge,
            labels: Vec::new(),
            value,
        }
    }

    /// The same sample with one more label.
    pub fn with_label(mut self, key: &'static str, value: &'static str) -> Self {
        self.labels.push((key, value));
        self
    }

    /// Whether the name, kind and labels follow the rules above.
    pub(super) fn is_valid(&self) -> bool {
        valid_name(self.name, true)
            && (self.kind != MetricKind::Counter || self.name.ends_with("_total"))
            && family(self.name).is_none()
            && self
                .labels
                .iter()
                .all(|(k, _)| valid_name(k, false) && !k.starts_with("__"))
    }
}

/// Every counter of the node at one moment.
#[derive(Debug, Clone, Default, PartialEq)]
#[non_exhaustive]
pub struct MetricsSnapshot {
    /// The node's counters, overlay included.
    pub node: NodeStats,
    /// The stream counters, summed over this node's circuits (levels: the largest).
    pub streams: MuxStats,
    /// Time since the node started.
    pub uptime: Duration,
    /// Daemon-level numbers (SOCKS, control API, process, build, ...).
    pub extra: Vec<ExtraMetric>,
    /// Distributions (circuit build times, application streams); Prometheus only.
    pub histograms: Vec<HistogramMetric>,
}

impl MetricsSnapshot {
    /// A snapshot without extra metrics.
    pub fn new(node: NodeStats, streams: MuxStats, uptime: Duration) -> Self {
        MetricsSnapshot {
            node,
            streams,
            uptime,
            extra: Vec::new(),
            histograms: Vec::new(),
        }
    }
}

/// What a [`SnapshotSource`] returns.
pub type SnapshotFuture = Pin<Box<dyn Future<Output = MetricsSnapshot> + Send + 'static>>;

/// Where fresh snapshots come from: called once per Prometheus scrape and once per OTLP
/// refresh, so it should be cheap (ask the node for its stats; do not wait on the network).
/// Make one with [`snapshot_source`].
pub type SnapshotSource = Arc<dyn Fn() -> SnapshotFuture + Send + Sync + 'static>;

/// Wrap an async closure as a [`SnapshotSource`].
pub fn snapshot_source<F, Fut>(f: F) -> SnapshotSource
where
    F: Fn() -> Fut + Send + Sync + 'static,
    Fut: Future<Output = MetricsSnapshot> + Send + 'static,
{
    Arc::new(move || Box::pin(f()))
}

/// The snapshot in the Prometheus text exposition format 0.0.4: for every family a
/// `# HELP` and a `# TYPE` line, then its samples, one per line (histograms as
/// `_bucket`, `_sum` and `_count` lines).
pub fn render_prometheus(snapshot: &MetricsSnapshot) -> String {
    let mut out = String::with_capacity(8 * 1024);
    for f in all_families() {
        header(&mut out, f.name, f.help, f.kind.as_str());
        (f.samples)(snapshot, &mut |labels, value| {
            sample(&mut out, f.name, labels, value);
        });
    }
    render_extra(&mut out, &snapshot.extra);
    render_histograms(&mut out, &snapshot.histograms);
    out
}

fn render_extra(out: &mut String, extra: &[ExtraMetric]) {
    for (first, all) in families_of(extra, |m| m.name) {
        if !first.is_valid() {
            tracing::warn!(
                name = first.name,
                "extra metric left out: invalid name or labels"
            );
            continue;
        }
        header(out, first.name, first.help, first.kind.as_str());
        for m in all.filter(|m| m.kind == first.kind && m.is_valid()) {
            sample(out, m.name, &m.labels, m.value);
        }
    }
}

/// The items grouped into families by name, in the order names first appear: the first
/// item of each (its help and kind stand for the family), and all of its items.
pub(super) fn families_of<T>(
    items: &[T],
    name: fn(&T) -> &'static str,
) -> impl Iterator<Item = (&T, impl Iterator<Item = &T>)> {
    items.iter().enumerate().filter_map(move |(i, first)| {
        let family = name(first);
        let seen = items[..i].iter().any(|m| name(m) == family);
        (!seen).then(|| (first, items[i..].iter().filter(move |m| name(m) == family)))
    })
}

/// The `# HELP` and `# TYPE` lines of a family of type `kind` (`counter`, `histogram`, ...).
pub(super) fn header(out: &mut String, name: &str, help: &str, kind: &str) {
    out.push_str("# HELP ");
    out.push_str(name);
    out.push(' ');
    for c in help.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out.push_str("\n# TYPE ");
    out.push_str(name);
    out.push(' ');
    out.push_str(kind);
    out.push('\n');
}

/// One sample line.
pub(super) fn sample(out: &mut String, name: &str, labels: &[Label], value: f64) {
    sample_le(out, name, labels, None, value);
}

/// One sample line, with an `le` label last when given (a histogram bucket's bound: a
/// number, so not a fixed-string [`Label`]).
pub(super) fn sample_le(
    out: &mut String,
    name: &str,
    labels: &[Label],
    le: Option<&str>,
    value: f64,
) {
    out.push_str(name);
    let le = le.map(|bound| ("le", bound));
    if !labels.is_empty() || le.is_some() {
        out.push('{');
        let all = labels
            .iter()
            .map(|&(k, v)| -> (&str, &str) { (k, v) })
            .chain(le);
        for (i, (k, v)) in all.enumerate() {
            if i > 0 {
                out.push(',');
            }
            out.push_str(k);
            out.push_str("=\"");
            for c in v.chars() {
                match c {
                    '\\' => out.push_str("\\\\"),
                    '"' => out.push_str("\\\""),
                    '\n' => out.push_str("\\n"),
                    c => out.push(c),
                }
            }
            out.push('"');
        }
        out.push('}');
    }
    out.push(' ');
    if value.is_nan() {
        out.push_str("NaN");
    } else if value == f64::INFINITY {
        out.push_str("+Inf");
    } else if value == f64::NEG_INFINITY {
        out.push_str("-Inf");
    } else {
        // Display never uses an exponent and prints integral values without a point.
        let _ = write!(out, "{value}");
    }
    out.push('\n');
}

/// `[a-zA-Z_:][a-zA-Z0-9_:]*` (metric names) or without the colons (label names).
fn valid_name(name: &str, colons: bool) -> bool {
    let ok = |c: char, first: bool| {
        c.is_ascii_alphabetic()
            || c == '_'
            || (colons && c == ':')
            || (!first && c.is_ascii_digit())
    };
    let mut chars = name.chars();
    chars.next().is_some_and(|c| ok(c, true)) && chars.all(|c| ok(c, false))
}

#[cfg(test)]
#[path = "metrics_tests.rs"]
mod tests;
