//! `nyx testnet`: a local NyxNet of N daemon processes on loopback addresses.
//!
//! 1. Each daemon gets a data directory and a config: node `i` listens on `127.0.0.i`
//!    (a free port), relays and exits to loopback only; node 1 also runs the SOCKS5 entry.
//! 2. Each daemon starts, creates its keys and publishes its descriptor in its data dir.
//! 3. The descriptors are joined into one directory file, and a consensus of them signed by
//!    three authority keys this process makes at start (every daemon pins them: it trusts no
//!    relay the consensus does not list); each daemon reloads both (through its control
//!    socket). The authorities' votes and consensus are computed here, as they would be by
//!    authorities exchanging votes, because the daemon has no authority mode yet (issue 19).
//! 4. Node 1 builds circuits until one succeeds; then the addresses and example commands
//!    are printed, and a small web server on loopback gives something to fetch.
//! 5. Ctrl-C (or SIGTERM) shuts every daemon down through its control socket.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use nyx_crypto::identity::IdentityKey;
use nyx_daemon::control::pb;
use nyx_daemon::daemon::{READY_PREFIX, Ready, files};
use nyx_overlay::directory::Directory;
use nyx_overlay::directory::consensus::{
    ConsensusBody, Period, UnverifiedConsensus, Vote, compute, sign_body, vote_status,
};
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
    let temporary = args.dir.is_none();
    let dir = match &args.dir {
        Some(d) => d.clone(),
        None => std::env::temp_dir().join(format!("nyx-testnet-{}", std::process::id())),
    };
    let io = |what: &str, e: std::io::Error| Failure::Call(format!("{what}: {e}"));
    std::fs::create_dir_all(&dir).map_err(|e| io("cannot create the testnet directory", e))?;
    let socks_port = free_or_fallback(args.socks_port).await;
    let http = start_demo_server(args.http_port).await?;
    eprintln!(
        "nyx testnet: starting {} daemons ({transport}) in {}",
        args.nodes,
        dir.display()
    );
    let authorities = (0..AUTHORITIES)
        .map(|_| IdentityKey::generate())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| Failure::Call(format!("authority keys: {e}")))?;
    let pinned: Vec<String> = authorities
        .iter()
        .map(|a| nyx_daemon::daemon::trust::authority_hex(&a.public()))
        .collect();
    let mut members: Vec<Member> = Vec::new();
    let result = async {
        for i in 1..=args.nodes {
            let member =
                start_member(&dir, i, &transport, socks_port, &args.log_level, &pinned).await?;
            eprintln!(
                "  [{i}/{}] {} up: node {} on {}",
                args.nodes,
                member.name,
                &member.ready.node_id[..16.min(member.ready.node_id.len())],
                member.ready.listen
            );
            members.push(member);
        }
        let directory = join_directory(&dir, &members)?;
        sign_consensus(&dir, &directory, &authorities)?;
        eprintln!(
            "  directory: {} relays, in a consensus signed by {AUTHORITIES} authorities; loading it",
            directory.len()
        );
        for m in &members {
            let mut c = client(&m.ready).await?;
            c.reload_config(pb::ReloadConfigRequest {}).await?;
        }
        let circuit = wait_for_circuit(&members[0].ready).await?;
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
    if json {
        let summary = Summary {
            nodes: members.len(),
            socks: &first.socks,
            control: &first.control,
            http: http.to_string(),
            dir: dir.display().to_string(),
            circuit: circuit.hops.iter().map(|h| h.nickname.clone()).collect(),
        };
        println!(
            "{}",
            serde_json::to_string(&summary).unwrap_or_else(|_| "{}".into())
        );
    } else {
        print_banner(&members, &circuit, http, &dir);
    }
    // Until stopped, act as the authorities would: when a daemon publishes a new descriptor
    // (its onion keys rotated, or it renewed it), or the consensus is due for replacement,
    // sign a new consensus and have every daemon load it.
    let refresh = async {
        let mut directory_text = std::fs::read_to_string(dir.join("directory.txt")).ok();
        let mut signed_at = Instant::now();
        loop {
            tokio::time::sleep(REFRESH).await;
            let Ok(directory) = join_directory(&dir, &members) else {
                continue;
            };
            let text = directory.to_text();
            let due = signed_at.elapsed() >= CONSENSUS_LIFETIME / 2;
            if directory_text.as_deref() == Some(text.as_str()) && !due {
                continue;
            }
            if let Err(e) = sign_consensus(&dir, &directory, &authorities) {
                eprintln!("nyx testnet: cannot sign a new consensus: {e:?}");
                continue;
            }
            directory_text = Some(text);
            signed_at = Instant::now();
            for m in &members {
                if let Ok(mut c) = client(&m.ready).await {
                    let _ = c.reload_config(pb::ReloadConfigRequest {}).await;
                }
            }
        }
    };
    tokio::select! {
        () = stop.wait() => {}
        () = refresh => {}
    }
    eprintln!("nyx testnet: stopping");
    stop_all(&mut members).await;
    if temporary {
        let _ = std::fs::remove_dir_all(&dir);
    }
    eprintln!("nyx testnet: stopped");
    Ok(())
}

