//! The unmodified daemon under the Shadow network simulator, when `$SHADOW` names a Shadow
//! binary (skipped with a message otherwise): the CI-sized variant of
//! `benches/shadow/experiment.py`. Three authorities and four relays bootstrap a consensus
//! inside the simulation, two clients fetch a page and 1 MiB through their SOCKS entries over
//! 20 ms links, on both transports; every download is byte-exact, and a second run of the
//! same network (the same authority keys; everything else is made inside the simulation)
//! gives the same results to the microsecond: Shadow is deterministic, and so must the
//! daemon be under it.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::path::{Path, PathBuf};
use std::process::Command;

fn experiment(shadow: &std::ffi::OsStr, dir: &Path, keys: &Path) -> serde_json::Value {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let out = Command::new("python3")
        .arg(root.join("benches/shadow/experiment.py"))
        .args(["--relays", "4", "--clients", "2", "--size", "1048576"])
        .args(["--downloads", "1", "--nets", "nyx-udp,nyx-quic"])
        .args(["--latency-ms", "20", "--start-s", "30", "--stop-s", "150"])
        .arg("--dir")
        .arg(dir)
        .arg("--authority-keys")
        .arg(keys)
        .arg("--daemon")
        .arg(env!("CARGO_BIN_EXE_nyx-daemon"))
        .env("SHADOW", shadow)
        .output()
        .expect("python3 runs the experiment");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "experiment failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let summary = std::fs::read_to_string(dir.join("summary.json")).unwrap();
    serde_json::from_str(&summary).unwrap()
}

fn results(dir: &Path, net: &str) -> String {
    std::fs::read_to_string(dir.join(net).join("results.json")).unwrap()
}

#[test]
fn a_small_network_bootstraps_and_carries_downloads_under_shadow() {
    let Some(shadow) = std::env::var_os("SHADOW") else {
        eprintln!(
            "skipped: set SHADOW to a Shadow binary (e.g. ../shared/tools/shadow/bin/shadow) \
             to run the daemon under the Shadow simulator"
        );
        return;
    };
    let base: PathBuf = std::env::temp_dir().join(format!("nyx-shadow-{}", std::process::id()));
    let (first, second) = (base.join("first"), base.join("second"));
    // The same authority keys for both runs: everything else is made inside the simulation,
    // from Shadow's seeded randomness.
    let keys = base.join("authority-keys");
    let summary = experiment(&shadow, &first, &keys);
    for net in ["nyx-udp", "nyx-quic"] {
        let r = &summary["nets"][net];
        assert_eq!(r["shadow_rc"], 0, "{net}: {r}");
        assert_eq!(r["clients_ready"], 2, "{net}: {r}");
        assert_eq!(r["failed"], 0, "{net}: {r}");
        assert_eq!(
            r["downloads"], 2,
            "{net}: every 1 MiB download byte-exact: {r}"
        );
        // Two circuit round trips at least: 4 links of 20 ms, there and back.
        assert!(r["ttfb_s"].as_f64().unwrap() >= 0.16, "{net}: {r}");
    }
    experiment(&shadow, &second, &keys);
    for net in ["nyx-udp", "nyx-quic"] {
        assert_eq!(
            results(&first, net),
            results(&second, net),
            "{net}: two runs of one simulation differ"
        );
    }
    let _ = std::fs::remove_dir_all(&base);
}
