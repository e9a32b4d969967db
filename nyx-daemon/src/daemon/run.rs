//! Starting and stopping a daemon: data directory and keys, bind, publish the descriptor,
//! start the node with the directory, open the SOCKS and HTTP CONNECT entries, the control
//! socket and the metrics endpoint, then wait for a stop (SIGINT, SIGTERM, the Shutdown call) while
//! SIGHUP reloads.

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::signal::unix::{Signal, SignalKind, signal};

use super::config::DaemonConfig;
use super::dir::{self, authority::AuthorityHandle};
use super::sd_notify::Notifier;
use super::state::{DaemonState, Endpoints, LogControl, StateParts};
use super::{files, keeper, link_keys, trust};
use crate::Error;
use crate::control::{self, ControlListener};
use crate::entry::{EntryConfig, EntryServer, Protocol};
use crate::telemetry::prometheus::{PrometheusConfig, PrometheusServer};
use crate::telemetry::{MetricsSnapshot, SnapshotSource, snapshot_source};
use nyx_node::{BoundNode, Node, unix_now};

/// The line a daemon prints on stdout once it serves, followed by a JSON object with its
/// node id and addresses (`nyx testnet` and tests read it).
pub const READY_PREFIX: &str = "nyx-daemon ready ";

/// How long a graceful stop may take before the node is stopped hard.
const STOP_GRACE: Duration = Duration::from_secs(5);

/// What a started daemon reports (also printed as the ready line).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Ready {
    /// The node id.
    pub node_id: String,
    /// Where it listens for other nodes.
    pub listen: String,
    /// The SOCKS entry ("" when off).
    pub socks: String,
    /// The HTTP CONNECT entry ("" when off; absent from the lines of older daemons).
    #[serde(default)]
    pub http_connect: String,
    /// The control socket ("" when off).
    pub control: String,
    /// The Prometheus endpoint ("" when off).
    pub prometheus: String,
    /// The data directory.
    pub data_dir: String,
    /// Whether the keys were created by this start.
    pub new_keys: bool,
}

/// A started daemon: call [`wait`](Self::wait) to run it until it is told to stop.
#[derive(Debug)]
pub struct Daemon {
    state: Arc<DaemonState>,
    node: Node,
    ready: Ready,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    /// The SOCKS and HTTP CONNECT entries that are on.
    entries: Vec<EntryServer>,
    signals: Signals,
    notifier: Option<Arc<Notifier>>,
}

/// The signals a daemon handles, registered at start: from then on SIGINT and SIGTERM
/// no longer kill the process outright (even before [`Daemon::wait`] runs).
#[derive(Debug)]
struct Signals {
    interrupt: Signal,
    terminate: Signal,
    hangup: Signal,
}

impl Signals {
    fn install(control: &std::path::Path) -> Result<Self, Error> {
        let install = |kind| {
            signal(kind).map_err(|e| Error::Control {
                path: control.to_owned(),
                reason: format!("cannot install signal handlers: {e}"),
            })
        };
        Ok(Signals {
            interrupt: install(SignalKind::interrupt())?,
            terminate: install(SignalKind::terminate())?,
            hangup: install(SignalKind::hangup())?,
        })
    }
}

