//! Printing answers: aligned text for people, one JSON document for scripts. Every function
//! writes to `out` and returns the write's error, so that a reader that went away (a closed
//! pipe) ends the command instead of a panic.

use std::io::{self, Write};
use std::time::Duration;

use nyx_daemon::control::pb;
use serde::Serialize;

fn json<T: Serialize>(out: &mut impl Write, value: &T) -> io::Result<()> {
    serde_json::to_writer_pretty(&mut *out, value)?;
    writeln!(out)
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

pub(crate) fn status(out: &mut impl Write, info: &pb::NodeInfo, as_json: bool) -> io::Result<()> {
    if as_json {
        return json(out, info);
    }
    let or_off = |s: &str| {
        if s.is_empty() {
            "off".to_owned()
        } else {
            s.to_owned()
        }
    };
    writeln!(out, "node       {} ({})", info.node_id, info.nickname)?;
    writeln!(
        out,
        "daemon     nyx-daemon {}, pid {}, up {}",
        info.version,
        info.pid,
        age(info.uptime_ms)
    )?;
    writeln!(out, "listen     {} {}", info.transport, info.listen_addr)?;
    writeln!(out, "socks5     {}", or_off(&info.socks_addr))?;
    writeln!(out, "http       {}", or_off(&info.http_connect_addr))?;
    writeln!(out, "control    {}", info.control_socket)?;
    writeln!(out, "metrics    {}", or_off(&info.prometheus_addr))?;
    writeln!(out, "data dir   {}", info.data_dir)?;
    writeln!(
        out,
        "directory  {} relays{}",
        info.relays,
        if info.ready {
            ""
        } else {
            " (not enough for circuits)"
        }
    )?;
    writeln!(
        out,
        "now        {} peers, {} own circuits, {} relayed circuits, {} streams",
        info.peers, info.own_circuits, info.relay_circuits, info.streams
    )?;
    writeln!(out, "exit       {}", info.exit_policy)?;
    Ok(())
}

pub(crate) fn peers(
    out: &mut impl Write,
    r: &pb::ListPeersResponse,
    as_json: bool,
) -> io::Result<()> {
    if as_json {
        return json(out, r);
    }
    if r.peers.is_empty() {
        return writeln!(out, "no peers");
    }
    writeln!(out, "{:<66} {:<16} {:<7} UP", "NODE", "NICKNAME", "KIND")?;
    for p in &r.peers {
        let kind = if p.relay { "relay" } else { "client" };
        writeln!(
            out,
            "{:<66} {:<16} {:<7} {}",
            p.node_id,
            p.nickname,
            kind,
            age(p.up_ms)
        )?;
    }
    Ok(())
}

pub(crate) fn circuits(
    out: &mut impl Write,
    r: &pb::ListCircuitsResponse,
    as_json: bool,
) -> io::Result<()> {
    if as_json {
        return json(out, r);
    }
    if r.circuits.is_empty() {
        return writeln!(out, "no circuits");
    }
    writeln!(out, "{:<8} {:<9} PATH", "ID", "AGE")?;
    for c in &r.circuits {
        writeln!(out, "{:<8} {:<9} {}", c.id, age(c.age_ms), path(&c.hops))?;
    }
    Ok(())
}

pub(crate) fn circuit_built(
    out: &mut impl Write,
    c: &pb::Circuit,
    as_json: bool,
) -> io::Result<()> {
    if as_json {
        return json(out, c);
    }
    writeln!(out, "circuit {} built: {}", c.id, path(&c.hops))?;
    Ok(())
}

pub(crate) fn streams(
    out: &mut impl Write,
    r: &pb::ListStreamsResponse,
    stats: &pb::StreamStats,
    as_json: bool,
) -> io::Result<()> {
    if as_json {
        #[derive(Serialize)]
        struct Both<'a> {
            streams: &'a [pb::StreamInfo],
            stats: &'a pb::StreamStats,
        }
        return json(
            out,
            &Both {
                streams: &r.streams,
                stats,
            },
        );
    }
    if r.streams.is_empty() {
        writeln!(out, "no streams")?;
    } else {
        writeln!(
            out,
            "{:<6} {:<8} {:<9} {:>12} {:>12}  TARGET / PATH",
            "ID", "SOURCE", "AGE", "SENT", "RECEIVED"
        )?;
        for s in &r.streams {
            writeln!(
                out,
                "{:<6} {:<8} {:<9} {:>12} {:>12}  {} via {}",
                s.id,
                s.source,
                age(s.age_ms),
                s.bytes_sent,
                s.bytes_received,
                s.target,
                path(&s.hops)
            )?;
        }
    }
    writeln!(
        out,
        "transport: {} packets sent, {} received, {} lost; FEC overhead {:.3}; window {} cells, \
         {} in flight; srtt {} us",
        stats.packets_sent,
        stats.packets_received,
        stats.packets_lost,
        stats.fec_overhead,
        stats.window_cells,
        stats.in_flight_cells,
        stats.srtt_us
    )?;
    Ok(())
}

pub(crate) fn event(out: &mut impl Write, e: &pb::Event, as_json: bool) -> io::Result<()> {
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
        return writeln!(out, "{value}");
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
    writeln!(out, "{:<18} {detail}", name)?;
    Ok(())
}

pub(crate) fn metrics(out: &mut impl Write, m: &pb::Metrics, as_json: bool) -> io::Result<()> {
    if as_json {
        return json(out, &m.values);
    }
    write!(out, "{}", m.prometheus_text)?;
    Ok(())
}

pub(crate) fn config(out: &mut impl Write, c: &pb::Config, as_json: bool) -> io::Result<()> {
    if as_json {
        return json(out, c);
    }
    if c.path.is_empty() {
        writeln!(out, "# embedded defaults (no config file)")?;
    } else {
        writeln!(out, "# from {}", c.path)?;
    }
    write!(out, "{}", c.toml)?;
    Ok(())
}

pub(crate) fn reloaded(
    out: &mut impl Write,
    r: &pb::ReloadConfigResponse,
    as_json: bool,
) -> io::Result<()> {
    if as_json {
        return json(out, r);
    }
    if r.applied.is_empty() && r.restart_required.is_empty() {
        writeln!(out, "reloaded: nothing changed ({} relays)", r.relays)?;
        return Ok(());
    }
    if !r.applied.is_empty() {
        writeln!(out, "applied: {}", r.applied.join(", "))?;
    }
    if !r.restart_required.is_empty() {
        writeln!(
            out,
            "need a restart (old values kept): {}",
            r.restart_required.join(", ")
        )?;
    }
    writeln!(out, "directory: {} relays", r.relays)?;
    Ok(())
}

pub(crate) fn done(out: &mut impl Write, message: &str, as_json: bool) -> io::Result<()> {
    if as_json {
        return json(out, &serde_json::json!({ "ok": true, "message": message }));
    }
    writeln!(out, "{message}")?;
    Ok(())
}
