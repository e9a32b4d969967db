//! The daemon's own sections of its configuration file: `[control]`, `[http_connect]`,
//! `[log]`, `[telemetry]` and `[authority]`, with their defaults and checks. (`[limits]` is nyx-core's
//! [`LimitsConfig`](nyx_core::config::LimitsConfig), shared with anyone who runs a node.)

use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Longest Unix socket path Linux accepts (`sun_path` is 108 bytes with the terminating NUL).
const MAX_UNIX_SOCKET_PATH: usize = 107;

/// The local gRPC control socket.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ControlConfig {
    /// Serve the control socket. Default `true`; without it `nyx` cannot reach the daemon
    /// (signals still stop and reload it).
    pub enabled: bool,
    /// Path of the Unix domain socket, or `@name` for a Linux abstract socket name (no file;
    /// for environments that cannot bind paths, such as the Shadow simulator). Default:
    /// unset, meaning `<data_dir>/control.sock`.
    pub socket: Option<PathBuf>,
}

impl Default for ControlConfig {
    fn default() -> Self {
        ControlConfig {
            enabled: true,
            socket: None,
        }
    }
}

/// `[http_connect]`: the HTTP CONNECT entry (Tor's HTTPTunnelPort), off by default as Tor's
/// is.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HttpConnectSection {
    /// Whether to run it. Default false.
    pub enabled: bool,
    /// Where it listens; keep it on loopback. Default `127.0.0.1:9080`.
    pub listen: SocketAddr,
    /// A client must send its whole request head within this. Default `10s`.
    #[serde(with = "humantime_serde")]
    pub handshake_timeout: Duration,
    /// Most HTTP CONNECT connections open at once. Default 1024.
    pub max_connections: usize,
}

impl Default for HttpConnectSection {
    fn default() -> Self {
        HttpConnectSection {
            enabled: false,
            listen: SocketAddr::from((Ipv4Addr::LOCALHOST, 9080)),
            handshake_timeout: Duration::from_secs(10),
            max_connections: 1024,
        }
    }
}

impl HttpConnectSection {
    /// Problems with `[http_connect]`, as `(key, reason)`: the limits `[socks]` has.
    pub(super) fn problems(&self) -> Vec<(&'static str, String)> {
        let mut p = Vec::new();
        if self.handshake_timeout < Duration::from_millis(10) {
            p.push((
                "http_connect.handshake_timeout",
                format!("{:?} is shorter than 10ms", self.handshake_timeout),
            ));
        }
        if self.max_connections == 0 {
            p.push((
                "http_connect.max_connections",
                "must be at least 1".to_owned(),
            ));
        }
        p
    }
}

/// Logging.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LogConfig {
    /// A level (`trace`, `debug`, `info`, `warn`, `error`, `off`) or comma-separated
    /// `target=level` directives, as in `RUST_LOG`. Default: `info`.
    pub level: String,
    /// Output format. Default: `text`.
    pub format: LogFormat,
    /// How precise the time of each line is. Default: `seconds`.
    pub timestamps: LogTimestamps,
    /// Log peer addresses and other identifying details. Payloads and keys are never logged.
    /// Default: `false`.
    pub log_sensitive: bool,
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            level: "info".to_owned(),
            format: LogFormat::Text,
            timestamps: LogTimestamps::Seconds,
            log_sensitive: false,
        }
    }
}

/// Log output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

/// How precise log timestamps are (always UTC, RFC 3339).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogTimestamps {
    /// To the second, the fraction dropped (as Tor and arti log): a line's time does not
    /// single out the packet that caused it.
    #[default]
    Seconds,
    /// To the microsecond, for debugging.
    Micros,
}

