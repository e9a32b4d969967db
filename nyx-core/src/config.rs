//! Typed configuration shared by whoever runs a node: the link transport and the resource
//! limits that protect a node from strangers, with documented defaults and a
//! [`validate`](LimitsConfig::validate) that reports every problem with the field it concerns.
//!
//! These structs are plain Rust; with the `serde` feature they also (de)serialize, rejecting
//! unknown fields, so the daemon can load them from TOML (docs/configuration.md documents
//! the keys). The daemon's own sections (control socket, logging, telemetry) are its own.
//!
//! ```
//! use nyx_core::config::LimitsConfig;
//!
//! let mut limits = LimitsConfig::default();
//! assert!(limits.validate().is_ok());
//!
//! limits.max_links = 0;
//! limits.max_circuits = 0;
//! let problems = limits.validate().unwrap_err();
//! assert_eq!(problems.len(), 2);
//! assert_eq!(problems.iter().next().unwrap().field, "limits.max_links");
//! ```

use std::fmt;
use std::str::FromStr;

use crate::Error;
use crate::rate::Quota;

#[cfg(feature = "serde")]
use serde::{Deserialize, Serialize};

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
    /// Most circuits this node relays at once (its own circuits are not counted). Default:
    /// 8192.
    pub max_circuits: usize,
    /// Most streams on one circuit (at most 65535). Default: 256.
    pub max_streams_per_circuit: u32,
    /// Memory cap of the UDP transport's datagram buffer pool in bytes (at least 64 KiB).
    /// Default: 64 MiB.
    pub cell_pool_bytes: usize,
    /// Cells a peer may send over its link. Default: 200000/s (about 230 MB/s), burst 20000.
    pub link_cells: RateConfig,
    /// Cells on one relayed circuit. Default: 100000/s (about 115 MB/s), burst 10000.
    pub circuit_cells: RateConfig,
    /// Circuits a peer may ask this node to create. Default: 10/s, burst 20.
    pub circuit_creates: RateConfig,
    /// Link handshakes (UDP HELLOs, QUIC Initials) from one source IP prefix (/24 for IPv4,
    /// /48 for IPv6), checked before any expensive cryptography. Default: 5/s, burst 10.
    pub handshakes_per_prefix: RateConfig,
    /// Most peers the overlay's per-peer limiters (link cells, circuit creates) track; see
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

/// One thing wrong with a configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigProblem {
    /// Dotted path of the field, as in the TOML file, e.g. `limits.link_cells.burst`.
    pub field: String,
    /// What is wrong and what would be accepted.
    pub reason: String,
}

/// Every problem a validation found (never empty when returned as an error).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigProblems(Vec<ConfigProblem>);

impl ConfigProblems {
    /// Problems found by a caller's own checks (for configuration files that extend
    /// these structs); in field order.
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

impl LimitsConfig {
    /// Check every field; on failure, list every problem with its field name (as a key of
    /// the daemon's `[limits]` section).
    pub fn validate(&self) -> Result<(), ConfigProblems> {
        let mut p = Problems(Vec::new());
        self.check(&mut p);
        if p.0.is_empty() {
            Ok(())
        } else {
            Err(ConfigProblems(p.0))
        }
    }

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
                    "{} is outside 1..={max_streams}",
                    self.max_streams_per_circuit
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid() {
        let c = LimitsConfig::default();
        assert_eq!(c.validate(), Ok(()));
        assert!(c.link_cells.quota().is_ok());
    }

    #[test]
    fn every_problem_is_reported_with_its_field() {
        let mut c = LimitsConfig {
            max_links: 0,
            max_streams_per_circuit: 70_000,
            cell_pool_bytes: 1000,
            ..LimitsConfig::default()
        };
        c.link_cells.burst = 0;
        c.circuit_creates.per_second = f64::INFINITY;
        let problems = c.validate().unwrap_err();
        let fields: Vec<&str> = problems.iter().map(|p| p.field.as_str()).collect();
        assert_eq!(
            fields,
            [
                "limits.max_links",
                "limits.max_streams_per_circuit",
                "limits.cell_pool_bytes",
                "limits.link_cells",
                "limits.circuit_creates",
            ]
        );
        let text = Error::from(problems).to_string();
        assert!(
            text.contains("limits.link_cells: burst must be at least 1"),
            "{text}"
        );
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
        let c = LimitsConfig::default();
        let text = toml::to_string(&c).unwrap();
        assert_eq!(toml::from_str::<LimitsConfig>(&text).unwrap(), c);
        let partial: LimitsConfig = toml::from_str("max_links = 3\n").unwrap();
        assert_eq!(partial.max_links, 3);
        assert_eq!(partial.max_circuits, LimitsConfig::default().max_circuits);
        let err = toml::from_str::<LimitsConfig>("max_linkz = 3\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("max_linkz"), "{err}");
    }
}
