//! The daemon under a service manager: root is refused unless allowed, and sd_notify tells
//! a manager listening on `$NOTIFY_SOCKET` when the daemon is ready, reloading (on SIGHUP
//! or a control-API reload), alive
//! (the watchdog) and stopping.
#![allow(clippy::unwrap_used)]

mod support;

use std::os::unix::net::UnixDatagram;
use std::time::Duration;

use nyx_daemon::daemon::service::effective_uid;
use support::{DaemonProcess, daemon_command, loopback_config, temp_dir};

#[test]
fn root_is_refused_without_allow_root() {
    let dir = temp_dir("service-root");
    let config = loopback_config(&dir);
    let mut cmd = daemon_command();
    cmd.env_remove("NYX_ALLOW_ROOT")
        .arg("--config")
        .arg(&config);
    if effective_uid() == 0 {
        let out = cmd.output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{stderr}");
        assert!(stderr.contains("refusing to run as root"), "{stderr}");
        assert!(stderr.contains("--allow-root"), "{stderr}");
        assert!(!dir.join("data").exists(), "no keys are made as root");
        // --check-config writes nothing and still works.
        let out = daemon_command()
            .env_remove("NYX_ALLOW_ROOT")
            .arg("--config")
            .arg(&config)
            .arg("--check-config")
            .output()
            .unwrap();
        assert!(out.status.success());
    } else {
        // Not root: the flag is not needed.
        let daemon = DaemonProcess::spawn(cmd);
        assert_eq!(daemon.stop_with("-TERM"), Some(0));
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The next state the daemon notifies, skipping watchdog pings.
fn next_state(manager: &UnixDatagram, pings: &mut usize) -> String {
    let mut buf = [0u8; 512];
    loop {
        let n = manager.recv(&mut buf).unwrap();
        let state = String::from_utf8(buf[..n].to_vec()).unwrap();
        match state.as_str() {
            "WATCHDOG=1" => *pings += 1,
            _ => return state,
        }
    }
}

#[test]
fn sd_notify_reports_ready_reload_watchdog_and_stop() {
    let dir = temp_dir("service-notify");
    let config = loopback_config(&dir);
    let socket = dir.join("notify.sock");
    let manager = UnixDatagram::bind(&socket).unwrap();
    manager
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let mut cmd = daemon_command();
    cmd.arg("--config")
        .arg(&config)
        .env("NOTIFY_SOCKET", &socket)
        // Pings every 100 ms.
        .env("WATCHDOG_USEC", "200000")
        .env_remove("WATCHDOG_PID");
    let daemon = DaemonProcess::spawn(cmd);
    let mut pings = 0;
    // The ready line came first; READY=1 follows it.
    assert_eq!(next_state(&manager, &mut pings), "READY=1");
    std::thread::sleep(Duration::from_millis(500));
    daemon.signal("-HUP");
    let reloading = next_state(&manager, &mut pings);
    let usec = reloading
        .strip_prefix("RELOADING=1\nMONOTONIC_USEC=")
        .unwrap_or_else(|| panic!("{reloading:?}"));
    assert!(usec.parse::<u64>().unwrap() > 0, "{reloading:?}");
    assert_eq!(next_state(&manager, &mut pings), "READY=1");
    assert!(pings >= 2, "{pings} watchdog pings in 500 ms");
    // A reload asked for over the control API is framed the same way.
    let control = std::path::Path::new(&daemon.ready.control).to_owned();
    support::nyx(&control, &["config", "reload"]);
    let reloading = next_state(&manager, &mut pings);
    assert!(
        reloading.starts_with("RELOADING=1\nMONOTONIC_USEC="),
        "{reloading:?}"
    );
    assert_eq!(next_state(&manager, &mut pings), "READY=1");
    daemon.signal("-TERM");
    assert_eq!(next_state(&manager, &mut pings), "STOPPING=1");
    assert_eq!(daemon.wait(), Some(0));
    std::fs::remove_dir_all(&dir).unwrap();
}
