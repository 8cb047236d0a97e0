#!/usr/bin/env bash
# usage: defaults.sh OUT_DIR NAME=SRC_ROOT ...: a clean baseline reference engine and one
# candidate engine per VARIANTS (default: clean mixed-dtype) on loopback; then, per NAME=SRC_ROOT
# in turn, the README's default `servegate gate` (GATES=a,b: only those gates) against each
# candidate with that source tree (its src first on PYTHONPATH), into OUT_DIR/NAME-VARIANT.json
# (mixed-dtype: NAME-mixed.json) and the store OUT_DIR/ttv.db (benchmarks/time_to_verdict.py
# reads it; DB_PER_TREE=1: OUT_DIR/NAME.db, one store per source tree, so that no tree reads a
# store another tree's schema wrote). One line per gate run in OUT_DIR/runs.txt: exit, wall, load.
# SERVE (words) goes to every `engine serve`: SERVE=--stock runs stock llama-cpp-python servers.
# EXTRA (words) goes to every `servegate gate`: EXTRA=--complete runs every gate after a failure.
set -u
read -r -a serve <<< "${SERVE:-}"
read -r -a extra <<< "${EXTRA:-}"
read -r -a variants <<< "${VARIANTS:-clean mixed-dtype}"
gates=()
[ -n "${GATES:-}" ] && gates=(--gates "$GATES")
out=$1; shift
mkdir -p "$out"
PY=${PY:-/work/main/.venv/bin/python}
port() { $PY -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }
pb=$(port)
$PY -m servegate engine serve "${serve[@]}" --variant clean --port $pb > "$out/engine-b.log" 2>&1 & pids=($!)
declare -A ports
for v in "${variants[@]}"; do
  ports[$v]=$(port)
  $PY -m servegate engine serve "${serve[@]}" --variant "$v" --port "${ports[$v]}" > "$out/engine-$v.log" 2>&1 &
  pids+=($!)
done
trap 'kill "${pids[@]}" 2>/dev/null; wait "${pids[@]}" 2>/dev/null' EXIT
for _ in $(seq 180); do
  up=1
  for p in $pb "${ports[@]}"; do curl -sf http://127.0.0.1:$p/v1/models >/dev/null || up=0; done
  [ $up = 1 ] && break; sleep 1
done
gate() {  # gate NAME SRC_ROOT CANDIDATE_PORT
  local t0 t1 rc db=$out/ttv.db
  [ "${DB_PER_TREE:-0}" = 1 ] && db=$out/${1%%-*}.db
  t0=$(date +%s.%N)
  PYTHONPATH="$2/src" $PY -m servegate gate --baseline http://127.0.0.1:$pb/v1 \
    --candidate http://127.0.0.1:$3/v1 "${gates[@]}" "${extra[@]}" --json "$out/$1.json" --db "$db" --quiet
  rc=$?; t1=$(date +%s.%N)
  echo "$1 rc=$rc wall=$(echo "$t1 - $t0" | bc) load=$(cut -d' ' -f1 /proc/loadavg) at=$(date -u +%H:%M:%S)" | tee -a "$out/runs.txt"
}
for spec in "$@"; do
  name=${spec%%=*}; src=${spec#*=}
  for v in "${variants[@]}"; do
    gate "$name-${v/mixed-dtype/mixed}" "$src" "${ports[$v]}"
  done
done
