//! The daemon's configuration file: the node's settings from nyx-core's [`NodeConfig`] plus
//! what only a daemon has (its nickname, SOCKS entry, directory file, exit policy). Unknown
//! keys, wrong types and invalid values are refused with the key name and the reason.
//!
//! docs/configuration.md documents every key; `nyx-daemon/nyx.example.toml` is a commented
//! example that a test parses.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use nyx_core::config::{
    ConfigProblem, ControlConfig, LimitsConfig, LogConfig, NodeConfig, RateConfig, TelemetryConfig,
    TransportKind,
};
use nyx_core::rate::Quota;
use serde::{Deserialize, Serialize};

use crate::Error;
use crate::directory::{ExitPolicy, MAX_NICKNAME_LEN};
use crate::node::NodeSettings;
use crate::overlay::LiveLimits;

/// Everything `nyx-daemon` reads from its TOML file. Every field has a default, so an empty
/// file (or no file) is a working client-and-relay node on 127.0.0.1.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DaemonConfig {
    /// Addresses the node listens on for other nodes (one for now). Port 0 picks a free
    /// port. Default `["127.0.0.1:0"]`.
    pub listen: Vec<SocketAddr>,
    /// `quic` (default) or `udp`.
    pub transport: TransportKind,
    /// Keys, the control socket and the published descriptor live here. Default
    /// `$XDG_STATE_HOME/nyx` or `~/.local/state/nyx`.
    pub data_dir: Option<PathBuf>,
    /// The name in this node's descriptor (1-32 of `A-Z a-z 0-9 - _`). Default `nyx`.
    pub nickname: String,
    /// The local control socket.
    pub control: ControlConfig,
    /// The SOCKS5 entry for applications.
    pub socks: SocksSection,
    /// Where the relays come from.
    pub directory: DirectorySection,
    /// What this node offers others as a relay.
    pub relay: RelaySection,
    /// Resource limits.
    pub limits: LimitsConfig,
    /// Logging.
    pub log: LogConfig,
    /// Metrics and trace export.
    pub telemetry: TelemetryConfig,
}

/// `[socks]`: the SOCKS5 entry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SocksSection {
    /// Whether to run it. Default true.
    pub enabled: bool,
    /// Where it listens; keep it on loopback. Default `127.0.0.1:9050` (Tor's port).
    pub listen: SocketAddr,
    /// A client must finish its SOCKS handshake within this. Default `10s`.
    #[serde(with = "humantime_serde")]
    pub handshake_timeout: Duration,
    /// Most SOCKS connections open at once. Default 1024.
    pub max_connections: usize,
}

impl Default for SocksSection {
    fn default() -> Self {
        SocksSection {
            enabled: true,
            listen: SocketAddr::from((Ipv4Addr::LOCALHOST, 9050)),
            handshake_timeout: Duration::from_secs(10),
            max_connections: 1024,
        }
    }
}

/// `[directory]`: the relays circuits are built through.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DirectorySection {
    /// A directory document (`nyx-directory 1` and descriptor lines); relative paths are
    /// inside `data_dir`. Re-read on reload. A missing file means no relays yet (the node
    /// still relays for others). Default `directory.txt`.
    pub file: PathBuf,
}

impl Default for DirectorySection {
    fn default() -> Self {
        DirectorySection {
            file: PathBuf::from("directory.txt"),
        }
    }
}

/// `[relay]`: what this node publishes and allows as a relay.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RelaySection {
    /// Exit policy: rules `accept|reject ADDR[/BITS]:PORTS`, first match wins, then reject.
    /// Default `["reject *:*"]` (not an exit). Changes apply on reload.
    pub exit_policy: Vec<String>,
    /// Bandwidth this node offers, in KB/s, as published (path selection weights by it).
    /// Default 1000.
    pub bandwidth: u32,
    /// How long the published descriptor is valid. Default `24h`.
    #[serde(with = "humantime_serde")]
    pub descriptor_validity: Duration,
}

impl Default for RelaySection {
    fn default() -> Self {
        RelaySection {
            exit_policy: vec!["reject *:*".to_owned()],
            bandwidth: 1000,
            descriptor_validity: Duration::from_secs(24 * 3600),
        }
    }
}

impl Default for DaemonConfig {
    fn default() -> Self {
        let node = NodeConfig::default();
        DaemonConfig {
            listen: node.listen,
            transport: node.transport,
            data_dir: None,
            nickname: "nyx".to_owned(),
            control: node.control,
            socks: SocksSection::default(),
            directory: DirectorySection::default(),
            relay: RelaySection::default(),
            limits: node.limits,
            log: node.log,
            telemetry: node.telemetry,
        }
    }
}

