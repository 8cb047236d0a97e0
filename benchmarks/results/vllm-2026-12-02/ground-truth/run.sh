#!/usr/bin/env bash
# Independent ground truth per vLLM path: prompt_logprobs on a hand-started baseline and on each
# candidate, paired by benchmarks/vllm_ground_truth.py (plain HTTP, no servegate gate code).
set -u
cd /work/main
PY=.venv-vllm-0.32.0/bin/python
OUT=/work/runs/gt
start() {  # port, flags... -> pid in $PID (own process group)
  local port=$1; shift
  setsid $PY -m servegate.engine.vllm_model serve --port "$port" "$@" > "$OUT/vllm-$port-$(date +%s).log" 2>&1 &
  PID=$!
  for _ in $(seq 1 300); do
    curl -sf "http://127.0.0.1:$port/v1/models" >/dev/null && return 0
    kill -0 $PID 2>/dev/null || return 1
    sleep 2
  done
  return 1
}
stop() { kill -TERM -- -"$1" 2>/dev/null; for _ in $(seq 1 30); do kill -0 "$1" 2>/dev/null || return 0; sleep 1; done; kill -KILL -- -"$1" 2>/dev/null; }
t0=$(date +%s)
start 18100 || { echo "baseline did not start"; exit 1; }
BASE=$PID; echo "baseline ready after $(( $(date +%s) - t0 )) s"
while IFS='|' read -r name flags; do
  t=$(date +%s)
  if eval start 18101 $flags; then
    echo "$name ready after $(( $(date +%s) - t )) s"
    .venv/bin/python benchmarks/vllm_ground_truth.py pair http://127.0.0.1:18100/v1 http://127.0.0.1:18101/v1 > "$OUT/$name.json"
    echo "$name scored: $(python3 -c "import json;d=json.load(open('$OUT/$name.json'))['texts']['joined'];print(d)")"
  else
    echo "$name did not start"
  fi
  stop $PID
done <<'PATHS'
eager|--enforce-eager
fp32|--dtype float32
no-prefix-caching|--no-enable-prefix-caching
no-chunked-prefill|--no-enable-chunked-prefill
kv-fp8|--kv-cache-dtype fp8
ngram-speculative|--speculative-config '{"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 3}'
PATHS
stop $BASE
echo "done in $(( $(date +%s) - t0 )) s"
