//! What a running daemon knows and can change: the node, the configuration in force, the
//! published descriptor, the application streams. The control API, SIGHUP and the metrics
//! endpoint all act through [`DaemonState`].

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use nyx_crypto::identity::IdentityKey;
use tokio::sync::watch;

use super::config::{ConfigDiff, DaemonConfig};
use super::files;
use super::sd_notify::Notifier;
use super::stream_registry::StreamRegistry;
use crate::Error;
use crate::entry::{EntryCounters, Protocol};
use crate::telemetry::histogram::{CIRCUIT_BUILD_HELP, CIRCUIT_BUILD_SECONDS, LATENCY_SECONDS};
use crate::telemetry::{
    ExtraMetric, Histogram, MetricsSnapshot, process_metrics, render_prometheus,
};
use nyx_node::{NodeHandle, unix_now};
use nyx_overlay::directory::{Descriptor, DescriptorBuilder, Directory};

use super::held::Bundle;

mod reload;

/// Changes the log filter of the running process (installed by the binary's telemetry);
/// returns a description of what is wrong with directives it refuses.
pub type LogControl = Arc<dyn Fn(&str) -> Result<(), String> + Send + Sync>;

/// Addresses and paths fixed for the daemon's lifetime.
#[derive(Debug, Clone)]
pub struct Endpoints {
    /// Where the node listens for other nodes.
    pub listen: SocketAddr,
    /// The SOCKS entry, when on.
    pub socks: Option<SocketAddr>,
    /// The HTTP CONNECT entry, when on.
    pub http_connect: Option<SocketAddr>,
    /// The control socket, when on (a path, or `@name` for an abstract socket).
    pub control: Option<PathBuf>,
    /// The Prometheus endpoint, when on.
    pub prometheus: Option<SocketAddr>,
    /// The data directory.
    pub data_dir: PathBuf,
}

/// What a reload did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReloadOutcome {
    /// Changed keys (live ones applied, others waiting for a restart).
    pub diff: ConfigDiff,
    /// Relays in the directory afterwards.
    pub relays: usize,
}

/// The running daemon, shared by its tasks.
pub struct DaemonState {
    /// The node.
    pub node: NodeHandle,
    /// Fixed addresses.
    pub endpoints: Endpoints,
    /// Application streams.
    pub streams: StreamRegistry,
    /// When the daemon started.
    pub started: Instant,
    /// How long this node's circuits took to build (fed from its events).
    pub circuit_builds: Arc<Histogram>,
    config_path: Option<PathBuf>,
    config: Mutex<DaemonConfig>,
    pub(super) directory: Mutex<Directory>,
    /// The start of the consensus in force (older ones are refused on reload).
    pub(super) consensus_valid_after: Mutex<Option<u64>>,
    /// When the consensus in force expires.
    pub(super) consensus_valid_until: Mutex<Option<u64>>,
    /// The consensus in force as signed, with its descriptors (what this daemon serves as
    /// a directory cache).
    pub(super) bundle: Mutex<Option<Arc<Bundle>>>,
    /// The descriptor last signed (the uploader sends it to the authorities).
    pub(super) signed: watch::Sender<Option<Descriptor>>,
    /// Held while a consensus is taken up or the configuration reloaded.
    pub(super) adopting: tokio::sync::Mutex<()>,
    log_level: Mutex<String>,
    log_control: Option<LogControl>,
    identity: Arc<IdentityKey>,
    /// What this relay publishes; `None` for a client-only daemon.
    descriptor: Mutex<Option<DescriptorBuilder>>,
    shutdown: watch::Sender<bool>,
    /// The counters of the entries that are on (SOCKS, HTTP CONNECT).
    entries: Mutex<Vec<(Protocol, EntryCounters)>>,
    /// The service manager, told of reloads from any source (SIGHUP or the control API).
    notifier: std::sync::OnceLock<Arc<Notifier>>,
}

impl std::fmt::Debug for DaemonState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DaemonState")
            .field("node", &self.node.node_id())
            .field("endpoints", &self.endpoints)
            .finish_non_exhaustive()
    }
}

