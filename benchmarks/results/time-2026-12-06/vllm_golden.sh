#!/usr/bin/env bash
# usage: vllm_golden.sh OUT_DIR [RUN ...]: four real vLLM 0.32.0 servers on loopback (`bash
# scripts/setup.sh vllm 0.32.0` first), each stopped by its own PID: a bf16 baseline, a second
# bf16 one (A/A), `--dtype float32` (harmless) and the mixed-dtype weights (every answer commas).
# Then each RUN, a `servegate gate --gates golden` with `golden_concurrency` set:
#   aa-auto fp32-auto mixed-auto aa-1 fp32-1 mixed-1   (CANDIDATE-CONCURRENCY; auto measures)
#   default-auto                                       (the README's default gate, A/A)
# into OUT_DIR/RUN.json and the store OUT_DIR/ttv.db; one line per run in OUT_DIR/runs.txt.
set -u
out=$1; shift
mkdir -p "$out"
PY=${PY:-/work/main/.venv/bin/python}
VPY=/work/main/.venv-vllm-0.32.0/bin/python
port() { $PY -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }
declare -A ports pids
ports[b]=$(port); ports[aa]=$(port); ports[fp32]=$(port); ports[mixed]=$(port)
t0=$(date +%s)
$VPY -m servegate.engine.vllm_model serve --port ${ports[b]} > "$out/engine-b.log" 2>&1 & pids[b]=$!
$VPY -m servegate.engine.vllm_model serve --port ${ports[aa]} > "$out/engine-aa.log" 2>&1 & pids[aa]=$!
$VPY -m servegate.engine.vllm_model serve --port ${ports[fp32]} --dtype float32 > "$out/engine-fp32.log" 2>&1 & pids[fp32]=$!
$VPY -m servegate.engine.vllm_model serve --port ${ports[mixed]} --variant mixed-dtype > "$out/engine-mixed.log" 2>&1 & pids[mixed]=$!
trap 'kill ${pids[*]} 2>/dev/null; wait ${pids[*]} 2>/dev/null' EXIT
for _ in $(seq 900); do
  up=0; for k in b aa fp32 mixed; do curl -sf http://127.0.0.1:${ports[$k]}/v1/models >/dev/null && up=$((up+1)); done
  [ $up = 4 ] && break; sleep 1
done
echo "started $up of 4 in $(( $(date +%s) - t0 )) s" | tee -a "$out/runs.txt"
for run in "$@"; do
  cand=${run%-*}; width=${run##*-}; gates="golden"
  [ "$cand" = default ] && { cand=aa; gates="startup,numerics,embeddings,golden,sampling,context,performance"; }
  cat > "$out/$run.yaml" <<YAML
baseline: {url: "http://127.0.0.1:${ports[b]}/v1"}
candidate: {url: "http://127.0.0.1:${ports[$cand]}/v1"}
gates: [${gates}]
golden_concurrency: ${width}
YAML
  t1=$(date +%s.%N)
  $PY -m servegate gate --config "$out/$run.yaml" --json "$out/$run.json" --db "$out/ttv.db" --quiet
  rc=$?; t2=$(date +%s.%N)
  echo "$run rc=$rc wall=$(echo "$t2 - $t1" | bc) load=$(cut -d' ' -f1 /proc/loadavg) at=$(date -u +%H:%M:%S)" | tee -a "$out/runs.txt"
done
