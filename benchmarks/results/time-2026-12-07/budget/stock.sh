#!/usr/bin/env bash
# usage: stock.sh [NAME:BUDGET ...] (default: 8m-clean:8m full-clean:full): two stock
# llama-cpp-python servers (clean, clean), then series.sh with each NAME:BUDGET against them;
# the engines stopped by PID at the end.
set -u
out=/work/main/benchmarks/results/time-2026-12-07/budget/stock
mkdir -p $out
PY=/work/main/.venv/bin/python
port() { $PY -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }
pb=$(port); pc=$(port)
$PY -m servegate engine serve --stock --variant clean --port $pb > $out/engine-b.log 2>&1 & b=$!
$PY -m servegate engine serve --stock --variant clean --port $pc > $out/engine-clean.log 2>&1 & c=$!
echo "$b $c" > /tmp/stock-engines.pids
trap 'kill $b $c 2>/dev/null; wait $b $c 2>/dev/null' EXIT
for _ in $(seq 180); do
  curl -sf http://127.0.0.1:$pb/v1/models >/dev/null && curl -sf http://127.0.0.1:$pc/v1/models >/dev/null && break; sleep 1
done
specs=("$@"); [ ${#specs[@]} = 0 ] && specs=(8m-clean:8m full-clean:full)
bash /work/main/benchmarks/results/time-2026-12-07/budget/series.sh $out $pb "${specs[@]/%/:$pc}"
