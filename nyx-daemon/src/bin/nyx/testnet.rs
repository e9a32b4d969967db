//! `nyx testnet`: a local NyxNet of N daemon processes on loopback addresses.
//!
//! 1. Each daemon gets a data directory and a config: node `i` listens on `127.0.0.i`
//!    (a free port), relays and exits to loopback only; node 1 also runs the SOCKS entry and
//!    the HTTP CONNECT entry.
//!    The last three are directory authorities: their keys are made here before they start
//!    and a free port is picked for them, so that every daemon's config can pin them
//!    (identity, address, link key).
//! 2. Each daemon starts and creates its keys (the authorities' exist already); every one
//!    uploads its descriptor to the authorities and fetches the consensus from them. The
//!    authorities test each relay, vote every period (`--period`, 16 s by default), exchange
//!    votes and signatures and publish the consensus; nothing is signed here.
//! 3. Node 1 builds circuits until one succeeds (once the first consensus is out); then the
//!    addresses and example commands are printed, and a small web server on loopback gives
//!    something to fetch.
//! 4. Ctrl-C (or SIGTERM) shuts every daemon down through its control socket.

use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nyx_daemon::control::pb;
use nyx_daemon::daemon::Ready;
use nyx_daemon::daemon::config::MAX_WORKER_THREADS;
use tokio::net::TcpListener;

use crate::commands::Failure;

mod demo;
mod member;

use demo::start_demo_server;
use member::{Member, MemberSettings, Role, prepare_authority, start_member, stop_all};

/// Options of `nyx testnet`.
#[derive(Debug, clap::Args)]
pub(crate) struct TestnetArgs {
    /// Daemons to start (at least 4: a client and 3 relays for its circuits).
    #[arg(long, short = 'n', default_value_t = 5)]
    nodes: u8,
    /// Link transport between the daemons: quic or udp.
    #[arg(long, default_value = "quic")]
    transport: String,
    /// SOCKS5 port of node 1 on 127.0.0.1 (0: any free port; if 9050 is taken, a free
    /// port is used).
    #[arg(long, default_value_t = 9050)]
    socks_port: u16,
    /// HTTP CONNECT port of node 1 on 127.0.0.1 (0: any free port; if 9080 is taken, a
    /// free port is used).
    #[arg(long, default_value_t = 9080)]
    http_connect_port: u16,
    /// Port of the demo web server on 127.0.0.1 (0: any free port; if 8080 is taken, a
    /// free port is used).
    #[arg(long, default_value_t = 8080)]
    http_port: u16,
    /// Keep the daemons' files here (default: a temporary directory removed at the end).
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,
    /// Log filter of the daemons (their logs go to `<dir>/nodeN/daemon.log`).
    #[arg(long, default_value = "info")]
    log_level: String,
    /// The authorities' voting period in seconds (at least 16): a new consensus this often.
    #[arg(long, default_value_t = 16)]
    period: u64,
    /// Threads of each daemon (`worker_threads`); 0: the machine's cores shared out, at
    /// least one each.
    #[arg(long, default_value_t = 0)]
    worker_threads: usize,
}

/// What a running testnet prints for scripts (`--json`).
#[derive(Debug, serde::Serialize)]
struct Summary<'a> {
    nodes: usize,
    socks: &'a str,
    http_connect: &'a str,
    control: &'a str,
    http: String,
    dir: String,
    circuit: Vec<String>,
}

