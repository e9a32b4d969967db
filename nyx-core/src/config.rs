//! Typed node configuration with documented defaults and a [`validate`](NodeConfig::validate)
//! that reports every problem with the field it concerns.
//!
//! These structs are plain Rust; with the `serde` feature they also (de)serialize, rejecting
//! unknown fields, so the daemon can load them from TOML. Field names below are the keys of
//! that file; docs/configuration.md (written with the daemon) mirrors them.
//!
//! ```
//! use nyx_core::config::{NodeConfig, TransportKind};
//!
//! let mut config = NodeConfig::default();
//! assert_eq!(config.transport, TransportKind::Quic);
//! assert!(config.validate().is_ok());
//!
//! config.listen.clear();
//! config.limits.max_circuits = 0;
//! let problems = config.validate().unwrap_err();
//! assert_eq!(problems.len(), 2);
//! assert_eq!(problems.iter().next().unwrap().field, "listen");
//! ```

use std::collections::HashSet;
use std::fmt;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use crate::rate::Quota;
use crate::{Error, StreamId};

#[cfg(feature = "serde")]
use serde::{Deserialize, Serialize};

/// Everything a node needs to know at start.
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(
    feature = "serde",
    derive(Serialize, Deserialize),
    serde(default, deny_unknown_fields)
)]
pub struct NodeConfig {
    /// Addresses the node's transport listens on. Port 0 picks a free port.
    /// Default: `["127.0.0.1:0"]`.
    pub listen: Vec<SocketAddr>,
    /// Which link transport to use between nodes. Default: `quic`.
    pub transport: TransportKind,
    /// Where keys and state live. Default: unset, meaning the daemon uses
    /// `$XDG_STATE_HOME/nyx` (or `~/.local/state/nyx`).
    pub data_dir: Option<PathBuf>,
    /// The local control socket.
    pub control: ControlConfig,
    /// Resource limits that protect the node from strangers.
    pub limits: LimitsConfig,
    /// Logging.
    pub log: LogConfig,
    /// Metrics and trace export.
    pub telemetry: TelemetryConfig,
}

impl Default for NodeConfig {
    fn default() -> Self {
        NodeConfig {
            listen: vec![SocketAddr::from((Ipv4Addr::LOCALHOST, 0))],
            transport: TransportKind::Quic,
            data_dir: None,
            control: ControlConfig::default(),
            limits: LimitsConfig::default(),
            log: LogConfig::default(),
            telemetry: TelemetryConfig::default(),
        }
    }
}

/// The link transport between nodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[cfg_attr(
    feature = "serde",
    derive(Serialize, Deserialize),
    serde(rename_all = "lowercase")
)]
pub enum TransportKind {
    /// Raw UDP datagrams protected by nyx-crypto's link handshake: least overhead per cell.
    Udp,
    /// QUIC (quinn) with cells in DATAGRAM frames: congestion control and path MTU discovery.
    #[default]
    Quic,
}

impl fmt::Display for TransportKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TransportKind::Udp => "udp",
            TransportKind::Quic => "quic",
        })
    }
}

impl FromStr for TransportKind {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self, Error> {
        match s.trim().to_ascii_lowercase().as_str() {
            "udp" => Ok(TransportKind::Udp),
            "quic" => Ok(TransportKind::Quic),
            other => Err(Error::InvalidParameter {
                what: "transport",
                reason: format!("{other:?} is neither \"udp\" nor \"quic\""),
            }),
        }
    }
}

/// The local gRPC control socket.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[cfg_attr(
    feature = "serde",
    derive(Serialize, Deserialize),
    serde(default, deny_unknown_fields)
)]
pub struct ControlConfig {
    /// Path of the Unix domain socket. Default: unset, meaning `<data_dir>/control.sock`.
    pub socket: Option<PathBuf>,
}

/// A rate and burst as written in configuration; see [`crate::rate`] for the semantics.
#[derive(Debug, Clone, Copy, PartialEq)]
#[cfg_attr(
    feature = "serde",
    derive(Serialize, Deserialize),
    serde(deny_unknown_fields)
)]
pub struct RateConfig {
    /// Sustained rate in tokens per second (fractions allowed, e.g. `0.5`).
    pub per_second: f64,
    /// Tokens an idle limiter admits at once (at least 1).
    pub burst: u32,
}

impl RateConfig {
    /// The limiter quota this describes.
    pub fn quota(&self) -> Result<Quota, Error> {
        Quota::from_rate(self.per_second, self.burst)
    }
}

