//! The daemons of a testnet: each one's data directory, keys and configuration, its
//! process, and its shutdown.

use std::net::SocketAddr;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use nyx_daemon::control::pb;
use nyx_daemon::daemon::{READY_PREFIX, Ready, files, trust};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

use super::client;
use crate::commands::Failure;

/// One daemon of the testnet.
pub(super) struct Member {
    pub(super) name: String,
    pub(super) child: Child,
    pub(super) ready: Ready,
}

/// What a member is.
#[derive(Debug, Clone, Copy)]
pub(super) enum Role {
    /// A relay (and client).
    Relay,
    /// A relay that is also a directory authority, on a fixed address.
    Authority { listen: SocketAddr, period: u64 },
}

/// How to configure a member.
pub(super) struct MemberSettings<'a> {
    pub(super) transport: &'a str,
    pub(super) socks_port: u16,
    pub(super) http_connect_port: u16,
    pub(super) log_level: &'a str,
    /// `worker_threads` of each daemon.
    pub(super) worker_threads: usize,
    /// `directory.authorities` lines.
    pub(super) authorities: &'a [String],
    pub(super) role: Role,
}

/// An authority prepared before it starts: its node number, address and pinned line.
pub(super) struct PreparedAuthority {
    pub(super) index: u8,
    pub(super) listen: SocketAddr,
    pub(super) line: String,
}

/// Make node `i`'s keys and pick its port, so that its line can be pinned everywhere.
pub(super) fn prepare_authority(dir: &Path, i: u8) -> Result<PreparedAuthority, Failure> {
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

pub(super) async fn start_member(
    dir: &Path,
    i: u8,
    settings: &MemberSettings<'_>,
) -> Result<Member, Failure> {
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

/// Ask every daemon to shut down, wait for them, kill what did not stop.
pub(super) async fn stop_all(members: &mut [Member]) {
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
