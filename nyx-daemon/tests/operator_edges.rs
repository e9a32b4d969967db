//! The edges an operator meets, with the built binaries: the CLI behind a pipe whose reader
//! is gone, gRPC health that follows the node's readiness, `--check-config` that binds
//! every listener and shows every effective value, and the warning for a listener beyond
//! loopback.
#![allow(clippy::unwrap_used)]

mod support;

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use nyx_daemon::control::pb;
use support::{DaemonProcess, temp_dir};
use tonic_health::pb::health_check_response::ServingStatus;

/// Run `cmd` with its stdout on a pipe whose read end is already closed.
fn with_closed_stdout(mut cmd: Command) -> Output {
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    cmd.stdout(writer).stderr(Stdio::piped()).output().unwrap()
}

fn daemon_cmd(config: &Path) -> Command {
    let mut cmd = support::daemon_command();
    cmd.arg("--config").arg(config);
    cmd
}

#[test]
fn a_reader_that_went_away_ends_the_cli_quietly() {
    let dir = temp_dir("closed-pipe");
    let config = support::loopback_config(&dir);
    // The daemon's own printing (before it runs: a running one fails the check).
    let mut cmd = daemon_cmd(&config);
    cmd.arg("--check-config");
    let out = with_closed_stdout(cmd);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(stderr.is_empty(), "{stderr}");
    let daemon = DaemonProcess::spawn(daemon_cmd(&config));
    let calls: [&[&str]; 7] = [
        &["--json", "metrics"],
        &["metrics"],
        &["status"],
        &["--json", "status"],
        &["config", "show"],
        &["streams"],
        &["log-level", "info"],
    ];
    for args in calls {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_nyx"));
        cmd.arg("--control").arg(&daemon.ready.control).args(args);
        let out = with_closed_stdout(cmd);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "nyx {args:?}: {stderr}");
        assert!(stderr.is_empty(), "nyx {args:?} says: {stderr}");
    }
    assert_eq!(daemon.stop_with("-TERM"), Some(0));
    std::fs::remove_dir_all(&dir).unwrap();
}

async fn health(channel: tonic::transport::Channel, service: &str) -> ServingStatus {
    tonic_health::pb::health_client::HealthClient::new(channel)
        .check(tonic_health::pb::HealthCheckRequest {
            service: service.into(),
        })
        .await
        .unwrap()
        .into_inner()
        .status()
}