impl Daemon {
    /// Start a daemon with `config` (read from `config_path`, if any, which reloads read
    /// again). `log_control` changes the log filter (reload, SetLogLevel). Needs a tokio
    /// runtime.
    pub async fn start(
        config: DaemonConfig,
        config_path: Option<PathBuf>,
        log_control: Option<LogControl>,
    ) -> Result<Self, Error> {
        let data_dir = config.effective_data_dir()?;
        files::prepare_data_dir(&data_dir)?;
        let now = unix_now();
        let relay = config.relay.enabled;
        let (keys, new_keys) =
            files::load_or_create_keys(&data_dir, now, config.onion_key_rotation(), relay)?;
        let identity = keys.identity.clone();
        let guards_path = data_dir.join(files::GUARDS_FILE);
        let saved_guards = files::read_guards(&guards_path)?;
        let settings = nyx_node::NodeSettings {
            guards: saved_guards.clone(),
            ..config.node_settings()
        };
        let bound = BoundNode::bind(keys, settings)?;
        let listen = bound.local_addr();
        // A relay publishes a descriptor; a client-only daemon has none.
        let descriptor = match relay {
            true => Some(bound.descriptor_builder(
                &config.nickname,
                config.relay.bandwidth,
                now,
                config.relay.descriptor_validity,
            )?),
            false => None,
        };
        let trusted = config.trusted(&data_dir, now, None)?;
        let directory = trusted.directory;
        let control_path = config.effective_control_socket(&data_dir);
        // Bind every local listener before starting anything, so a port in use fails the
        // start cleanly.
        let signals = Signals::install(&control_path)?;
        let control_listener = match config.control.enabled {
            true => Some(ControlListener::bind(&control_path)?),
            false => None,
        };
        let socks_listener = match config.socks.enabled {
            true => Some(bind_tcp("SOCKS5", config.socks.listen).await?),
            false => None,
        };
        let http_connect_listener = match config.http_connect.enabled {
            true => Some(bind_tcp("HTTP CONNECT", config.http_connect.listen).await?),
            false => None,
        };
        // The metrics server is bound now; its snapshots come from the state, set below.
        let metrics_state: Arc<OnceLock<Arc<DaemonState>>> = Arc::new(OnceLock::new());
        let prometheus = match config.telemetry.prometheus_listen {
            Some(addr) => Some(
                PrometheusServer::bind(
                    addr,
                    metrics_source(metrics_state.clone()),
                    PrometheusConfig::default(),
                )
                .await?,
            ),
            None => None,
        };
        for (key, addr) in config.exposed_listeners() {
            tracing::warn!(key, %addr, "{}", super::config::OPEN_LISTENER);
        }
        let endpoints = Endpoints {
            listen,
            socks: socks_listener.as_ref().and_then(|l| l.local_addr().ok()),
            http_connect: http_connect_listener
                .as_ref()
                .and_then(|l| l.local_addr().ok()),
            control: control_listener.as_ref().map(|l| l.path().to_owned()),
            prometheus: prometheus.as_ref().and_then(|p| p.local_addr().ok()),
            data_dir: data_dir.clone(),
        };
        let pinned =
            trust::parse_authority_lines(&config.directory.authorities).map_err(|reason| {
                Error::ConfigInvalid {
                    path: PathBuf::new(),
                    problems: nyx_core::config::ConfigProblems::from_vec(vec![
                        nyx_core::config::ConfigProblem {
                            field: "directory.authorities".to_owned(),
                            reason,
                        },
                    ]),
                }
            })?;
        let authority = match config.authority.enabled {
            true => Some(Arc::new(AuthorityHandle::new(
                identity.clone(),
                &config,
                &pinned,
            )?)),
            false => None,
        };
        let mut node = bound.start(directory.clone())?;
        let state = DaemonState::new(StateParts {
            node: node.handle(),
            endpoints: endpoints.clone(),
            config_path,
            config: config.clone(),
            directory: directory.clone(),
            consensus_valid_after: trusted.consensus_valid_after,
            consensus_valid_until: trusted.consensus_valid_until,
            consensus: trusted.consensus,
            log_control,
            identity,
            descriptor: descriptor.clone(),
        });
        let _ = metrics_state.set(state.clone());
        let mut tasks = Vec::new();
        // Directory streams: answered as an authority or a cache.
        if let Some(streams) = node.take_directory_streams() {
            tasks.push(dir::serve::spawn(streams, state.clone(), authority.clone()));
        }
        if let Some(authority) = &authority {
            tasks.push(dir::authority::spawn(
                authority.clone(),
                state.clone(),
                &pinned,
            ));
        }
        // With authorities to reach: upload the descriptor to them, keep a consensus.
        let contacts: Vec<nyx_node::PinnedPeer> =
            pinned.iter().filter_map(|a| a.contact.clone()).collect();
        if !contacts.is_empty() {
            if relay {
                tasks.extend(dir::fetch::spawn_uploads(
                    state.clone(),
                    contacts.clone(),
                    authority.clone(),
                ));
            }
            tasks.push(dir::fetch::spawn_fetcher(state.clone(), contacts));
        }
        if let Some(descriptor) = descriptor {
            state.publish(descriptor)?;
        }
        if let Some(schedule) = config.link_key_schedule() {
            tasks.push(link_keys::spawn(
                state.clone(),
                node.handle(),
                data_dir.clone(),
                schedule,
            ));
        }
        let mut entries = Vec::new();
        let wanted = [
            (
                Protocol::Socks,
                socks_listener,
                config.socks.handshake_timeout,
                config.socks.max_connections,
            ),
            (
                Protocol::HttpConnect,
                http_connect_listener,
                config.http_connect.handshake_timeout,
                config.http_connect.max_connections,
            ),
        ];
        for (protocol, listener, handshake_timeout, max_connections) in wanted {
            let Some(listener) = listener else { continue };
            let entry_config = EntryConfig {
                handshake_timeout,
                max_connections,
                ..EntryConfig::default()
            };
            let streams = Some(state.streams.clone());
            let entry =
                EntryServer::spawn(protocol, listener, node.handle(), entry_config, streams)?;
            state.set_entry_counters(protocol, entry.counters());
            entries.push(entry);
        }
        if let Some(server) = prometheus {
            let stop = state.clone();
            tasks.push(tokio::spawn(async move {
                server
                    .run(async move { stop.shutdown_requested().await })
                    .await;
            }));
        }
        tasks.push(tokio::spawn(
            crate::telemetry::histogram::record_circuit_builds(
                node.handle().subscribe(),
                state.circuit_builds.clone(),
            ),
        ));
        tasks.push(keeper::spawn_keeper(
            state.clone(),
            node.handle().subscribe(),
            guards_path,
            saved_guards,
        ));
        if let Some(listener) = control_listener {
            let stop = state.clone();
            let control_state = state.clone();
            tasks.push(tokio::spawn(async move {
                let shutdown = async move { stop.shutdown_requested().await };
                if let Err(e) = control::serve(listener, control_state, shutdown).await {
                    tracing::error!(error = %e, "control socket stopped");
                }
            }));
        }
        let ready = Ready {
            node_id: node.handle().node_id().to_string(),
            listen: listen.to_string(),
            socks: endpoints.socks.map(|a| a.to_string()).unwrap_or_default(),
            http_connect: endpoints
                .http_connect
                .map(|a| a.to_string())
                .unwrap_or_default(),
            control: endpoints
                .control
                .as_ref()
                .map(|p| p.display().to_string())
                .unwrap_or_default(),
            prometheus: endpoints
                .prometheus
                .map(|a| a.to_string())
                .unwrap_or_default(),
            data_dir: data_dir.display().to_string(),
            new_keys,
        };
        tracing::info!(
            relays = directory.len(),
            relay,
            authority = authority.is_some(),
            new_keys,
            transport = %config.transport,
            "nyx-daemon started"
        );
        Ok(Daemon {
            state,
            node,
            ready,
            tasks,
            entries,
            signals,
            notifier: None,
        })
    }

