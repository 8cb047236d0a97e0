#!/usr/bin/env bash
# usage: stock_perfseq.sh BEFORE_SRC AFTER_SRC OUT_DIR ROUNDS SLOW_ROUNDS: perfseq.sh (the
# performance gate before and after its sequential looks) on three stock llama-cpp-python
# servers (`servegate engine serve --stock`, .venv-stock): clean, clean, clean behind the slow
# fault at 300 ms.
set -u
out=$3; mkdir -p "$out"
PY=${PY:-/work/main/.venv/bin/python}; export PY
port() { $PY -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }
p1=$(port); p2=$(port); p3=$(port)
$PY -m servegate engine serve --stock --variant clean --port $p1 > "$out/engine-b.log" 2>&1 & b=$!
$PY -m servegate engine serve --stock --variant clean --port $p2 > "$out/engine-c.log" 2>&1 & c=$!
$PY -m servegate engine serve --stock --variant clean --fault slow --delay-ms 300 --port $p3 \
  > "$out/engine-s.log" 2>&1 & s=$!
trap 'kill $b $c $s 2>/dev/null; wait $b $c $s 2>/dev/null' EXIT
bash "$(dirname "$0")/../perfseq-2026-12-03/perfseq.sh" "$1" "$2" "$out" "$4" "$5" $p1 $p2 $p3