pub(crate) async fn run(args: TestnetArgs, json: bool) -> Result<(), Failure> {
    if args.nodes < 4 {
        return Err(Failure::Usage(format!(
            "--nodes {}: at least 4 are needed (a client and 3 relays)",
            args.nodes
        )));
    }
    let transport = args.transport.to_ascii_lowercase();
    if transport != "quic" && transport != "udp" {
        return Err(Failure::Usage(format!(
            "--transport {transport}: use quic or udp"
        )));
    }
    let worker_threads = match args.worker_threads {
        0 => {
            let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
            cores_each(cores, args.nodes)
        }
        n if n > MAX_WORKER_THREADS => {
            return Err(Failure::Usage(format!(
                "--worker-threads {n}: at most {MAX_WORKER_THREADS}"
            )));
        }
        n => n,
    };
    let temporary = args.dir.is_none();
    let dir = match &args.dir {
        Some(d) => d.clone(),
        None => std::env::temp_dir().join(format!("nyx-testnet-{}", std::process::id())),
    };
    let io = |what: &str, e: std::io::Error| Failure::Call(format!("{what}: {e}"));
    std::fs::create_dir_all(&dir).map_err(|e| io("cannot create the testnet directory", e))?;
    let socks_port = free_or_fallback(args.socks_port).await;
    let http_connect_port = free_or_fallback(args.http_connect_port).await;
    let http = start_demo_server(args.http_port).await?;
    note!(
        "nyx testnet: starting {} daemons ({transport}, {worker_threads} thread{} each) in {}",
        args.nodes,
        if worker_threads == 1 { "" } else { "s" },
        dir.display()
    );
    // A test network of loopback daemons in a directory of its own: as root (containers,
    // the benchmark scripts) its daemons are allowed to run as root, and told so.
    let as_root = nyx_daemon::daemon::service::effective_uid() == 0;
    if as_root {
        note!("  running as root: the daemons get --allow-root (a real node refuses root)");
    }
    let min = nyx_overlay::directory::authority::MIN_PERIOD;
    if args.period < min {
        return Err(Failure::Usage(format!(
            "--period {}: at least {min} seconds",
            args.period
        )));
    }
    let authorities = (args.nodes - AUTHORITIES + 1..=args.nodes)
        .map(|i| prepare_authority(&dir, i))
        .collect::<Result<Vec<_>, _>>()?;
    let pinned: Vec<String> = authorities.iter().map(|a| a.line.clone()).collect();
    let mut members: Vec<Member> = Vec::new();
    let result = async {
        for i in 1..=args.nodes {
            let role = match authorities.iter().find(|a| a.index == i) {
                Some(a) => Role::Authority {
                    listen: a.listen,
                    period: args.period,
                },
                None => Role::Relay,
            };
            let settings = MemberSettings {
                transport: &transport,
                socks_port,
                http_connect_port,
                log_level: &args.log_level,
                worker_threads,
                authorities: &pinned,
                role,
            };
            let member = start_member(&dir, i, &settings).await?;
            note!(
                "  [{i}/{}] {} up{}: node {} on {}",
                args.nodes,
                member.name,
                if matches!(role, Role::Authority { .. }) {
                    " (authority)"
                } else {
                    ""
                },
                &member.ready.node_id[..16.min(member.ready.node_id.len())],
                member.ready.listen
            );
            members.push(member);
        }
        note!(
            "  waiting for the first consensus of the {AUTHORITIES} authorities (a period is {} s)",
            args.period
        );
        let circuit = wait_for_circuit(&members[0].ready, members.len()).await?;
        Ok::<_, Failure>(circuit)
    }
    .await;
    let circuit = match result {
        Ok(c) => c,
        Err(e) => {
            stop_all(&mut members).await;
            return Err(e);
        }
    };
    // Handle Ctrl-C from here on (before anyone is told the network is up).
    let stop = match StopSignals::install() {
        Ok(s) => s,
        Err(e) => {
            stop_all(&mut members).await;
            return Err(Failure::Call(format!("cannot handle signals: {e}")));
        }
    };
    let first = &members[0].ready;
    // A closed stdout does not stop the network: Ctrl-C does.
    let mut out = std::io::stdout();
    let shown = if json {
        let summary = Summary {
            nodes: members.len(),
            socks: &first.socks,
            http_connect: &first.http_connect,
            control: &first.control,
            http: http.to_string(),
            dir: dir.display().to_string(),
            circuit: circuit.hops.iter().map(|h| h.nickname.clone()).collect(),
        };
        serde_json::to_writer(&mut out, &summary)
            .map_err(std::io::Error::from)
            .and_then(|()| writeln!(out))
    } else {
        print_banner(&mut out, &members, &circuit, http, &dir)
    };
    if let Err(e) = shown.and_then(|()| out.flush())
        && e.kind() != std::io::ErrorKind::BrokenPipe
    {
        note!("nyx testnet: cannot write to stdout: {e}");
    }
    stop.wait().await;
    note!("nyx testnet: stopping");
    stop_all(&mut members).await;
    if temporary {
        let _ = std::fs::remove_dir_all(&dir);
    }
    note!("nyx testnet: stopped");
    Ok(())
}

/// Threads for each of `nodes` daemons sharing `cores`: an equal share, at least one. More
/// threads than cores would make every hand-off between a daemon's tasks a wake-up of a
/// thread that has no core to run on.
fn cores_each(cores: usize, nodes: u8) -> usize {
    (cores / usize::from(nodes.max(1))).max(1)
}

/// `port` on 127.0.0.1 if it is free (or 0), else 0 (a free port chosen later).
async fn free_or_fallback(port: u16) -> u16 {
    if port == 0 {
        return 0;
    }
    match TcpListener::bind(("127.0.0.1", port)).await {
        Ok(_) => port,
        Err(_) => {
            note!("nyx testnet: 127.0.0.1:{port} is in use; using a free port instead");
            0
        }
    }
}

