#!/usr/bin/env python3
"""NyxNet (and a private Tor network beside it) under the Shadow network simulator.

One command generates the networks, runs each in Shadow and prints, per client, the time to
open a stream (SOCKS CONNECT), the time to first byte of a small GET and the goodput of a
large one, then the medians and NyxNet/Tor ratios:

    cargo build --release -p nyx-daemon
    SHADOW=../shared/tools/shadow/bin/shadow benches/shadow/experiment.py \\
        --relays 100 --clients 20 --latency-ms 20 --loss 0 --nets nyx-udp,nyx-quic,tor

Topology: every host (authorities, relays, clients) attaches to one network node with a
`--bandwidth-mbit` link up and down (the web server, on a node of its own, has 10 Gbit/s, so
that clients do not queue at it); every path between two hosts crosses one edge of
`--latency-ms` one-way latency that drops `--loss` of its packets (`--server-loss` on the
server's path, 0 by default). A 3-hop circuit thus crosses three lossy links (client, guard,
middle, exit) and the exit's clean one to the server, like compare.sh's loss on the links
between nodes on loopback.

NyxNet: `--authorities` directory authorities (relays too) whose keys are made before the
simulation (`nyx-daemon --authority-line`); every other daemon pins them and bootstraps from
them inside the simulation (the real directory protocol: uploads, reachability tests, votes,
a signed consensus). The daemon is the normal release binary, unmodified; its config sets
`socket_io = "auto"` (it falls back to plain I/O by itself under Shadow) and an abstract
control socket name. Tor: Debian's tor in a TestingTorNetwork with as many authorities,
relays and clients. Results are in DIR/<net>/results.json; Shadow's own output in
DIR/<net>/shadow.data.
"""

import argparse
import hashlib
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
SERVER_IP = "12.0.0.1"
SERVER_PORT = 8080
DAEMON_PORT = 9000
TOR_OR_PORT = 9001
TOR_DIR_PORT = 9030
SOCKS = "127.0.0.1:9050"


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--relays", type=int, default=100, help="relays besides the authorities")
    p.add_argument("--authorities", type=int, default=3)
    p.add_argument("--clients", type=int, default=20)
    p.add_argument("--latency-ms", type=float, default=20.0, help="one-way latency per link")
    p.add_argument("--loss", type=float, default=0.0,
                   help="packet loss per link between the networks' hosts, 0..1")
    p.add_argument("--server-latency-ms", type=float, default=None,
                   help="one-way latency of the web server's link (default: --latency-ms)")
    p.add_argument("--server-loss", type=float, default=0.0,
                   help="packet loss on the web server's link, 0..1 (default 0: the server is "
                        "outside both networks, as in compare.sh, and Shadow's TCP breaks "
                        "down at 2%% loss)")
    p.add_argument("--bandwidth-mbit", type=int, default=100, help="each host's link, up and down")
    p.add_argument("--size", type=int, default=10 * 1024 * 1024, help="bytes of the large file")
    p.add_argument("--downloads", type=int, default=3, help="large downloads per client, in turn")
    p.add_argument("--nets", default="nyx-udp,nyx-quic,tor",
                   help="comma-separated: nyx-udp, nyx-quic, tor")
    p.add_argument("--stop-s", type=int, default=180,
                   help="simulated seconds at most (Tor's run gets --tor-start-s - --start-s more)")
    p.add_argument("--start-s", type=int, default=30,
                   help="simulated second the NyxNet clients start fetching (they retry until "
                        "ready)")
    p.add_argument("--tor-start-s", type=int, default=90,
                   help="the same for Tor, whose clients start 30 s before it: Tor relays "
                        "publish their self-measured bandwidth only after a self-test, and a "
                        "client that bootstraps on the first consensus builds all its circuits "
                        "through the few relays that have weight by then")
    p.add_argument("--period-s", type=int, default=16, help="NyxNet authorities' voting period")
    p.add_argument("--parallelism", type=int, default=os.cpu_count() or 1)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--strace", action="store_true",
                   help="log every process's system calls (slow; for debugging)")
    p.add_argument("--pcap", action="store_true",
                   help="capture the web server's packets (for debugging a TCP leg)")
    p.add_argument("--dir", default=os.path.join(ROOT, "target", "shadow", "experiment"))
    p.add_argument("--daemon", default=os.path.join(ROOT, "target", "release", "nyx-daemon"))
    p.add_argument("--tor", default=shutil.which("tor") or "/usr/sbin/tor")
    p.add_argument("--python", default=sys.executable)
    p.add_argument("--log-level", default="info", help="NyxNet daemons' log filter")
    p.add_argument("--generate-only", action="store_true", help="write the networks, do not run")
    p.add_argument("--authority-keys", metavar="DIR",
                   help="take the NyxNet authorities' keys from DIR (made there if missing), so "
                        "that two runs simulate the same network; default: fresh keys")
    args = p.parse_args(argv)
    # Shadow runs in the network's directory: paths given relative to here must still work.
    for key in ("dir", "daemon", "authority_keys"):
        if getattr(args, key, None):
            setattr(args, key, os.path.abspath(getattr(args, key)))
    return args


