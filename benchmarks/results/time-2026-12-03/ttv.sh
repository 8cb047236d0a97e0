#!/usr/bin/env bash
# usage: ttv.sh SRC_ROOT OUT_JSON CANDIDATE_VARIANT [extra gate args...]: two reference engines, one default gate
set -u
src=$1; out=$2; variant=$3; shift 3
export PYTHONPATH="$src/src"
PY=/work/main/.venv/bin/python
p1=$($PY -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])')
p2=$($PY -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])')
$PY -m servegate engine serve --variant clean --port $p1 > /tmp/ttv-b.log 2>&1 & b=$!
$PY -m servegate engine serve --variant $variant --port $p2 > /tmp/ttv-c.log 2>&1 & c=$!
trap 'kill $b $c 2>/dev/null; wait $b $c 2>/dev/null' EXIT
for i in $(seq 120); do curl -sf http://127.0.0.1:$p1/v1/models >/dev/null && curl -sf http://127.0.0.1:$p2/v1/models >/dev/null && break; sleep 1; done
t0=$(date +%s.%N)
$PY -m servegate gate --baseline http://127.0.0.1:$p1/v1 --candidate http://127.0.0.1:$p2/v1 --json "$out" --no-store --quiet "$@"
rc=$?
t1=$(date +%s.%N)
echo "variant=$variant rc=$rc wall=$(echo "$t1 - $t0" | bc)"
