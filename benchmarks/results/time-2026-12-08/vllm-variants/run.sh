#!/usr/bin/env bash
# usage: run.sh OUT BEFORE_ROOT AFTER_ROOT [STAGE ...]: RESULTS-vllm.md's variants and faults on
# real vLLM 0.32.0 (`bash scripts/setup.sh vllm` first), the gate of each source tree in turn
# (BEFORE_ROOT first; its src first on PYTHONPATH) against the same running servers:
#   bf16   a bf16 baseline and a second bf16 server: A/A, and the fault layer in front of the
#          candidate — stream-utf8 (correctness gates), hang-long (startup), slow and
#          batch-corrupt (performance, with an A/A performance run beside them);
#   fp32   the candidate restarted with `--dtype float32`;
#   mixed  the candidate restarted on the mixed-dtype weights;
#   complete  the mixed-dtype weights again, AFTER_ROOT alone with `--complete` (every gate run
#          after the critical finding), into OUT/complete-mixed.json and OUT/complete.db.
# Correctness gates: startup,numerics,golden,context (the sampling gate did not exist at the
# filing). Each report OUT/TREE-NAME.json, one store per tree (OUT/TREE.db), one line per run in
# OUT/runs.txt. Every server and proxy is stopped by its own PID.
set -u
out=$1; before=$2; after=$3; shift 3
stages=("$@"); [ ${#stages[@]} = 0 ] && stages=(bf16 fp32 mixed)
mkdir -p "$out"
PY=/work/main/.venv/bin/python
VPY=/work/main/.venv-vllm-0.32.0/bin/python
CORRECTNESS=startup,numerics,golden,context
port() { $PY -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }
pids=()
trap 'kill "${pids[@]}" 2>/dev/null; wait "${pids[@]}" 2>/dev/null' EXIT
up() { for _ in $(seq 900); do curl -sf "http://127.0.0.1:$1/v1/models" >/dev/null && return 0; sleep 1; done; return 1; }
serve() {  # serve NAME PORT [vllm_model args]: background, its PID in $last
  local name=$1 p=$2; shift 2
  $VPY -m servegate.engine.vllm_model serve --port "$p" "$@" > "$out/engine-$name.log" 2>&1 &
  last=$!; pids+=("$last")
}
stop() { kill "$@" 2>/dev/null; wait "$@" 2>/dev/null; }
trees=(before after)
gate() {  # gate NAME PORT GATES: each tree in turn
  local name=$1 p=$2 gates=$3 tree root t0 t1 rc extra
  for tree in "${trees[@]}"; do
    root=$before; [ $tree != before ] && root=$after
    extra=(); [ $tree = complete ] && extra=(--complete)
    t0=$(date +%s.%N)
    PYTHONPATH="$root/src" $PY -m servegate gate --baseline "http://127.0.0.1:$pb/v1" \
      --candidate "http://127.0.0.1:$p/v1" --gates "$gates" --json "$out/$tree-$name.json" \
      --db "$out/$tree.db" --quiet "${extra[@]}"
    rc=$?; t1=$(date +%s.%N)
    echo "$tree-$name rc=$rc wall=$(echo "$t1 - $t0" | bc) load=$(cut -d' ' -f1 /proc/loadavg) at=$(date -u +%H:%M:%S)" | tee -a "$out/runs.txt"
  done
}
pb=$(port); pc=$(port)
t0=$(date +%s)
serve baseline "$pb"
for stage in "${stages[@]}"; do
  t0=$(date +%s)
  case $stage in
    bf16) serve bf16 "$pc";;
    fp32) serve fp32 "$pc" --dtype float32;;
    mixed) serve mixed "$pc" --variant mixed-dtype;;
    complete) serve complete "$pc" --variant mixed-dtype; trees=(complete); stage=mixed;;
  esac
  cand=$last
  up "$pb" && up "$pc" || { echo "$stage: a server did not start" | tee -a "$out/runs.txt"; exit 1; }
  echo "$stage: up in $(( $(date +%s) - t0 )) s" | tee -a "$out/runs.txt"
  if [ "$stage" = bf16 ]; then
    gate aa "$pc" $CORRECTNESS
    declare -A fp
    proxies=()
    for f in stream-utf8 hang-long slow batch-corrupt; do
      fp[$f]=$(port)
      $PY -m servegate.engine.faults "$f" --port "${fp[$f]}" --upstream "http://127.0.0.1:$pc" \
        > "$out/fault-$f.log" 2>&1 &
      proxies+=($!); pids+=($!)
    done
    for f in "${!fp[@]}"; do up "${fp[$f]}"; done
    gate utf8 "${fp[stream-utf8]}" $CORRECTNESS
    gate hang-long "${fp[hang-long]}" startup
    gate aa-perf "$pc" performance
    gate slow "${fp[slow]}" performance
    gate batch-corrupt "${fp[batch-corrupt]}" performance
    stop "${proxies[@]}"
  else
    gate "$stage" "$pc" $CORRECTNESS
  fi
  stop "$cand"
done
