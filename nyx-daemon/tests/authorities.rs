//! Directory authorities as operators run them: three `nyx-daemon` processes configured as
//! authorities and two relays, all pinning the three. The relays upload their descriptors,
//! the authorities test them, vote, exchange votes and signatures and publish a consensus
//! that every daemon fetches. With one authority stopped, the other two still make one;
//! with two stopped none is made, and the daemons keep the last one until it expires and
//! then say so (no relays used).
#![allow(clippy::unwrap_used)]

mod support;

use std::net::{SocketAddr, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use nyx_daemon::control::pb;
use nyx_daemon::daemon::{files, trust};
use nyx_overlay::directory::consensus::UnverifiedConsensus;
use support::{DaemonProcess, temp_dir};

/// The voting period: the shortest an authority accepts.
const PERIOD: u64 = 16;
/// Liveness bound only (never speed): CI machines are shared and slow.
const LONG: Duration = Duration::from_secs(120);

struct Member {
    data: PathBuf,
    process: Option<DaemonProcess>,
}

/// Three authorities (nodes 1-3, keys and ports chosen before they start) and two relays on
/// 127.0.`net`.1-5; `extra(i)` is added to node `i`'s config (it may hold `[socks]` and
/// `[relay]`).
fn start_network(dir: &Path, net: u8, extra: impl Fn(u8) -> String) -> Vec<Member> {
    let mut lines = Vec::new();
    let mut listens = Vec::new();
    for i in 1..=3u8 {
        let data = dir.join(format!("node{i}"));
        let addr: SocketAddr = UdpSocket::bind((format!("127.0.{net}.{i}"), 0))
            .unwrap()
            .local_addr()
            .unwrap();
        // As an operator does: the line comes from the authority's own daemon.
        let out = support::daemon_command()
            .arg("--data-dir")
            .arg(&data)
            .arg("--authority-line")
            .arg("--config")
            .arg(write_listen_only(&data, addr))
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let line = String::from_utf8(out.stdout).unwrap().trim().to_owned();
        assert!(line.starts_with(&trust::authority_hex(&identity_of(&data))));
        lines.push(format!("\"{line}\""));
        listens.push(addr.to_string());
    }
    (1..=5u8)
        .map(|i| {
            let data = dir.join(format!("node{i}"));
            let (listen, authority) = match listens.get(usize::from(i) - 1) {
                Some(addr) => (
                    addr.clone(),
                    format!("[authority]\nenabled = true\nperiod = \"{PERIOD}s\"\n"),
                ),
                None => (format!("127.0.{net}.{i}:0"), String::new()),
            };
            let config = data.join("nyx.toml");
            std::fs::create_dir_all(&data).unwrap();
            // Every member relays; `extra` may open `[relay]` itself (then it says so).
            let extra = extra(i);
            let relay = match extra.contains("[relay]") {
                true => "",
                false => "[relay]\nenabled = true\n",
            };
            std::fs::write(
                &config,
                format!(
                    "listen = [\"{listen}\"]\ndata_dir = \"{}\"\nnickname = \"node{i}\"\n\
                     [directory]\nauthorities = [{}]\n{authority}\
                     [limits]\nhandshakes_per_prefix = {{ per_second = 1000.0, burst = 1000 }}\n\
                     {relay}{extra}",
                    data.display(),
                    lines.join(", "),
                ),
            )
            .unwrap();
            let mut cmd = support::daemon_command();
            cmd.arg("--config").arg(&config);
            Member {
                data,
                process: Some(DaemonProcess::spawn(cmd)),
            }
        })
        .collect()
}

/// A config with only `listen` (what `--authority-line` needs besides the data dir).
fn write_listen_only(data: &Path, addr: SocketAddr) -> PathBuf {
    std::fs::create_dir_all(data).unwrap();
    let path = data.join("listen.toml");
    std::fs::write(&path, format!("listen = [\"{addr}\"]\n")).unwrap();
    path
}

/// The identity key `--authority-line` created in `data`.
fn identity_of(data: &Path) -> nyx_crypto::identity::IdentityPublic {
    let (keys, created) =
        files::load_or_create_keys(data, nyx_node::unix_now(), Default::default(), true).unwrap();
    assert!(!created, "--authority-line made the keys");
    keys.identity.public()
}

/// The consensus a daemon saved: its start and how many authorities signed it.
fn saved_consensus(data: &Path) -> Option<(u64, usize)> {
    let bytes = std::fs::read(data.join("consensus.bin")).ok()?;
    let c = UnverifiedConsensus::decode(&bytes).ok()?;
    Some((c.body().period.valid_after, c.signatures().len()))
}

async fn relays(member: &Member) -> u32 {
    let ready = &member.process.as_ref().unwrap().ready;
    let mut c = nyx_daemon::control::connect(Path::new(&ready.control))
        .await
        .unwrap();
    c.get_info(pb::GetInfoRequest {})
        .await
        .unwrap()
        .into_inner()
        .relays
}

/// Wait until `check` holds, or fail with `what` after [`LONG`].
async fn eventually<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + LONG;
    while !check().await {
        assert!(Instant::now() < deadline, "{what}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_authorities_make_a_consensus_two_still_do_one_does_not() {
    let dir = temp_dir("authorities");
    let mut net = start_network(&dir, 70, |_| "[socks]\nenabled = false\n".to_owned());

    // Every daemon uses a consensus listing all five (each uploaded, tested, voted for).
    for (i, m) in net.iter().enumerate() {
        eventually(&format!("node{} has all five relays", i + 1), || async {
            relays(m).await == 5
        })
        .await;
    }
    let (first, signers) = saved_consensus(&net[4].data).unwrap();
    assert_eq!(signers, 3, "all three authorities signed");

    // One authority stops: the other two still publish, signed by two.
    let stopped = nyx_node::unix_now();
    assert_eq!(net[2].process.take().unwrap().stop_with("-TERM"), Some(0));
    eventually("a consensus made after an authority stopped", || async {
        saved_consensus(&net[4].data).is_some_and(|(start, _)| start > stopped + PERIOD)
    })
    .await;
    let (second, signers) = saved_consensus(&net[4].data).unwrap();
    assert!(second > first);
    assert_eq!(signers, 2, "the two running authorities signed");
    // The stopped authority fails its reachability test and leaves the list.
    eventually("the stopped authority leaves the consensus", || async {
        relays(&net[3]).await == 4
    })
    .await;

    // A second stops: no consensus can be made; the last one is kept until it expires,
    // then no relays are used (and the log says why).
    assert_eq!(net[1].process.take().unwrap().stop_with("-TERM"), Some(0));
    let (last, _) = saved_consensus(&net[4].data).unwrap();
    eventually("the daemons drop the expired consensus", || async {
        relays(&net[3]).await == 0 && relays(&net[4]).await == 0
    })
    .await;
    let (still, _) = saved_consensus(&net[4].data).unwrap();
    assert!(
        still <= last + PERIOD,
        "no consensus was made by one authority"
    );
    for m in &mut net {
        if let Some(p) = m.process.take() {
            assert_eq!(p.stop_with("-TERM"), Some(0));
        }
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The descriptor digests a daemon's saved consensus lists, by relay.
fn listed_digests(data: &Path) -> Vec<(nyx_core::NodeId, [u8; 32])> {
    let Ok(bytes) = std::fs::read(data.join("consensus.bin")) else {
        return Vec::new();
    };
    UnverifiedConsensus::decode(&bytes)
        .map(|c| {
            c.body()
                .relays
                .iter()
                .map(|r| (r.node_id, r.digest))
                .collect()
        })
        .unwrap_or_default()
}

/// A network in fast time: consensus periods of 16 s and onion keys that rotate every 40 s
/// (32 s of overlap: a new descriptor reaches clients within two periods), run through at
/// least two rotations of every relay without
/// restarting anything. Every relay uploads each new descriptor, the authorities list it,
/// clients fetch it, and a fetch on a fresh circuit (a new SOCKS isolation group each time)
/// keeps working throughout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn circuits_keep_working_through_onion_key_rotations_and_consensus_periods() {
    let dir = temp_dir("rotations");
    let site = nyx_node::testing::WebServer::page("through rotations")
        .await
        .unwrap();
    let socks_port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut net = start_network(&dir, 71, |i| {
        let socks = match i {
            4 => format!("[socks]\nenabled = true\nlisten = \"127.0.0.1:{socks_port}\"\n"),
            _ => "[socks]\nenabled = false\n".to_owned(),
        };
        format!(
            "{socks}[relay]\nenabled = true\n\
             exit_policy = [\"accept 127.0.0.0/8:*\", \"reject *:*\"]\n\
             onion_key_period = \"40s\"\nonion_key_overlap = \"32s\"\n"
        )
    });
    for (i, m) in net.iter().enumerate() {
        eventually(&format!("node{} has all five relays", i + 1), || async {
            relays(m).await == 5
        })
        .await;
    }
    let url = format!("http://{}/", site.addr());
    let socks = format!("127.0.0.1:{socks_port}");
    let mut seen: std::collections::HashMap<nyx_core::NodeId, std::collections::HashSet<[u8; 32]>> =
        Default::default();
    let started = Instant::now();
    let mut fetches = 0;
    // Two rotations take 80 s; a little more so the last new descriptors reach clients.
    while started.elapsed() < Duration::from_secs(100) {
        let (socks, url) = (socks.clone(), url.clone());
        let user = format!("rotation{fetches}:x");
        let out = tokio::task::spawn_blocking(move || {
            Command::new("curl")
                .args(["--silent", "--show-error", "--max-time", "30"])
                .args(["--socks5-hostname", &socks, "--proxy-user", &user, &url])
                .output()
                .expect("curl must be installed (.ci/run installs it)")
        })
        .await
        .unwrap();
        assert!(
            out.status.success() && out.stdout.ends_with(b"through rotations"),
            "fetch {fetches} after {:?}: {}",
            started.elapsed(),
            String::from_utf8_lossy(&out.stderr)
        );
        fetches += 1;
        for (relay, digest) in listed_digests(&net[3].data) {
            seen.entry(relay).or_default().insert(digest);
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    // Every relay was listed with at least three descriptors: the first and two rotations.
    assert_eq!(seen.len(), 5);
    for (relay, digests) in &seen {
        assert!(
            digests.len() >= 3,
            "{relay}: {} descriptors listed",
            digests.len()
        );
    }
    assert_eq!(relays(&net[3]).await, 5, "every relay is still listed");
    for m in &mut net {
        if let Some(p) = m.process.take() {
            assert_eq!(p.stop_with("-TERM"), Some(0));
        }
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
