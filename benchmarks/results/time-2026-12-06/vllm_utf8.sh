#!/usr/bin/env bash
# usage: vllm_utf8.sh OUT_DIR [RUN ...]: two real vLLM 0.32.0 servers on loopback and the fault
# layer's stream-utf8 in front of the first (every non-ASCII character of a streamed delta
# becomes U+FFFD per byte; plain answers untouched), each stopped by its own PID. RUN:
#   utf8-auto utf8-1   `--gates golden`, the first server against the fault in front of it (as
#                      tests/integration/test_vllm_engine.py does), golden_concurrency auto / 1
#   default-auto       the README's default gate between the two servers, auto
# into OUT_DIR/RUN.json and OUT_DIR/ttv.db; one line per run in OUT_DIR/runs.txt.
set -u
out=$1; shift
mkdir -p "$out"
PY=${PY:-/work/main/.venv/bin/python}
VPY=/work/main/.venv-vllm-0.32.0/bin/python
port() { $PY -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }
pb=$(port); pc=$(port); pf=$(port)
t0=$(date +%s)
$VPY -m servegate.engine.vllm_model serve --port $pb > "$out/engine-b.log" 2>&1 & b=$!
$VPY -m servegate.engine.vllm_model serve --port $pc > "$out/engine-c.log" 2>&1 & c=$!
$PY -m servegate.engine.faults stream-utf8 --port $pf --upstream http://127.0.0.1:$pb > "$out/fault.log" 2>&1 & f=$!
trap 'kill $b $c $f 2>/dev/null; wait $b $c $f 2>/dev/null' EXIT
for _ in $(seq 900); do
  curl -sf http://127.0.0.1:$pb/v1/models >/dev/null && curl -sf http://127.0.0.1:$pc/v1/models >/dev/null \
    && curl -sf http://127.0.0.1:$pf/v1/models >/dev/null && break; sleep 1
done
echo "started both and the fault in $(( $(date +%s) - t0 )) s" | tee -a "$out/runs.txt"
for run in "$@"; do
  width=${run##*-}
  case $run in
    utf8-*) cand=$pf; gates="golden" ;;
    default-*) cand=$pc; gates="startup,numerics,embeddings,golden,sampling,context,performance" ;;
  esac
  cat > "$out/$run.yaml" <<YAML
baseline: {url: "http://127.0.0.1:$pb/v1"}
candidate: {url: "http://127.0.0.1:$cand/v1"}
gates: [${gates}]
golden_concurrency: ${width}
YAML
  t1=$(date +%s.%N)
  $PY -m servegate gate --config "$out/$run.yaml" --json "$out/$run.json" --db "$out/ttv.db" --quiet
  rc=$?; t2=$(date +%s.%N)
  echo "$run rc=$rc wall=$(echo "$t2 - $t1" | bc) load=$(cut -d' ' -f1 /proc/loadavg) at=$(date -u +%H:%M:%S)" | tee -a "$out/runs.txt"
done
