#!/usr/bin/env bash
# Issue 14 on the 2-GPU machine (nvidia-h100-x2): a 2-rank torchrun program (tests/gpu/multi_allreduce.py)
# whose NCCL all-reduce hangs under ncu when every rank is profiled.
#   0. the program alone (its own time), then raw ncu with the collectives left out (the program plus ncu's)
#   1. first walk:  python -m nsightwrap run --profile default --json -- torchrun --nproc-per-node 2 PROG
#   2. second walk: the same command (the hang store now knows the all-reduce)
#   3. SIGINT to nsightwrap in the middle of a third run
# After each step: the processes left (ps) and nvidia-smi --query-compute-apps=pid,name --format=csv.
# Each step runs under `timeout`; the whole script stays under 8 minutes; leftovers are killed at the end
# (and the log says so). NVLink multicast stays off for every program (exported below, never changed).
#   bash devtools/gpu_multi.sh OUTDIR          (repo root; needs torch, torchrun, ncu, nvidia-smi)
#   DRY=1 bash devtools/gpu_multi.sh OUTDIR    (CPU dry run: the fake ncu, torchrun and nvidia-smi of tests/)
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
OUT=${1:?outdir}; mkdir -p "$OUT"; LOG="$OUT/gpu_multi.log"
exec > >(tee -a "$LOG") 2>&1
exec 3>&1  # the log, for the script's own lines while a step's stdout goes to a file
W=$(mktemp -d /tmp/nw-multi.XXXXXX); STORE="$W/hangs.db"; LIMIT_S=${LIMIT_S:-470}
# Every process a step starts carries this tag; only those are looked for, and killed, as leftovers
# (on a shared machine, a dry run must never touch other people's processes).
TAG=$(basename "$W")
AR=ncclDevKernel_AllReduce_Sum_f32_RING_LL
if [ "${DRY:-0}" = 1 ]; then
  TORCHRUN=$PWD/tests/fake_dist/torchrun
  PROG=("$PWD/tests/fake_ncu/app.py" gemm softmax "$AR@collective" sleep:1 gemm softmax "$AR@collective" "$AR@collective")
  export NSIGHTWRAP_NCU=$PWD/tests/fake_ncu/ncu FAKE_NCU_SCALE=0.3 FAKE_GPU_TARGET=1 FAKE_SMI_GPUS=2
  export PATH="$PWD/tests/fake_nvidia_smi:$PATH" NSIGHTWRAP_CACHE_DIR=$W/cache
  NCU=$NSIGHTWRAP_NCU; EXTRA=(--stall-timeout 2); SETTLE=0.5
else
  TORCHRUN=torchrun; PROG=("$PWD/tests/gpu/multi_allreduce.py"); NCU=${NSIGHTWRAP_NCU:-ncu}; EXTRA=(); SETTLE=3
fi
JOB=("$TORCHRUN" --nproc-per-node 2 "${PROG[@]}")
RUN=(python3 -m nsightwrap run --profile default --json --store "$STORE" "${EXTRA[@]}" --)

tagged() {  # pids of live processes started by a step (they carry GPU_MULTI_RUN=$TAG)
  local d
  for d in /proc/[0-9]*; do
    grep -qz "^GPU_MULTI_RUN=$TAG\$" "$d/environ" 2>/dev/null && echo "${d#/proc/}"
  done
}
left() {
  local pids; pids=$(tagged | tr '\n' ',' | sed 's/,$//')
  [ -n "$pids" ] && ps -o pid=,ppid=,stat=,etimes=,cmd= -p "$pids" | grep -v ' Z' | cut -c1-300
  if [ "${DRY:-0}" != 1 ]; then  # the GPU machine is ours alone: processes of the job that lost the tag too
    ps -eo pid=,ppid=,stat=,etimes=,cmd= | grep -E "torchrun|multi_allreduce|TreeLauncher|nsightwrap.watch.onerank|/ncu( |$)" \
      | grep -v -E "grep|gpu_multi" | awk -v tagged=" $(tagged | tr '\n' ' ') " 'index(tagged, " " $1 " ") == 0' \
      | sed 's/^/(untagged) /' | cut -c1-300
  fi
}
after() {
  echo "== $(date +%T) after $1: processes left:"; local l; l=$(left); echo "${l:-none}"
  echo "== nvidia-smi --query-compute-apps=pid,name --format=csv:"; nvidia-smi --query-compute-apps=pid,name --format=csv
}
budget() { local b=$(( LIMIT_S - SECONDS )); [ "$b" -gt "$1" ] && b=$1; echo "$b"; }
timed() {  # timed NAME LIMIT CMD...: run CMD under timeout (SIGTERM, then SIGKILL 10 s later), say how long
  local name=$1 lim; lim=$(budget "$2"); shift 2
  if [ "$lim" -le 10 ]; then echo "== $name: skipped, the script's ${LIMIT_S} s are spent"; return 124; fi
  echo "== $(date +%T) $name (timeout ${lim} s): $*" >&3
  local t0=$SECONDS; timeout -k 10 "$lim" env "GPU_MULTI_RUN=$TAG" "$@"; local rc=$?
  echo "== $name: rc=$rc in $(( SECONDS - t0 )) s" >&3; return $rc
}
summary() {
  python3 - "$1" <<'PY'
import json, sys
from collections import Counter
try:
    d = json.load(open(sys.argv[1]))
except (OSError, ValueError) as e:
    sys.exit(f"   no JSON ({e})")
if "steps" not in d:  # an interrupted walk prints the attempt it stopped (under "attempt")
    a = d.get("attempt") or {}
    print(f"   {d['status']}: {d['reason']}\n   kernels {len(a.get('kernels', []))}; stop {a.get('stop')}")
    sys.exit()
print(f"   processes {d['processes']}, GPUs {d['gpus']}; hangs {d['hangs']}; unprofiled {d['unprofiled']}; "
      f"stopped {d['stopped']}")
for k, why in d["why_unprofiled"].items():
    print(f"   why {k}: {why}")
total = 0.0
for s in d["steps"]:
    a = s["attempt"]
    if a is None:
        print(f"   [{s['job'][:44]}] {s['rung']}: skipped ({s['skipped']})")
        continue
    total += a["elapsed_s"]
    ranks = "rank " + a["command"][a["command"].index("--rank") + 1] if "--rank" in a["command"] else "all ranks"
    stall = a["stall"]["where"] if a["stall"] else "-"
    print(f"   [{s['job'][:44]}] {s['rung']}: {a['status']} in {a['elapsed_s']:.1f} s, {len(a['kernels'])} kernels, "
          f"{ranks}, connected {a['connected_processes']}, stall {stall}, gpu left {a['gpu_left_after']}")
    print(f"      {dict(Counter(k['name'][:48] + ' x' + str(k['passes']) + 'p' for k in a['kernels']))}")
    if a["stop"]:
        print(f"      stop: {a['stop']['steps']} survivors {a['stop']['survivors']}")
    if a["status"] != "ok":
        print(f"      reason: {a['reason'][:300]}")
    if ranks != "all ranks":
        print(f"      command: {' '.join(a['command'])[:600]}")
print(f"   attempts' time together: {total:.1f} s")
PY
}

