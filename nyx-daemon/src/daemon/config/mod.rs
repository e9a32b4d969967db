//! The daemon's configuration file: the node's listen address, transport and resource
//! limits (nyx-core's [`LimitsConfig`]) and what only a daemon has (data directory,
//! nickname, control socket, SOCKS and HTTP CONNECT entries, directory file, exit policy,
//! logging, telemetry: [`sections`]). Unknown keys, wrong types and invalid values are
//! refused with the key name and the reason.
//!
//! docs/configuration.md documents every key; `nyx-daemon/nyx.example.toml` is a commented
//! example that a test parses.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use nyx_core::NodeId;
use nyx_core::config::{ConfigProblem, LimitsConfig, TransportKind};
use serde::{Deserialize, Serialize};

use crate::Error;
use nyx_node::{NodeRole, NodeSettings};
use nyx_overlay::circuit::LiveLimits;
use nyx_overlay::directory::{ExitPolicy, MAX_FAMILY};
use nyx_transport::socket::SocketMode;
pub use sections::{
    AuthoritySection, ControlConfig, HttpConnectSection, LogConfig, LogFormat, LogTimestamps,
    TelemetryConfig,
};

/// The most `worker_threads` a configuration may ask for.
pub const MAX_WORKER_THREADS: usize = 1024;

/// Everything `nyx-daemon` reads from its TOML file. Every field has a default, so an empty
/// file (or no file) is a working client-only node (`relay.enabled = true` makes a relay).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DaemonConfig {
    /// The node's socket (a list of one address): where a relay listens for other nodes and
    /// what its descriptor publishes; where a client's links start from. Port 0 picks a
    /// free port. Default: none given, which binds `127.0.0.1:0` for a relay and
    /// `0.0.0.0:0` for a client.
    pub listen: Vec<SocketAddr>,
    /// `quic` (default) or `udp`.
    pub transport: TransportKind,
    /// How the node's socket moves datagrams: `auto` (default: batched system calls, one
    /// datagram per call where the system refuses batching), `batched`, or `plain` (one
    /// datagram per `recvfrom`/`sendto`, as network simulators such as Shadow need).
    pub socket_io: SocketIo,
    /// Keys, the control socket and the published descriptor live here. Default
    /// `$STATE_DIRECTORY` (its first entry), else `$XDG_STATE_HOME/nyx`, else
    /// `~/.local/state/nyx`.
    pub data_dir: Option<PathBuf>,
    /// The name in this node's descriptor (1-32 of `A-Z a-z 0-9 - _`). Default `nyx`.
    pub nickname: String,
    /// Threads that run the node (its async runtime's workers), at most
    /// [`MAX_WORKER_THREADS`]. 0 (default): one per CPU core the process may use, or
    /// `TOKIO_WORKER_THREADS` when set. Daemons that share a machine do better with a share
    /// of its cores each: more threads than cores turn every hand-off between a node's
    /// tasks into a wake-up of another thread (`nyx testnet` gives each daemon its share).
    pub worker_threads: usize,
    /// The local control socket.
    pub control: ControlConfig,
    /// The SOCKS entry (SOCKS5, SOCKS4, SOCKS4a) for applications.
    pub socks: SocksSection,
    /// The HTTP CONNECT entry for applications.
    pub http_connect: HttpConnectSection,
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
    /// Running as a directory authority.
    pub authority: AuthoritySection,
    /// How circuits' paths are chosen.
    pub path: PathSection,
}

/// `socket_io`: how the node's socket moves datagrams ([`nyx_transport::socket`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SocketIo {
    /// Batched where the system allows it, plain where it refuses.
    #[default]
    Auto,
    /// Batched only: the start fails where the system refuses it.
    Batched,
    /// One datagram per system call.
    Plain,
}

impl From<SocketIo> for SocketMode {
    fn from(io: SocketIo) -> Self {
        match io {
            SocketIo::Auto => SocketMode::Auto,
            SocketIo::Batched => SocketMode::Batched,
            SocketIo::Plain => SocketMode::Plain,
        }
    }
}

/// `[path]`: how circuits' paths are chosen.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PathSection {
    /// No two relays of a path in one IPv4 /16 or IPv6 /32. Default `true`; turn it off
    /// only for test networks whose relays share a subnet (it guards against one operator
    /// or network seeing two hops).
    pub distinct_subnets: bool,
}

impl Default for PathSection {
    fn default() -> Self {
        PathSection {
            distinct_subnets: true,
        }
    }
}