/// Everything [`DaemonState::new`] needs.
pub struct StateParts {
    /// The node.
    pub node: NodeHandle,
    /// Fixed addresses.
    pub endpoints: Endpoints,
    /// The file the configuration came from (`None`: embedded defaults).
    pub config_path: Option<PathBuf>,
    /// The configuration in force.
    pub config: DaemonConfig,
    /// The directory in use.
    pub directory: Directory,
    /// The start of the consensus it came from, if any.
    pub consensus_valid_after: Option<u64>,
    /// When that consensus expires, if any.
    pub consensus_valid_until: Option<u64>,
    /// That consensus as signed, if any.
    pub consensus: Option<Vec<u8>>,
    /// Log filter control, when the binary installed one.
    pub log_control: Option<LogControl>,
    /// The node's identity (signs republished descriptors).
    pub identity: Arc<IdentityKey>,
    /// The descriptor contents to publish (`None`: a client-only daemon publishes none).
    pub descriptor: Option<DescriptorBuilder>,
}

impl DaemonState {
    /// Assemble the state of a started daemon.
    pub fn new(parts: StateParts) -> Arc<Self> {
        let (shutdown, _) = watch::channel(false);
        let bundle = parts
            .consensus
            .and_then(|c| Bundle::new(c, &parts.directory))
            .map(Arc::new);
        Arc::new(DaemonState {
            node: parts.node,
            endpoints: parts.endpoints,
            streams: StreamRegistry::default(),
            started: Instant::now(),
            circuit_builds: Arc::new(Histogram::new(LATENCY_SECONDS)),
            config_path: parts.config_path,
            log_level: Mutex::new(parts.config.log.level.clone()),
            config: Mutex::new(parts.config),
            directory: Mutex::new(parts.directory),
            consensus_valid_after: Mutex::new(parts.consensus_valid_after),
            consensus_valid_until: Mutex::new(parts.consensus_valid_until),
            bundle: Mutex::new(bundle),
            signed: watch::channel(None).0,
            adopting: tokio::sync::Mutex::new(()),
            log_control: parts.log_control,
            identity: parts.identity,
            descriptor: Mutex::new(parts.descriptor),
            shutdown,
            entries: Mutex::new(Vec::new()),
            notifier: std::sync::OnceLock::new(),
        })
    }

    /// Tell `notifier` (sd_notify) about every reload from now on: `RELOADING=1` before,
    /// `READY=1` after. Only the first notifier set is used.
    pub fn set_notifier(&self, notifier: Arc<Notifier>) {
        let _ = self.notifier.set(notifier);
    }

    /// The configuration in force.
    pub fn config(&self) -> DaemonConfig {
        lock(&self.config).clone()
    }

    /// The file the configuration came from.
    pub fn config_path(&self) -> Option<&Path> {
        self.config_path.as_deref()
    }

    /// The directory in use.
    pub fn directory(&self) -> Directory {
        lock(&self.directory).clone()
    }

    /// Whether circuits can be built: the directory holds at least three relays other than
    /// this node (GetInfo's `ready`; the gRPC health status follows it).
    pub fn ready_for_circuits(&self) -> bool {
        let me = self.node.node_id();
        let others = lock(&self.directory)
            .iter()
            .filter(|d| d.node_id() != me)
            .count();
        others >= 3
    }

    /// The log filter in force.
    pub fn log_level(&self) -> String {
        lock(&self.log_level).clone()
    }

    /// Change the log filter; returns the previous one.
    pub fn set_log_level(&self, level: &str) -> Result<String, String> {
        let Some(control) = &self.log_control else {
            return Err("this daemon has no adjustable log filter".into());
        };
        control(level)?;
        Ok(std::mem::replace(
            &mut lock(&self.log_level),
            level.to_owned(),
        ))
    }

    /// Count an entry's clients in the metrics (SOCKS as `nyx_socks_*`, HTTP CONNECT as
    /// `nyx_http_connect_*`).
    pub fn set_entry_counters(&self, protocol: Protocol, counters: EntryCounters) {
        lock(&self.entries).push((protocol, counters));
    }

