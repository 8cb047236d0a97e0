#!/usr/bin/env bash
# usage: run.sh OUT BUDGET [NAME ...] (default: aa slow batch-corrupt): the performance gate alone
# under `--budget BUDGET` (`--gates performance`: the planner scales its requests a block and
# its looks to the budget, down to its smallest plan) between two reference engines, the
# candidate behind the fault layer for slow (200 ms) and batch-corrupt; then the same without a
# budget. Each report OUT/NAME-BUDGET.json and OUT/NAME-full.json, the store OUT/ttv.db, one
# line per run in OUT/runs.txt. Engines and proxies are stopped by their own PIDs.
set -u
out=$1; budget=$2; shift 2
names=("$@"); [ ${#names[@]} = 0 ] && names=(aa slow batch-corrupt)
mkdir -p "$out"
PY=/work/main/.venv/bin/python
port() { $PY -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }
pb=$(port); pc=$(port)
$PY -m servegate engine serve --variant clean --port "$pb" > "$out/engine-b.log" 2>&1 & pids=($!)
$PY -m servegate engine serve --variant clean --port "$pc" > "$out/engine-c.log" 2>&1 & pids+=($!)
trap 'kill "${pids[@]}" 2>/dev/null; wait "${pids[@]}" 2>/dev/null' EXIT
declare -A ports=([aa]=$pc)
for f in slow batch-corrupt; do
  ports[$f]=$(port)
  $PY -m servegate.engine.faults "$f" --port "${ports[$f]}" --upstream "http://127.0.0.1:$pc" \
    > "$out/fault-$f.log" 2>&1 & pids+=($!)
done
for _ in $(seq 180); do
  ok=1; for p in $pb "${ports[@]}"; do curl -sf "http://127.0.0.1:$p/v1/models" >/dev/null || ok=0; done
  [ $ok = 1 ] && break; sleep 1
done
for b in "$budget" full; do
  for name in "${names[@]}"; do
    args=(); [ "$b" != full ] && args=(--budget "$b")
    t0=$(date +%s.%N)
    $PY -m servegate gate --baseline "http://127.0.0.1:$pb/v1" --candidate "http://127.0.0.1:${ports[$name]}/v1" \
      --gates performance "${args[@]}" --json "$out/$name-$b.json" --db "$out/ttv.db" --quiet
    rc=$?; t1=$(date +%s.%N)
    echo "$name-$b rc=$rc wall=$(echo "$t1 - $t0" | bc) load=$(cut -d' ' -f1 /proc/loadavg) at=$(date -u +%H:%M:%S)" | tee -a "$out/runs.txt"
  done
done
