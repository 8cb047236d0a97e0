#!/usr/bin/env bash
# usage: vllm.sh [NAME:BUDGET ...] (default: 5m-clean:5m full-clean:full): two real vLLM 0.32.0
# servers (`bash scripts/setup.sh vllm` first) on loopback, each stopped by its own PID at the
# end, then series.sh with each NAME:BUDGET against them, into budget/vllm/.
set -u
out=/work/main/benchmarks/results/time-2026-12-07/budget/vllm
mkdir -p $out
PY=/work/main/.venv/bin/python
VPY=/work/main/.venv-vllm-0.32.0/bin/python
port() { $PY -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }
pb=$(port); pc=$(port)
t0=$(date +%s)
$VPY -m servegate.engine.vllm_model serve --port $pb > $out/engine-b.log 2>&1 & b=$!
$VPY -m servegate.engine.vllm_model serve --port $pc > $out/engine-c.log 2>&1 & c=$!
echo "$b $c" > /tmp/vllm-engines.pids
trap 'kill $b $c 2>/dev/null; wait $b $c 2>/dev/null' EXIT
for _ in $(seq 600); do
  curl -sf http://127.0.0.1:$pb/v1/models >/dev/null && curl -sf http://127.0.0.1:$pc/v1/models >/dev/null && break; sleep 1
done
echo "started both in $(( $(date +%s) - t0 )) s" | tee -a $out/runs.txt
specs=("$@"); [ ${#specs[@]} = 0 ] && specs=(5m-clean:5m full-clean:full)
bash /work/main/benchmarks/results/time-2026-12-07/budget/series.sh $out $pb "${specs[@]/%/:$pc}"