/// Limits on what other nodes and clients can make this node spend.
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(
    feature = "serde",
    derive(Serialize, Deserialize),
    serde(default, deny_unknown_fields)
)]
pub struct LimitsConfig {
    /// Most links (peer connections) open at once. Default: 1024.
    pub max_links: usize,
    /// Most circuits through or from this node at once. Default: 8192.
    pub max_circuits: usize,
    /// Most streams on one circuit (at most 65535, the stream id space). Default: 256.
    pub max_streams_per_circuit: u32,
    /// Memory cap of the cell buffer pool in bytes (at least 64 KiB). Default: 64 MiB.
    pub cell_pool_bytes: usize,
    /// Cells a peer may send over its link. Default: 200000/s (about 230 MB/s), burst 20000.
    pub link_cells: RateConfig,
    /// Cells on one relayed circuit. Default: 100000/s (about 115 MB/s), burst 10000.
    pub circuit_cells: RateConfig,
    /// Circuits a peer may ask this node to create. Default: 10/s, burst 20.
    pub circuit_creates: RateConfig,
    /// Link handshakes from one source IP prefix (/24 for IPv4, /48 for IPv6), checked before
    /// any expensive cryptography. Default: 5/s, burst 10.
    pub handshakes_per_prefix: RateConfig,
    /// Most keys (peers, prefixes, circuits) each keyed limiter tracks; see
    /// [`KeyedLimiter`](crate::rate::KeyedLimiter). Default: 65536.
    pub max_limited_keys: usize,
}

impl Default for LimitsConfig {
    fn default() -> Self {
        LimitsConfig {
            max_links: 1024,
            max_circuits: 8192,
            max_streams_per_circuit: 256,
            cell_pool_bytes: 64 << 20,
            link_cells: RateConfig {
                per_second: 200_000.0,
                burst: 20_000,
            },
            circuit_cells: RateConfig {
                per_second: 100_000.0,
                burst: 10_000,
            },
            circuit_creates: RateConfig {
                per_second: 10.0,
                burst: 20,
            },
            handshakes_per_prefix: RateConfig {
                per_second: 5.0,
                burst: 10,
            },
            max_limited_keys: 65_536,
        }
    }
}

/// Logging.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(
    feature = "serde",
    derive(Serialize, Deserialize),
    serde(default, deny_unknown_fields)
)]
pub struct LogConfig {
    /// A level (`trace`, `debug`, `info`, `warn`, `error`, `off`) or comma-separated
    /// `target=level` directives, as in `RUST_LOG`. Default: `info`.
    pub level: String,
    /// Output format. Default: `text`.
    pub format: LogFormat,
    /// Log peer addresses and other identifying details. Payloads and keys are never logged.
    /// Default: `false`.
    pub log_sensitive: bool,
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            level: "info".to_owned(),
            format: LogFormat::Text,
            log_sensitive: false,
        }
    }
}

/// Log output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(
    feature = "serde",
    derive(Serialize, Deserialize),
    serde(rename_all = "lowercase")
)]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

/// Metrics and trace export.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(
    feature = "serde",
    derive(Serialize, Deserialize),
    serde(default, deny_unknown_fields)
)]
pub struct TelemetryConfig {
    /// OpenTelemetry collector to send traces and metrics to over OTLP/gRPC, e.g.
    /// `http://127.0.0.1:4317` (plain http: no TLS in this version). Default: unset (no
    /// export).
    pub otlp_endpoint: Option<String>,
    /// Address to serve Prometheus metrics on. Default: unset (metrics only over the control
    /// socket).
    pub prometheus_listen: Option<SocketAddr>,
    /// `service.name` reported to the collector. Default: `nyx-daemon`.
    pub service_name: String,
    /// How often metrics are exported (at least 100 ms). Default: 10 s.
    #[cfg_attr(feature = "serde", serde(with = "humantime_serde"))]
    pub export_interval: Duration,
}

impl Default for TelemetryConfig {
    fn default() -> Self {
        TelemetryConfig {
            otlp_endpoint: None,
            prometheus_listen: None,
            service_name: "nyx-daemon".to_owned(),
            export_interval: Duration::from_secs(10),
        }
    }
}

/// One thing wrong with a configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigProblem {
    /// Dotted path of the field, as in the TOML file, e.g. `limits.link_cells.burst`.
    pub field: String,
    /// What is wrong and what would be accepted.
    pub reason: String,
}

/// Every problem [`NodeConfig::validate`] found (never empty when returned as an error).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigProblems(Vec<ConfigProblem>);

impl ConfigProblems {
    /// Problems found by a caller's own checks (for configuration files that extend
    /// [`NodeConfig`]); in field order.
    pub fn from_vec(problems: Vec<ConfigProblem>) -> Self {
        ConfigProblems(problems)
    }

    /// The problems, in field order.
    pub fn iter(&self) -> impl Iterator<Item = &ConfigProblem> {
        self.0.iter()
    }

