#!/usr/bin/env bash
# Session 12 on the GPU machine: a SIGTERM whose KeyboardInterrupt Python drops (it comes while a weakref
# callback runs, as importlib's module-lock callback runs in every import) while `run` still imports must still
# answer `interrupted` (130, one JSON object) before ncu starts; before the fix the command ran the program to
# its end and exited 0. Then the guard of a real run: /bin/sh, and the GPU free after.
#   bash devtools/gpu_dropped_signal.sh OUTDIR     (needs nvcc, ncu, nvidia-smi; PYTHONPATH set by the caller)
set -u
OUT=${1:?outdir}; mkdir -p "$OUT"; LOG="$OUT/dropped_signal.log"
W=/tmp/nw; mkdir -p "$W"
exec > >(tee -a "$LOG") 2>&1
[ -x "$W/app" ] || nvcc -O2 -arch=sm_90 -o "$W/app" tests/gpu/kernels.cu || exit 1
for module in nsightwrap.cli.run nsightwrap.fallback.session; do
  echo "== $(date +%T) SIGTERM dropped while importing $module: run --json -- app hang 60"
  t0=$(date +%s.%N)
  timeout 120 python3 tests/cli/dropped_signal.py "$module" run --json -q -o "$W/dropped" -- "$W/app" hang 60 > "$W/drop.out" 2> "$W/drop.err"
  rc=$?
  echo "rc=$rc in $(python3 -c "print(round($(date +%s.%N) - $t0, 2))") s; stdout: $(cat "$W/drop.out")"
  echo "stderr: $(tr '\n' ' ' < "$W/drop.err" | cut -c1-300)"
  echo "reports written: $(ls "$W"/dropped* 2>/dev/null | wc -l)"
done
echo "== $(date +%T) the guard of a real run (app two):"
python3 -m nsightwrap run --json -q -o "$W/guarded" -- "$W/app" two > "$W/guarded.out" 2>&1 &
NW=$!
for i in $(seq 1 40); do g=$(ps -ww -eo pid,ppid,cmd | awk -v p=$NW '$2 == p' | grep -E "nsightwrap-guard" | cut -c1-60); [ -n "$g" ] && break; sleep 0.1; done
echo "guard: ${g:-not seen}"
wait $NW; echo "run rc=$? $(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(d["status"], [k["name"] for k in d["kernels"]])' "$W/guarded.out")"
echo "== nvidia-smi compute apps: $(nvidia-smi --query-compute-apps=pid,process_name --format=csv,noheader | tr '\n' ' ')"
echo "== end $(date +%T)"
