//! Printing answers: aligned text for people, one JSON document for scripts.

use std::time::Duration;

use nyx_daemon::control::pb;
use serde::Serialize;

fn json<T: Serialize>(value: &T) {
    match serde_json::to_string_pretty(value) {
        Ok(text) => println!("{text}"),
        Err(e) => eprintln!("nyx: cannot print JSON: {e}"),
    }
}

/// `1h02m`, `3m12s`, `4.2s`.
pub(crate) fn age(ms: u64) -> String {
    let d = Duration::from_millis(ms);
    let s = d.as_secs();
    if s >= 3600 {
        format!("{}h{:02}m", s / 3600, (s % 3600) / 60)
    } else if s >= 60 {
        format!("{}m{:02}s", s / 60, s % 60)
    } else {
        format!("{:.1}s", d.as_secs_f64())
    }
}

fn short(id: &str) -> &str {
    id.get(..16).unwrap_or(id)
}

fn path(hops: &[pb::Hop]) -> String {
    hops.iter()
        .map(|h| {
            if h.nickname.is_empty() {
                short(&h.node_id).to_owned()
            } else {
                h.nickname.clone()
            }
        })
        .collect::<Vec<_>>()
        .join(" > ")
}

pub(crate) fn status(info: &pb::NodeInfo, as_json: bool) {
    if as_json {
        return json(info);
    }
    let or_off = |s: &str| {
        if s.is_empty() {
            "off".to_owned()
        } else {
            s.to_owned()
        }
    };
    println!("node       {} ({})", info.node_id, info.nickname);
    println!(
        "daemon     nyx-daemon {}, pid {}, up {}",
        info.version,
        info.pid,
        age(info.uptime_ms)
    );
    println!("listen     {} {}", info.transport, info.listen_addr);
    println!("socks5     {}", or_off(&info.socks_addr));
    println!("control    {}", info.control_socket);
    println!("metrics    {}", or_off(&info.prometheus_addr));
    println!("data dir   {}", info.data_dir);
    println!(
        "directory  {} relays{}",
        info.relays,
        if info.ready {
            ""
        } else {
            " (not enough for circuits)"
        }
    );
    println!(
        "now        {} peers, {} own circuits, {} relayed circuits, {} streams",
        info.peers, info.own_circuits, info.relay_circuits, info.streams
    );
    println!("exit       {}", info.exit_policy);
}

pub(crate) fn peers(r: &pb::ListPeersResponse, as_json: bool) {
    if as_json {
        return json(r);
    }
    if r.peers.is_empty() {
        return println!("no peers");
    }
    println!("{:<66} {:<16} {:<7} UP", "NODE", "NICKNAME", "KIND");
    for p in &r.peers {
        let kind = if p.relay { "relay" } else { "client" };
        println!(
            "{:<66} {:<16} {:<7} {}",
            p.node_id,
            p.nickname,
            kind,
            age(p.up_ms)
        );
    }
}

pub(crate) fn circuits(r: &pb::ListCircuitsResponse, as_json: bool) {
    if as_json {
        return json(r);
    }
    if r.circuits.is_empty() {
        return println!("no circuits");
    }
    println!("{:<8} {:<9} PATH", "ID", "AGE");
    for c in &r.circuits {
        println!("{:<8} {:<9} {}", c.id, age(c.age_ms), path(&c.hops));
    }
}

pub(crate) fn circuit_built(c: &pb::Circuit, as_json: bool) {
    if as_json {
        return json(c);
    }
    println!("circuit {} built: {}", c.id, path(&c.hops));
}

pub(crate) fn streams(r: &pb::ListStreamsResponse, stats: &pb::StreamStats, as_json: bool) {
    if as_json {
        #[derive(Serialize)]
        struct Both<'a> {
            streams: &'a [pb::StreamInfo],
            stats: &'a pb::StreamStats,
        }
        return json(&Both {
            streams: &r.streams,
            stats,
        });
    }
    if r.streams.is_empty() {
        println!("no streams");
    } else {
        println!(
            "{:<6} {:<8} {:<9} {:>12} {:>12}  TARGET / PATH",
            "ID", "SOURCE", "AGE", "SENT", "RECEIVED"
        );
        for s in &r.streams {
            println!(
                "{:<6} {:<8} {:<9} {:>12} {:>12}  {} via {}",
                s.id,
                s.source,
                age(s.age_ms),
                s.bytes_sent,
                s.bytes_received,
                s.target,
                path(&s.hops)
            );
        }
    }
    println!(
        "transport: {} packets sent, {} received, {} lost; FEC overhead {:.3}; window {} cells, \
         {} in flight; srtt {} us",
        stats.packets_sent,
        stats.packets_received,
        stats.packets_lost,
        stats.fec_overhead,
        stats.window_cells,
        stats.in_flight_cells,
        stats.srtt_us
    );
}

pub(crate) fn event(e: &pb::Event, as_json: bool) {
    let kind = pb::EventKind::try_from(e.kind).unwrap_or(pb::EventKind::Unspecified);
    let name = kind
        .as_str_name()
        .trim_start_matches("EVENT_KIND_")
        .to_ascii_lowercase();
    if as_json {
        // One object per line, so `nyx events --json | jq` follows along.
        let value = serde_json::json!({
            "kind": name,
            "time_unix_ms": e.time_unix_ms,
            "circuit_id": e.circuit_id,
            "hops": e.hops,
            "reason": e.reason,
            "node_id": e.node_id,
            "count": e.count,
            "message": e.message,
        });
        return println!("{value}");
    }
    let detail = match kind {
        pb::EventKind::CircuitBuilt => format!("circuit {} via {}", e.circuit_id, path(&e.hops)),
        pb::EventKind::CircuitFailed => format!("attempt {}: {}", e.count, e.reason),
        pb::EventKind::CircuitClosed => format!("circuit {}: {}", e.circuit_id, e.reason),
        pb::EventKind::PeerUp | pb::EventKind::PeerDown => short(&e.node_id).to_owned(),
        pb::EventKind::DirectoryChanged => format!("{} relays", e.count),
        pb::EventKind::Lagged => format!("{} events skipped", e.count),
        pb::EventKind::OnionKeysRotated => format!("{} onion keys in use", e.count),
        pb::EventKind::Error => e.message.clone(),
        pb::EventKind::Unspecified => String::new(),
    };
    println!("{:<18} {detail}", name);
}

pub(crate) fn metrics(m: &pb::Metrics, as_json: bool) {
    if as_json {
        return json(&m.values);
    }
    print!("{}", m.prometheus_text);
}

pub(crate) fn config(c: &pb::Config, as_json: bool) {
    if as_json {
        return json(c);
    }
    if c.path.is_empty() {
        println!("# embedded defaults (no config file)");
    } else {
        println!("# from {}", c.path);
    }
    print!("{}", c.toml);
}

pub(crate) fn reloaded(r: &pb::ReloadConfigResponse, as_json: bool) {
    if as_json {
        return json(r);
    }
    if r.applied.is_empty() && r.restart_required.is_empty() {
        println!("reloaded: nothing changed ({} relays)", r.relays);
        return;
    }
    if !r.applied.is_empty() {
        println!("applied: {}", r.applied.join(", "));
    }
    if !r.restart_required.is_empty() {
        println!(
            "need a restart (old values kept): {}",
            r.restart_required.join(", ")
        );
    }
    println!("directory: {} relays", r.relays);
}

pub(crate) fn done(message: &str, as_json: bool) {
    if as_json {
        return json(&serde_json::json!({ "ok": true, "message": message }));
    }
    println!("{message}");
}