/// `port` on 127.0.0.1 if it is free (or 0), else 0 (a free port chosen later).
async fn free_or_fallback(port: u16) -> u16 {
    if port == 0 {
        return 0;
    }
    match TcpListener::bind(("127.0.0.1", port)).await {
        Ok(_) => port,
        Err(_) => {
            eprintln!("nyx testnet: 127.0.0.1:{port} is in use; using a free port instead");
            0
        }
    }
}

async fn start_member(
    dir: &Path,
    i: u8,
    transport: &str,
    socks_port: u16,
    log_level: &str,
    authorities: &[String],
) -> Result<Member, Failure> {
    let name = format!("node{i}");
    let data = dir.join(&name);
    files::prepare_data_dir(&data).map_err(|e| Failure::Call(e.to_string()))?;
    let socks = if i == 1 {
        format!("enabled = true\nlisten = \"127.0.0.1:{socks_port}\"\n")
    } else {
        "enabled = false\n".to_owned()
    };
    let config = format!(
        "# Written by `nyx testnet`.\n\
         listen = [\"127.0.0.{i}:0\"]\n\
         transport = \"{transport}\"\n\
         data_dir = \"{data}\"\n\
         nickname = \"{name}\"\n\
         [socks]\n{socks}\
         [directory]\nfile = \"{directory}\"\nconsensus = \"{consensus}\"\n\
         authorities = [{authorities}]\n\
         [relay]\nexit_policy = [\"accept 127.0.0.0/8:*\", \"accept [::1]:*\", \"reject *:*\"]\n\
         [limits]\nhandshakes_per_prefix = {{ per_second = 1000.0, burst = 1000 }}\n\
         [log]\nlevel = \"{log_level}\"\n",
        data = data.display(),
        directory = dir.join("directory.txt").display(),
        consensus = dir.join(CONSENSUS_FILE).display(),
        authorities = authorities
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
    let mut child = Command::new(exe)
        .arg("daemon")
        .arg("--config")
        .arg(&config_path)
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

/// Authorities whose keys every member pins.
const AUTHORITIES: usize = 3;
/// How often the testnet looks for new descriptors to sign a new consensus for.
const REFRESH: Duration = Duration::from_secs(30);
/// How long a consensus is fresh (a new one is signed halfway).
const CONSENSUS_LIFETIME: Duration = Duration::from_secs(3600);
/// The consensus file, beside the directory file.
const CONSENSUS_FILE: &str = "consensus.bin";

/// Each authority votes for every relay of `directory` (as `vote_status` says), the votes
/// are combined, every authority signs the result, and it is written beside the directory.
/// The period starts a minute ago (for clocks a little behind) and lasts as long as the
/// descriptors do.
fn sign_consensus(
    dir: &Path,
    directory: &Directory,
    authorities: &[IdentityKey],
) -> Result<(), Failure> {
    let now = nyx_node::unix_now();
    let valid_until = directory
        .iter()
        .map(|d| d.valid_until())
        .min()
        .unwrap_or(now + 3600);
    let period = Period {
        valid_after: now.saturating_sub(60),
        fresh_until: now + CONSENSUS_LIFETIME.as_secs(),
        valid_until: valid_until.max(now + CONSENSUS_LIFETIME.as_secs()),
    };
    let relays: Vec<_> = directory.iter().map(vote_status).collect();
    let votes: Vec<Vote> = authorities
        .iter()
        .map(|a| Vote {
            authority: a.node_id(),
            body: ConsensusBody {
                period,
                relays: relays.clone(),
            },
        })
        .collect();
    let body = compute(&votes, authorities.len()).map_err(|e| Failure::Call(e.to_string()))?;
    let signatures = authorities.iter().map(|a| sign_body(&body, a)).collect();
    files::write_atomic(
        &dir.join(CONSENSUS_FILE),
        UnverifiedConsensus::new(body, signatures).encode(),
    )
    .map_err(|e| Failure::Call(e.to_string()))
}

/// Join every member's published descriptor into the testnet's directory file.
fn join_directory(dir: &Path, members: &[Member]) -> Result<Directory, Failure> {
    let now = nyx_node::unix_now();
    let mut descriptors = Vec::new();
    for m in members {
        let path = Path::new(&m.ready.data_dir).join(files::DESCRIPTOR_FILE);
        let text = std::fs::read_to_string(&path)
            .map_err(|e| Failure::Call(format!("{}: {e}", path.display())))?;
        let (one, _) = Directory::parse(&text, now)
            .map_err(|e| Failure::Call(format!("{}: {e}", path.display())))?;
        descriptors.extend(one.iter().cloned());
    }
    let directory =
        Directory::from_descriptors(descriptors).map_err(|e| Failure::Call(e.to_string()))?;
    files::write_atomic(&dir.join("directory.txt"), directory.to_text())
        .map_err(|e| Failure::Call(e.to_string()))?;
    Ok(directory)
}

async fn client(
    ready: &Ready,
) -> Result<pb::control_client::ControlClient<tonic::transport::Channel>, Failure> {
    nyx_daemon::control::connect(Path::new(&ready.control))
        .await
        .map_err(|e| Failure::Call(e.to_string()))
}

/// Build circuits from node 1 until one succeeds (links come up as they are used).
async fn wait_for_circuit(ready: &Ready) -> Result<pb::Circuit, Failure> {
    let mut c = client(ready).await?;
    let started = Instant::now();
    loop {
        match c
            .build_circuit(pb::BuildCircuitRequest {
                target: String::new(),
            })
            .await
        {
            Ok(r) => {
                let circuit = r.into_inner();
                let path: Vec<&str> = circuit.hops.iter().map(|h| h.nickname.as_str()).collect();
                eprintln!("  circuit built: node1 > {}", path.join(" > "));
                return Ok(circuit);
            }
            Err(status) if started.elapsed() < Duration::from_secs(60) => {
                eprintln!("  waiting for circuits ({})", status.message());
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            Err(status) => {
                return Err(Failure::Call(format!(
                    "no circuit after 60 s: {}",
                    status.message()
                )));
            }
        }
    }
}

fn print_banner(members: &[Member], circuit: &pb::Circuit, http: SocketAddr, dir: &Path) {
    let first = &members[0].ready;
    let path: Vec<&str> = circuit.hops.iter().map(|h| h.nickname.as_str()).collect();
    println!();
    println!(
        "NyxNet testnet is up: {} daemons on 127.0.0.1-{}; first circuit node1 > {}",
        members.len(),
        members.len(),
        path.join(" > ")
    );
    println!();
    println!("  SOCKS5 entry     {}", first.socks);
    println!("  control socket   {}", first.control);
    println!("  demo web server  http://{http}/  (exits allow loopback only)");
    println!("  files and logs   {}", dir.display());
    println!();
    println!("Try, in another terminal:");
    println!("  curl --socks5-hostname {} http://{http}/", first.socks);
    println!(
        "  curl --socks5-hostname {} -o /dev/null http://{http}/file",
        first.socks
    );
    println!(
        "  cargo run --release -p nyx-daemon --bin nyx -- --control {} status",
        first.control
    );
    println!("  grpcurl -plaintext -unix {} list", first.control);
    println!();
    println!("Ctrl-C stops the testnet.");
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
            Ok(Ok(status)) => eprintln!("  {} exited with {status}", m.name),
            _ => {
                eprintln!("  {} did not stop; killing it", m.name);
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