def ip(kind, i):
    """Every host in a /16 of its own (path selection keeps hops in distinct /16s)."""
    first = {"auth": 10, "client": 13, "relay": 20 + i // 250}[kind]
    return f"{first}.{i % 250}.0.1"


def hosts_of(args):
    auths = [(f"auth{i}", ip("auth", i)) for i in range(1, args.authorities + 1)]
    relays = [(f"relay{i}", ip("relay", i)) for i in range(1, args.relays + 1)]
    clients = [(f"client{i}", ip("client", i)) for i in range(1, args.clients + 1)]
    return auths, relays, clients


def write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)


def make_files(args, base):
    """The server's files: a small one (time to first byte) and a large one (goodput)."""
    www = os.path.join(base, "www")
    os.makedirs(www, exist_ok=True)
    rng = random.Random(args.seed)
    specs = []
    for name, size in [("small", 1024), ("large", args.size)]:
        body = rng.randbytes(size)
        with open(os.path.join(www, name), "wb") as f:
            f.write(body)
        specs.append(f"{name}:{size}:{hashlib.sha256(body).hexdigest()}")
    # The small one first (readiness and time to first byte), then the large ones.
    return www, [specs[0]] + [specs[1]] * args.downloads


def graph(args):
    loss = max(0.0, min(1.0, args.loss))
    server_loss = max(0.0, min(1.0, args.server_loss))
    def latency(ms):
        return f"    latency \"{round(ms * 1000)} us\"\n"

    server_ms = args.latency_ms if args.server_latency_ms is None else args.server_latency_ms
    bandwidth = (f"    host_bandwidth_down \"{args.bandwidth_mbit} Mbit\"\n"
                 f"    host_bandwidth_up \"{args.bandwidth_mbit} Mbit\"\n")

    def edge(a, b, p, ms):
        return (f"  edge [\n    source {a}\n    target {b}\n{latency(ms)}"
                f"    packet_loss {p}\n  ]\n")

    # Node 0 holds the networks' hosts, node 1 the web server: the server's path can have a
    # loss of its own. Shadow's GML parser wants one key-value pair per line.
    return (
        "graph [\n  directed 0\n"
        f"  node [\n    id 0\n{bandwidth}  ]\n"
        f"  node [\n    id 1\n{bandwidth}  ]\n"
        + edge(0, 0, loss, args.latency_ms) + edge(0, 1, server_loss, server_ms)
        + edge(1, 1, 0.0, server_ms)
        + "]\n"
    )


def shadow_yaml(args, hosts, start_s):
    """Shadow's configuration (JSON is YAML): `--stop-s` seconds counted as if the clients
    started at `--start-s`, so each network gets as long from its clients' start."""
    config = {
        "general": {
            "stop_time": f"{args.stop_s + start_s - args.start_s}s",
            "seed": args.seed,
            "parallelism": args.parallelism,
            # Off: with it, runs differed by microseconds (how many non-blocking calls a
            # thread makes is not reproducible); neither the daemon nor Tor busy-waits.
            "model_unblocked_syscall_latency": False,
        },
        "network": {"graph": {"type": "gml", "inline": graph(args)}},
        "hosts": hosts,
    }
    if args.strace:
        # Every system call of every process, per process (Shadow's strace log): what
        # a socket returned and when, for debugging a stall.
        config["experimental"] = {"strace_logging_mode": "standard"}
    if args.pcap:
        # The web server's packets (eth0.pcap in its host directory): the TCP legs.
        hosts["server"]["host_options"] = {"pcap_enabled": True}
    return json.dumps(config, indent=1)


