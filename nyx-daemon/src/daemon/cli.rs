//! The `nyx-daemon` command line, as a library function so that `nyx-daemon` and
//! `nyx daemon` (what `nyx testnet` starts) are the same program.
//!
//! Exit codes: 0 after a graceful stop, 2 for a configuration error, 1 for any other
//! failure (`--check-config` too, when a listener cannot bind; running as root without
//! `--allow-root` too). What is printed on stdout
//! for a reader that went away (a closed pipe) is dropped quietly.

use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use super::config::OPEN_LISTENER;
use super::sd_notify::Notifier;
use super::{Daemon, DaemonConfig, LogControl, READY_PREFIX};
use crate::telemetry::Telemetry;

/// Run a NyxNet node.
#[derive(Debug, Clone, clap::Args)]
pub struct DaemonArgs {
    /// The TOML configuration file (default: embedded defaults).
    #[arg(long, short = 'c', value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Keep keys, the descriptor and the control socket here (overrides `data_dir`).
    #[arg(long, value_name = "DIR")]
    pub data_dir: Option<PathBuf>,
    /// Log filter, e.g. `debug` or `nyx_daemon=debug,info` (overrides `log.level`).
    #[arg(long, value_name = "FILTER")]
    pub log_level: Option<String>,
    /// Check the configuration and that its listeners can bind now, print it with every
    /// default filled in (data directory and control socket too), and exit.
    #[arg(long)]
    pub check_config: bool,
    /// Print this node's `directory.authorities` line (identity key, listen address, link
    /// key), creating its keys if needed, and exit: what every daemon of a network pins for
    /// an authority. `listen` must be an address others reach, with a fixed port.
    #[arg(long)]
    pub authority_line: bool,
    /// Run even as root (effective uid 0), which is refused otherwise: run the daemon as a
    /// dedicated user instead (the systemd unit uses `DynamicUser=yes`).
    #[arg(long, env = "NYX_ALLOW_ROOT")]
    pub allow_root: bool,
}

/// Run the daemon as `args` say, until it is stopped; the process's exit code.
pub fn main(args: DaemonArgs) -> ExitCode {
    let config = match load_config(&args) {
        Ok(c) => c,
        Err(e) => {
            complain(e);
            return ExitCode::from(2);
        }
    };
    if args.check_config {
        return check_config(&config);
    }
    // Below, keys are created and the node runs: not as root unless asked.
    if let Err(e) = super::service::check_user(super::service::effective_uid(), args.allow_root) {
        complain(e);
        return ExitCode::FAILURE;
    }
    if args.authority_line {
        return match authority_line(&config) {
            Ok(line) => print_stdout(&format!("{line}\n")),
            Err(e) => {
                complain(e);
                ExitCode::from(2)
            }
        };
    }
    let runtime = match build_runtime(&config) {
        Ok(r) => r,
        Err(e) => {
            complain(format_args!("cannot start the runtime: {e}"));
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(config, args.config)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            complain(e);
            ExitCode::FAILURE
        }
    }
}

/// The node's async runtime: `config.worker_threads` workers, or tokio's default (one per
/// core the process may use, or `TOKIO_WORKER_THREADS`) when it is 0.
fn build_runtime(config: &DaemonConfig) -> std::io::Result<tokio::runtime::Runtime> {
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    builder.enable_all().thread_name("nyx");
    if config.worker_threads > 0 {
        builder.worker_threads(config.worker_threads);
    }
    builder.build()
}

/// `--check-config`: warn of listeners beyond loopback, try every listener, print the
/// effective configuration. Exit 1 when a listener cannot bind (the start would fail).
fn check_config(config: &DaemonConfig) -> ExitCode {
    for (key, addr) in config.exposed_listeners() {
        complain(format_args!("warning: {key} = {addr}: {OPEN_LISTENER}"));
    }
    let problems = super::check::check_listeners(config);
    for problem in &problems {
        complain(problem);
    }
    let shown = match config.effective() {
        Ok(effective) => print_stdout(&effective.to_toml()),
        Err(e) => {
            complain(e);
            return ExitCode::FAILURE;
        }
    };
    match problems.is_empty() {
        true => shown,
        false => ExitCode::FAILURE,
    }
}

/// Print `text` on stdout: success, also when the reader went away (a closed pipe: it has
/// what it wanted); failure for any other error.
fn print_stdout(text: &str) -> ExitCode {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
            complain(format_args!("cannot write to stdout: {e}"));
            ExitCode::FAILURE
        }
        _ => ExitCode::SUCCESS,
    }
}

