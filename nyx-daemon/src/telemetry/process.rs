//! What the process is and what it uses: `nyx_build_info` and the standard `process_*`
//! metrics of the Prometheus client libraries.
//!
//! What it is for: [`process_metrics`], called once per snapshot, reads `/proc/self` on
//! Linux (CPU time, memory, descriptors, start time) and returns them with the build
//! information, as [`ExtraMetric`]s. Elsewhere only `nyx_build_info` is returned: the
//! `process_*` series are absent rather than made up.
//!
//! What it is not for: anything about the host or the node's identity (no host name, no
//! node id, no path): `nyx_build_info` carries the version and the build profile only.

use super::metrics::ExtraMetric;

/// `nyx_build_info`: 1, labelled with the crate version and the build profile.
fn build_info() -> ExtraMetric {
    let profile = if cfg!(debug_assertions) {
        "debug"
    } else {
        "release"
    };
    ExtraMetric::gauge(
        "nyx_build_info",
        "Always 1; the labels say which build of nyx-daemon runs.",
        1.0,
    )
    .with_label("version", env!("CARGO_PKG_VERSION"))
    .with_label("profile", profile)
}

/// The build information, then the process's resource use where the system tells it.
pub fn process_metrics() -> Vec<ExtraMetric> {
    let mut out = vec![build_info()];
    #[cfg(target_os = "linux")]
    linux::push(&mut out);
    out
}

/// The fields of `/proc/self/stat` the metrics use, in the kernel's units.
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stat {
    /// User and system CPU time, in clock ticks.
    cpu_ticks: u64,
    /// Start time after boot, in clock ticks.
    start_ticks: u64,
    /// Virtual memory size, in bytes.
    vsize: u64,
    /// Resident set size, in pages.
    rss_pages: u64,
}

/// Parse `/proc/<pid>/stat`. The command name (field 2) is in parentheses and may hold
/// spaces and parentheses itself, so fields are counted after its last `)`.
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
fn parse_stat(text: &str) -> Option<Stat> {
    let (_, rest) = text.rsplit_once(')')?;
    // rest[0] is field 3 (state); field n is rest[n - 3].
    let fields: Vec<&str> = rest.split_ascii_whitespace().collect();
    let field = |n: usize| -> Option<u64> { fields.get(n - 3)?.parse().ok() };
    Some(Stat {
        cpu_ticks: field(14)?.checked_add(field(15)?)?,
        start_ticks: field(22)?,
        vsize: field(23)?,
        rss_pages: field(24)?,
    })
}

/// The boot time (`btime`, Unix seconds) from `/proc/stat`.
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
fn parse_btime(text: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix("btime "))
        .and_then(|v| v.trim().parse().ok())
}

#[cfg(target_os = "linux")]
mod linux {
    use super::{ExtraMetric, parse_btime, parse_stat};

    /// Append the `process_*` metrics that could be read (any that could not are left out).
    pub(super) fn push(out: &mut Vec<ExtraMetric>) {
        let ticks = rustix::param::clock_ticks_per_second() as f64;
        let page = rustix::param::page_size() as f64;
        let stat = std::fs::read_to_string("/proc/self/stat")
            .ok()
            .and_then(|t| parse_stat(&t));
        if let Some(stat) = stat.filter(|_| ticks > 0.0) {
            out.push(ExtraMetric {
                value: stat.cpu_ticks as f64 / ticks,
                ..ExtraMetric::counter(
                    "process_cpu_seconds_total",
                    "Total user and system CPU time spent in seconds.",
                    0,
                )
            });
            out.push(ExtraMetric::gauge(
                "process_resident_memory_bytes",
                "Resident memory size in bytes.",
                stat.rss_pages as f64 * page,
            ));
            out.push(ExtraMetric::gauge(
                "process_virtual_memory_bytes",
                "Virtual memory size in bytes.",
                stat.vsize as f64,
            ));
            let btime = std::fs::read_to_string("/proc/stat")
                .ok()
                .and_then(|t| parse_btime(&t));
            if let Some(btime) = btime {
                out.push(ExtraMetric::gauge(
                    "process_start_time_seconds",
                    "Start time of the process since unix epoch in seconds.",
                    btime as f64 + stat.start_ticks as f64 / ticks,
                ));
            }
        }
        if let Ok(fds) = std::fs::read_dir("/proc/self/fd") {
            out.push(ExtraMetric::gauge(
                "process_open_fds",
                "Number of open file descriptors.",
                fds.count() as f64,
            ));
        }
        let limit = rustix::process::getrlimit(rustix::process::Resource::Nofile);
        if let Some(max) = limit.current {
            out.push(ExtraMetric::gauge(
                "process_max_fds",
                "Maximum number of open file descriptors.",
                max as f64,
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_are_counted_after_the_command_name() {
        // A command name with a space and a parenthesis, as `(a) b` would be.
        let line = "4242 (nyx (a) b) S 1 4242 4242 0 -1 4194560 2093 0 0 0 \
                    150 25 0 0 20 0 3 0 98765 123456789 4321 18446744073709551615";
        assert_eq!(
            parse_stat(line),
            Some(Stat {
                cpu_ticks: 175,
                start_ticks: 98765,
                vsize: 123_456_789,
                rss_pages: 4321,
            })
        );
        assert_eq!(parse_stat("4242 (cut short) S 1 2"), None);
        assert_eq!(parse_stat("no parenthesis"), None);
        assert_eq!(
            parse_stat("1 (x) S 1 1 1 0 -1 0 0 0 0 0 oops 1 0 0 20 0 1 0 1 1 1"),
            None
        );
    }

    #[test]
    fn boot_time_comes_from_the_btime_line() {
        let text = "cpu  1 2 3\nctxt 99\nbtime 1764000000\nprocesses 7\n";
        assert_eq!(parse_btime(text), Some(1_764_000_000));
        assert_eq!(parse_btime("cpu 1\n"), None);
        assert_eq!(parse_btime("btime soon\n"), None);
    }

    #[test]
    fn build_info_is_one_with_the_version() {
        let all = process_metrics();
        let info = all.iter().find(|m| m.name == "nyx_build_info").unwrap();
        assert_eq!(info.value, 1.0);
        assert!(
            info.labels
                .contains(&("version", env!("CARGO_PKG_VERSION")))
        );
        assert!(all.iter().all(ExtraMetric::is_valid));
    }

    /// This process's own numbers are plausible: it has run, holds memory and descriptors,
    /// and started before now.
    #[cfg(target_os = "linux")]
    #[test]
    fn this_process_reports_its_resources() {
        let all = process_metrics();
        let value = |name: &str| {
            all.iter()
                .find(|m| m.name == name)
                .map(|m| m.value)
                .unwrap_or_else(|| panic!("{name} missing"))
        };
        assert!(value("process_resident_memory_bytes") > 1_000_000.0);
        assert!(value("process_virtual_memory_bytes") >= value("process_resident_memory_bytes"));
        assert!(value("process_open_fds") >= 3.0);
        assert!(value("process_max_fds") >= value("process_open_fds"));
        assert!(value("process_cpu_seconds_total") >= 0.0);
        let now = nyx_node::unix_now() as f64;
        let start = value("process_start_time_seconds");
        assert!(
            start <= now + 1.0 && start > now - 3600.0,
            "{start} vs {now}"
        );
    }
}
