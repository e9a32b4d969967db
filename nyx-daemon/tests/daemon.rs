//! The daemon as operators run it: the built `nyx-daemon` and `nyx` binaries as processes
//! on loopback. Configuration errors, files and permissions, every control call through the
//! generated client, health and reflection, the CLI, reload on SIGHUP, the Prometheus
//! endpoint, and a graceful stop on SIGTERM.
#![allow(clippy::unwrap_used)]

mod support;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use nyx_daemon::control::pb;
use support::{DaemonProcess, nyx, temp_dir};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn mode(p: &Path) -> u32 {
    std::fs::metadata(p).unwrap().permissions().mode() & 0o777
}

#[test]
fn config_errors_are_refused_with_the_key_name() {
    let dir = temp_dir("config-errors");
    let cases = [
        ("[limits]\nmax_circuts = 5\n", "max_circuts"),
        ("nickname = 7\n", "nickname"),
        ("transport = \"tcp\"\n", "transport"),
        (
            "[relay]\nexit_policy = [\"allow *:*\"]\n",
            "relay.exit_policy",
        ),
        ("[socks]\nmax_connections = 0\n", "socks.max_connections"),
        ("[log]\nlevel = \"loud\"\n", "log.level"),
        ("listen = [\"not an address\"]\n", "listen"),
        // A relay publishes its listen address: an unspecified one reaches nobody.
        (
            "listen = [\"0.0.0.0:0\"]\n[relay]\nenabled = true\n",
            "listen",
        ),
    ];
    for (text, key) in cases {
        let path = dir.join("bad.toml");
        std::fs::write(&path, text).unwrap();
        let out = support::daemon_command()
            .arg("--config")
            .arg(&path)
            .arg("--data-dir")
            .arg(dir.join("data"))
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{text:?}: {stderr}");
        assert!(stderr.contains(key), "{text:?}: {key} not in {stderr}");
        assert!(
            !dir.join("data").exists(),
            "nothing is created for a bad config"
        );
    }
    // The example file is valid and --check-config prints the effective configuration.
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("nyx.example.toml");
    let out = support::daemon_command()
        .arg("--config")
        .arg(&example)
        .arg("--check-config")
        .output()
        .unwrap();
    assert!(out.status.success());
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(shown.contains("nickname = \"my-relay\""), "{shown}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn embedded_defaults_create_private_state_and_stop_cleanly() {
    let dir = temp_dir("defaults");
    // No config file: the data dir comes from XDG_STATE_HOME, SOCKS from its default port
    // (a free port is used instead when 9050 is busy on this machine: the test then
    // checks the default through --check-config only).
    let socks_free = std::net::TcpListener::bind("127.0.0.1:9050").is_ok();
    let shown = support::daemon_command()
        .arg("--check-config")
        .output()
        .unwrap();
    let shown = String::from_utf8_lossy(&shown.stdout).to_string();
    assert!(shown.contains("listen = \"127.0.0.1:9050\""), "{shown}");
    assert!(shown.contains("transport = \"quic\""), "{shown}");
    let mut cmd = support::daemon_command();
    cmd.env("XDG_STATE_HOME", &dir)
        .env_remove("STATE_DIRECTORY");
    if !socks_free {
        let cfg = dir.join("socks.toml");
        std::fs::write(&cfg, "[socks]\nlisten = \"127.0.0.1:0\"\n").unwrap();
        cmd.arg("--config").arg(cfg);
    }
    let daemon = DaemonProcess::spawn(cmd);
    let data = dir.join("nyx");
    assert_eq!(daemon.ready.data_dir, data.display().to_string());
    assert!(daemon.ready.new_keys);
    // A client by default: its links start from any interface, and it accepts none.
    assert!(
        daemon.ready.listen.starts_with("0.0.0.0:"),
        "{}",
        daemon.ready.listen
    );
    if socks_free {
        assert_eq!(daemon.ready.socks, "127.0.0.1:9050");
    }
    assert_eq!(mode(&data), 0o700);
    assert_eq!(mode(&data.join("keys")), 0o700);
    assert_eq!(mode(&data.join("keys/identity.key")), 0o600);
    let socket = data.join("control.sock");
    assert_eq!(mode(&socket), 0o600);
    // A client makes no relay key and publishes no descriptor.
    assert!(!data.join("keys/link.key").exists());
    assert!(!data.join("descriptor.txt").exists());
    let node_id = daemon.ready.node_id.clone();
    let status = daemon.stop_with("-TERM");
    assert_eq!(status, Some(0));
    assert!(!socket.exists(), "the control socket is removed");
    // A second start reuses the keys: same node id.
    let mut cmd = support::daemon_command();
    cmd.env("XDG_STATE_HOME", &dir)
        .env_remove("STATE_DIRECTORY");
    let cfg = dir.join("socks0.toml");
    std::fs::write(&cfg, "[socks]\nlisten = \"127.0.0.1:0\"\n").unwrap();
    cmd.arg("--config").arg(cfg);
    let again = DaemonProcess::spawn(cmd);
    assert_eq!(again.ready.node_id, node_id);
    assert!(!again.ready.new_keys);
    assert_eq!(again.stop_with("-INT"), Some(0));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn control_api_cli_reload_and_metrics() {
    let dir = temp_dir("control");
    let config = dir.join("nyx.toml");
    // `family`: the entries of relay.family, as TOML.
    let write_config = |policy: &str, family: &str, level: &str, socks: &str| {
        std::fs::write(
            &config,
            format!(
                "data_dir = \"{}\"\nnickname = \"ctl\"\n[socks]\nlisten = \"{socks}\"\n\
                 [relay]\nenabled = true\nexit_policy = [\"{policy}\"]\nfamily = [{family}]\n\
                 [log]\nlevel = \"{level}\"\n\
                 [http_connect]\nenabled = true\nlisten = \"127.0.0.1:0\"\n\
                 [telemetry]\nprometheus_listen = \"127.0.0.1:0\"\n",
                dir.join("data").display()
            ),
        )
        .unwrap();
    };
    write_config("reject *:*", "", "info", "127.0.0.1:0");
    let mut cmd = support::daemon_command();
    cmd.arg("--config").arg(&config);
    let daemon = DaemonProcess::spawn(cmd);
    let socket = Path::new(&daemon.ready.control).to_owned();
    let mut c = nyx_daemon::control::connect(&socket).await.unwrap();

    // Info.
    let info = c
        .get_info(pb::GetInfoRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(info.node_id, daemon.ready.node_id);
    assert_eq!(info.nickname, "ctl");
    assert_eq!(info.transport, "quic");
    assert_eq!(info.socks_addr, daemon.ready.socks);
    assert!(!daemon.ready.http_connect.is_empty());
    assert_eq!(info.http_connect_addr, daemon.ready.http_connect);
    assert_eq!(info.relays, 0);
    assert!(!info.ready);
    assert_eq!(info.exit_policy, "reject *:*");
    // Lists are empty on a node alone.
    let peers = c.list_peers(pb::ListPeersRequest {}).await.unwrap();
    assert!(peers.into_inner().peers.is_empty());
    let circuits = c.list_circuits(pb::ListCircuitsRequest {}).await.unwrap();
    assert!(circuits.into_inner().circuits.is_empty());
    let streams = c.list_streams(pb::ListStreamsRequest {}).await.unwrap();
    assert!(streams.into_inner().streams.is_empty());
    let stats = c
        .get_stream_stats(pb::GetStreamStatsRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(stats.packets_sent, 0);
    // Errors become statuses with useful messages.
    let err = c
        .build_circuit(pb::BuildCircuitRequest {
            target: String::new(),
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::FailedPrecondition, "{err:?}");
    assert!(err.message().contains("directory"), "{err:?}");
    let err = c
        .build_circuit(pb::BuildCircuitRequest {
            target: "no port".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
    let err = c
        .close_circuit(pb::CloseCircuitRequest { id: 77 })
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::NotFound);
    let err = c
        .close_stream(pb::CloseStreamRequest { id: 5 })
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::NotFound);
    let open = pb::StreamRequest {
        msg: Some(pb::stream_request::Msg::Data(b"no open first".to_vec())),
    };
    let err = c
        .open_stream(tokio_stream::iter(vec![open]))
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
    let err = c
        .set_log_level(pb::SetLogLevelRequest {
            level: "very=loud=x".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
    let r = c
        .set_log_level(pb::SetLogLevelRequest {
            level: "debug".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.previous, "info");
    // Config.
    let shown = c
        .get_config(pb::GetConfigRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(shown.path, config.display().to_string());
    assert!(shown.toml.contains("level = \"debug\""), "{}", shown.toml);
    // The HTTP CONNECT entry is on (a GET gets 405 from it), and counted.
    let mut tunnel = tokio::net::TcpStream::connect(&daemon.ready.http_connect)
        .await
        .unwrap();
    tunnel.write_all(b"GET / HTTP/1.1\r\n\r\n").await.unwrap();
    let mut answer = String::new();
    tunnel.read_to_string(&mut answer).await.unwrap();
    assert!(answer.starts_with("HTTP/1.1 405 "), "{answer}");
    drop(tunnel);
    // Metrics: over the control API and the Prometheus endpoint.
    let m = c
        .get_metrics(pb::GetMetricsRequest {})
        .await
        .unwrap()
        .into_inner();
    assert!(
        m.prometheus_text.contains("# TYPE"),
        "{}",
        m.prometheus_text
    );
    for key in [
        "nyx_cells_relayed_total{direction=\"forward\"}",
        "nyx_queue_depth{queue=\"inbound\"}",
        "nyx_socks_connections_total",
        "nyx_socks_handshakes_aborted_total",
        "nyx_directory_relays",
    ] {
        assert!(m.values.contains_key(key), "{key} not in {:?}", m.values);
    }
    // Counted once the entry is done with the client (it reads what a refused client still
    // sends for a moment), so ask again until it is.
    let mut malformed = m.values.get("nyx_http_connect_malformed_total").copied();
    for _ in 0..100 {
        if malformed == Some(1.0) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        let m = c.get_metrics(pb::GetMetricsRequest {}).await.unwrap();
        malformed = m
            .into_inner()
            .values
            .get("nyx_http_connect_malformed_total")
            .copied();
    }
    assert_eq!(malformed, Some(1.0));
    let body = support::http_get(&daemon.ready.prometheus, "/metrics").await;
    assert!(body.starts_with("HTTP/1.1 200"), "{body}");
    assert!(body.contains("text/plain; version=0.0.4"), "{body}");
    assert!(body.contains("nyx_"), "{body}");

    // Events: a reload that changes the directory file reports it.
    let mut events = c
        .subscribe_events(pb::SubscribeEventsRequest {})
        .await
        .unwrap()
        .into_inner();
    // Reload through SIGHUP: exit policy, family and log level are live, the SOCKS address
    // is not. The family lists this node too, as one list for every relay of a family
    // would; the descriptor leaves it out.
    let sibling = "ab".repeat(32);
    let family = format!("\"{}\", \"{sibling}\"", daemon.ready.node_id);
    write_config("accept 127.0.0.0/8:*", &family, "warn", "127.0.0.1:1");
    daemon.signal("-HUP");
    let event = tokio::time::timeout(Duration::from_secs(10), events.message())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(event.kind(), pb::EventKind::DirectoryChanged);
    let info = c
        .get_info(pb::GetInfoRequest {})
        .await
        .unwrap()
        .into_inner();
    assert!(
        info.exit_policy.starts_with("accept 127.0.0.0/8:"),
        "{}",
        info.exit_policy
    );
    assert_eq!(info.socks_addr, daemon.ready.socks, "restart-only key kept");
    let descriptor =
        std::fs::read_to_string(Path::new(&daemon.ready.data_dir).join("descriptor.txt")).unwrap();
    let (published, _) =
        nyx_overlay::directory::Directory::parse(&descriptor, nyx_node::unix_now()).unwrap();
    let d = published.iter().next().unwrap();
    assert!(
        d.exit_policy().allows(&"127.0.0.1:80".parse().unwrap()),
        "the descriptor is republished with the new policy"
    );
    let sibling: nyx_core::NodeId = sibling.parse().unwrap();
    assert_eq!(d.family(), [sibling], "and the new family");
    // Reload through the API reports what needs a restart.
    write_config("accept 127.0.0.0/8:*", &family, "warn", "127.0.0.1:2");
    let r = c
        .reload_config(pb::ReloadConfigRequest {})
        .await
        .unwrap()
        .into_inner();
    assert!(r.applied.is_empty(), "{r:?}");
    assert_eq!(r.restart_required, ["socks.listen"]);
    // A broken file changes nothing and says why.
    std::fs::write(&config, "[limits]\nmax_circuts = 1\n").unwrap();
    let err = c
        .reload_config(pb::ReloadConfigRequest {})
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
    assert!(err.message().contains("max_circuts"), "{err:?}");
    write_config("accept 127.0.0.0/8:*", &family, "warn", "127.0.0.1:2");

    // Health (NOT_SERVING: no relays to build circuits through) and reflection.
    let channel = support::channel(&socket).await;
    let mut health = tonic_health::pb::health_client::HealthClient::new(channel.clone());
    let h = health
        .check(tonic_health::pb::HealthCheckRequest {
            service: "nyx.control.v1.Control".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        h.status(),
        tonic_health::pb::health_check_response::ServingStatus::NotServing
    );
    let services = support::reflection_services_v1(channel.clone()).await;
    for s in [
        "nyx.control.v1.Control",
        "grpc.health.v1.Health",
        "grpc.reflection.v1.ServerReflection",
    ] {
        assert!(services.contains(&s.to_owned()), "{s} not in {services:?}");
    }
    let services = support::reflection_services_v1alpha(channel).await;
    assert!(services.contains(&"nyx.control.v1.Control".to_owned()));

    // The CLI against the live daemon.
    let out = nyx(&socket, &["status"]);
    assert!(
        out.contains(&daemon.ready.node_id) && out.contains("ctl"),
        "{out}"
    );
    let http_line = format!("http       {}", daemon.ready.http_connect);
    assert!(out.lines().any(|l| l == http_line), "{out}");
    let json: serde_json::Value =
        serde_json::from_str(&nyx(&socket, &["--json", "status"])).unwrap();
    assert_eq!(json["node_id"], daemon.ready.node_id.as_str());
    assert_eq!(nyx(&socket, &["peers"]).trim(), "no peers");
    assert_eq!(nyx(&socket, &["circuits"]).trim(), "no circuits");
    assert!(nyx(&socket, &["streams"]).contains("no streams"));
    assert!(nyx(&socket, &["metrics"]).contains("# TYPE"));
    assert!(nyx(&socket, &["config", "show"]).contains("nickname = \"ctl\""));
    // The file asks for another SOCKS address than the one running: still reported.
    assert!(
        nyx(&socket, &["config", "reload"]).contains("need a restart (old values kept): socks")
    );
    assert!(nyx(&socket, &["log-level", "info"]).contains("was warn"));
    // Shutdown through the CLI: exit 0, no socket left.
    assert!(nyx(&socket, &["shutdown"]).contains("stopping"));
    assert_eq!(daemon.wait(), Some(0));
    assert!(!socket.exists());
    // A stopped daemon gets a clear message and exit code 3.
    let out = Command::new(env!("CARGO_BIN_EXE_nyx"))
        .arg("--control")
        .arg(&socket)
        .arg("status")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("is nyx-daemon running"), "{stderr}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Connections from another user are refused by their peer credentials, even when the file
/// modes would let them in. Needs root to run a client as another uid (CI runs as root);
/// otherwise the check itself is covered by the unit test `peer_of_another_uid_is_refused`.
#[test]
fn control_socket_refuses_other_users() {
    use std::os::unix::fs::MetadataExt;
    use std::os::unix::process::CommandExt;
    if std::fs::metadata("/proc/self").unwrap().uid() != 0 {
        eprintln!("not root: cannot run a client as another uid; unit test covers the check");
        return;
    }
    let dir = temp_dir("peercred");
    let socket = dir.join("ctl/control.sock");
    let config = dir.join("nyx.toml");
    std::fs::write(
        &config,
        format!(
            "data_dir = \"{}\"\n[control]\nsocket = \"{}\"\n[socks]\nenabled = false\n",
            dir.join("data").display(),
            socket.display()
        ),
    )
    .unwrap();
    let mut cmd = support::daemon_command();
    cmd.arg("--config").arg(&config);
    let daemon = DaemonProcess::spawn(cmd);
    // Open the way to the socket for everyone: only the credential check remains.
    for (p, m) in [(&dir, 0o755), (&dir.join("ctl"), 0o755), (&socket, 0o777)] {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(m)).unwrap();
    }
    let nobody = Command::new(env!("CARGO_BIN_EXE_nyx"))
        .arg("--control")
        .arg(&socket)
        .arg("status")
        .uid(65534)
        .gid(65534)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&nobody.stdout);
    let stderr = String::from_utf8_lossy(&nobody.stderr);
    assert!(!nobody.status.success(), "another uid was served: {stdout}");
    // The socket was reachable (modes open): the daemon hung up after the connect.
    assert!(!stderr.contains("ermission denied"), "{stderr}");
    eprintln!("refused client saw: {stderr}");
    assert!(!stdout.contains(&daemon.ready.node_id));
    // The owner is still served.
    assert!(nyx(&socket, &["status"]).contains(&daemon.ready.node_id));
    assert_eq!(daemon.stop_with("-TERM"), Some(0));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A daemon that pins authorities uses the relays of their consensus, and none once it
/// expires, while it keeps running.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relays_come_from_the_pinned_consensus_and_go_when_it_expires() {
    use nyx_crypto::identity::IdentityKey;
    use nyx_overlay::directory::consensus::{
        ConsensusBody, Period, UnverifiedConsensus, sign_body, vote_status,
    };
    use nyx_overlay::directory::testnet::{self, TestnetSpec};

    let dir = temp_dir("consensus");
    let data = dir.join("data");
    let now = nyx_node::unix_now();
    let (_, directory) = testnet::generate(&TestnetSpec::default(), now - 60).unwrap();
    std::fs::create_dir_all(&data).unwrap();
    std::fs::write(data.join("directory.txt"), directory.to_text()).unwrap();
    let authorities: Vec<IdentityKey> = (0..3)
        .map(|i| IdentityKey::from_seed(&[0x70 + i; 32]))
        .collect();
    // Valid from a minute ago for 15 seconds more (the daemon must start well within them).
    let body = ConsensusBody {
        period: Period {
            valid_after: now - 60,
            fresh_until: now + 5,
            valid_until: now + 15,
        },
        relays: directory.iter().map(vote_status).collect(),
    };
    let signatures = authorities[..2]
        .iter()
        .map(|a| sign_body(&body, a))
        .collect();
    std::fs::write(
        data.join("consensus.bin"),
        UnverifiedConsensus::new(body, signatures).encode(),
    )
    .unwrap();
    let pinned: Vec<String> = authorities
        .iter()
        .map(|a| {
            format!(
                "\"{}\"",
                nyx_daemon::daemon::trust::authority_hex(&a.public())
            )
        })
        .collect();
    let config = dir.join("nyx.toml");
    std::fs::write(
        &config,
        format!(
            "data_dir = \"{}\"\n[socks]\nenabled = false\n[directory]\nauthorities = [{}]\n",
            data.display(),
            pinned.join(", ")
        ),
    )
    .unwrap();
    let mut cmd = support::daemon_command();
    cmd.arg("--config").arg(&config);
    let daemon = DaemonProcess::spawn(cmd);
    let mut c = nyx_daemon::control::connect(Path::new(&daemon.ready.control))
        .await
        .unwrap();
    let relays = |info: pb::NodeInfo| info.relays;
    let info = c
        .get_info(pb::GetInfoRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(relays(info), 5, "the consensus lists the five relays");
    // Liveness bound only: the consensus ends within seconds.
    let mut gone = false;
    for _ in 0..400 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let info = c
            .get_info(pb::GetInfoRequest {})
            .await
            .unwrap()
            .into_inner();
        if relays(info) == 0 {
            gone = true;
            break;
        }
    }
    assert!(gone, "the expired consensus's relays are still used");
    assert_eq!(daemon.stop_with("-TERM"), Some(0));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A daemon whose onion keys rotate every 10 s (`relay.onion_key_period`) makes new ones while
/// it runs, says so on the control API, and publishes its descriptor again with them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn onion_keys_rotate_while_the_daemon_runs_and_events_say_so() {
    let dir = temp_dir("rotation-events");
    let config = dir.join("nyx.toml");
    std::fs::write(
        &config,
        format!(
            "data_dir = \"{}\"\n[socks]\nenabled = false\n\
             [relay]\nenabled = true\nonion_key_period = \"10s\"\nonion_key_overlap = \"5s\"\n",
            dir.join("data").display()
        ),
    )
    .unwrap();
    let mut cmd = support::daemon_command();
    cmd.arg("--config").arg(&config);
    let daemon = DaemonProcess::spawn(cmd);
    let descriptor = Path::new(&daemon.ready.data_dir).join("descriptor.txt");
    let first = std::fs::read_to_string(&descriptor).unwrap();
    let mut c = nyx_daemon::control::connect(Path::new(&daemon.ready.control))
        .await
        .unwrap();
    let mut events = c
        .subscribe_events(pb::SubscribeEventsRequest {})
        .await
        .unwrap()
        .into_inner();
    // The first new key comes 5 s after start (10 s period, 5 s overlap); a bound for
    // liveness only.
    let rotated = loop {
        let event = tokio::time::timeout(Duration::from_secs(60), events.message())
            .await
            .expect("no ONION_KEYS_ROTATED within 60 s")
            .unwrap()
            .unwrap();
        if event.kind() == pb::EventKind::OnionKeysRotated {
            break event;
        }
    };
    assert_eq!(rotated.count, 2, "the key in use and its successor");
    // The descriptor on disk was signed again with the new certificates.
    let mut again = first.clone();
    for _ in 0..100 {
        again = std::fs::read_to_string(&descriptor).unwrap();
        if again != first {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_ne!(again, first, "the descriptor was not published again");
    assert_eq!(daemon.stop_with("-TERM"), Some(0));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A relay daemon whose link key rotates every 10 s (`relay.link_key_period`) makes a new one
/// while it runs, keeps the previous one on disk for the overlap (5 s) and then erases it,
/// publishes its descriptor again with the new key, and after a restart still uses the key
/// it last made.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn link_keys_rotate_overlap_and_survive_a_restart() {
    use nyx_overlay::directory::Directory;
    let dir = temp_dir("link-rotation");
    let data = dir.join("data");
    let config = dir.join("nyx.toml");
    std::fs::write(
        &config,
        format!(
            "data_dir = \"{}\"\ntransport = \"udp\"\n[socks]\nenabled = false\n\
             [relay]\nenabled = true\nlink_key_period = \"10s\"\nlink_key_overlap = \"5s\"\n",
            data.display()
        ),
    )
    .unwrap();
    let published_key = || {
        let text = std::fs::read_to_string(data.join("descriptor.txt")).unwrap();
        let (directory, _) = Directory::parse(&text, nyx_node::unix_now()).unwrap();
        directory.iter().next().unwrap().link_key().clone()
    };
    let spawn = || {
        let mut cmd = support::daemon_command();
        cmd.arg("--config").arg(&config);
        DaemonProcess::spawn(cmd)
    };
    let daemon = spawn();
    let first = published_key();
    let first_file = std::fs::read(data.join("keys/link.key")).unwrap();
    let previous = data.join("keys/link.prev.key");
    // Bounds for liveness only: the rotation is due 10 s after the key was made.
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while !previous.exists() {
        assert!(
            std::time::Instant::now() < deadline,
            "no rotation within 60 s"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        std::fs::read(&previous).unwrap(),
        first_file,
        "the previous key is the first one"
    );
    // The new key replaces link.key just after the previous name was made.
    while std::fs::read(data.join("keys/link.key")).unwrap() == first_file {
        assert!(std::time::Instant::now() < deadline, "no new link key");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let mut second = first.clone();
    while second == first {
        assert!(
            std::time::Instant::now() < deadline,
            "descriptor not republished"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
        second = published_key();
    }
    // The overlap ends: the previous key is erased.
    while previous.exists() {
        assert!(
            std::time::Instant::now() < deadline,
            "previous key kept past 60 s"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(daemon.stop_with("-TERM"), Some(0));
    // A restart publishes the key on disk (or, if one fell due meanwhile, its successor).
    let on_disk = || {
        nyx_crypto::keyfile::read_hybrid(&data.join("keys/link.key"))
            .unwrap()
            .public()
            .clone()
    };
    let before = on_disk();
    assert_eq!(before, second, "the published key is the one on disk");
    let again = spawn();
    let restarted = published_key();
    assert!(
        restarted == before || restarted == on_disk(),
        "a restart published a key that is not on disk"
    );
    assert_eq!(again.stop_with("-TERM"), Some(0));
    std::fs::remove_dir_all(&dir).unwrap();
}
