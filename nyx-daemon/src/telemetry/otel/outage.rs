//! A collector that does not answer: one warning, exports spaced out, one line when it is
//! back.
//!
//! What it is for: [`Outage`] decides, from export results and `now` alone, whether the
//! next export is tried or skipped and what to log; [`Guarded`] wraps the OTLP span and
//! metric exporters with it. While the collector is down, exports are tried after the
//! export interval, then twice as long each time up to [`MAX_BACKOFF`]; the skipped ones
//! fail at once (their data is dropped, as the SDK does with any failed export), so a
//! shutdown during an outage does not wait for a connect timeout either.
//!
//! What it is not for: retrying a batch (the SDK drops failed batches; metrics are
//! cumulative, so the next export that succeeds carries the totals).

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use opentelemetry_sdk::error::{OTelSdkError, OTelSdkResult};
use opentelemetry_sdk::metrics::Temporality;
use opentelemetry_sdk::metrics::data::ResourceMetrics;
use opentelemetry_sdk::metrics::exporter::PushMetricExporter;
use opentelemetry_sdk::trace::{SpanData, SpanExporter};

/// The longest wait between two tries while the collector is down.
pub const MAX_BACKOFF: Duration = Duration::from_secs(300);

/// What changed with an export's result (the caller logs it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Change {
    /// The first failure after a success (or at start): warn once.
    WentDown {
        /// When the next export is tried.
        retry_in: Duration,
    },
    /// The first success after failures.
    CameBack {
        /// How long the collector was down.
        after: Duration,
        /// Exports skipped meanwhile.
        skipped: u64,
    },
}

#[derive(Debug)]
struct Down {
    since: Instant,
    retry_at: Instant,
    delay: Duration,
    skipped: u64,
}

/// The collector's state as the exporters saw it (sans-IO: the caller passes `now`).
#[derive(Debug)]
pub(crate) struct Outage {
    first_delay: Duration,
    down: Option<Down>,
}

impl Outage {
    /// Up until an export fails; then retried after `first_delay` (the export interval),
    /// doubling up to [`MAX_BACKOFF`].
    pub(crate) fn new(first_delay: Duration) -> Self {
        Outage {
            first_delay: first_delay.clamp(Duration::from_millis(1), MAX_BACKOFF),
            down: None,
        }
    }

    /// Whether an export due at `now` is tried; the time until the next try when it is not.
    pub(crate) fn admit(&mut self, now: Instant) -> Result<(), Duration> {
        match &mut self.down {
            Some(d) if now < d.retry_at => {
                d.skipped += 1;
                Err(d.retry_at - now)
            }
            _ => Ok(()),
        }
    }

    /// Record a tried export's outcome at `now`.
    pub(crate) fn record(&mut self, now: Instant, ok: bool) -> Option<Change> {
        match (&mut self.down, ok) {
            (None, true) => None,
            (Some(d), true) => {
                let change = Change::CameBack {
                    after: now.saturating_duration_since(d.since),
                    skipped: d.skipped,
                };
                self.down = None;
                Some(change)
            }
            (None, false) => {
                self.down = Some(Down {
                    since: now,
                    retry_at: now + self.first_delay,
                    delay: self.first_delay,
                    skipped: 0,
                });
                Some(Change::WentDown {
                    retry_in: self.first_delay,
                })
            }
            (Some(d), false) => {
                d.delay = (d.delay * 2).min(MAX_BACKOFF);
                d.retry_at = now + d.delay;
                None
            }
        }
    }
}

/// An exporter whose exports go through a shared [`Outage`].
#[derive(Debug)]
pub(crate) struct Guarded<E> {
    inner: E,
    outage: Arc<Mutex<Outage>>,
}

impl<E> Guarded<E> {
    /// `inner`, guarded by `outage` (share one between exporters to the same collector, so
    /// that an outage is reported once).
    pub(crate) fn new(inner: E, outage: Arc<Mutex<Outage>>) -> Self {
        Guarded { inner, outage }
    }