/// `[socks]`: the SOCKS entry (SOCKS5, SOCKS4 and SOCKS4a on one port).
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
    /// The directory authorities: `IDENTITY` (an identity key, 64 hex digits) or
    /// `IDENTITY ADDRESS LINK_KEY` (also where to reach it: `ip:port` and the base64 of its
    /// link key). When set, only the relays of a consensus signed by more than half of them
    /// are used; `file` alone is never trusted. The daemon then fetches the consensus from
    /// the authorities it can reach (and from relays once it has one), uploads its own
    /// descriptor to them, and keeps the last good consensus in `consensus` and its
    /// descriptors in `file`. Default: none.
    pub authorities: Vec<String>,
    /// The consensus (relative paths are inside `data_dir`); re-read on reload, refused when
    /// older than the one in force. Used only with `authorities`. Default `consensus.bin`.
    pub consensus: PathBuf,
}

impl Default for DirectorySection {
    fn default() -> Self {
        DirectorySection {
            file: PathBuf::from("directory.txt"),
            authorities: Vec::new(),
            consensus: PathBuf::from("consensus.bin"),
        }
    }
}

/// `[relay]`: what this node publishes and allows as a relay.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RelaySection {
    /// Relay others' circuits: listen for links, publish a descriptor (uploaded to the
    /// authorities), rotate onion keys, show the identity on links. Off (the default), the
    /// node is a client only: it accepts no links, publishes nothing, makes no link key,
    /// and its guard sees a fresh identity on each link (Tor's and arti's default).
    pub enabled: bool,
    /// The address the descriptor publishes when it is not `listen`: for a relay listening
    /// on `0.0.0.0` or `[::]`, or behind NAT or port forwarding. Port 0 means the bound
    /// port. Default: none (`listen` is published).
    pub advertise: Option<SocketAddr>,
    /// Exit policy: rules `accept|reject ADDR[/BITS]:PORTS`, first match wins, then reject.
    /// Default `["reject *:*"]` (not an exit). Changes apply on reload.
    pub exit_policy: Vec<String>,
    /// The relays run by the same operator (Tor's `MyFamily`): node ids, 64 hex digits each,
    /// at most 32, none twice. This node's own id may be among them (it is left out of the
    /// descriptor), so one list can serve every relay of the family. Clients keep two relays
    /// out of one path only when each lists the other. Default: none. Changes apply on
    /// reload.
    pub family: Vec<String>,
    /// Bandwidth this node offers, in KB/s, as published (path selection weights by it).
    /// Default 1000.
    pub bandwidth: u32,
    /// How long the published descriptor is valid. Default `24h`.
    #[serde(with = "humantime_serde")]
    pub descriptor_validity: Duration,
    /// How often a new onion key is made (Tor's `OnionKeyRotationDays`); the descriptor is
    /// published again with it. Default `24h`, at least 10 s.
    #[serde(with = "humantime_serde")]
    pub onion_key_period: Duration,
    /// How often a relay makes a new link key (the key of the UDP link handshake, published
    /// in the descriptor). Default `7d`, at least 10 s. Authorities keep theirs (pinned).
    #[serde(with = "humantime_serde")]
    pub link_key_period: Duration,
    /// How long the previous link key is still answered after a rotation: clients must get
    /// the new descriptor within it. Default `3h`; shorter than the period.
    #[serde(with = "humantime_serde")]
    pub link_key_overlap: Duration,
    /// How long before a key expires its successor is published, which is also how long both
    /// are accepted: clients must get the new descriptor (through a new consensus) within
    /// it. Default `3h`; shorter than the period.
    #[serde(with = "humantime_serde")]
    pub onion_key_overlap: Duration,
}

impl Default for RelaySection {
    fn default() -> Self {
        RelaySection {
            enabled: false,
            advertise: None,
            exit_policy: vec!["reject *:*".to_owned()],
            family: Vec::new(),
            bandwidth: 1000,
            descriptor_validity: Duration::from_secs(24 * 3600),
            onion_key_period: Duration::from_secs(24 * 3600),
            onion_key_overlap: Duration::from_secs(3 * 3600),
            link_key_period: Duration::from_secs(7 * 86_400),
            link_key_overlap: Duration::from_secs(3 * 3600),
        }
    }
}

