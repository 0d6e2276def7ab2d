#!/usr/bin/env bash
# Issue 11 on the GPU machine: SIGKILL `python -m nsightwrap run` during a real hang;
# 5 s later no process of the tree may be left and the GPU must be free, without
# `cleanup`; then a plain run of an ordinary program must work.
#   bash devtools/gpu_sigkill.sh OUTDIR     (needs nvcc, ncu, nvidia-smi; PYTHONPATH set by the caller)
set -u
OUT=${1:?outdir}; mkdir -p "$OUT"; LOG="$OUT/sigkill.log"
W=/tmp/nw; mkdir -p "$W"
exec > >(tee -a "$LOG") 2>&1
[ -x "$W/app" ] || nvcc -O2 -arch=sm_90 -o "$W/app" tests/gpu/kernels.cu || exit 1
tree_left() { ps -eo pid,ppid,etimes,cmd | grep -E "ncu|TreeLauncher|$W/app" | grep -v -E "grep|gpu_sigkill" ; }
echo "== $(date +%T) start: nsightwrap run --stall-timeout 60 -- app hang 60"
python3 -m nsightwrap run --stall-timeout 60 -o "$W/sigkill" -- "$W/app" hang 60 > "$W/run.out" 2>&1 &
NW=$!
for i in $(seq 1 60); do grep -q 'Profiling "wait_for_host"' "$W/run.out" && break; sleep 0.5; done
sleep 2
echo "== $(date +%T) hang reached (output so far):"; cat "$W/run.out"
echo "== tree before SIGKILL:"; tree_left
echo "== its guard: $(ps -ww -eo pid,ppid,cmd | awk -v p=$NW '$2 == p' | grep nsightwrap-guard | cut -c1-70)"
echo "== $(date +%T) kill -9 $NW"; kill -9 "$NW"
sleep 5
echo "== $(date +%T) 5 s after SIGKILL, processes of the tree left:"; left=$(tree_left); echo "${left:-none}"
echo "== nvidia-smi compute apps: $(nvidia-smi --query-compute-apps=pid,process_name --format=csv,noheader | tr '\n' ' ')"
echo "== $(date +%T) plain run of an ordinary program:"; timeout 60 "$W/app" ok; echo "rc=$?"
echo "== ncu run of an ordinary program:"; timeout 120 python3 -m nsightwrap run --json -o "$W/after" -- "$W/app" two | python3 -c 'import json,sys; d=json.load(sys.stdin); print(d["status"], [k["name"] for k in d["kernels"]])'
left=$(tree_left); [ -n "$left" ] && { echo "killing leftovers: $left"; echo "$left" | awk '{print $1}' | xargs -r kill -9; }
echo "== end $(date +%T)"