    /// Every counter now: the node's, its streams', and the daemon's own.
    pub async fn metrics_snapshot(&self) -> MetricsSnapshot {
        let node = self.node.stats().await.unwrap_or_default();
        let streams = self.node.stream_stats().await;
        let mut snapshot = MetricsSnapshot::new(node, streams, self.started.elapsed());
        let queues = [
            ("inbound", snapshot.node.inbound_queue),
            ("commands", snapshot.node.command_queue),
            ("udp_send", snapshot.node.udp_send_queue),
        ];
        let extra = &mut snapshot.extra;
        for (queue, depth) in queues {
            extra.push(
                ExtraMetric::gauge(
                    "nyx_queue_depth",
                    "Messages waiting in the node's internal queues now.",
                    depth as f64,
                )
                .with_label("queue", queue),
            );
        }
        extra.push(ExtraMetric::gauge(
            "nyx_directory_relays",
            "Relays in the directory in use.",
            lock(&self.directory).len() as f64,
        ));
        extra.push(ExtraMetric::gauge(
            "nyx_app_streams_open",
            "Application streams (SOCKS, HTTP CONNECT and control API) open now.",
            self.streams.open_count() as f64,
        ));
        extra.push(ExtraMetric::counter(
            "nyx_app_streams_opened_total",
            "Application streams opened since the daemon started.",
            self.streams.opened_total(),
        ));
        for (protocol, counters) in lock(&self.entries).iter() {
            counters.snapshot().push_metrics(*protocol, extra);
        }
        extra.extend(process_metrics());
        snapshot.histograms = self.streams.histograms();
        let builds = self
            .circuit_builds
            .snapshot(CIRCUIT_BUILD_SECONDS, CIRCUIT_BUILD_HELP);
        snapshot.histograms.push(builds);
        snapshot
    }

    /// [`metrics_snapshot`](Self::metrics_snapshot) in the Prometheus text format.
    pub async fn metrics_text(&self) -> String {
        render_prometheus(&self.metrics_snapshot().await)
    }

    /// Ask the daemon to stop (as SIGTERM does).
    pub fn request_shutdown(&self) {
        self.shutdown.send_replace(true);
    }

    /// Resolves once a shutdown was requested.
    pub async fn shutdown_requested(&self) {
        let mut rx = self.shutdown.subscribe();
        let _ = rx.wait_for(|stop| *stop).await;
    }

    /// Publish the descriptor again with a fresh validity, and with `certs` when the onion
    /// keys rotated (the node reports them in `NodeEvent::OnionKeysRotated`). False for a
    /// client-only daemon, which has none.
    pub fn renew_descriptor(
        &self,
        certs: Option<Vec<nyx_crypto::onion_cert::OnionKeyCert>>,
    ) -> Result<bool, Error> {
        self.update_descriptor(self.config().relay.descriptor_validity, |b| {
            if let Some(certs) = certs {
                b.onion_certs = certs;
            }
        })
    }

    /// Publish the descriptor again with a new link key (after a rotation). False for a
    /// client-only daemon, which has none.
    pub fn publish_link_key(
        &self,
        link_key: nyx_crypto::kem::HybridPublicKey,
    ) -> Result<bool, Error> {
        self.update_descriptor(self.config().relay.descriptor_validity, |b| {
            b.link_key = link_key
        })
    }

    /// The link key the published descriptor names (none for a client-only daemon).
    pub fn published_link_key(&self) -> Option<nyx_crypto::kem::HybridPublicKey> {
        lock(&self.descriptor).as_ref().map(|b| b.link_key.clone())
    }

    /// Change the descriptor with `change`, make it valid for `validity` from now and
    /// publish it, all under one lock, so that two updates (a reload, a key rotation, a
    /// renewal) cannot undo each other. False for a client-only daemon, which has none.
    pub(super) fn update_descriptor(
        &self,
        validity: std::time::Duration,
        change: impl FnOnce(&mut DescriptorBuilder),
    ) -> Result<bool, Error> {
        let validity = validity.as_secs();
        let mut held = lock(&self.descriptor);
        let Some(mut builder) = held.clone() else {
            return Ok(false);
        };
        change(&mut builder);
        let now = unix_now();
        builder.published = now;
        builder.valid_until = now + validity;
        self.sign_and_write(&builder)?;
        *held = Some(builder);
        Ok(true)
    }

    /// Sign `builder` and write it as the node's published descriptor.
    pub fn publish(&self, builder: DescriptorBuilder) -> Result<(), Error> {
        self.sign_and_write(&builder)?;
        *lock(&self.descriptor) = Some(builder);
        Ok(())
    }

    /// Sign `builder`, write it to the descriptor file and hand it to the uploaders.
    fn sign_and_write(&self, builder: &DescriptorBuilder) -> Result<(), Error> {
        let descriptor = builder
            .clone()
            .sign(&self.identity)
            .map_err(nyx_overlay::Error::from)?;
        let directory =
            Directory::from_descriptors(vec![descriptor]).map_err(nyx_overlay::Error::from)?;
        files::write_atomic(
            &self.endpoints.data_dir.join(files::DESCRIPTOR_FILE),
            directory.to_text(),
        )?;
        self.signed.send_replace(directory.iter().next().cloned());
        Ok(())
    }
}

pub(super) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    match m.lock() {
        Ok(g) => g,
        Err(poisoned) => poisoned.into_inner(),
    }
}