def host(addr, processes, node=0):
    return {"network_node_id": node, "ip_addr": addr, "processes": processes}


def process(path, args, start_s, final="running", env=None):
    p = {"path": path, "args": args, "start_time": f"{start_s}s",
         "expected_final_state": final}
    if env:
        p["environment"] = env
    return p


def common_hosts(args, www, specs, clients, client_procs, start_s):
    server = host(SERVER_IP, [process(args.python, [os.path.join(HERE, "peer.py"), "serve",
                                                   f"{SERVER_IP}:{SERVER_PORT}", www], 1)], node=1)
    # The server's own link is not what is measured: 20 clients at once must not share one
    # host link there.
    server.update({"bandwidth_down": "10 Gbit", "bandwidth_up": "10 Gbit"})
    hosts = {"server": server}
    for name, addr in clients:
        fetch = process(args.python, [os.path.join(HERE, "peer.py"), "fetch", SOCKS,
                                      f"{SERVER_IP}:{SERVER_PORT}"] + specs,
                        start_s, final={"exited": 0})
        hosts[name] = host(addr, client_procs(name, addr) + [fetch])
    return hosts


def nyx_network(args, base, transport, www, specs):
    """Configs, authority keys and shadow.yaml of a NyxNet network over `transport`."""
    auths, relays, clients = hosts_of(args)
    nodes = os.path.join(base, "nodes")

    def config(name, addr, relay, authority_lines, extra=""):
        data = os.path.join(nodes, name)
        os.makedirs(data, mode=0o700, exist_ok=True)
        listen = f"{addr}:{DAEMON_PORT}" if relay else f"{addr}:0"
        socks = f'enabled = true\nlisten = "{SOCKS}"' if not relay else "enabled = false"
        lines = ",\n  ".join(json.dumps(line) for line in authority_lines)
        text = (
            f'listen = ["{listen}"]\ntransport = "{transport}"\nsocket_io = "auto"\n'
            f'data_dir = "{data}"\nnickname = "{name}"\n'
            f'[control]\nsocket = "@nyx-{name}"\n'
            f"[socks]\n{socks}\n"
            f"[directory]\nauthorities = [\n  {lines}\n]\n"
            f"[relay]\nenabled = {str(relay).lower()}\n"
            f'exit_policy = ["accept {SERVER_IP}/32:{SERVER_PORT}", "reject *:*"]\n'
            f'[log]\nlevel = "{args.log_level}"\n' + extra
        )
        path = os.path.join(data, "nyx.toml")
        write(path, text)
        return path

    # nyx-daemon refuses to run as root unless told to (CI containers run as root).
    root = ["--allow-root"] if os.geteuid() == 0 else []
    lines = []
    for name, addr in auths:
        path = config(name, addr, True, [])
        keys = os.path.join(nodes, name, "keys")
        kept = os.path.join(args.authority_keys, name) if args.authority_keys else None
        if kept and os.path.isdir(kept):
            shutil.copytree(kept, keys, dirs_exist_ok=True)
        out = subprocess.run([args.daemon, "--config", path, "--authority-line", *root],
                             check=True, capture_output=True, text=True)
        lines.append(out.stdout.strip())
        if kept and not os.path.isdir(kept):
            shutil.copytree(keys, kept)
    hosts = {}
    period = f'[authority]\nenabled = true\nperiod = "{args.period_s}s"\n'
    for name, addr in auths:
        path = config(name, addr, True, lines, period)
        hosts[name] = host(addr, [process(args.daemon, ["--config", path, *root], 1)])
    for name, addr in relays:
        path = config(name, addr, True, lines)
        hosts[name] = host(addr, [process(args.daemon, ["--config", path, *root], 2)])

    def client_daemon(name, addr):
        path = config(name, addr, False, lines)
        return [process(args.daemon, ["--config", path, *root], 3)]

    hosts.update(common_hosts(args, www, specs, clients, client_daemon, args.start_s))
    return shadow_yaml(args, hosts, args.start_s)