impl Default for DaemonConfig {
    fn default() -> Self {
        DaemonConfig {
            listen: Vec::new(),
            transport: TransportKind::Quic,
            socket_io: SocketIo::Auto,
            data_dir: None,
            nickname: "nyx".to_owned(),
            worker_threads: 0,
            control: ControlConfig::default(),
            socks: SocksSection::default(),
            http_connect: HttpConnectSection::default(),
            directory: DirectorySection::default(),
            relay: RelaySection::default(),
            limits: LimitsConfig::default(),
            log: LogConfig::default(),
            telemetry: TelemetryConfig::default(),
            authority: AuthoritySection::default(),
            path: PathSection::default(),
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

    /// The relays to trust under this configuration (see [`crate::daemon::trust`]), files
    /// resolved against `data_dir`; `held` is the start of the consensus in force, if any.
    pub fn trusted(
        &self,
        data_dir: &Path,
        now_unix: u64,
        held: Option<u64>,
    ) -> Result<crate::daemon::trust::Trusted, Error> {
        let authorities = crate::daemon::trust::parse_authorities(&self.directory.authorities)
            .map_err(|reason| Error::ConfigInvalid {
                path: PathBuf::new(),
                problems: nyx_core::config::ConfigProblems::from_vec(vec![ConfigProblem {
                    field: "directory.authorities".to_owned(),
                    reason,
                }]),
            })?;
        crate::daemon::trust::load(
            &data_dir.join(&self.directory.file),
            &data_dir.join(&self.directory.consensus),
            &authorities,
            now_unix,
            held,
        )
    }

    /// How the onion keys rotate (`relay.onion_key_period`, `relay.onion_key_overlap`).
    pub fn onion_key_rotation(&self) -> nyx_crypto::onion_keys::RotationPolicy {
        nyx_crypto::onion_keys::RotationPolicy {
            period: self.relay.onion_key_period,
            overlap: self.relay.onion_key_overlap,
        }
    }

    /// How a relay's link keys rotate; `None` when they do not (a client has none, an
    /// authority's is pinned).
    pub fn link_key_schedule(&self) -> Option<crate::daemon::link_keys::LinkKeySchedule> {
        (self.relay.enabled && !self.authority.enabled).then_some(
            crate::daemon::link_keys::LinkKeySchedule {
                period: self.relay.link_key_period,
                overlap: self.relay.link_key_overlap,
            },
        )
    }

    /// The exit policy of `[relay]`.
    pub fn exit_policy(&self) -> Result<ExitPolicy, nyx_overlay::directory::PolicyError> {
        self.relay.exit_policy.join(", ").parse()
    }

    /// The node ids of `relay.family` (this node's own id may be among them).
    pub fn family(&self) -> Result<Vec<NodeId>, String> {
        let family = (self.relay.family.iter())
            .map(|text| {
                text.parse::<NodeId>().map_err(|e| {
                    let shown: String = text.chars().take(70).collect();
                    format!("{shown:?}: {e}")
                })
            })
            .collect::<Result<Vec<NodeId>, String>>()?;
        if family.len() > MAX_FAMILY {
            return Err(format!("{} node ids, at most {MAX_FAMILY}", family.len()));
        }
        for (i, id) in family.iter().enumerate() {
            if family[..i].contains(id) {
                return Err(format!("{id} is listed twice"));
            }
        }
        Ok(family)
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
        let (role, listen) = match self.relay.enabled {
            true => (NodeRole::Relay, Ipv4Addr::LOCALHOST),
            false => (NodeRole::Client, Ipv4Addr::UNSPECIFIED),
        };
        let mut s = NodeSettings {
            role,
            transport: self.transport,
            listen: SocketAddr::from((listen, 0)),
            ..NodeSettings::default()
        };
        if let Some(addr) = self.listen.first() {
            s.listen = *addr;
        }
        s.advertise = self.relay.advertise;
        s.udp.socket = self.socket_io.into();
        s.quic.socket = self.socket_io.into();
        s.path.distinct_subnets = self.path.distinct_subnets;
        if let Ok(limits) = self.live_limits() {
            s.overlay.link_cells = limits.link_cells;
            s.overlay.circuit_cells = limits.circuit_cells;
            s.overlay.circuit_creates = limits.circuit_creates;
            s.overlay.max_relay_circuits = limits.max_relay_circuits;
        }
        s.overlay.max_limited_keys = self.limits.max_limited_keys;
        s.streams.max_streams = self.limits.max_streams_per_circuit as usize;
        if let Ok(hellos) = quota(self.limits.handshakes_per_prefix) {
            s.udp.hello_per_source = hellos;
            s.quic.admission.per_source = hellos;
        }
        s.udp.max_peers = self.limits.max_links;
        s.quic.max_links = self.limits.max_links;
        s.udp.pool_bytes = self.limits.cell_pool_bytes;
        if let Ok(policy) = self.exit_policy() {
            s.exit_policy = policy;
        }
        if let Ok(family) = self.family() {
            s.family = family;
        }
        s
    }
}

mod diff;
mod effective;
pub(crate) use effective::OPEN_LISTENER;
pub mod sections;
#[cfg(test)]
mod tests;
mod validate;

pub use diff::{ConfigDiff, LIVE_KEYS};
use validate::quota;
