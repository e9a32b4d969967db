//! `nyx testnet` as a newcomer runs it: five daemon processes on loopback, then curl
//! through the SOCKS5 entry, streams and circuits through the control API and the CLI,
//! events, and a clean stop on SIGINT.
#![allow(clippy::unwrap_used)]

#[path = "support/collector.rs"]
mod collector;
mod support;

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use nyx_daemon::control::pb;
use nyx_node::testing::WebServer;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// What `nyx testnet --json` prints once the network is up.
#[derive(Debug, serde::Deserialize)]
struct Summary {
    nodes: usize,
    socks: String,
    http_connect: String,
    control: String,
    http: String,
    dir: String,
}

fn random_bytes(n: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 32) as u8
        })
        .collect()
}

fn body_of(response: &[u8]) -> &[u8] {
    let at = response
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("an HTTP header");
    &response[at + 4..]
}

fn curl(socks: &str, url: &str, extra: &[&str]) -> Vec<u8> {
    curl_via(&["--socks5-hostname", socks], url, extra)
}

/// curl with `proxy` options (`--socks5-hostname ADDR`, `--proxytunnel --proxy URL`).
fn curl_via(proxy: &[&str], url: &str, extra: &[&str]) -> Vec<u8> {
    let out = Command::new("curl")
        .args(["--silent", "--show-error", "--max-time", "60"])
        .args(proxy)
        .args(extra)
        .arg(url)
        .output()
        .expect("curl must be installed (.ci/run installs it)");
    assert!(
        out.status.success(),
        "curl {url}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// Sends SIGTERM to the testnet when the test ends, so a failed assertion does not leave its
/// daemons running (after a clean stop the signal goes nowhere).
struct StopOnDrop(u32);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(self.0.to_string())
            .stderr(Stdio::null())
            .status();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn testnet_serves_curl_streams_circuits_and_stops_cleanly() {
    // Every daemon exports its spans to this collector, told so by the standard variables.
    let collector = collector::Collector::start("127.0.0.1:0").await;
    // As root (CI runs tests as root) the testnet itself lets its daemons run as root.
    let mut testnet = Command::new(env!("CARGO_BIN_EXE_nyx"))
        .env_remove("NYX_ALLOW_ROOT")
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", collector.endpoint())
        .env(
            "OTEL_RESOURCE_ATTRIBUTES",
            "deployment.environment=nyx-testnet",
        )
        .env_remove("OTEL_SDK_DISABLED")
        .args([
            "--json",
            "testnet",
            "--nodes",
            "5",
            "--socks-port",
            "0",
            "--http-connect-port",
            "0",
            "--http-port",
            "0",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let _stop_on_failure = StopOnDrop(testnet.id());
    let stdout = testnet.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut lines = BufReader::new(stdout).lines();
        if let Some(Ok(line)) = lines.next() {
            let _ = tx.send(line);
        }
        for _ in lines {}
    });
    let line = match rx.recv_timeout(Duration::from_secs(180)) {
        Ok(line) => line,
        Err(_) => {
            let _ = testnet.kill();
            panic!("the testnet did not come up");
        }
    };
    let s: Summary = serde_json::from_str(&line).unwrap();
    assert_eq!(s.nodes, 5);
    let control = PathBuf::from(&s.control);

    // curl through SOCKS5, byte-exact, with and without credentials; the demo page.
    let file = random_bytes(3 << 20, 7);
    let web = WebServer::start(vec![("/file".into(), file.clone())])
        .await
        .unwrap();
    let web = web.addr().to_string();
    let url = format!("http://{web}/file");
    let (socks, url2) = (s.socks.clone(), url.clone());
    let got = tokio::task::spawn_blocking(move || curl(&socks, &url2, &[]))
        .await
        .unwrap();
    assert!(got == file, "curl got {} bytes, not the file", got.len());
    let (socks, url2) = (s.socks.clone(), url.clone());
    let got = tokio::task::spawn_blocking(move || curl(&socks, &url2, &["--proxy-user", "u:p"]))
        .await
        .unwrap();
    assert!(got == file);
    let (socks, demo) = (s.socks.clone(), format!("http://{}/", s.http));
    let page = tokio::task::spawn_blocking(move || curl(&socks, &demo, &[]))
        .await
        .unwrap();
    assert!(String::from_utf8_lossy(&page).contains("Hello from the NyxNet testnet"));
    // The HTTP CONNECT entry of node 1, as the banner suggests using it.
    let tunnel = format!("http://{}", s.http_connect);
    let demo = format!("http://{}/", s.http);
    let page = tokio::task::spawn_blocking(move || {
        curl_via(&["--proxytunnel", "--proxy", &tunnel], &demo, &[])
    })
    .await
    .unwrap();
    assert!(String::from_utf8_lossy(&page).contains("Hello from the NyxNet testnet"));

    let mut c = nyx_daemon::control::connect(&control).await.unwrap();
    let info = c
        .get_info(pb::GetInfoRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(info.relays, 5);
    assert!(info.ready);
    let peers = c
        .list_peers(pb::ListPeersRequest {})
        .await
        .unwrap()
        .into_inner();
    assert!(!peers.peers.is_empty() && peers.peers.iter().all(|p| p.relay));

    // Circuits and their events.
    let mut events = c
        .subscribe_events(pb::SubscribeEventsRequest {})
        .await
        .unwrap()
        .into_inner();
    let built = c
        .build_circuit(pb::BuildCircuitRequest {
            target: web.clone(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(built.hops.len(), 3);
    let event = next_event(&mut events, pb::EventKind::CircuitBuilt).await;
    assert_eq!(event.circuit_id, built.id);
    assert_eq!(event.hops, built.hops);
    let listed = c
        .list_circuits(pb::ListCircuitsRequest {})
        .await
        .unwrap()
        .into_inner();
    assert!(listed.circuits.iter().any(|x| x.id == built.id));
    c.close_circuit(pb::CloseCircuitRequest { id: built.id })
        .await
        .unwrap();
    let event = next_event(&mut events, pb::EventKind::CircuitClosed).await;
    assert_eq!(event.circuit_id, built.id);
    assert_eq!(event.reason, "Requested");
    let listed = c
        .list_circuits(pb::ListCircuitsRequest {})
        .await
        .unwrap()
        .into_inner();
    assert!(listed.circuits.iter().all(|x| x.id != built.id));

    // A stream through the control API: the request, a half-close, the whole answer.
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    tx.send(pb::StreamRequest {
        msg: Some(pb::stream_request::Msg::Open(pb::OpenTarget {
            target: web.clone(),
            isolation: "api".into(),
        })),
    })
    .await
    .unwrap();
    tx.send(pb::StreamRequest {
        msg: Some(pb::stream_request::Msg::Data(
            b"GET /file HTTP/1.0\r\n\r\n".to_vec(),
        )),
    })
    .await
    .unwrap();
    drop(tx);
    let mut answer = c
        .open_stream(tokio_stream::wrappers::ReceiverStream::new(rx))
        .await
        .unwrap()
        .into_inner();
    let first = answer.message().await.unwrap().unwrap();
    let Some(pb::stream_response::Msg::Opened(opened)) = first.msg else {
        panic!("first answer is not `opened`: {first:?}");
    };
    assert_eq!(opened.hops.len(), 3);
    let mut response = Vec::new();
    while let Some(msg) = answer.message().await.unwrap() {
        if let Some(pb::stream_response::Msg::Data(d)) = msg.msg {
            response.extend_from_slice(&d);
        }
    }
    assert!(body_of(&response) == file.as_slice());

    // The histograms saw those circuits and streams: the three curl fetches (each had its
    // first byte before curl ended) and this one, 3 MiB received by each file fetch.
    let mut m = std::collections::HashMap::new();
    for _ in 0..50 {
        m = c
            .get_metrics(pb::GetMetricsRequest {})
            .await
            .unwrap()
            .into_inner()
            .values;
        if m.get("nyx_stream_duration_seconds_count") >= Some(&4.0) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let value = |key: &str| *m.get(key).unwrap_or_else(|| panic!("{key} missing: {m:?}"));
    assert!(value("nyx_circuit_build_seconds_count") >= 3.0, "{m:?}");
    assert!(value("nyx_circuit_build_seconds_sum") > 0.0, "{m:?}");
    assert!(value("nyx_stream_first_byte_seconds_count") >= 4.0, "{m:?}");
    assert!(value("nyx_stream_duration_seconds_count") >= 4.0, "{m:?}");
    let received = value("nyx_stream_bytes_sum{direction=\"received\"}");
    assert!(received >= 3.0 * file.len() as f64, "{m:?}");
    let big = value("nyx_stream_bytes_bucket{direction=\"received\",le=\"4194304\"}")
        - value("nyx_stream_bytes_bucket{direction=\"received\",le=\"524288\"}");
    assert!(
        big >= 3.0,
        "the file fetches are between 512 KiB and 4 MiB: {m:?}"
    );
    let err = c
        .open_stream(tokio_stream::iter(vec![pb::StreamRequest {
            msg: Some(pb::stream_request::Msg::Open(pb::OpenTarget {
                target: "10.9.8.7:80".into(),
                isolation: String::new(),
            })),
        }]))
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::FailedPrecondition, "{err:?}");

    // A target that refuses: curl fails (and the stream_open span says why, below).
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let socks = s.socks.clone();
    let refused = tokio::task::spawn_blocking(move || {
        Command::new("curl")
            .args(["--silent", "--max-time", "60", "--socks5-hostname", &socks])
            .arg(format!("http://{closed}/"))
            .status()
            .unwrap()
    })
    .await
    .unwrap();
    assert!(!refused.success(), "curl to a closed port succeeded");

    // A SOCKS stream is listed while it is open and closed from the API.
    let mut held = socks_connect(&s.socks, &web).await;
    let streams = c
        .list_streams(pb::ListStreamsRequest {})
        .await
        .unwrap()
        .into_inner();
    let listed = streams
        .streams
        .iter()
        .find(|x| x.source == "socks" && x.target == web)
        .expect("the SOCKS stream is listed");
    assert_eq!(listed.hops.len(), 3);
    c.close_stream(pb::CloseStreamRequest { id: listed.id })
        .await
        .unwrap();
    let mut rest = Vec::new();
    let closed = tokio::time::timeout(Duration::from_secs(10), held.read_to_end(&mut rest)).await;
    assert!(closed.is_ok(), "the SOCKS connection is closed");
    let stats = c
        .get_stream_stats(pb::GetStreamStatsRequest {})
        .await
        .unwrap()
        .into_inner();
    assert!(
        stats.packets_sent > 0 && stats.fec_overhead >= 1.0,
        "{stats:?}"
    );

    // The CLI: status, events, circuit build and close, and `nyx connect` piping stdin
    // and stdout.
    let status = support::nyx(&control, &["status"]);
    assert!(status.contains("5 relays"), "{status}");
    // The relays came from the consensus the testnet's three authorities published (node1
    // fetched and saved it), and the client keeps its entry guards on disk for its next
    // start.
    let saved = std::fs::read(Path::new(&s.dir).join("node1/consensus.bin")).unwrap();
    let consensus = nyx_overlay::directory::consensus::UnverifiedConsensus::decode(&saved).unwrap();
    assert_eq!(consensus.body().relays.len(), 5);
    assert!(consensus.signatures().len() >= 2, "signed by a majority");
    let guards = std::fs::read_to_string(Path::new(&s.dir).join("node1/guards.txt")).unwrap();
    assert!(guards.lines().any(|l| l.starts_with("guard ")), "{guards}");
    let mut follow = Command::new(env!("CARGO_BIN_EXE_nyx"))
        .arg("--control")
        .arg(&control)
        .args(["--json", "events"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let follow_out = follow.stdout.take().unwrap();
    let (ev_tx, ev_rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(follow_out).lines().map_while(Result::ok) {
            let _ = ev_tx.send(line);
        }
    });
    // The subscription is in place once the command has connected: wait for it by
    // building until an event arrives (each build emits CIRCUIT_BUILT).
    let mut built_ids = Vec::new();
    let event = loop {
        let out = support::nyx(&control, &["circuit", "build"]);
        let id: u64 = out
            .strip_prefix("circuit ")
            .and_then(|r| r.split_whitespace().next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("nyx circuit build printed {out:?}"));
        built_ids.push(id);
        // Other events (a new consensus every period) may come first.
        let built = ev_rx
            .recv_timeout(Duration::from_secs(5))
            .into_iter()
            .chain(ev_rx.try_iter())
            .map(|line| serde_json::from_str::<serde_json::Value>(&line).unwrap())
            .find(|e| e["kind"] == "circuit_built");
        if let Some(event) = built {
            break event;
        }
        assert!(built_ids.len() < 5, "nyx events printed no circuit_built");
    };
    assert!(built_ids.contains(&event["circuit_id"].as_u64().unwrap()));
    for id in &built_ids {
        let out = support::nyx(&control, &["circuit", "close", &id.to_string()]);
        assert!(out.contains("closed"), "{out}");
    }
    let _ = follow.kill();
    let _ = follow.wait();
    let out = nyx_connect(&control, &web, b"GET /file HTTP/1.0\r\n\r\n");
    assert!(
        body_of(&out) == file.as_slice(),
        "nyx connect: {} bytes",
        out.len()
    );

    // Ctrl-C stops every daemon and removes the temporary directory.
    let ok = Command::new("kill")
        .arg("-INT")
        .arg(testnet.id().to_string())
        .status()
        .unwrap()
        .success();
    assert!(ok);
    let mut status = None;
    for _ in 0..300 {
        if let Some(st) = testnet.try_wait().unwrap() {
            status = Some(st);
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let Some(status) = status else {
        let _ = testnet.kill();
        panic!("the testnet did not stop within 30 s");
    };
    assert!(status.success(), "{status}");
    assert!(!Path::new(&s.dir).exists(), "{} is left", s.dir);
    assert!(!control.exists());
    spans_were_exported_without_addresses(&collector.store);
    collector.stop().await;
}

/// The daemons flushed their spans when they stopped: circuit builds, stream opens and
/// directory fetches, each with its outcome, and no address anywhere in them.
fn spans_were_exported_without_addresses(store: &collector::Store) {
    use collector::{text, values};
    let spans = store.spans();
    let find = |name: &str, key: &str, want: &str| {
        spans
            .iter()
            .any(|(_, s)| s.name == name && text(&s.attributes, key).as_deref() == Some(want))
    };
    assert!(
        find("circuit_build", "outcome", "built"),
        "no built circuit_build"
    );
    assert!(
        find("circuit_build", "exit", "target"),
        "no circuit_build for a target"
    );
    assert!(
        find("stream_open", "outcome", "opened"),
        "no opened stream_open"
    );
    assert!(
        find("directory_fetch", "outcome", "adopted"),
        "no directory_fetch"
    );
    for (resource, span) in &spans {
        assert_eq!(
            text(resource, "deployment.environment").as_deref(),
            Some("nyx-testnet"),
            "OTEL_RESOURCE_ATTRIBUTES is on every resource"
        );
        let mut all = values(&span.attributes);
        for event in &span.events {
            all.extend(values(&event.attributes));
        }
        for v in all {
            assert!(
                !v.contains("127.0.0.") && !v.contains("localhost"),
                "span {} carries {v:?}",
                span.name
            );
        }
    }
}

async fn next_event(events: &mut tonic::Streaming<pb::Event>, kind: pb::EventKind) -> pb::Event {
    loop {
        let e = tokio::time::timeout(Duration::from_secs(30), events.message())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        if e.kind() == kind {
            return e;
        }
    }
}

/// A SOCKS5 CONNECT (no authentication) left open.
async fn socks_connect(proxy: &str, target: &str) -> tokio::net::TcpStream {
    let mut conn = tokio::net::TcpStream::connect(proxy).await.unwrap();
    conn.write_all(&[5, 1, 0]).await.unwrap();
    let mut reply = [0u8; 2];
    conn.read_exact(&mut reply).await.unwrap();
    assert_eq!(reply, [5, 0]);
    let addr: std::net::SocketAddrV4 = target.parse().unwrap();
    let mut req = vec![5, 1, 0, 1];
    req.extend_from_slice(&addr.ip().octets());
    req.extend_from_slice(&addr.port().to_be_bytes());
    conn.write_all(&req).await.unwrap();
    let mut reply = [0u8; 10];
    conn.read_exact(&mut reply).await.unwrap();
    assert_eq!(reply[1], 0, "SOCKS reply {reply:?}");
    conn
}

fn nyx_connect(control: &Path, target: &str, input: &[u8]) -> Vec<u8> {
    let mut child = Command::new(env!("CARGO_BIN_EXE_nyx"))
        .arg("--control")
        .arg(control)
        .arg("connect")
        .arg(target)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(input).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "nyx connect: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}