impl DaemonConfig {
    /// Read, parse and validate the TOML file at `path`.
    pub fn load(path: &Path) -> Result<Self, Error> {
        let text = std::fs::read_to_string(path).map_err(|source| Error::ConfigRead {
            path: path.to_owned(),
            source,
        })?;
        Self::parse(&text, path)
    }

    /// Parse and validate TOML text; `origin` names it in errors.
    pub fn parse(text: &str, origin: &Path) -> Result<Self, Error> {
        let config: DaemonConfig = toml::from_str(text).map_err(|e| Error::ConfigSyntax {
            path: origin.to_owned(),
            message: e.to_string().trim_end().to_owned(),
        })?;
        config.validate(origin)?;
        Ok(config)
    }

    /// The configuration as TOML (what `nyx config show` prints).
    pub fn to_toml(&self) -> String {
        toml::to_string_pretty(self).unwrap_or_else(|e| format!("# cannot show: {e}\n"))
    }

    /// The nyx-core view of the node's settings (shared validation).
    pub fn node_config(&self) -> NodeConfig {
        NodeConfig {
            listen: self.listen.clone(),
            transport: self.transport,
            data_dir: self.data_dir.clone(),
            control: self.control.clone(),
            limits: self.limits.clone(),
            log: self.log.clone(),
            telemetry: self.telemetry.clone(),
        }
    }

    /// Check every value; all problems are reported at once, each with its key.
    pub fn validate(&self, origin: &Path) -> Result<(), Error> {
        let mut problems: Vec<ConfigProblem> = match self.node_config().validate() {
            Ok(()) => Vec::new(),
            Err(p) => p.iter().cloned().collect(),
        };
        let mut add = |field: &str, reason: String| {
            problems.push(ConfigProblem {
                field: field.to_owned(),
                reason,
            })
        };
        if self.listen.len() > 1 {
            add(
                "listen",
                format!(
                    "{} addresses given; this version listens on one",
                    self.listen.len()
                ),
            );
        }
        if let Err(reason) = check_nickname(&self.nickname) {
            add("nickname", reason);
        }
        if self.socks.handshake_timeout < Duration::from_millis(10) {
            add(
                "socks.handshake_timeout",
                format!("{:?} is shorter than 10ms", self.socks.handshake_timeout),
            );
        }
        if self.socks.max_connections == 0 {
            add("socks.max_connections", "must be at least 1".to_owned());
        }
        if self.directory.file.as_os_str().is_empty() {
            add("directory.file", "must not be empty".to_owned());
        }
        if let Err(e) = self.exit_policy() {
            add("relay.exit_policy", e.to_string());
        }
        if self.relay.bandwidth == 0 {
            add("relay.bandwidth", "must be at least 1".to_owned());
        }
        if self.relay.descriptor_validity < Duration::from_secs(600) {
            add(
                "relay.descriptor_validity",
                format!(
                    "{:?} is shorter than 10 minutes",
                    self.relay.descriptor_validity
                ),
            );
        }
        for (field, rate) in [
            ("limits.link_cells", self.limits.link_cells),
            ("limits.circuit_cells", self.limits.circuit_cells),
            ("limits.circuit_creates", self.limits.circuit_creates),
        ] {
            if let Err(e) = quota(rate) {
                add(field, e);
            }
        }
        if problems.is_empty() {
            return Ok(());
        }
        // De-duplicate (nyx-core and this function may both check a field).
        problems.dedup();
        Err(Error::ConfigInvalid {
            path: origin.to_owned(),
            problems: nyx_core::config::ConfigProblems::from_vec(problems),
        })
    }

    /// The exit policy of `[relay]`.
    pub fn exit_policy(&self) -> Result<ExitPolicy, crate::directory::PolicyError> {
        self.relay.exit_policy.join(", ").parse()
    }

    /// The overlay limits that can change while the node runs.
    pub fn live_limits(&self) -> Result<LiveLimits, String> {
        Ok(LiveLimits {
            link_cells: quota(self.limits.link_cells)?,
            circuit_cells: quota(self.limits.circuit_cells)?,
            circuit_creates: quota(self.limits.circuit_creates)?,
            max_relay_circuits: self.limits.max_circuits,
        })
    }

