//! The `fetch_page` example runs as a program: a page fetched through an in-process testnet
//! by an embedded client node arrives whole, and the program exits with success.
//!
//! The example is compiled into this test (so it is always the current source) and run in a
//! child process: this test binary runs itself again with `NYX_RUN_EXAMPLE` set, and then
//! the test calls the example's `main` instead of checking it.

use std::process::Command;
use std::time::{Duration, Instant};

#[path = "../examples/fetch_page.rs"]
mod fetch_page;

const TEST: &str = "the_fetch_page_example_fetches_the_page_and_exits";

#[test]
fn the_fetch_page_example_fetches_the_page_and_exits() {
    if std::env::var_os("NYX_RUN_EXAMPLE").is_some() {
        if let Err(e) = fetch_page::main() {
            eprintln!("the example failed: {e}");
            std::process::exit(1);
        }
        return;
    }
    let started = Instant::now();
    let out = Command::new(std::env::current_exe().expect("test binary path"))
        .args(["--exact", TEST, "--nocapture", "--test-threads=1"])
        .env("NYX_RUN_EXAMPLE", "1")
        .output()
        .expect("run the example");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{}\n{stdout}\n{stderr}", out.status);
    assert!(stdout.contains("HTTP/1.0 200 OK\r\n"), "{stdout}");
    assert!(
        stdout.contains("\r\n\r\n<h1>Hello from the other side of three hops</h1>\n"),
        "{stdout}"
    );
    assert!(stderr.contains("circuit: ["), "{stderr}");
    // Liveness only (a hung example would block CI), never speed.
    assert!(started.elapsed() < Duration::from_secs(120));
}