/// Both the server (`""`) and the control service, once they agree on `want` (at most
/// 10 s: a reload is applied in the background).
async fn wait_for_health(channel: &tonic::transport::Channel, want: ServingStatus) {
    for _ in 0..100 {
        if health(channel.clone(), "").await == want
            && health(channel.clone(), "nyx.control.v1.Control").await == want
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("health did not become {want:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_is_not_serving_until_the_node_can_build_circuits() {
    use nyx_overlay::directory::testnet::{self, TestnetSpec};
    let dir = temp_dir("health");
    let data = dir.join("data");
    let config = dir.join("nyx.toml");
    std::fs::write(
        &config,
        format!(
            "data_dir = \"{}\"\n[socks]\nenabled = false\n",
            data.display()
        ),
    )
    .unwrap();
    let daemon = DaemonProcess::spawn(daemon_cmd(&config));
    let socket = Path::new(&daemon.ready.control).to_owned();
    let channel = support::channel(&socket).await;
    let mut c = nyx_daemon::control::connect(&socket).await.unwrap();
    let ready = |info: pb::NodeInfo| info.ready;
    // No relays yet: not ready, and health says so from the first answer.
    assert!(!ready(
        c.get_info(pb::GetInfoRequest {})
            .await
            .unwrap()
            .into_inner()
    ));
    assert_eq!(health(channel.clone(), "").await, ServingStatus::NotServing);
    assert_eq!(
        health(channel.clone(), "nyx.control.v1.Control").await,
        ServingStatus::NotServing
    );
    // Five relays in the directory and a reload: ready, SERVING.
    let now = nyx_node::unix_now();
    let (_, directory) = testnet::generate(&TestnetSpec::default(), now - 60).unwrap();
    std::fs::write(data.join("directory.txt"), directory.to_text()).unwrap();
    daemon.signal("-HUP");
    wait_for_health(&channel, ServingStatus::Serving).await;
    assert!(ready(
        c.get_info(pb::GetInfoRequest {})
            .await
            .unwrap()
            .into_inner()
    ));
    // The relays gone again: NOT_SERVING.
    std::fs::remove_file(data.join("directory.txt")).unwrap();
    c.reload_config(pb::ReloadConfigRequest {}).await.unwrap();
    wait_for_health(&channel, ServingStatus::NotServing).await;
    assert!(!ready(
        c.get_info(pb::GetInfoRequest {})
            .await
            .unwrap()
            .into_inner()
    ));
    assert_eq!(daemon.stop_with("-TERM"), Some(0));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn check_config_binds_every_listener_and_shows_every_effective_value() {
    let dir = temp_dir("check-config");
    let config = dir.join("nyx.toml");
    // Embedded defaults but the SOCKS port: the data dir comes from XDG_STATE_HOME.
    std::fs::write(&config, "[socks]\nlisten = \"127.0.0.1:0\"\n").unwrap();
    let check = |config: &Path| {
        let mut cmd = daemon_cmd(config);
        cmd.arg("--check-config").env("XDG_STATE_HOME", &dir);
        cmd.output().unwrap()
    };
    let out = check(&config);
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let data = dir.join("nyx");
    for line in [
        format!("data_dir = \"{}\"", data.display()),
        format!("socket = \"{}\"", data.join("control.sock").display()),
        "listen = [\"0.0.0.0:0\"]".to_owned(),
        "timestamps = \"seconds\"".to_owned(),
    ] {
        assert!(shown.lines().any(|l| l == line), "{line} not in {shown}");
    }
    assert!(!data.exists(), "a check creates no data directory");

    // The OTEL_* variables fill in the telemetry keys the file leaves unset, and one the
    // daemon cannot honour fails the check, named.
    let mut cmd = daemon_cmd(&config);
    cmd.arg("--check-config")
        .env("XDG_STATE_HOME", &dir)
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4317")
        .env("OTEL_SERVICE_NAME", "relay-check")
        .env_remove("OTEL_SDK_DISABLED");
    let out = cmd.output().unwrap();
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for line in [
        "otlp_endpoint = \"http://127.0.0.1:4317\"",
        "service_name = \"relay-check\"",
        "export_interval = \"10s\"",
    ] {
        assert!(shown.lines().any(|l| l == line), "{line} not in {shown}");
    }
    let out = cmd
        .env("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("OTEL_EXPORTER_OTLP_PROTOCOL"), "{stderr}");

    // A SOCKS port in use: the check fails with the error the start then fails with.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap();
    std::fs::write(&config, format!("[socks]\nlisten = \"{addr}\"\n")).unwrap();
    let expected = format!("nyx-daemon: cannot listen on {addr} for SOCKS5: ");
    let out = check(&config);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains(&expected), "{stderr}");
    let mut start = daemon_cmd(&config);
    let out = start.env("XDG_STATE_HOME", &dir).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains(&expected), "{stderr}");
    drop(taken);

    // A daemon on the control socket already.
    std::fs::write(&config, "[socks]\nenabled = false\n").unwrap();
    let mut cmd = daemon_cmd(&config);
    cmd.env("XDG_STATE_HOME", &dir)
        .env_remove("STATE_DIRECTORY");
    let daemon = DaemonProcess::spawn(cmd);
    let out = check(&config);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("another daemon is already listening"),
        "{stderr}"
    );
    assert_eq!(daemon.stop_with("-TERM"), Some(0));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn listeners_beyond_loopback_are_warned_about() {
    let dir = temp_dir("open-listeners");
    let config = dir.join("nyx.toml");
    let write = |socks: &str, metrics: &str| {
        let text = format!(
            "data_dir = \"{}\"\n[socks]\nlisten = \"{socks}\"\n\
             [telemetry]\nprometheus_listen = \"{metrics}\"\n",
            dir.join("data").display()
        );
        std::fs::write(&config, text).unwrap();
    };
    let log_of_start = |name: &str| {
        let log = dir.join(name);
        let mut cmd = daemon_cmd(&config);
        cmd.stderr(std::fs::File::create(&log).unwrap());
        let daemon = DaemonProcess::spawn(cmd);
        assert_eq!(daemon.stop_with("-TERM"), Some(0));
        std::fs::read_to_string(log).unwrap()
    };
    write("0.0.0.0:0", "0.0.0.0:0");
    let log = log_of_start("open.log");
    let warnings: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("WARN") && l.contains("not a loopback address"))
        .collect();
    assert_eq!(warnings.len(), 2, "{log}");
    assert!(warnings[0].contains("key=\"socks.listen\"") && warnings[0].contains("0.0.0.0:0"));
    assert!(
        warnings[1].contains("key=\"telemetry.prometheus_listen\""),
        "{log}"
    );
    let mut cmd = daemon_cmd(&config);
    let out = cmd.arg("--check-config").output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("warning: socks.listen = 0.0.0.0:0: not a loopback address"),
        "{stderr}"
    );
    assert!(
        stderr.contains("warning: telemetry.prometheus_listen"),
        "{stderr}"
    );
    // On loopback: not a word.
    write("127.0.0.1:0", "[::1]:0");
    let log = log_of_start("loopback.log");
    assert!(log.contains("nyx-daemon started"), "{log}");
    assert!(!log.contains("not a loopback address"), "{log}");
    std::fs::remove_dir_all(&dir).unwrap();
}
