//! Helpers for tests that run the built binaries: a daemon process that reports when it is
//! ready, signals, the CLI, raw HTTP, gRPC channels and reflection queries.
#![allow(dead_code, clippy::unwrap_used)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use nyx_daemon::daemon::{READY_PREFIX, Ready};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tonic::transport::Channel;

/// A fresh directory for one test (mode 0700, so control sockets may live in it).
pub(crate) fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("nyx-test-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    dir
}

/// The built `nyx-daemon`, allowed to run as root (`NYX_ALLOW_ROOT`): CI runs tests as
/// root. tests/service.rs checks the refusal itself.
pub(crate) fn daemon_command() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_nyx-daemon"));
    cmd.env("NYX_ALLOW_ROOT", "true");
    cmd
}

/// `dir/nyx.toml` for a client daemon with its data in `dir/data` and SOCKS on a free
/// loopback port; its path.
pub(crate) fn loopback_config(dir: &Path) -> PathBuf {
    let config = dir.join("nyx.toml");
    std::fs::write(
        &config,
        format!(
            "data_dir = \"{}\"\n[socks]\nlisten = \"127.0.0.1:0\"\n",
            dir.join("data").display()
        ),
    )
    .unwrap();
    config
}

/// A running `nyx-daemon` (killed if the test fails before stopping it).
pub(crate) struct DaemonProcess {
    pub(crate) child: Child,
    pub(crate) ready: Ready,
}

impl DaemonProcess {
    /// Start `cmd` and wait (at most 60 s) for its ready line. Its stderr goes where `cmd`
    /// says (the test's own by default).
    pub(crate) fn spawn(mut cmd: Command) -> Self {
        let mut child = cmd.stdout(Stdio::piped()).spawn().unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut lines = BufReader::new(stdout).lines();
            while let Some(Ok(line)) = lines.next() {
                if let Some(json) = line.strip_prefix(READY_PREFIX) {
                    let _ = tx.send(serde_json::from_str::<Ready>(json).unwrap());
                }
            }
        });
        match rx.recv_timeout(Duration::from_secs(60)) {
            Ok(ready) => DaemonProcess { child, ready },
            Err(_) => {
                let _ = child.kill();
                panic!("the daemon did not report ready: {:?}", child.wait());
            }
        }
    }

    /// Send a signal (`-HUP`, `-TERM`, `-INT`) with kill(1).
    pub(crate) fn signal(&self, sig: &str) {
        let ok = Command::new("kill")
            .arg(sig)
            .arg(self.child.id().to_string())
            .status()
            .unwrap()
            .success();
        assert!(ok, "kill {sig} failed");
    }

    /// Signal, then wait for the exit code (at most 30 s).
    pub(crate) fn stop_with(self, sig: &str) -> Option<i32> {
        self.signal(sig);
        self.wait()
    }

    /// Wait for the exit code (at most 30 s, then kill and fail).
    pub(crate) fn wait(mut self) -> Option<i32> {
        for _ in 0..300 {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status.code();
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = self.child.kill();
        panic!("the daemon did not stop within 30 s");
    }
}

impl Drop for DaemonProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Run `nyx --control <socket> <args>` and return its stdout (it must succeed).
pub(crate) fn nyx(socket: &Path, args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_nyx"))
        .arg("--control")
        .arg(socket)
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "nyx {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// A raw HTTP/1.1 GET; the whole response as text.
pub(crate) async fn http_get(addr: &str, path: &str) -> String {
    let mut conn = tokio::net::TcpStream::connect(addr).await.unwrap();
    let req = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    conn.write_all(req.as_bytes()).await.unwrap();
    let mut body = Vec::new();
    conn.read_to_end(&mut body).await.unwrap();
    String::from_utf8_lossy(&body).into_owned()
}

/// A gRPC channel over the control socket.
pub(crate) async fn channel(socket: &Path) -> Channel {
    let path = socket.to_owned();
    tonic::transport::Endpoint::from_static("http://nyx.control.local")
        .connect_with_connector(tower::service_fn(move |_: tonic::transport::Uri| {
            let path = path.clone();
            async move {
                tokio::net::UnixStream::connect(path)
                    .await
                    .map(hyper_util::rt::TokioIo::new)
            }
        }))
        .await
        .unwrap()
}

/// `ListServices` through one version of the reflection API.
macro_rules! list_services {
    ($version:ident, $channel:expr) => {{
        use tonic_reflection::pb::$version::ServerReflectionRequest;
        use tonic_reflection::pb::$version::server_reflection_client::ServerReflectionClient;
        use tonic_reflection::pb::$version::server_reflection_request::MessageRequest;
        use tonic_reflection::pb::$version::server_reflection_response::MessageResponse;
        let mut client = ServerReflectionClient::new($channel);
        let req = ServerReflectionRequest {
            host: String::new(),
            message_request: Some(MessageRequest::ListServices(String::new())),
        };
        let mut responses = client
            .server_reflection_info(tokio_stream::iter(vec![req]))
            .await
            .unwrap()
            .into_inner();
        let first = responses.message().await.unwrap().unwrap();
        match first.message_response {
            Some(MessageResponse::ListServicesResponse(list)) => {
                list.service.into_iter().map(|s| s.name).collect()
            }
            other => panic!("unexpected reflection answer {other:?}"),
        }
    }};
}

/// Service names listed by reflection v1.
pub(crate) async fn reflection_services_v1(channel: Channel) -> Vec<String> {
    list_services!(v1, channel)
}

/// Service names listed by reflection v1alpha.
pub(crate) async fn reflection_services_v1alpha(channel: Channel) -> Vec<String> {
    list_services!(v1alpha, channel)
}
