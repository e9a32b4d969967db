//! A real Prometheus server (Debian's `prometheus`, which `.ci/run` installs) scrapes a
//! running daemon every second; its HTTP API must report the target up and the series
//! present. Skipped, with a message, when `prometheus` is not on the PATH.

use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::support::{self, DaemonProcess};

/// How long Prometheus gets to start and scrape. It takes about 5.5 s: Prometheus 2.42
/// hands discovered targets (static ones too) to its scrape loop every 5 s at the most.
const DEADLINE: Duration = Duration::from_secs(20);

/// Kills the Prometheus server when the test ends, passed or not.
struct Prometheus(Child);

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A port free on 127.0.0.1 now (Prometheus does not report the port it got for `:0`).
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// `GET path` over HTTP/1.0 (so the answer is not chunked); the body, if the status is 200.
async fn get(addr: &str, path: &str) -> Option<String> {
    let mut conn = tokio::net::TcpStream::connect(addr).await.ok()?;
    let req = format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n");
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    conn.write_all(req.as_bytes()).await.ok()?;
    let mut raw = Vec::new();
    conn.read_to_end(&mut raw).await.ok()?;
    let text = String::from_utf8(raw).ok()?;
    let (head, body) = text.split_once("\r\n\r\n")?;
    let ok = head.starts_with("HTTP/1.0 200") || head.starts_with("HTTP/1.1 200");
    ok.then(|| body.to_owned())
}

/// An instant query's result vector (empty while the series is not there yet).
async fn query(web: &str, promql: &str) -> Vec<Value> {
    let path = format!("/api/v1/query?query={}", encode(promql));
    let Some(body) = get(web, &path).await else {
        return Vec::new();
    };
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["status"], "success", "{body}");
    v["data"]["result"].as_array().cloned().unwrap_or_default()
}

/// Percent-encoding for a query string value.
fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'_' | b'-' | b'.' => (b as char).to_string(),
            b => format!("%{b:02X}"),
        })
        .collect()
}

fn start_prometheus(dir: &Path, target: &str, web: &str) -> Option<Prometheus> {
    let config = dir.join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n\
             scrape_configs:\n  - job_name: nyx\n    static_configs:\n      \
             - targets: ['{target}']\n"
        ),
    )
    .unwrap();
    let child = Command::new("prometheus")
        .arg(format!("--config.file={}", config.display()))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.join("tsdb").display()
        ))
        .arg(format!("--web.listen-address={web}"))
        .arg("--log.level=warn")
        .stdout(Stdio::null())
        .spawn();
    match child {
        Ok(child) => Some(Prometheus(child)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => panic!("cannot start prometheus: {e}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prometheus_server_scrapes_the_daemon() {
    let dir = support::temp_dir("scrape");
    let prometheus_dir = dir.join("prometheus");
    std::fs::create_dir_all(&prometheus_dir).unwrap();
    // Prometheus starts first, on ports chosen now: its 5 s wait overlaps the daemon's start.
    let (target, web) = (
        format!("127.0.0.1:{}", free_port()),
        format!("127.0.0.1:{}", free_port()),
    );
    let started = Instant::now();
    let Some(_prometheus) = start_prometheus(&prometheus_dir, &target, &web) else {
        eprintln!("skipped: `prometheus` is not on the PATH (apt-get install prometheus)");
        return;
    };
    let config = dir.join("nyx.toml");
    std::fs::write(
        &config,
        format!(
            "data_dir = \"{}\"\n[socks]\nlisten = \"127.0.0.1:0\"\n\
             [telemetry]\nprometheus_listen = \"{target}\"\n",
            dir.join("data").display()
        ),
    )
    .unwrap();
    let mut cmd = support::daemon_command();
    cmd.arg("--config").arg(&config);
    let daemon = DaemonProcess::spawn(cmd);
    assert_eq!(daemon.ready.prometheus, target);

    // The target is scraped and healthy.
    let mut health = String::new();
    while started.elapsed() < DEADLINE {
        if let Some(body) = get(&web, "/api/v1/targets?state=active").await {
            let v: Value = serde_json::from_str(&body).unwrap();
            if let Some(t) = v["data"]["activeTargets"]
                .as_array()
                .and_then(|a| a.first())
            {
                health = format!("{} {}", t["health"], t["lastError"]);
                if t["health"] == "up" {
                    assert_eq!(t["lastError"], "", "{body}");
                    assert_eq!(t["scrapeUrl"], format!("http://{target}/metrics"));
                    break;
                }
                // Still "unknown", or "down" with the reason (a malformed exposition
                // would say so here until the deadline).
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        health.starts_with("\"up\""),
        "not scraped in time: {health}"
    );

    // The series exist, with their labels, as Prometheus parsed them.
    let info = query(&web, "nyx_build_info").await;
    assert_eq!(info.len(), 1, "{info:?}");
    assert_eq!(info[0]["metric"]["version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(info[0]["value"][1], "1");
    for (promql, series) in [
        ("up{job=\"nyx\"} == 1", 1),
        ("process_resident_memory_bytes > 1000000", 1),
        ("process_open_fds > 0", 1),
        ("process_start_time_seconds > 0", 1),
        ("nyx_circuit_build_seconds_bucket", LATENCY_BUCKETS + 1),
        ("nyx_stream_bytes_count", 2),
        ("nyx_stream_first_byte_seconds_sum", 1),
        ("nyx_socks_failed_total", 8),
        // The daemon runs QUIC by default.
        ("nyx_quic_connection_attempts_total", 4),
        ("nyx_cells_dropped_total", 8),
    ] {
        let result = query(&web, promql).await;
        assert_eq!(result.len(), series, "{promql}: {result:?}");
    }
    eprintln!("scraped and queried in {:?}", started.elapsed());
    assert_eq!(daemon.stop_with("-TERM"), Some(0));
    drop(_prometheus);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Buckets of circuit build times, `+Inf` aside.
const LATENCY_BUCKETS: usize = nyx_daemon::telemetry::histogram::LATENCY_SECONDS.len();