/// Metrics and trace export. Unset keys fall back to the standard `OTEL_*` variables (see
/// [`crate::telemetry::OtlpSettings`]), then to the defaults.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TelemetryConfig {
    /// OpenTelemetry collector to send traces and metrics to over OTLP/gRPC, e.g.
    /// `http://127.0.0.1:4317` (plain http: no TLS in this version). Default: unset, then
    /// `OTEL_EXPORTER_OTLP_ENDPOINT`; with neither, nothing is exported.
    pub otlp_endpoint: Option<String>,
    /// Address to serve Prometheus metrics on. Default: unset (metrics only over the control
    /// socket).
    pub prometheus_listen: Option<SocketAddr>,
    /// `service.name` reported to the collector. Default: `OTEL_SERVICE_NAME`, else a
    /// `service.name` in `OTEL_RESOURCE_ATTRIBUTES`, else `nyx-daemon`.
    pub service_name: Option<String>,
    /// How often metrics are exported (at least 100 ms). Default: `OTEL_METRIC_EXPORT_INTERVAL`
    /// (ms), else 10 s.
    #[serde(with = "humantime_serde")]
    pub export_interval: Option<Duration>,
}

impl ControlConfig {
    /// Problems with `[control]`, as `(key, reason)`.
    pub(super) fn problems(&self) -> Vec<(&'static str, String)> {
        let mut p = Vec::new();
        if let Some(sock) = &self.socket {
            let len = sock.as_os_str().len();
            if len == 0 {
                p.push((
                    "control.socket",
                    "must not be empty (leave it unset for the default)".to_owned(),
                ));
            } else if sock.as_os_str() == "@" {
                p.push((
                    "control.socket",
                    "an abstract name needs characters after the @".to_owned(),
                ));
            } else if len > MAX_UNIX_SOCKET_PATH {
                p.push((
                    "control.socket",
                    format!(
                        "path is {len} bytes; Unix sockets allow at most {MAX_UNIX_SOCKET_PATH}"
                    ),
                ));
            }
        }
        p
    }
}

impl LogConfig {
    /// Problems with `[log]`, as `(key, reason)`: the level is checked by the one parser of
    /// log filters, the same that applies it ([`crate::telemetry::parse_log_filter`]).
    pub(super) fn problems(&self) -> Vec<(&'static str, String)> {
        match crate::telemetry::parse_log_filter(&self.level) {
            Ok(_) => Vec::new(),
            Err(reason) => vec![("log.level", reason)],
        }
    }
}

impl TelemetryConfig {
    /// Problems with `[telemetry]`, as `(key, reason)`.
    pub(super) fn problems(&self) -> Vec<(&'static str, String)> {
        let mut p = Vec::new();
        if let Some(endpoint) = &self.otlp_endpoint
            && let Err(reason) = crate::telemetry::check_endpoint(endpoint)
        {
            p.push(("telemetry.otlp_endpoint", reason));
        }
        if self
            .service_name
            .as_ref()
            .is_some_and(|name| name.trim().is_empty())
        {
            p.push(("telemetry.service_name", "must not be empty".to_owned()));
        }
        if let Some(interval) = self.export_interval {
            if interval < crate::telemetry::MIN_EXPORT_INTERVAL {
                p.push((
                    "telemetry.export_interval",
                    format!("{interval:?} is shorter than 100ms"),
                ));
            } else if interval > crate::telemetry::MAX_EXPORT_INTERVAL {
                p.push((
                    "telemetry.export_interval",
                    format!("{interval:?} is longer than a day"),
                ));
            }
        }
        p
    }
}

/// `[authority]`: run this daemon as a directory authority. Its own identity key must be
/// among `directory.authorities`, and every authority must be configured with the same list
/// and period.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AuthoritySection {
    /// Whether this daemon is an authority. Default false.
    pub enabled: bool,
    /// How long one consensus is the newest (at least 16 s; periods start at multiples of it
    /// in Unix time). Default `1h`.
    #[serde(with = "humantime_serde")]
    pub period: Duration,
    /// Continuous reachability before a relay gets the Stable flag. Default `1d`.
    #[serde(with = "humantime_serde")]
    pub stable_after: Duration,
    /// Continuous reachability before a Stable relay gets the Guard flag. Default `8d`.
    #[serde(with = "humantime_serde")]
    pub guard_after: Duration,
}

impl Default for AuthoritySection {
    fn default() -> Self {
        AuthoritySection {
            enabled: false,
            period: Duration::from_secs(3600),
            stable_after: Duration::from_secs(24 * 3600),
            guard_after: Duration::from_secs(8 * 24 * 3600),
        }
    }
}