    /// Addresses and identity of the started daemon.
    pub fn ready(&self) -> &Ready {
        &self.ready
    }

    /// The shared state (what the control API acts on).
    pub fn state(&self) -> &Arc<DaemonState> {
        &self.state
    }

    /// Tell the service manager through `notifier` (sd_notify) about what
    /// [`wait`](Self::wait) does: reloads, the watchdog, the stop. The caller sends
    /// `READY=1` itself, once it has announced the daemon.
    pub fn with_notifier(mut self, notifier: Notifier) -> Self {
        let notifier = Arc::new(notifier);
        self.state.set_notifier(Arc::clone(&notifier));
        self.notifier = Some(notifier);
        self
    }

    /// Run until SIGINT, SIGTERM or a Shutdown call; SIGHUP reloads the configuration.
    /// Then stop gracefully: stop accepting, tear circuits down, remove the control socket.
    /// With a notifier, a reload (from SIGHUP or the control API) is framed by `RELOADING=1`
    /// and `READY=1`, `WATCHDOG=1` goes out at its interval from this loop, and
    /// `STOPPING=1` precedes the stop.
    pub async fn wait(mut self) -> Result<(), Error> {
        let mut watchdog = self
            .notifier
            .as_ref()
            .and_then(|n| n.watchdog())
            .map(tokio::time::interval);
        loop {
            tokio::select! {
                _ = self.signals.interrupt.recv() => { tracing::info!("SIGINT: stopping"); break }
                _ = self.signals.terminate.recv() => { tracing::info!("SIGTERM: stopping"); break }
                _ = self.signals.hangup.recv() => self.reload().await,
                () = tick(&mut watchdog) => {
                    if let Some(notifier) = &self.notifier {
                        notifier.watchdog_ping();
                    }
                }
                () = self.state.shutdown_requested() => break,
            }
        }
        if let Some(notifier) = &self.notifier {
            notifier.stopping();
        }
        self.stop().await;
        Ok(())
    }

    /// SIGHUP: reload the configuration file (the state tells the service manager).
    async fn reload(&self) {
        match self.state.reload().await {
            Ok(outcome) => {
                if !outcome.diff.restart.is_empty() {
                    tracing::warn!(
                        keys = %outcome.diff.restart.join(", "),
                        "SIGHUP: changed keys need a restart"
                    );
                }
            }
            Err(e) => tracing::error!(error = %e, "SIGHUP: reload failed; nothing changed"),
        }
    }

    /// Stop gracefully now (what [`wait`](Self::wait) does after a signal).
    pub async fn stop(self) {
        self.state.request_shutdown();
        for entry in self.entries {
            entry.shutdown().await;
        }
        self.node.shutdown_within(STOP_GRACE).await;
        for task in self.tasks {
            // The control server finishes its calls and removes the socket file.
            let _ = tokio::time::timeout(STOP_GRACE, task).await;
        }
        tracing::info!("nyx-daemon stopped");
    }
}

/// Snapshots of the daemon in `cell` (empty ones until it is set).
pub(crate) fn metrics_source(cell: Arc<OnceLock<Arc<DaemonState>>>) -> SnapshotSource {
    snapshot_source(move || {
        let state = cell.get().cloned();
        async move {
            match state {
                Some(s) => s.metrics_snapshot().await,
                None => MetricsSnapshot::default(),
            }
        }
    })
}

/// The next tick of `interval`; never, without one.
async fn tick(interval: &mut Option<tokio::time::Interval>) {
    match interval {
        Some(interval) => {
            interval.tick().await;
        }
        None => std::future::pending().await,
    }
}

async fn bind_tcp(what: &'static str, addr: std::net::SocketAddr) -> Result<TcpListener, Error> {
    TcpListener::bind(addr)
        .await
        .map_err(|source| Error::Listen { what, addr, source })
}
