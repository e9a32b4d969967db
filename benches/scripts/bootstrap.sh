#!/bin/bash
# Bootstrap time of a new daemon joining a running `nyx testnet`.
# Usage (from the repository root, after `cargo build --release -p nyx-daemon --bins`):
#   benches/scripts/bootstrap.sh            # NODES=50 for a larger testnet
set -u
NYX=${NYX:-target/release/nyx}
# A throwaway daemon on loopback: allowed to run as root; microsecond log times to measure.
ROOT=$([ "$(id -u)" = 0 ] && echo --allow-root)
rm -rf ${DIR:-/tmp/nyx-bootstrap}; mkdir -p ${DIR:-/tmp/nyx-bootstrap}
t0=$(date +%s.%N)
$NYX --json testnet --dir ${DIR:-/tmp/nyx-bootstrap} --socks-port 0 --http-port 0 --nodes ${NODES:-5} > ${DIR:-/tmp/nyx-bootstrap}.json 2>${DIR:-/tmp/nyx-bootstrap}.err &
TN=$!
while [ ! -s ${DIR:-/tmp/nyx-bootstrap}.json ]; do sleep 0.2; if ! kill -0 $TN 2>/dev/null; then echo "testnet died"; cat ${DIR:-/tmp/nyx-bootstrap}.err | tail; exit 1; fi; done
t1=$(date +%s.%N)
echo "testnet of ${NODES:-5}: up (consensus lists every daemon, circuit built) after $(echo "$t1 - $t0" | bc) s"
auth=$(grep '^authorities' ${DIR:-/tmp/nyx-bootstrap}/node1/nyx.toml)
for run in 1 2 3 4 5; do
  d=${DIR:-/tmp/nyx-bootstrap}/new$run; mkdir -p $d; chmod 700 $d
  printf 'listen = ["127.0.0.200:0"]\ndata_dir = "%s"\nnickname = "new%s"\n[socks]\nenabled = false\n[log]\ntimestamps = "micros"\n[directory]\n%s\n' "$d" "$run" "$auth" > $d/nyx.toml
  s0=$(date +%s.%N)
  $NYX daemon $ROOT --config $d/nyx.toml > $d/out 2> $d/daemon.log &
  P=$!
  while ! grep -q "new consensus in force" $d/daemon.log 2>/dev/null; do sleep 0.05; done
  s1=$(date +%s.%N)
  echo "cold bootstrap $run: $(echo "$s1 - $s0" | bc) s (process start to consensus in force, polled every 50 ms)"
  python3 - "$d/daemon.log" <<'PY'
import sys, datetime
lines = open(sys.argv[1]).read().splitlines()
ts = lambda l: datetime.datetime.strptime(l[:26], "%Y-%m-%dT%H:%M:%S.%f")
done = next(l for l in lines if "new consensus in force" in l)
print("  from the first log line (keys made): %.1f ms" % ((ts(done) - ts(lines[0])).total_seconds() * 1000))
PY
  kill -TERM $P; wait $P
  # warm: same data dir, consensus on disk
  s0=$(date +%s.%N)
  $NYX daemon $ROOT --config $d/nyx.toml > $d/out2 2> $d/daemon2.log &
  P=$!
  while ! grep -q "nyx-daemon ready" $d/out2 2>/dev/null; do sleep 0.05; done
  s1=$(date +%s.%N)
  rel=$(grep -o 'nyx-daemon started relays=[0-9]*' $d/daemon2.log)
  echo "warm start $run: $(echo "$s1 - $s0" | bc) s to ready ($rel)"
  kill -TERM $P; wait $P
done
kill -INT $TN; wait $TN