TOR_COMMON = """TestingTorNetwork 1
DataDirectory {data}
Log notice file {data}/notice.log
RunAsDaemon 0
ShutdownWaitLength 0
SafeLogging 0
DisableDebuggerAttachment 0
TestingDirAuthVoteExit *
TestingDirAuthVoteGuard *
TestingDirAuthVoteHSDir *
V3AuthVotingInterval 10 seconds
V3AuthVoteDelay 2 seconds
V3AuthDistDelay 2 seconds
TestingV3AuthInitialVotingInterval 10 seconds
TestingV3AuthInitialVoteDelay 2 seconds
TestingV3AuthInitialDistDelay 2 seconds
TestingV3AuthVotingStartOffset 0
AssumeReachable 1
"""


def tor_network(args, base, www, specs):
    """torrcs, authority keys and shadow.yaml of a private Tor network of the same shape."""
    auths, relays, clients = hosts_of(args)
    nodes = os.path.join(base, "nodes")
    dir_lines = []
    for name, addr in auths:
        data = os.path.join(nodes, name)
        keys = os.path.join(data, "keys")
        os.makedirs(keys, mode=0o700, exist_ok=True)
        subprocess.run(["tor-gencert", "--create-identity-key", "-m", "24", "-a",
                        f"{addr}:{TOR_DIR_PORT}", "--passphrase-fd", "0"],
                       cwd=keys, input="\n", check=True, capture_output=True, text=True)
        torrc = os.path.join(data, "torrc")
        write(torrc, TOR_COMMON.format(data=data) + f"ORPort {addr}:{TOR_OR_PORT}\n"
              "DirAuthority placeholder 127.0.0.1:1 ffffffffffffffffffffffffffffffffffffffff\n")
        subprocess.run([args.tor, "-f", torrc, "--list-fingerprint", "--quiet"],
                       check=False, capture_output=True, text=True)
        with open(os.path.join(data, "fingerprint")) as f:
            fp = f.read().split()[1]
        with open(os.path.join(keys, "authority_certificate")) as f:
            v3 = next(line.split()[1] for line in f if line.startswith("fingerprint"))
        dir_lines.append(f"DirAuthority {name} orport={TOR_OR_PORT} no-v2 v3ident={v3} "
                         f"{addr}:{TOR_DIR_PORT} {fp}")
    authorities = "\n".join(dir_lines) + "\n"
    # Clients judge exits by the policy summaries of microdescriptors, which count only
    # ports open to (nearly) every address: a policy for the server's address alone would
    # summarise as "reject" and leave the clients without exits.
    exit_policy = f"ExitPolicy accept *:{SERVER_PORT}\nExitPolicy reject *:*\n" \
                  "ExitPolicyRejectPrivate 0\nExitRelay 1\n"

    def relay_torrc(name, addr, extra):
        data = os.path.join(nodes, name)
        os.makedirs(data, mode=0o700, exist_ok=True)
        torrc = os.path.join(data, "torrc")
        write(torrc, TOR_COMMON.format(data=data) + authorities + exit_policy +
              f"Nickname {name}\nAddress {addr}\nORPort {addr}:{TOR_OR_PORT}\n"
              f"DirPort {addr}:{TOR_DIR_PORT}\nSocksPort 0\nContactInfo {name}@sim\n" + extra)
        return torrc

    hosts = {}
    for name, addr in auths:
        torrc = relay_torrc(name, addr, "AuthoritativeDirectory 1\nV3AuthoritativeDirectory 1\n")
        hosts[name] = host(addr, [process(args.tor, ["-f", torrc], 1)])
    for name, addr in relays:
        torrc = relay_torrc(name, addr, "")
        hosts[name] = host(addr, [process(args.tor, ["-f", torrc], 2)])

    def client_tor(name, addr):
        data = os.path.join(nodes, name)
        os.makedirs(data, mode=0o700, exist_ok=True)
        torrc = os.path.join(data, "torrc")
        common = TOR_COMMON.replace("AssumeReachable 1\n", "")
        write(torrc, common.format(data=data) + authorities +
              f"SocksPort {SOCKS}\nClientOnly 1\n")
        return [process(args.tor, ["-f", torrc], max(3, args.tor_start_s - 30))]

    hosts.update(common_hosts(args, www, specs, clients, client_tor, args.tor_start_s))
    return shadow_yaml(args, hosts, args.tor_start_s)


