#!/usr/bin/env bash
# usage: series.sh OUT BASELINE_PORT NAME:BUDGET:PORT ...: the README's default `servegate gate`
# against engines already running on loopback (started by defaults.sh or `servegate engine
# serve`), one run per NAME:BUDGET:PORT in turn: BUDGET a `--budget` duration, or "full" for
# none; each report OUT/NAME.json, the store OUT/ttv.db, one line per run in OUT/runs.txt.
set -u
out=$1; pb=$2; shift 2
mkdir -p "$out"
PY=${PY:-/work/main/.venv/bin/python}
for spec in "$@"; do
  IFS=: read -r name budget port <<< "$spec"
  args=()
  [ "$budget" != full ] && args=(--budget "$budget")
  t0=$(date +%s.%N)
  $PY -m servegate gate --baseline http://127.0.0.1:$pb/v1 --candidate http://127.0.0.1:$port/v1 \
    "${args[@]}" --json "$out/$name.json" --db "$out/ttv.db" --quiet
  rc=$?; t1=$(date +%s.%N)
  echo "$name rc=$rc wall=$(echo "$t1 - $t0" | bc) load=$(cut -d' ' -f1 /proc/loadavg) at=$(date -u +%H:%M:%S)" | tee -a "$out/runs.txt"
done
