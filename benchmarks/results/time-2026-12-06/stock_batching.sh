#!/usr/bin/env bash
# usage: stock_batching.sh OUT_DIR: two stock llama-cpp-python servers on loopback (`servegate
# engine serve --stock`), each stopped by its own PID, and `servegate gate --gates golden
# --category canary` between them with `golden_concurrency: auto`: what golden measures of
# their batching (OUT_DIR/auto.json, the golden details' `batching`).
set -u
out=$1; mkdir -p "$out"
PY=${PY:-/work/main/.venv/bin/python}
port() { $PY -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }
pb=$(port); pc=$(port)
$PY -m servegate engine serve --stock --variant clean --port $pb > "$out/engine-b.log" 2>&1 & b=$!
$PY -m servegate engine serve --stock --variant clean --port $pc > "$out/engine-c.log" 2>&1 & c=$!
trap 'kill $b $c 2>/dev/null; wait $b $c 2>/dev/null' EXIT
for _ in $(seq 180); do
  curl -sf http://127.0.0.1:$pb/v1/models >/dev/null && curl -sf http://127.0.0.1:$pc/v1/models >/dev/null && break; sleep 1
done
printf 'golden_concurrency: auto\n' > "$out/auto.yaml"
$PY -m servegate gate --config "$out/auto.yaml" --baseline http://127.0.0.1:$pb/v1 \
  --candidate http://127.0.0.1:$pc/v1 --gates golden --category canary --json "$out/auto.json" --no-store --quiet
echo "auto rc=$? at=$(date -u +%H:%M:%S)" | tee -a "$out/runs.txt"
