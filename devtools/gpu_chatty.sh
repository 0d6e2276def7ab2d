#!/usr/bin/env bash
# Issue 11 on the GPU machine: a program that prints every 150 ms while its kernels are
# profiled (tests/gpu/kernels.cu `chatty 3`: 3 vec_add + 3 spin_cycles). With ncu's own
# channel (--log-file) every kernel must be counted and every program line passed through.
set -u
W=/tmp/nw; mkdir -p "$W"
[ -x "$W/app" ] || nvcc -O2 -arch=sm_90 -o "$W/app" tests/gpu/kernels.cu || exit 1
timeout 150 python3 -m nsightwrap run --json --set basic -o "$W/chatty" -- "$W/app" chatty 3 \
  2> "$W/chatty.err" > "$W/chatty.json"
echo "rc=$?"
python3 - "$W/chatty.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
print("chatty:", d["status"], len(d["kernels"]), "kernels:", [k["name"] for k in d["kernels"]])
PY
echo "program lines passed through: $(grep -c 'loss 0.5' "$W/chatty.err")"
grep -n -m 4 -E 'loss|Profiling' "$W/chatty.err"