    fn admit(&self) -> OTelSdkResult {
        let mut o = self.outage.lock().unwrap_or_else(PoisonError::into_inner);
        o.admit(Instant::now()).map_err(|wait| {
            OTelSdkError::InternalFailure(format!(
                "OTLP collector down; export skipped, next try in {}s",
                wait.as_secs()
            ))
        })
    }

    fn record(&self, result: &OTelSdkResult) {
        let change = self
            .outage
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .record(Instant::now(), result.is_ok());
        match (change, result) {
            (Some(Change::WentDown { retry_in }), Err(e)) => tracing::warn!(
                error = %e,
                retry_in_s = retry_in.as_secs_f64(),
                "OTLP export failed; spans and metrics are dropped until the collector \
                 answers (tried again with growing delays, logged once when it is back)"
            ),
            (Some(Change::CameBack { after, skipped }), _) => tracing::info!(
                down_s = after.as_secs(),
                skipped_exports = skipped,
                "OTLP collector answers again"
            ),
            (_, Err(e)) => tracing::debug!(error = %e, "OTLP export failed again"),
            _ => {}
        }
    }
}

impl<E: SpanExporter> SpanExporter for Guarded<E> {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        self.admit()?;
        let result = self.inner.export(batch).await;
        self.record(&result);
        result
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn set_resource(&mut self, resource: &opentelemetry_sdk::Resource) {
        self.inner.set_resource(resource);
    }
}

impl<E: PushMetricExporter> PushMetricExporter for Guarded<E> {
    async fn export(&self, metrics: &ResourceMetrics) -> OTelSdkResult {
        self.admit()?;
        let result = self.inner.export(metrics).await;
        self.record(&result);
        result
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn temporality(&self) -> Temporality {
        self.inner.temporality()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);

    #[test]
    fn an_outage_is_reported_once_and_tries_back_off() {
        let t0 = Instant::now();
        let mut o = Outage::new(10 * S);
        assert_eq!(o.admit(t0), Ok(()));
        assert_eq!(o.record(t0, true), None, "successes say nothing");
        assert_eq!(
            o.record(t0, false),
            Some(Change::WentDown { retry_in: 10 * S })
        );
        // Until the retry time, exports are skipped without trying.
        assert_eq!(o.admit(t0 + 4 * S), Err(6 * S));
        assert_eq!(o.admit(t0 + 9 * S), Err(S));
        assert_eq!(o.admit(t0 + 10 * S), Ok(()));
        // A second failure is silent and doubles the wait: 20 s, then 40 s.
        assert_eq!(o.record(t0 + 10 * S, false), None);
        assert_eq!(o.admit(t0 + 29 * S), Err(S));
        assert_eq!(o.admit(t0 + 30 * S), Ok(()));
        assert_eq!(o.record(t0 + 30 * S, false), None);
        assert_eq!(o.admit(t0 + 69 * S), Err(S));
        assert!(o.down.is_some());
        // Back: one report, with what was skipped.
        assert_eq!(o.admit(t0 + 70 * S), Ok(()));
        assert_eq!(
            o.record(t0 + 70 * S, true),
            Some(Change::CameBack {
                after: 70 * S,
                skipped: 4
            })
        );
        assert!(o.down.is_none());
        assert_eq!(o.admit(t0 + 71 * S), Ok(()));
        // The next outage starts over from the first delay, and is reported again.
        assert_eq!(
            o.record(t0 + 80 * S, false),
            Some(Change::WentDown { retry_in: 10 * S })
        );
    }

    #[test]
    fn the_wait_stops_growing_at_the_maximum() {
        let t0 = Instant::now();
        let mut o = Outage::new(100 * S);
        o.record(t0, false);
        let mut now = t0;
        for _ in 0..10 {
            while let Err(wait) = o.admit(now) {
                now += wait;
            }
            o.record(now, false);
        }
        assert_eq!(o.admit(now), Err(MAX_BACKOFF));
    }
}
