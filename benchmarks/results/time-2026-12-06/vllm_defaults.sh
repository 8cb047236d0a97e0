#!/usr/bin/env bash
# usage: vllm_defaults.sh OUT_DIR [VERSION]: two real vLLM servers of the same version (default
# 0.32.0, `bash scripts/setup.sh vllm VERSION` first) on loopback, each stopped by its own PID,
# then the README's default `servegate gate` between them into OUT_DIR/clean.json and the store
# OUT_DIR/ttv.db (benchmarks/time_to_verdict.py reads it). One line in OUT_DIR/runs.txt: exit,
# wall, load; the servers' start-up seconds too.
set -u
out=$1; version=${2:-0.32.0}
mkdir -p "$out"
PY=${PY:-/work/main/.venv/bin/python}
VPY=/work/main/.venv-vllm-$version/bin/python
port() { $PY -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }
pb=$(port); pc=$(port)
t0=$(date +%s)
$VPY -m servegate.engine.vllm_model serve --port $pb > "$out/engine-b.log" 2>&1 & b=$!
$VPY -m servegate.engine.vllm_model serve --port $pc > "$out/engine-c.log" 2>&1 & c=$!
trap 'kill $b $c 2>/dev/null; wait $b $c 2>/dev/null' EXIT
for _ in $(seq 600); do
  curl -sf http://127.0.0.1:$pb/v1/models >/dev/null && curl -sf http://127.0.0.1:$pc/v1/models >/dev/null && break; sleep 1
done
echo "started both in $(( $(date +%s) - t0 )) s" | tee -a "$out/runs.txt"
t0=$(date +%s.%N)
$PY -m servegate gate --baseline http://127.0.0.1:$pb/v1 --candidate http://127.0.0.1:$pc/v1 \
  --json "$out/clean.json" --db "$out/ttv.db" --quiet
rc=$?; t1=$(date +%s.%N)
echo "clean rc=$rc wall=$(echo "$t1 - $t0" | bc) load=$(cut -d' ' -f1 /proc/loadavg) at=$(date -u +%H:%M:%S)" | tee -a "$out/runs.txt"
