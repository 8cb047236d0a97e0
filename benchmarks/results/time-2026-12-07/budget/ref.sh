#!/usr/bin/env bash
# usage: ref.sh OUT [NAME:BUDGET:VARIANT ...] (default: 5m-clean:5m:clean 5m-flash-attn:5m:flash-attn):
# a clean baseline reference engine and one candidate engine per variant named, on loopback,
# each stopped by its own PID at the end; then series.sh with each NAME:BUDGET against its
# variant's engine, into OUT.
set -u
out=$1; shift
mkdir -p "$out"
PY=/work/main/.venv/bin/python
port() { $PY -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }
specs=("$@"); [ ${#specs[@]} = 0 ] && specs=(5m-clean:5m:clean 5m-flash-attn:5m:flash-attn)
pb=$(port)
$PY -m servegate engine serve --variant clean --port $pb > "$out/engine-b.log" 2>&1 & pids=($!)
declare -A ports
for spec in "${specs[@]}"; do
  v=${spec##*:}
  [ -n "${ports[$v]:-}" ] && continue
  ports[$v]=$(port)
  $PY -m servegate engine serve --variant "$v" --port "${ports[$v]}" > "$out/engine-$v.log" 2>&1 & pids+=($!)
done
echo "${pids[*]}" > /tmp/ref-engines.pids
trap 'kill "${pids[@]}" 2>/dev/null; wait "${pids[@]}" 2>/dev/null' EXIT
for _ in $(seq 180); do
  up=1
  for p in $pb "${ports[@]}"; do curl -sf http://127.0.0.1:$p/v1/models >/dev/null || up=0; done
  [ $up = 1 ] && break; sleep 1
done
runs=()
for spec in "${specs[@]}"; do runs+=("${spec%:*}:${ports[${spec##*:}]}"); done
bash /work/main/benchmarks/results/time-2026-12-07/budget/series.sh "$out" $pb "${runs[@]}"
