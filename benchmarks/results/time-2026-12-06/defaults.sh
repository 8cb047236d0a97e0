#!/usr/bin/env bash
# usage: defaults.sh OUT_DIR NAME=SRC_ROOT ...: two clean reference engines and a mixed-dtype one
# on loopback; then, per NAME=SRC_ROOT in turn, the README's default `servegate gate` clean vs
# clean with that source tree (its src first on PYTHONPATH), into OUT_DIR/NAME-clean.json and
# the store OUT_DIR/ttv.db (benchmarks/time_to_verdict.py reads it), and clean vs mixed-dtype
# into OUT_DIR/NAME-mixed.json. One line per gate run in OUT_DIR/runs.txt: exit, wall, load.
# SERVE (words) goes to every `engine serve`: SERVE=--stock runs stock llama-cpp-python servers.
set -u
read -r -a serve <<< "${SERVE:-}"
out=$1; shift
mkdir -p "$out"
PY=${PY:-/work/main/.venv/bin/python}
port() { $PY -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }
pb=$(port); pc=$(port); pm=$(port)
$PY -m servegate engine serve "${serve[@]}" --variant clean --port $pb > "$out/engine-b.log" 2>&1 & b=$!
$PY -m servegate engine serve "${serve[@]}" --variant clean --port $pc > "$out/engine-c.log" 2>&1 & c=$!
$PY -m servegate engine serve "${serve[@]}" --variant mixed-dtype --port $pm > "$out/engine-m.log" 2>&1 & m=$!
trap 'kill $b $c $m 2>/dev/null; wait $b $c $m 2>/dev/null' EXIT
for _ in $(seq 180); do
  curl -sf http://127.0.0.1:$pb/v1/models >/dev/null && curl -sf http://127.0.0.1:$pc/v1/models >/dev/null \
    && curl -sf http://127.0.0.1:$pm/v1/models >/dev/null && break; sleep 1
done
gate() {  # gate NAME SRC_ROOT CANDIDATE_PORT
  local t0 t1 rc
  t0=$(date +%s.%N)
  PYTHONPATH="$2/src" $PY -m servegate gate --baseline http://127.0.0.1:$pb/v1 \
    --candidate http://127.0.0.1:$3/v1 --json "$out/$1.json" --db "$out/ttv.db" --quiet
  rc=$?; t1=$(date +%s.%N)
  echo "$1 rc=$rc wall=$(echo "$t1 - $t0" | bc) load=$(cut -d' ' -f1 /proc/loadavg) at=$(date -u +%H:%M:%S)" | tee -a "$out/runs.txt"
}
for spec in "$@"; do
  name=${spec%%=*}; src=${spec#*=}
  gate "$name-clean" "$src" $pc
  gate "$name-mixed" "$src" $pm
done
