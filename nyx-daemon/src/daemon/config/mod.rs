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
use nyx_core::config::{ConfigProblem, LimitsConfig, RateConfig, TransportKind};
use nyx_core::rate::Quota;
use serde::{Deserialize, Serialize};

use crate::Error;
use nyx_node::{NodeRole, NodeSettings};
use nyx_overlay::circuit::LiveLimits;
use nyx_overlay::directory::{ExitPolicy, MAX_FAMILY, MAX_NICKNAME_LEN};
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

    /// Check every value; all problems are reported at once, each with its key.
    pub fn validate(&self, origin: &Path) -> Result<(), Error> {
        let mut problems: Vec<ConfigProblem> = Vec::new();
        let mut add = |field: &str, reason: String| {
            problems.push(ConfigProblem {
                field: field.to_owned(),
                reason,
            })
        };
        if self.relay.enabled
            && self.relay.advertise.is_none()
            && let Some(addr) = self.listen.first()
            && addr.ip().to_canonical().is_unspecified()
        {
            add(
                "listen",
                format!(
                    "a relay on {} must say where others reach it: set relay.advertise",
                    addr.ip()
                ),
            );
        }
        if let Some(addr) = self.relay.advertise
            && addr.ip().to_canonical().is_unspecified()
        {
            add(
                "relay.advertise",
                format!(
                    "{} reaches nobody: give the address others reach",
                    addr.ip()
                ),
            );
        }
        for (i, addr) in self.listen.iter().enumerate() {
            if self.listen[..i].contains(addr) {
                add("listen", format!("{addr} is listed twice"));
            }
        }
        if self.listen.len() > 1 {
            add(
                "listen",
                format!(
                    "{} addresses given; this version listens on one",
                    self.listen.len()
                ),
            );
        }
        if let Some(dir) = &self.data_dir
            && dir.as_os_str().is_empty()
        {
            add(
                "data_dir",
                "must not be empty (leave it unset for the default)".to_owned(),
            );
        }
        if let Err(reason) = check_nickname(&self.nickname) {
            add("nickname", reason);
        }
        if self.worker_threads > MAX_WORKER_THREADS {
            add(
                "worker_threads",
                format!(
                    "{} is more than {MAX_WORKER_THREADS} (0 means one per CPU core)",
                    self.worker_threads
                ),
            );
        }
        for (field, reason) in self.control.problems() {
            add(field, reason);
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
        for (field, reason) in self.http_connect.problems() {
            add(field, reason);
        }
        if self.directory.file.as_os_str().is_empty() {
            add("directory.file", "must not be empty".to_owned());
        }
        if let Err(reason) = crate::daemon::trust::parse_authorities(&self.directory.authorities) {
            add("directory.authorities", reason);
        }
        // Clients refuse onion keys certified for longer than MAX_ONION_KEY_LIFETIME (a
        // period plus an overlap shorter than it): a period of at most half of it fits.
        let max_onion = nyx_overlay::directory::MAX_ONION_KEY_LIFETIME / 2;
        if self.relay.onion_key_period < Duration::from_secs(10)
            || self.relay.onion_key_period > Duration::from_secs(max_onion)
        {
            add(
                "relay.onion_key_period",
                format!(
                    "{:?} is shorter than 10s or longer than {} days (clients refuse longer keys)",
                    self.relay.onion_key_period,
                    max_onion / 86_400
                ),
            );
        }
        if self.relay.link_key_period < Duration::from_secs(10) {
            add(
                "relay.link_key_period",
                format!("{:?} is shorter than 10s", self.relay.link_key_period),
            );
        }
        // Both keys' overlaps: above zero and shorter than their period.
        for (kind, overlap, period) in [
            (
                "onion",
                self.relay.onion_key_overlap,
                self.relay.onion_key_period,
            ),
            (
                "link",
                self.relay.link_key_overlap,
                self.relay.link_key_period,
            ),
        ] {
            if overlap.is_zero() || overlap >= period {
                add(
                    &format!("relay.{kind}_key_overlap"),
                    format!(
                        "{overlap:?} must be above zero and shorter than relay.{kind}_key_period"
                    ),
                );
            }
        }
        let min_period = nyx_overlay::directory::authority::MIN_PERIOD;
        // A consensus is valid for three periods; clients refuse longer than
        // MAX_CONSENSUS_LIFETIME.
        let max_period = nyx_overlay::directory::consensus::MAX_CONSENSUS_LIFETIME / 3;
        if self.authority.period < Duration::from_secs(min_period)
            || self.authority.period > Duration::from_secs(max_period)
        {
            add(
                "authority.period",
                format!(
                    "{:?} is shorter than {min_period}s or longer than {}h (clients refuse \
                     consensuses valid for longer than three of them)",
                    self.authority.period,
                    max_period / 3600
                ),
            );
        }
        if self.authority.enabled && !self.relay.enabled {
            add(
                "authority.enabled",
                "an authority is reached and probes relays as a relay: set relay.enabled"
                    .to_owned(),
            );
        }
        if self.authority.enabled && self.directory.authorities.is_empty() {
            add(
                "authority.enabled",
                "an authority needs directory.authorities (its own key among them)".to_owned(),
            );
        }
        if self.directory.consensus.as_os_str().is_empty() {
            add("directory.consensus", "must not be empty".to_owned());
        }
        if let Err(e) = self.exit_policy() {
            add("relay.exit_policy", e.to_string());
        }
        if let Err(reason) = self.family() {
            add("relay.family", reason);
        }
        if self.relay.bandwidth == 0 {
            add("relay.bandwidth", "must be at least 1".to_owned());
        }
        let max_validity = nyx_overlay::directory::authority::MAX_DESCRIPTOR_VALIDITY;
        if self.relay.descriptor_validity < Duration::from_secs(600)
            || self.relay.descriptor_validity > Duration::from_secs(max_validity)
        {
            add(
                "relay.descriptor_validity",
                format!(
                    "{:?} is shorter than 10 minutes or longer than {} days (what \
                     authorities accept)",
                    self.relay.descriptor_validity,
                    max_validity / 86_400
                ),
            );
        }
        if let Err(limits) = self.limits.validate() {
            for p in limits.iter() {
                add(&p.field, p.reason.clone());
            }
        }
        for (field, reason) in self
            .log
            .problems()
            .into_iter()
            .chain(self.telemetry.problems())
        {
            add(field, reason);
        }
        if problems.is_empty() {
            return Ok(());
        }
        Err(Error::ConfigInvalid {
            path: origin.to_owned(),
            problems: nyx_core::config::ConfigProblems::from_vec(problems),
        })
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
        s.udp.hello_rate_per_source = self.limits.handshakes_per_prefix.per_second.ceil() as u32;
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

    /// Keys of `self` that differ in `new` and can change while the daemon runs, and those
    /// that need a restart. The keys are found by comparing the two configurations as TOML
    /// (top-level keys, and the keys of each section), so a key added to the file format is
    /// never missed; it needs a restart unless it is listed in [`LIVE_KEYS`].
    pub fn diff(&self, new: &DaemonConfig) -> ConfigDiff {
        let mut changed = Vec::new();
        match (toml::Value::try_from(self), toml::Value::try_from(new)) {
            (Ok(toml::Value::Table(a)), Ok(toml::Value::Table(b))) => {
                changed_keys(&a, &b, "", 2, &mut changed);
            }
            // Plain data always serializes; if it ever did not, claim nothing was applied.
            _ => changed.push("*".to_owned()),
        }
        let (live, restart) = changed
            .into_iter()
            .partition(|key| LIVE_KEYS.contains(&key.as_str()));
        ConfigDiff { live, restart }
    }
}

/// The keys a running daemon applies on reload (SIGHUP or the control API): the directory
/// file is re-read, the exit policy applied, the descriptor republished (with the new exit
/// policy, family, bandwidth or validity), the overlay's limits and the log filter changed in
/// place. Every other key takes effect after a restart.
pub const LIVE_KEYS: [&str; 13] = [
    "directory.file",
    "directory.authorities",
    "directory.consensus",
    "relay.exit_policy",
    "relay.family",
    "relay.bandwidth",
    "relay.descriptor_validity",
    "limits.link_cells",
    "limits.circuit_cells",
    "limits.circuit_creates",
    "limits.max_circuits",
    "log.level",
    "log.log_sensitive",
];

/// Append to `out` the dotted keys whose values differ between `a` and `b` (present in one
/// only counts), descending into tables `depth - 1` more levels.
fn changed_keys(
    a: &toml::Table,
    b: &toml::Table,
    prefix: &str,
    depth: usize,
    out: &mut Vec<String>,
) {
    let keys: std::collections::BTreeSet<&String> = a.keys().chain(b.keys()).collect();
    for key in keys {
        let path = if prefix.is_empty() {
            key.clone()
        } else {
            format!("{prefix}.{key}")
        };
        match (a.get(key), b.get(key)) {
            (Some(toml::Value::Table(x)), Some(toml::Value::Table(y))) if depth > 1 => {
                changed_keys(x, y, &path, depth - 1, out);
            }
            (x, y) if x != y => out.push(path),
            _ => {}
        }
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

mod effective;
pub(crate) use effective::OPEN_LISTENER;
pub mod sections;
#[cfg(test)]
mod tests;
