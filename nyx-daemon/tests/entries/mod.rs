//! For tests/socks.rs: the network its tests share ([`fixture`]), and clients of the
//! entries written from the protocols' specifications independently of the daemon's
//! codecs: SOCKS5 (in `fixture`), SOCKS4 and SOCKS4a, HTTP CONNECT, curl, and headless
//! Chromium when it is installed.
#![allow(clippy::unwrap_used)]

pub(crate) mod fixture;

use std::net::SocketAddr;
use std::process::Command;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// A SOCKS4 CONNECT (command 1) or BIND (2) request to `ip:port`, or with `host` the SOCKS4a
/// form (address 0.0.0.1 and the name after the user id).
pub(crate) fn socks4_request(
    cmd: u8,
    ip: [u8; 4],
    port: u16,
    userid: &str,
    host: Option<&str>,
) -> Vec<u8> {
    let mut v = vec![4, cmd];
    v.extend_from_slice(&port.to_be_bytes());
    v.extend_from_slice(&if host.is_some() { [0, 0, 0, 1] } else { ip });
    v.extend_from_slice(userid.as_bytes());
    v.push(0);
    if let Some(host) = host {
        v.extend_from_slice(host.as_bytes());
        v.push(0);
    }
    v
}

/// Send a SOCKS4 `request` followed by `early` bytes in one write; read the 8-byte reply.
/// Returns the connection and the reply code (90 granted, 91 refused).
pub(crate) async fn socks4_open(
    proxy: SocketAddr,
    request: &[u8],
    early: &[u8],
) -> (TcpStream, u8) {
    let mut conn = TcpStream::connect(proxy).await.unwrap();
    conn.write_all(&[request, early].concat()).await.unwrap();
    let mut reply = [0u8; 8];
    conn.read_exact(&mut reply).await.unwrap();
    assert_eq!(reply[0], 0, "reply version {reply:?}");
    (conn, reply[1])
}

/// Send `CONNECT target HTTP/1.1` (with a `Host` header) followed by `early` bytes in one
/// write, and read the response head (byte by byte: what follows is the tunnel's).
/// Returns the connection and the head.
pub(crate) async fn connect_open(
    proxy: SocketAddr,
    target: &str,
    early: &[u8],
) -> (TcpStream, String) {
    let mut conn = TcpStream::connect(proxy).await.unwrap();
    let head = format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n");
    conn.write_all(&[head.as_bytes(), early].concat())
        .await
        .unwrap();
    let mut response = Vec::new();
    while !response.ends_with(b"\r\n\r\n") {
        let mut byte = [0u8; 1];
        match conn.read(&mut byte).await.unwrap() {
            0 => break,
            _ => response.push(byte[0]),
        }
    }
    (conn, String::from_utf8_lossy(&response).into_owned())
}

/// Run curl with `args` (the proxy options) on `url`; its output, which must be a success.
pub(crate) fn curl(args: &[&str], url: &str) -> Vec<u8> {
    let out = Command::new("curl")
        .args(["--silent", "--show-error", "--fail", "--max-time", "200"])
        .args(args)
        .arg(url)
        .arg("--output")
        .arg("-")
        .output();
    let out = match out {
        Ok(out) => out,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            panic!("this test needs curl on PATH (the CI script installs it): {e}")
        }
        Err(e) => panic!("cannot run curl: {e}"),
    };
    assert!(
        out.status.success(),
        "curl {args:?} failed: {:?} {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// The first of the usual Chromium binaries on PATH, if any.
pub(crate) fn chromium() -> Option<String> {
    let path = std::env::var_os("PATH")?;
    [
        "chromium",
        "chromium-browser",
        "google-chrome",
        "headless_shell",
    ]
    .into_iter()
    .find(|name| std::env::split_paths(&path).any(|dir| dir.join(name).is_file()))
    .map(str::to_owned)
}

/// Run headless `chromium` with `proxy` as its HTTP proxy (loopback included: Chromium
/// bypasses proxies for loopback unless told) on `url`, for at most `limit`.
pub(crate) fn run_chromium(chromium: &str, proxy: SocketAddr, url: &str, limit: Duration) {
    let mut child = Command::new(chromium)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--proxy-bypass-list=<-loopback>",
        ])
        .arg(format!("--proxy-server=http://{proxy}"))
        .arg(format!(
            "--user-data-dir={}",
            std::env::temp_dir()
                .join(format!("nyx-chromium-{}", std::process::id()))
                .display()
        ))
        .arg("--dump-dom")
        .arg(url)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let started = std::time::Instant::now();
    while child.try_wait().unwrap().is_none() && started.elapsed() < limit {
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = child.kill();
    let _ = child.wait();
}
