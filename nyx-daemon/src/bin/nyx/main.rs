//! `nyx`: the command line for a running NyxNet daemon (through its control socket), and
//! `nyx testnet`, which runs a local network of daemons.
//!
//! Human output by default, `--json` for scripts. Exit codes: 0 success, 1 the call failed,
//! 2 usage errors, 3 the daemon is not running. A reader that goes away (`nyx metrics |
//! head -1`) ends the command quietly with 0, as its output was written as far as anyone
//! reads it.

/// `eprintln!` that cannot panic: a message for a closed stderr is dropped.
macro_rules! note {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}

mod commands;
mod output;
mod testnet;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Control a NyxNet node, or run a local test network.
#[derive(Debug, Parser)]
#[command(name = "nyx", version, about)]
struct Cli {
    /// The daemon's control socket (default: $NYX_CONTROL, else `control.sock` in the
    /// default data directory).
    #[arg(long, global = true, value_name = "PATH", env = "NYX_CONTROL")]
    control: Option<PathBuf>,
    /// Print JSON instead of text.
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// The node: id, addresses, relays known, peers, circuits, streams.
    Status,
    /// Peers with a link to this node.
    Peers,
    /// This node's circuits.
    Circuits,
    /// Build or close a circuit.
    Circuit {
        #[command(subcommand)]
        action: CircuitAction,
    },
    /// Streams open now (SOCKS and `nyx connect`).
    Streams,
    /// Close a stream.
    Stream {
        #[command(subcommand)]
        action: StreamAction,
    },
    /// Follow events (circuits, peers, directory, errors) until Ctrl-C.
    Events,
    /// Metrics, in the Prometheus text format (or JSON).
    Metrics,
    /// Show or reload the configuration.
    Config {
        #[command(subcommand)]
        action: ConfigAction,
    },
    /// Change the daemon's log filter (e.g. `debug`, `nyx_daemon=trace,info`).
    LogLevel {
        /// The new filter.
        level: String,
    },
    /// Stop the daemon gracefully.
    Shutdown,
    /// Connect stdin and stdout to host:port through the network, like `nc`.
    Connect {
        /// Where to connect ("host:port"; names are resolved by the exit).
        target: String,
        /// Streams of different isolation groups never share a circuit.
        #[arg(long, value_name = "NAME")]
        isolation: Option<String>,
    },
    /// Run a local network of daemons on loopback until Ctrl-C.
    Testnet(testnet::TestnetArgs),
    /// Run a daemon in the foreground: the same program as `nyx-daemon` (what `nyx
    /// testnet` starts).
    #[command(hide = true)]
    Daemon(nyx_daemon::daemon::cli::DaemonArgs),
}

#[derive(Debug, Subcommand)]
enum CircuitAction {
    /// Build a 3-hop circuit now (pooled for streams of the default group).
    Build {
        /// Pick an exit that allows this "host:port".
        #[arg(long)]
        target: Option<String>,
    },
    /// Close a circuit by id (see `nyx circuits`).
    Close {
        /// The circuit's id.
        id: u64,
    },
}

#[derive(Debug, Subcommand)]
enum StreamAction {
    /// Close a stream by id (see `nyx streams`).
    Close {
        /// The stream's id.
        id: u64,
    },
}

#[derive(Debug, Subcommand)]
enum ConfigAction {
    /// The configuration in force, as TOML.
    Show,
    /// Re-read the configuration file and apply what can change live.
    Reload,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Command::Daemon(args) = cli.command {
        return nyx_daemon::daemon::cli::main(args);
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            note!("nyx: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(commands::run(cli))
}
