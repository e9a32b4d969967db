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
use std::process::Stdio;
use std::time::{Duration, Instant};

use nyx_daemon::control::pb;
use nyx_daemon::daemon::config::MAX_WORKER_THREADS;
use nyx_daemon::daemon::{READY_PREFIX, Ready, files, trust};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpListener;
use tokio::process::{Child, Command};

use crate::commands::Failure;

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

/// One daemon of the testnet.
struct Member {
    name: String,
    child: Child,
    ready: Ready,
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

/// What a member is.
#[derive(Debug, Clone, Copy)]
enum Role {
    /// A relay (and client).
    Relay,
    /// A relay that is also a directory authority, on a fixed address.
    Authority { listen: SocketAddr, period: u64 },
}

/// How to configure a member.
struct MemberSettings<'a> {
    transport: &'a str,
    socks_port: u16,
    http_connect_port: u16,
    log_level: &'a str,
    /// `worker_threads` of each daemon.
    worker_threads: usize,
    /// `directory.authorities` lines.
    authorities: &'a [String],
    role: Role,
}

/// An authority prepared before it starts: its node number, address and pinned line.
struct PreparedAuthority {
    index: u8,
    listen: SocketAddr,
    line: String,
}

/// Make node `i`'s keys and pick its port, so that its line can be pinned everywhere.
fn prepare_authority(dir: &Path, i: u8) -> Result<PreparedAuthority, Failure> {
    let data = dir.join(format!("node{i}"));
    files::prepare_data_dir(&data).map_err(|e| Failure::Call(e.to_string()))?;
    let (keys, _) =
        files::load_or_create_keys(&data, nyx_node::unix_now(), Default::default(), true)
            .map_err(|e| Failure::Call(e.to_string()))?;
    // A free UDP port on its address (QUIC and the UDP transport both listen on UDP).
    let socket = std::net::UdpSocket::bind(("127.0.0.".to_owned() + &i.to_string(), 0))
        .and_then(|s| s.local_addr())
        .map_err(|e| Failure::Call(format!("no free port on 127.0.0.{i}: {e}")))?;
    let line = trust::authority_line(&keys.identity.public(), socket, keys.link_key.public());
    Ok(PreparedAuthority {
        index: i,
        listen: socket,
        line,
    })
}

