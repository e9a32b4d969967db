//! The time on each log line: RFC 3339 in UTC, to the second by default (as Tor and arti
//! log), so that a line's time does not single out the packet that caused it; to the
//! microsecond when `log.timestamps = "micros"`.

use std::fmt;
use std::time::{SystemTime, UNIX_EPOCH};

use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::time::FormatTime;

use crate::daemon::config::LogTimestamps;

/// The log layers' timer, at the configured precision.
#[derive(Debug, Clone, Copy)]
pub(super) struct LogClock(pub(super) LogTimestamps);

impl FormatTime for LogClock {
    fn format_time(&self, w: &mut Writer<'_>) -> fmt::Result {
        match self.0 {
            LogTimestamps::Micros => tracing_subscriber::fmt::time::SystemTime.format_time(w),
            LogTimestamps::Seconds => {
                let now = SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .map_or(0, |d| d.as_secs());
                w.write_str(&rfc3339_seconds(now))
            }
        }
    }
}

/// `unix_secs` as `YYYY-MM-DDTHH:MM:SSZ`: the civil date by Howard Hinnant's
/// `civil_from_days` (proleptic Gregorian calendar).
fn rfc3339_seconds(unix_secs: u64) -> String {
    let (days, secs) = (unix_secs / 86_400, unix_secs % 86_400);
    // Days since 0000-03-01, in 400-year eras of 146 097 days.
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z % 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        secs / 3_600,
        secs % 3_600 / 60,
        secs % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Expected values from GNU date: `date -u -d @SECS +%Y-%m-%dT%H:%M:%SZ`.
    #[test]
    fn dates_match_gnu_date() {
        for (secs, expected) in [
            (0, "1970-01-01T00:00:00Z"),
            (951_782_400, "2000-02-29T00:00:00Z"),
            (1_709_208_000, "2024-02-29T12:00:00Z"),
            (1_798_245_301, "2026-12-26T00:35:01Z"),
            (4_102_444_799, "2099-12-31T23:59:59Z"),
        ] {
            assert_eq!(rfc3339_seconds(secs), expected, "{secs}");
        }
    }
}