/// Directory authorities among the members (the last ones).
const AUTHORITIES: u8 = 3;

async fn client(
    ready: &Ready,
) -> Result<pb::control_client::ControlClient<tonic::transport::Channel>, Failure> {
    nyx_daemon::control::connect(Path::new(&ready.control))
        .await
        .map_err(|e| Failure::Call(e.to_string()))
}

/// How long node 1 may take to build its first circuit (the first consensus comes within
/// two periods of the start).
const CIRCUIT_WAIT: Duration = Duration::from_secs(120);

/// Wait until node 1 uses a consensus listing all `nodes` daemons, then build circuits from
/// it until one succeeds (links come up as they are used).
async fn wait_for_circuit(ready: &Ready, nodes: usize) -> Result<pb::Circuit, Failure> {
    let mut c = client(ready).await?;
    let started = Instant::now();
    let mut listed = 0;
    loop {
        if listed < nodes {
            listed = c.get_info(pb::GetInfoRequest {}).await?.into_inner().relays as usize;
        }
        let attempt = if listed < nodes {
            Err(format!("the consensus lists {listed} of {nodes} daemons"))
        } else {
            c.build_circuit(pb::BuildCircuitRequest {
                target: String::new(),
            })
            .await
            .map_err(|status| status.message().to_owned())
        };
        match attempt {
            Ok(r) => {
                let circuit = r.into_inner();
                let path: Vec<&str> = circuit.hops.iter().map(|h| h.nickname.as_str()).collect();
                note!("  circuit built: node1 > {}", path.join(" > "));
                return Ok(circuit);
            }
            Err(why) if started.elapsed() < CIRCUIT_WAIT => {
                note!("  waiting ({why})");
                tokio::time::sleep(Duration::from_secs(2)).await;
            }
            Err(why) => {
                return Err(Failure::Call(format!(
                    "no circuit after {} s: {why}",
                    CIRCUIT_WAIT.as_secs()
                )));
            }
        }
    }
}

fn print_banner(
    out: &mut impl Write,
    members: &[Member],
    circuit: &pb::Circuit,
    http: SocketAddr,
    dir: &Path,
) -> std::io::Result<()> {
    let first = &members[0].ready;
    let path: Vec<&str> = circuit.hops.iter().map(|h| h.nickname.as_str()).collect();
    writeln!(out)?;
    writeln!(
        out,
        "NyxNet testnet is up: {} daemons on 127.0.0.1-{}; first circuit node1 > {}",
        members.len(),
        members.len(),
        path.join(" > ")
    )?;
    writeln!(out)?;
    writeln!(out, "  SOCKS5 entry     {}", first.socks)?;
    writeln!(out, "  HTTP CONNECT entry {}", first.http_connect)?;
    writeln!(out, "  control socket   {}", first.control)?;
    writeln!(
        out,
        "  demo web server  http://{http}/  (exits allow loopback only)"
    )?;
    writeln!(out, "  files and logs   {}", dir.display())?;
    writeln!(out)?;
    writeln!(out, "Try, in another terminal:")?;
    writeln!(
        out,
        "  curl --socks5-hostname {} http://{http}/",
        first.socks
    )?;
    writeln!(
        out,
        "  curl --socks5-hostname {} -o /dev/null http://{http}/file",
        first.socks
    )?;
    writeln!(
        out,
        "  curl --proxytunnel --proxy http://{} http://{http}/",
        first.http_connect
    )?;
    writeln!(
        out,
        "  cargo run --release -p nyx-daemon --bin nyx -- --control {} status",
        first.control
    )?;
    writeln!(out, "  grpcurl -plaintext -unix {} list", first.control)?;
    writeln!(out)?;
    writeln!(out, "Ctrl-C stops the testnet.")?;
    Ok(())
}

/// SIGINT and SIGTERM, registered so that they no longer kill the process.
struct StopSignals {
    interrupt: tokio::signal::unix::Signal,
    terminate: tokio::signal::unix::Signal,
}

impl StopSignals {
    fn install() -> std::io::Result<Self> {
        use tokio::signal::unix::{SignalKind, signal};
        Ok(StopSignals {
            interrupt: signal(SignalKind::interrupt())?,
            terminate: signal(SignalKind::terminate())?,
        })
    }

    async fn wait(mut self) {
        tokio::select! {
            _ = self.interrupt.recv() => {}
            _ = self.terminate.recv() => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::cores_each;

    #[test]
    fn daemons_share_the_cores() {
        assert_eq!(cores_each(2, 5), 1, "never more threads than cores in all");
        assert_eq!(cores_each(1, 4), 1, "at least one each");
        assert_eq!(cores_each(16, 5), 3);
        assert_eq!(cores_each(64, 4), 16);
    }
}