echo "== $(date) gpu_multi: $(nvidia-smi -L | tr '\n' ' ')"
echo "== $("$NCU" --version | tail -1); python3 $(python3 -c 'import sys; print(sys.version.split()[0])')"
echo "== NCCL_NVLS_ENABLE=$NCCL_NVLS_ENABLE TORCH_SYMM_MEM_DISABLE_MULTICAST=$TORCH_SYMM_MEM_DISABLE_MULTICAST NVSHMEM_DISABLE_NVLS=$NVSHMEM_DISABLE_NVLS"
after "nothing (before the first step)"

timed "0a: the program alone" 90 "${JOB[@]}"
after "0a"
timed "0b: raw ncu, collectives left out" 100 "$NCU" --set basic --kernel-name 'regex:^(?!nccl).*' -o "$W/raw" "${JOB[@]}" \
  > "$W/raw.out" 2>&1
grep -c '==PROF== Profiling' "$W/raw.out" | sed 's/^/   kernels profiled: /'; grep -E '==PROF== Connected|==ERROR==' "$W/raw.out" | head -6
after "0b"

for n in 1 2; do
  (cd "$W" && timed "$n: walk $n" 200 "${RUN[@]}" "${JOB[@]}" > "$OUT/walk$n.json" 2> "$OUT/walk$n.err")
  summary "$OUT/walk$n.json"
  after "walk $n"
done

lim=$(budget 120)
if [ "$lim" -gt 20 ]; then
  echo "== $(date +%T) 3: a third run, SIGINT in the middle"
  set -m  # job control: the background run gets SIGINT as from a terminal (not ignored)
  (cd "$W" && exec timeout -k 10 "$lim" env "GPU_MULTI_RUN=$TAG" "${RUN[@]}" "${JOB[@]}" \
     > "$OUT/sigint.json" 2> "$OUT/sigint.err") &
  pid=$!; set +m
  for _ in $(seq 1 $(( lim * 2 ))); do grep -q '==PROF== Profiling "' "$OUT/sigint.err" 2>/dev/null && break; sleep 0.5; done
  sleep "$SETTLE"
  nw=$(for p in $(tagged); do grep -qz -- '^nsightwrap$' "/proc/$p/cmdline" 2>/dev/null && echo "$p"; done | head -1)
  echo "== $(date +%T) SIGINT to nsightwrap ($nw), $(grep -c '==PROF== Profiling' "$OUT/sigint.err") kernel headers seen"
  kill -INT "$nw"; t0=$SECONDS; wait "$pid"; rc=$?
  echo "== 3: rc=$rc, $(( SECONDS - t0 )) s after SIGINT"
  summary "$OUT/sigint.json"
  sleep 2; after "SIGINT"
else
  echo "== 3: skipped, the script's ${LIMIT_S} s are spent"
fi

echo "== the hang store ($STORE):"
python3 -m nsightwrap hangs list --store "$STORE"
hung=$(python3 -c "import json; print(next(iter([h[0] for h in json.load(open('$OUT/walk1.json'))['hangs']]), '$AR'))" 2>/dev/null)
python3 -m nsightwrap hangs show --store "$STORE" --markdown "${hung:-$AR}" | sed -n '/Key differences/,$p'
python3 -c "
import sqlite3; c = sqlite3.connect('$STORE')
for r in c.execute('SELECT kernel, outcome, processes, gpus, ranks, rung FROM records ORDER BY id'): print('  ', *r)"

l=$(left)
if [ -n "$l" ]; then
  echo "== LEFTOVERS, killed now:"; echo "$l"; echo "$l" | sed 's/^(untagged) //' | awk '{print $1}' | xargs -r kill -9
else
  echo "== nothing left behind"
fi
after "the end"
rm -rf "$W"
echo "== end $(date +%T), ${SECONDS} s in all"