    /// How many problems there are.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Always false for a returned error; present for completeness.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl fmt::Display for ConfigProblems {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, p) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            write!(f, "{}: {}", p.field, p.reason)?;
        }
        Ok(())
    }
}

impl std::error::Error for ConfigProblems {}

impl From<ConfigProblems> for Error {
    fn from(p: ConfigProblems) -> Self {
        Error::InvalidConfig(p)
    }
}

/// Longest Unix socket path Linux accepts (`sun_path` is 108 bytes with the terminating NUL).
const MAX_UNIX_SOCKET_PATH: usize = 107;

impl NodeConfig {
    /// Check every field; on failure, list every problem with its field name.
    pub fn validate(&self) -> Result<(), ConfigProblems> {
        let mut p = Problems(Vec::new());
        if self.listen.is_empty() {
            p.add("listen", "at least one address is needed");
        }
        let mut seen = HashSet::new();
        for addr in &self.listen {
            if !seen.insert(addr) {
                p.add("listen", format!("{addr} is listed twice"));
            }
        }
        if let Some(dir) = &self.data_dir
            && dir.as_os_str().is_empty()
        {
            p.add(
                "data_dir",
                "must not be empty (leave it unset for the default)",
            );
        }
        if let Some(sock) = &self.control.socket {
            let len = sock.as_os_str().len();
            if len == 0 {
                p.add(
                    "control.socket",
                    "must not be empty (leave it unset for the default)",
                );
            } else if len > MAX_UNIX_SOCKET_PATH {
                p.add(
                    "control.socket",
                    format!(
                        "path is {len} bytes; Unix sockets allow at most {MAX_UNIX_SOCKET_PATH}"
                    ),
                );
            }
        }
        self.limits.check(&mut p);
        if let Err(reason) = check_log_directives(&self.log.level) {
            p.add("log.level", reason);
        }
        let t = &self.telemetry;
        if let Some(endpoint) = &t.otlp_endpoint {
            if endpoint.starts_with("https://") {
                // The exporter is built without TLS: say so now rather than at start.
                p.add(
                    "telemetry.otlp_endpoint",
                    format!(
                        "{endpoint:?}: https is not supported; use a local collector over \
                         http:// (e.g. http://127.0.0.1:4317)"
                    ),
                );
            } else if endpoint
                .strip_prefix("http://")
                .is_none_or(|h| h.is_empty() || h.starts_with('/'))
            {
                p.add(
                    "telemetry.otlp_endpoint",
                    format!("{endpoint:?} is not an http:// URL with a host"),
                );
            }
        }
        if t.service_name.trim().is_empty() {
            p.add("telemetry.service_name", "must not be empty");
        }
        if t.export_interval < Duration::from_millis(100) {
            p.add(
                "telemetry.export_interval",
                format!("{:?} is shorter than 100ms", t.export_interval),
            );
        }
        if p.0.is_empty() {
            Ok(())
        } else {
            Err(ConfigProblems(p.0))
        }
    }
}

impl LimitsConfig {
    fn check(&self, p: &mut Problems) {
        let positive = [
            ("limits.max_links", self.max_links),
            ("limits.max_circuits", self.max_circuits),
            ("limits.max_limited_keys", self.max_limited_keys),
        ];
        for (field, value) in positive {
            if value == 0 {
                p.add(field, "must be at least 1");
            }
        }
        let max_streams = u32::from(u16::MAX);
        if self.max_streams_per_circuit == 0 || self.max_streams_per_circuit > max_streams {
            p.add(
                "limits.max_streams_per_circuit",
                format!(
                    "{} is outside 1..={max_streams} (the {}-byte stream id space)",
                    self.max_streams_per_circuit,
                    StreamId::LEN
                ),
            );
        }
        if self.cell_pool_bytes < 64 << 10 {
            p.add(
                "limits.cell_pool_bytes",
                format!("{} is below the 65536-byte minimum", self.cell_pool_bytes),
            );
        }
        let rates = [
            ("limits.link_cells", &self.link_cells),
            ("limits.circuit_cells", &self.circuit_cells),
            ("limits.circuit_creates", &self.circuit_creates),
            ("limits.handshakes_per_prefix", &self.handshakes_per_prefix),
        ];
        for (field, rate) in rates {
            if let Err(e) = rate.quota() {
                let reason = match e {
                    Error::InvalidParameter { reason, .. } => reason,
                    other => other.to_string(),
                };
                p.add(field, reason);
            }
        }
    }
}

struct Problems(Vec<ConfigProblem>);

impl Problems {
    fn add(&mut self, field: &str, reason: impl Into<String>) {
        self.0.push(ConfigProblem {
            field: field.to_owned(),
            reason: reason.into(),
        });
    }
}

const LEVELS: [&str; 6] = ["trace", "debug", "info", "warn", "error", "off"];

