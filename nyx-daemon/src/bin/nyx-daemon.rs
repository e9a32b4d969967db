//! `nyx-daemon`: a NyxNet node as a service. Reads its TOML configuration (or runs on
//! embedded defaults), keeps its keys in its data directory, serves the local control
//! socket, the SOCKS entry (and the HTTP CONNECT one, when on) and metrics, and stops
//! gracefully on SIGINT or SIGTERM; SIGHUP reloads. docs/configuration.md lists every setting.
//!
//! Exit codes: 0 after a graceful stop, 2 for a configuration error, 1 for any other
//! failure.

use std::process::ExitCode;

use clap::Parser;
use nyx_daemon::daemon::cli::DaemonArgs;

/// Run a NyxNet node.
#[derive(Debug, Parser)]
#[command(name = "nyx-daemon", version, about)]
struct Cli {
    #[command(flatten)]
    args: DaemonArgs,
}

fn main() -> ExitCode {
    nyx_daemon::daemon::cli::main(Cli::parse().args)
}