async fn start_member(dir: &Path, i: u8, settings: &MemberSettings<'_>) -> Result<Member, Failure> {
    let name = format!("node{i}");
    let data = dir.join(&name);
    files::prepare_data_dir(&data).map_err(|e| Failure::Call(e.to_string()))?;
    let entry = |port: u16| match i {
        1 => format!("enabled = true\nlisten = \"127.0.0.1:{port}\"\n"),
        _ => "enabled = false\n".to_owned(),
    };
    let (socks, http_connect) = (
        entry(settings.socks_port),
        entry(settings.http_connect_port),
    );
    let (listen, authority) = match settings.role {
        Role::Relay => (format!("127.0.0.{i}:0"), String::new()),
        // Relays get Stable after a minute and Guard after two of reachability.
        Role::Authority { listen, period } => (
            listen.to_string(),
            format!(
                "[authority]\nenabled = true\nperiod = \"{period}s\"\n\
                 stable_after = \"1m\"\nguard_after = \"2m\"\n"
            ),
        ),
    };
    let config = format!(
        "# Written by `nyx testnet`.\n\
         listen = [\"{listen}\"]\n\
         transport = \"{transport}\"\n\
         data_dir = \"{data}\"\n\
         nickname = \"{name}\"\n\
         worker_threads = {worker_threads}\n\
         [socks]\n{socks}\
         [http_connect]\n{http_connect}\
         [directory]\nauthorities = [{authorities}]\n\
         {authority}\
         [relay]\nenabled = true\n\
         exit_policy = [\"accept 127.0.0.0/8:*\", \"accept [::1]:*\", \"reject *:*\"]\n\
         [limits]\nhandshakes_per_prefix = {{ per_second = 1000.0, burst = 1000 }}\n\
         [log]\nlevel = \"{log_level}\"\n",
        transport = settings.transport,
        log_level = settings.log_level,
        worker_threads = settings.worker_threads,
        data = data.display(),
        authorities = settings
            .authorities
            .iter()
            .map(|a| format!("\"{a}\""))
            .collect::<Vec<_>>()
            .join(", "),
    );
    let config_path = data.join("nyx.toml");
    std::fs::write(&config_path, config)
        .map_err(|e| Failure::Call(format!("{}: {e}", config_path.display())))?;
    let log = std::fs::File::create(data.join("daemon.log"))
        .map_err(|e| Failure::Call(format!("daemon.log: {e}")))?;
    let exe = std::env::current_exe()
        .map_err(|e| Failure::Call(format!("cannot find the nyx program: {e}")))?;
    let mut command = Command::new(exe);
    command.arg("daemon").arg("--config").arg(&config_path);
    if nyx_daemon::daemon::service::effective_uid() == 0 {
        command.arg("--allow-root");
    }
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(log)
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| Failure::Call(format!("cannot start {name}: {e}")))?;
    let stdout = child
        .stdout
        .take()
        .ok_or_else(|| Failure::Call("no stdout".into()))?;
    let mut lines = BufReader::new(stdout).lines();
    let line = tokio::time::timeout(Duration::from_secs(30), lines.next_line()).await;
    let ready = match line {
        Ok(Ok(Some(line))) => line
            .strip_prefix(READY_PREFIX)
            .and_then(|j| serde_json::from_str::<Ready>(j).ok()),
        _ => None,
    };
    // Keep draining stdout so the daemon never blocks on it.
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    match ready {
        Some(ready) => Ok(Member { name, child, ready }),
        None => {
            let _ = child.kill().await;
            Err(Failure::Call(format!(
                "{name} did not start; see {}",
                data.join("daemon.log").display()
            )))
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

/// Ask every daemon to shut down, wait for them, kill what did not stop.
async fn stop_all(members: &mut [Member]) {
    for m in members.iter() {
        if let Ok(mut c) = client(&m.ready).await {
            let _ = c.shutdown(pb::ShutdownRequest {}).await;
        }
    }
    for m in members.iter_mut() {
        match tokio::time::timeout(Duration::from_secs(10), m.child.wait()).await {
            Ok(Ok(status)) if status.success() => {}
            Ok(Ok(status)) => note!("  {} exited with {status}", m.name),
            _ => {
                note!("  {} did not stop; killing it", m.name);
                let _ = m.child.kill().await;
            }
        }
    }
}

/// A tiny HTTP/1.0 server on loopback: `/` is a page, `/file` 1 MiB of bytes.
async fn start_demo_server(port: u16) -> Result<SocketAddr, Failure> {
    let port = free_or_fallback(port).await;
    let listener = TcpListener::bind(("127.0.0.1", port))
        .await
        .map_err(|e| Failure::Call(format!("demo web server: {e}")))?;
    let addr = listener
        .local_addr()
        .map_err(|e| Failure::Call(format!("demo web server: {e}")))?;
    tokio::spawn(async move {
        while let Ok((mut conn, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut head = vec![0u8; 4096];
                let n = match tokio::time::timeout(Duration::from_secs(10), conn.read(&mut head))
                    .await
                {
                    Ok(Ok(n)) => n,
                    _ => return,
                };
                let request = String::from_utf8_lossy(&head[..n]);
                let path = request.split_whitespace().nth(1).unwrap_or("/");
                let (status, body) = match path {
                    "/" => ("200 OK", DEMO_PAGE.as_bytes().to_vec()),
                    "/file" => ("200 OK", demo_file()),
                    _ => ("404 Not Found", b"not found\n".to_vec()),
                };
                let header = format!(
                    "HTTP/1.0 {status}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                    body.len()
                );
                let _ = conn.write_all(header.as_bytes()).await;
                let _ = conn.write_all(&body).await;
                let _ = conn.shutdown().await;
            });
        }
    });
    Ok(addr)
}

const DEMO_PAGE: &str = "<!doctype html>\n<title>NyxNet testnet</title>\n\
<h1>Hello from the NyxNet testnet</h1>\n\
<p>This page crossed three relays, each hop keyed by X25519 + ML-KEM-768.</p>\n";

/// 1 MiB of a fixed pseudo-random sequence (xorshift), so a copy can be checked.
fn demo_file() -> Vec<u8> {
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    (0..1 << 20)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
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
