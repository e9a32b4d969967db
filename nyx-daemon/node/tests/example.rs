//! The `fetch_page` example runs as a program: a page fetched through an in-process testnet
//! by an embedded client node arrives whole, and the program exits with success.

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

/// The example's binary, built (or found up to date) by the cargo that runs this test, in
/// the same target directory and profile.
fn example_binary() -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    let profile_dir = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("target/<profile>/deps");
    let mut build = Command::new(env!("CARGO"));
    build.args([
        "build",
        "--quiet",
        "-p",
        "nyx-node",
        "--features",
        "testing",
        "--example",
        "fetch_page",
    ]);
    if profile_dir.file_name().is_some_and(|p| p == "release") {
        build.arg("--release");
    }
    let status = build.status().expect("run cargo");
    assert!(status.success(), "building the example failed: {status}");
    profile_dir.join("examples").join("fetch_page")
}

#[test]
fn the_fetch_page_example_fetches_the_page_and_exits() {
    let binary = example_binary();
    assert!(binary.exists(), "{} is missing", binary.display());
    let started = Instant::now();
    let out = Command::new(&binary).output().expect("run the example");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{}\n{stdout}\n{stderr}", out.status);
    assert!(stdout.starts_with("HTTP/1.0 200 OK\r\n"), "{stdout}");
    assert!(
        stdout.ends_with("<h1>Hello from the other side of three hops</h1>\n"),
        "{stdout}"
    );
    assert!(stderr.contains("circuit: ["), "{stderr}");
    // Liveness only (a hung example would block CI), never speed.
    assert!(started.elapsed() < Duration::from_secs(120));
}