    /// The node settings this configuration asks for (validated configuration assumed;
    /// invalid values fall back to the defaults).
    pub fn node_settings(&self) -> NodeSettings {
        let mut s = NodeSettings {
            transport: self.transport,
            ..NodeSettings::default()
        };
        if let Some(addr) = self.listen.first() {
            s.listen = *addr;
        }
        if let Ok(limits) = self.live_limits() {
            s.overlay.link_cells = limits.link_cells;
            s.overlay.circuit_cells = limits.circuit_cells;
            s.overlay.circuit_creates = limits.circuit_creates;
            s.overlay.max_relay_circuits = limits.max_relay_circuits;
        }
        s.overlay.max_limited_keys = self.limits.max_limited_keys;
        s.streams.max_streams = self.limits.max_streams_per_circuit as usize;
        s.udp.hello_rate_per_source = self.limits.handshakes_per_prefix.per_second.ceil() as u32;
        s.udp.max_peers = self.limits.max_links;
        s.udp.pool_bytes = self.limits.cell_pool_bytes;
        if let Ok(policy) = self.exit_policy() {
            s.exit_policy = policy;
        }
        s
    }

    /// Keys of `self` that differ in `new` and can change while the daemon runs, and those
    /// that need a restart.
    pub fn diff(&self, new: &DaemonConfig) -> ConfigDiff {
        let mut d = ConfigDiff::default();
        let mut check = |key: &str, changed: bool, live: bool| {
            if changed {
                if live {
                    d.live.push(key.to_owned());
                } else {
                    d.restart.push(key.to_owned());
                }
            }
        };
        check("listen", self.listen != new.listen, false);
        check("transport", self.transport != new.transport, false);
        check("data_dir", self.data_dir != new.data_dir, false);
        check("nickname", self.nickname != new.nickname, false);
        check("control", self.control != new.control, false);
        check("socks", self.socks != new.socks, false);
        check("directory.file", self.directory != new.directory, true);
        check(
            "relay.exit_policy",
            self.relay.exit_policy != new.relay.exit_policy,
            true,
        );
        check(
            "relay.bandwidth",
            self.relay.bandwidth != new.relay.bandwidth,
            true,
        );
        check(
            "relay.descriptor_validity",
            self.relay.descriptor_validity != new.relay.descriptor_validity,
            true,
        );
        let (a, b) = (&self.limits, &new.limits);
        check("limits.link_cells", a.link_cells != b.link_cells, true);
        check(
            "limits.circuit_cells",
            a.circuit_cells != b.circuit_cells,
            true,
        );
        check(
            "limits.circuit_creates",
            a.circuit_creates != b.circuit_creates,
            true,
        );
        check(
            "limits.max_circuits",
            a.max_circuits != b.max_circuits,
            true,
        );
        check("limits.max_links", a.max_links != b.max_links, false);
        check(
            "limits.max_streams_per_circuit",
            a.max_streams_per_circuit != b.max_streams_per_circuit,
            false,
        );
        check(
            "limits.cell_pool_bytes",
            a.cell_pool_bytes != b.cell_pool_bytes,
            false,
        );
        check(
            "limits.handshakes_per_prefix",
            a.handshakes_per_prefix != b.handshakes_per_prefix,
            false,
        );
        check(
            "limits.max_limited_keys",
            a.max_limited_keys != b.max_limited_keys,
            false,
        );
        check("log.level", self.log.level != new.log.level, true);
        check("log.format", self.log.format != new.log.format, false);
        check(
            "log.log_sensitive",
            self.log.log_sensitive != new.log.log_sensitive,
            true,
        );
        check("telemetry", self.telemetry != new.telemetry, false);
        d
    }
}

/// What a reload changes: keys applied live, and keys that only take effect after a restart.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConfigDiff {
    /// Changed keys applied while running.
    pub live: Vec<String>,
    /// Changed keys that need a restart (the running daemon keeps the old value).
    pub restart: Vec<String>,
}

fn quota(rate: RateConfig) -> Result<Quota, String> {
    Quota::from_rate(rate.per_second, rate.burst).map_err(|e| e.to_string())
}

fn check_nickname(name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > MAX_NICKNAME_LEN {
        return Err(format!(
            "{name:?} must be 1 to {MAX_NICKNAME_LEN} characters long"
        ));
    }
    if let Some(c) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || *c == '-' || *c == '_'))
    {
        return Err(format!(
            "{name:?} contains {c:?}; use only A-Z, a-z, 0-9, '-' and '_'"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests;
