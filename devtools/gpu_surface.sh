#!/usr/bin/env bash
# Issue 13 on the GPU machine (for the lead): `make run` in a fresh venv WITHOUT torch, then a ladder
# walk and a sweep with the live progress recorded as terminal typescripts (script -q -c ...).
#
#   bash devtools/gpu_surface.sh [OUTDIR]        (default devtools/gpu-runs/DATE-surface)
#
# The GPU machine reaches no package index: put wheels for ITS python (python3 -V there) in .whl/:
#   tenacity, ncu-report (>= 2026.3), and also psutil, pandas, numpy, python-dateutil, six, tzdata,
#   PyYAML, rich, markdown-it-py, mdurl, pygments, setuptools (the build backend of `pip install -e .`),
#   e.g. here: pip download -d .whl --only-binary=:all: --python-version 3.12 \
#              --platform manylinux2014_x86_64 --platform manylinux_2_28_x86_64 \
#              tenacity 'ncu-report>=2026.3' psutil pandas numpy PyYAML rich setuptools
# (tenacity and ncu-report in .whl, the rest in .whlv, which gpu_evidence.sh does not install into its site)
# and carry both (run's carry=[".whl", ".whlv"]). Every step runs under `timeout`; nothing is left running.
set -u
cd "$(dirname "$0")/.."
OUT=${1:-devtools/gpu-runs/$(date +%F)-surface}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
LOG="$OUT/steps.log"
WORK=$(mktemp -d /tmp/nw-surface.XXXXXX)
trap 'rm -rf "$WORK"' EXIT

note() { echo "$*" | tee -a "$LOG"; }
step() {  # step NAME LIMIT_S CMD...: its output in OUT/NAME.log, its exit code in steps.log
  local name=$1 limit=$2; shift 2
  note "=== $name (limit ${limit}s): $*"
  local t0=$SECONDS
  timeout -k 10 "$limit" "$@" >"$OUT/$name.log" 2>&1
  local rc=$?
  note "[$name] rc=$rc in $((SECONDS - t0)) s"
  tail -n 25 "$OUT/$name.log" | sed "s/^/  [$name] /" | tee -a "$LOG" >/dev/null
  return 0
}
gpu_state() { note "[$1] GPU compute processes: $(nvidia-smi --query-compute-apps=pid,process_name --format=csv,noheader | tr '\n' ';')"; }

note "$(date -Is) $(hostname) $(nvidia-smi -L | head -1)"
note "driver $(nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1); python3 $(python3 -V 2>&1)"
gpu_state start

# 1. A fresh venv: no --system-site-packages, so no torch; nsightwrap and its dependencies from .whl only.
python3 -m venv "$WORK/venv" || { note "python3 -m venv failed (apt install python3-venv?)"; exit 1; }
PY="$WORK/venv/bin/python"
"$PY" -c 'import torch' 2>/dev/null && note "WARNING: torch is importable in the fresh venv" \
                                    || note "fresh venv: torch not importable (as wanted)"
export PIP_NO_INDEX=1 PIP_FIND_LINKS="$PWD/.whl $PWD/.whlv" PIP_DISABLE_PIP_VERSION_CHECK=1
step make-run 240 make run PYTHON="$PY"
gpu_state make-run

# 2. The programs of the GPU tests: `app passes 1` hangs under multi-pass replay only (see gpu-runs/README.md).
nvcc -O2 -arch=native -o "$WORK/app" tests/gpu/kernels.cu 2>>"$LOG" || nvcc -O2 -o "$WORK/app" tests/gpu/kernels.cu \
  || { note "nvcc failed: no walk, no sweep"; exit 1; }
STORE="$WORK/hangs.db"

# 3. A ladder walk with live progress, recorded as a terminal would show it.
step walk 150 script -q -e -c "$PY -m nsightwrap run --profile default --set basic --stall-timeout 8 \
  --store $STORE -o $WORK/walk -- $WORK/app passes 1 30" "$OUT/walk.typescript"
gpu_state walk

# 4. A sweep with live progress.
step sweep 150 script -q -e -c "$PY -m nsightwrap sweep-sections --stall-timeout 8 --store $STORE \
  --section SpeedOfLight --section LaunchStats --section Occupancy --section WorkloadDistribution \
  --markdown $OUT/sweep-debug.md -- $WORK/app passes 1 30" "$OUT/sweep.typescript"
gpu_state sweep

# 5. doctor's view of this machine, and that nothing of ours is left.
step doctor 60 "$PY" -m nsightwrap doctor
step doctor-json 60 "$PY" -m nsightwrap doctor --json
step cleanup 60 "$PY" -m nsightwrap cleanup
gpu_state end
note "typescripts: $OUT/walk.typescript $OUT/sweep.typescript (view: cat, or less -R)"