/// `nyx-daemon: <message>` on stderr; dropped if stderr is closed.
fn complain(message: impl std::fmt::Display) {
    let _ = writeln!(std::io::stderr(), "nyx-daemon: {message}");
}

/// This node's `directory.authorities` line, its keys created if they do not exist yet.
fn authority_line(config: &DaemonConfig) -> Result<String, crate::Error> {
    let problem = |reason: String| crate::Error::ConfigInvalid {
        path: PathBuf::new(),
        problems: nyx_core::config::ConfigProblems::from_vec(vec![
            nyx_core::config::ConfigProblem {
                field: "listen".to_owned(),
                reason,
            },
        ]),
    };
    let addr = config
        .listen
        .first()
        .copied()
        .ok_or_else(|| problem("no address".to_owned()))?;
    if addr.port() == 0 || addr.ip().is_unspecified() {
        return Err(problem(format!(
            "{addr}: an authority's line needs the address others reach it at, with a fixed port"
        )));
    }
    let data_dir = config.effective_data_dir()?;
    super::files::prepare_data_dir(&data_dir)?;
    let (keys, _) = super::files::load_or_create_keys(
        &data_dir,
        nyx_node::unix_now(),
        config.onion_key_rotation(),
        true,
    )?;
    Ok(super::trust::authority_line(
        &keys.identity.public(),
        addr,
        keys.link_key.public(),
    ))
}

fn load_config(args: &DaemonArgs) -> Result<DaemonConfig, crate::Error> {
    let origin = args
        .config
        .clone()
        .unwrap_or_else(|| PathBuf::from("<defaults>"));
    let mut config = match &args.config {
        Some(path) => DaemonConfig::load(path)?,
        None => DaemonConfig::default(),
    };
    if let Some(dir) = &args.data_dir {
        config.data_dir = Some(dir.clone());
    }
    if let Some(level) = &args.log_level {
        config.log.level = level.clone();
    }
    config.validate(&origin)?;
    Ok(config)
}

async fn run(config: DaemonConfig, path: Option<PathBuf>) -> Result<(), crate::Error> {
    let telemetry = Arc::new(Telemetry::init(&config.log, &config.telemetry)?);
    // The daemon changes the log filter through a weak handle, so that this function holds
    // the only strong one and can shut telemetry down (flushing exports) at the end.
    let weak = Arc::downgrade(&telemetry);
    let log_control: LogControl = Arc::new(move |level: &str| match weak.upgrade() {
        Some(t) => t.set_log_level(level).map_err(|e| e.to_string()),
        None => Err("telemetry is shut down".into()),
    });
    let result = async {
        let notifier = Notifier::from_env()?;
        super::service::raise_nofile_limit();
        let daemon = Daemon::start(config, path, Some(log_control)).await?;
        if let Some(export_interval) = telemetry.otlp_interval() {
            let cell = Arc::new(std::sync::OnceLock::new());
            let _ = cell.set(daemon.state().clone());
            let source = super::run::metrics_source(cell);
            let stop = daemon.state().clone();
            let recorder = telemetry.metrics_recorder();
            tokio::spawn(async move {
                recorder
                    .run(source, export_interval, async move {
                        stop.shutdown_requested().await
                    })
                    .await;
            });
        }
        let ready = serde_json::to_string(daemon.ready()).unwrap_or_default();
        // Whoever started the daemon may have stopped reading: it runs on regardless.
        let mut out = std::io::stdout();
        if let Err(e) = writeln!(out, "{READY_PREFIX}{ready}").and_then(|()| out.flush()) {
            tracing::warn!(error = %e, "cannot print the ready line");
        }
        let daemon = match notifier {
            Some(notifier) => {
                notifier.ready();
                daemon.with_notifier(notifier)
            }
            None => daemon,
        };
        daemon.wait().await
    }
    .await;
    if let Err(e) = &result {
        tracing::error!(error = %e, "nyx-daemon failed");
    }
    match Arc::try_unwrap(telemetry) {
        Ok(t) => {
            let flushed = tokio::task::spawn_blocking(move || t.shutdown()).await;
            if let Ok(Err(e)) = flushed {
                complain(e);
            }
        }
        Err(_) => complain("telemetry still in use at exit; not flushed"),
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_runtime_has_the_configured_workers() {
        for n in [1, 3] {
            let config = DaemonConfig {
                worker_threads: n,
                ..DaemonConfig::default()
            };
            let runtime = build_runtime(&config).expect("a runtime");
            assert_eq!(runtime.metrics().num_workers(), n);
        }
    }
}
