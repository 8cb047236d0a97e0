#!/usr/bin/env bash
# usage: perfseq.sh BEFORE_SRC AFTER_SRC OUT_DIR ROUNDS SLOW_ROUNDS [B_PORT C_PORT S_PORT]
# Three reference engines on loopback (clean baseline, clean candidate, clean behind the slow
# fault at 300 ms, as tests/integration/test_performance_engine.py uses it), started here
# unless their ports are given; then ROUNDS rounds, each under the shared heavy lock: clean vs
# clean with the code before and after (the order alternating by round) and, in the first
# SLOW_ROUNDS rounds, clean vs slow before and after. `servegate gate --gates performance`,
# default settings; wall time is measured inside the lock.
set -u
before=$1; after=$2; out=$3; rounds=$4; slow=$5
mkdir -p "$out"
export PY=${PY:-.venv/bin/python} OUT=$out
port() { $PY -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }
if [ $# -ge 8 ]; then
  export P1=$6 P2=$7 P3=$8
else
  export P1=$(port) P2=$(port) P3=$(port)
  $PY -m servegate engine serve --variant clean --port $P1 > "$out/engine-b.log" 2>&1 & b=$!
  $PY -m servegate engine serve --variant clean --port $P2 > "$out/engine-c.log" 2>&1 & c=$!
  $PY -m servegate engine serve --variant clean --fault slow --delay-ms 300 --port $P3 \
    > "$out/engine-s.log" 2>&1 & s=$!
  trap 'kill $b $c $s 2>/dev/null; wait $b $c $s 2>/dev/null' EXIT
fi
for i in $(seq 180); do
  curl -sf http://127.0.0.1:$P1/v1/models >/dev/null && curl -sf http://127.0.0.1:$P2/v1/models >/dev/null \
    && curl -sf http://127.0.0.1:$P3/v1/models >/dev/null && break; sleep 1
done
gate() {  # gate NAME SRC CANDIDATE_PORT
  local t0 t1 rc
  t0=$(date +%s.%N)
  PYTHONPATH="$2" $PY -m servegate gate --baseline http://127.0.0.1:$P1/v1 \
    --candidate http://127.0.0.1:$3/v1 --gates performance --json "$OUT/$1.json" --no-store --quiet
  rc=$?
  t1=$(date +%s.%N)
  echo "$1 rc=$rc wall=$(echo "$t1 - $t0" | bc) load=$(cut -d' ' -f1 /proc/loadavg) at=$(date -u +%H:%M:%S)" | tee -a "$OUT/runs.txt"
}
export -f gate
for i in $(seq "$rounds"); do
  cmds=""
  if [ $((i % 2)) -eq 1 ]; then cmds="gate aa-before-$i $before \$P2; gate aa-after-$i $after \$P2"
  else cmds="gate aa-after-$i $after \$P2; gate aa-before-$i $before \$P2"; fi
  if [ "$i" -le "$slow" ]; then cmds="$cmds; gate slow-before-$i $before \$P3; gate slow-after-$i $after \$P3"; fi
  flock /tmp/servegate-heavy.lock bash -c "$cmds"
done