/// Check log filter directives the way [`NodeConfig::validate`] checks `log.level`: a level,
/// or comma-separated `target=level` items whose targets are module paths (the subset of
/// `RUST_LOG` syntax the daemon supports). The daemon uses it for levels changed at run time
/// too, so both accept the same text.
pub fn check_log_directives(s: &str) -> Result<(), String> {
    if s.trim().is_empty() {
        return Err(format!(
            "must not be empty; use one of {}",
            LEVELS.join(", ")
        ));
    }
    for item in s.split(',').map(str::trim) {
        let (target, level) = match item.split_once('=') {
            Some((t, l)) => (Some(t.trim()), l.trim()),
            None => (None, item),
        };
        if let Some(t) = target
            && (t.is_empty()
                || !t
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "_:-".contains(c)))
        {
            return Err(format!("{item:?}: {t:?} is not a module path"));
        }
        if !LEVELS.iter().any(|l| l.eq_ignore_ascii_case(level)) {
            return Err(format!(
                "{item:?}: {level:?} is not one of {}",
                LEVELS.join(", ")
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(c: &NodeConfig) -> Vec<String> {
        c.validate()
            .err()
            .map(|p| p.iter().map(|p| p.field.clone()).collect())
            .unwrap_or_default()
    }

    #[test]
    fn defaults_are_valid() {
        let c = NodeConfig::default();
        assert_eq!(c.validate(), Ok(()));
        assert!(c.limits.link_cells.quota().is_ok());
    }

    #[test]
    fn every_problem_is_reported_with_its_field() {
        let mut c = NodeConfig::default();
        let addr: SocketAddr = "127.0.0.2:9000".parse().unwrap();
        c.listen = vec![addr, addr];
        c.data_dir = Some(PathBuf::new());
        c.control.socket = Some(PathBuf::from(format!("/tmp/{}", "x".repeat(120))));
        c.limits.max_links = 0;
        c.limits.max_streams_per_circuit = 70_000;
        c.limits.cell_pool_bytes = 1000;
        c.limits.link_cells.burst = 0;
        c.limits.circuit_creates.per_second = f64::INFINITY;
        c.log.level = "inf".to_owned();
        c.telemetry.otlp_endpoint = Some("127.0.0.1:4317".to_owned());
        c.telemetry.service_name = " ".to_owned();
        c.telemetry.export_interval = Duration::from_millis(10);
        assert_eq!(
            fields(&c),
            [
                "listen",
                "data_dir",
                "control.socket",
                "limits.max_links",
                "limits.max_streams_per_circuit",
                "limits.cell_pool_bytes",
                "limits.link_cells",
                "limits.circuit_creates",
                "log.level",
                "telemetry.otlp_endpoint",
                "telemetry.service_name",
                "telemetry.export_interval",
            ]
        );
        let text = Error::from(c.validate().unwrap_err()).to_string();
        assert!(
            text.contains("listen: 127.0.0.2:9000 is listed twice"),
            "{text}"
        );
        assert!(
            text.contains("limits.link_cells: burst must be at least 1"),
            "{text}"
        );
        assert!(text.contains("Unix sockets allow at most 107"), "{text}");
    }

    #[test]
    fn log_directives() {
        for ok in [
            "info",
            "WARN",
            "nyx_core=debug,info",
            "nyx_daemon::relay=trace, off",
        ] {
            assert_eq!(check_log_directives(ok), Ok(()), "{ok}");
        }
        for bad in ["", "loud", "=info", "a b=info", "x=verbose"] {
            assert!(check_log_directives(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn transport_kind_text() {
        assert_eq!(
            "QUIC".parse::<TransportKind>().unwrap(),
            TransportKind::Quic
        );
        assert_eq!(TransportKind::Udp.to_string(), "udp");
        assert!(
            "tcp"
                .parse::<TransportKind>()
                .unwrap_err()
                .to_string()
                .contains("\"tcp\"")
        );
    }

    #[cfg(feature = "serde")]
    #[test]
    fn toml_round_trip_and_unknown_keys() {
        let c = NodeConfig::default();
        let text = toml::to_string(&c).unwrap();
        assert!(text.contains("export_interval = \"10s\""), "{text}");
        assert_eq!(toml::from_str::<NodeConfig>(&text).unwrap(), c);
        let partial: NodeConfig =
            toml::from_str("transport = \"udp\"\n[limits]\nmax_links = 3\n").unwrap();
        assert_eq!(partial.transport, TransportKind::Udp);
        assert_eq!(partial.limits.max_links, 3);
        assert_eq!(
            partial.limits.max_circuits,
            LimitsConfig::default().max_circuits
        );
        let err = toml::from_str::<NodeConfig>("[limits]\nmax_linkz = 3\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("max_linkz"), "{err}");
    }
}