def run_shadow(shadow, base):
    data = os.path.join(base, "shadow.data")
    shutil.rmtree(data, ignore_errors=True)
    began = time.monotonic()
    with open(os.path.join(base, "shadow.log"), "w") as log:
        rc = subprocess.run([shadow, "--data-directory", data, "shadow.yaml"], cwd=base,
                            stdout=log, stderr=subprocess.STDOUT).returncode
    return rc, time.monotonic() - began


def collect(base, clients):
    """Each client's records from its fetch process's stdout."""
    out = {}
    for name, _ in clients:
        folder = os.path.join(base, "shadow.data", "hosts", name)
        records = []
        if os.path.isdir(folder):
            for f in sorted(os.listdir(folder)):
                if f.startswith("python") and f.endswith(".stdout"):
                    with open(os.path.join(folder, f)) as fh:
                        records += [json.loads(line) for line in fh if line.startswith("{")]
        out[name] = records
    return out


def summarize(records, size):
    ttfb, goodput, connect, failed, ready = [], [], [], 0, 0
    for rs in records.values():
        for r in rs:
            if "ready" in r:
                ready += 1 if r["ready"] else 0
            elif not r.get("ok"):
                failed += 1
            elif r["size"] == size:
                goodput.append(r["goodput"])
                connect.append(r["connect_s"])
            else:
                ttfb.append(r["ttfb_s"])
                connect.append(r["connect_s"])
    med = lambda xs: round(statistics.median(xs), 4) if xs else None
    return {"clients_ready": ready, "failed": failed, "downloads": len(goodput),
            "goodput_mb_s": med(goodput), "ttfb_s": med(ttfb), "connect_s": med(connect)}


def main(argv):
    args = parse_args(argv)
    shadow = os.environ.get("SHADOW") or shutil.which("shadow")
    if not shadow and not args.generate_only:
        print("experiment: no Shadow (set SHADOW or put shadow on the PATH)", file=sys.stderr)
        return 2
    nets = [n.strip() for n in args.nets.split(",") if n.strip()]
    for net in nets:
        if net not in ("nyx-udp", "nyx-quic", "tor"):
            print(f"experiment: unknown net {net!r}", file=sys.stderr)
            return 2
    if any(n.startswith("nyx") for n in nets) and not os.access(args.daemon, os.X_OK):
        print(f"experiment: {args.daemon} missing: cargo build --release -p nyx-daemon",
              file=sys.stderr)
        return 2
    shutil.rmtree(args.dir, ignore_errors=True)
    os.makedirs(args.dir)
    www, specs = make_files(args, args.dir)
    _, _, clients = hosts_of(args)
    summary = {"args": {k: v for k, v in vars(args).items() if k not in ("dir",)}, "nets": {}}
    status = 0
    for net in nets:
        base = os.path.join(args.dir, net)
        os.makedirs(base)
        if net == "tor":
            yaml = tor_network(args, base, www, specs)
        else:
            yaml = nyx_network(args, base, net.split("-")[1], www, specs)
        write(os.path.join(base, "shadow.yaml"), yaml)
        if args.generate_only:
            continue
        rc, wall = run_shadow(shadow, base)
        records = collect(base, clients)
        result = summarize(records, args.size)
        result.update({"shadow_rc": rc, "wall_s": round(wall, 1)})
        summary["nets"][net] = result
        write(os.path.join(base, "results.json"), json.dumps(records, indent=1))
        print(f"{net}: {json.dumps(result)}", flush=True)
        for name, rs in records.items():
            line = " ".join(
                f"{r['name']}:{'ok' if r.get('ok') else 'FAIL'}"
                f"/ttfb={r.get('ttfb_s')}/gp={r.get('goodput')}/open={r.get('connect_s')}"
                for r in rs if "name" in r)
            print(f"  {name}: {line}")
        if rc != 0 or result["failed"] or result["clients_ready"] < args.clients:
            status = 1
    tor = summary["nets"].get("tor", {})
    for net, r in summary["nets"].items():
        if net != "tor" and tor.get("goodput_mb_s") and r.get("goodput_mb_s"):
            r["goodput_vs_tor"] = round(r["goodput_mb_s"] / tor["goodput_mb_s"], 2)
            print(f"{net}/tor goodput {r['goodput_vs_tor']}")
    write(os.path.join(args.dir, "summary.json"), json.dumps(summary, indent=1))
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
