#!/usr/bin/env bash
# The GPU evidence still missing for issues 3-6, in one device call (at most 570 s of steps, under the 600 s call limit).
# Each step has its own time limit; between steps the GPU is checked and anything
# an earlier step left behind is reported and killed, so one bad step cannot poison
# the next (see the 2026-11-26 H100 run in devtools/gpu-runs/).
#
#   carry: [".whl", ".debs"]   (tenacity wheel; libdw1 and friends for nsys)
#   command: bash devtools/gpu_evidence.sh "$OUT"
#
# Writes $OUT/evidence.tgz (logs, fixtures, nsys output) and $OUT/summary.txt.
set -u
OUT=${1:?outdir}
W=/tmp/evidence
mkdir -p "$W" /tmp/libdw
for d in .debs/*.deb; do dpkg -x "$d" /tmp/libdw 2>/dev/null; done
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=$PWD:/tmp/site PYTHONUNBUFFERED=1
S="$OUT/summary.txt"

gpu_check() {  # name of the step that just ran
  local held
  held=$(nvidia-smi --query-compute-apps=pid,process_name --format=csv,noheader)
  echo "[$1] GPU compute processes after: ${held:-none}" | tee -a "$S"
  if [ -n "$held" ]; then
    python3 -m nsightwrap cleanup | tee -a "$S"
    for p in $(echo "$held" | cut -d, -f1); do kill -9 "$p" 2>/dev/null; done
    sleep 5
    echo "[$1] after kill: $(nvidia-smi --query-compute-apps=pid --format=csv,noheader)" | tee -a "$S"
  fi
}

step() {  # limit name command...
  local limit=$1 name=$2; shift 2
  echo "=== $name (limit $limit s)" | tee -a "$S"
  local t0=$SECONDS
  timeout --signal=TERM --kill-after=20 "$limit" "$@" > "$W/$name.log" 2>&1
  echo "[$name] rc=$? in $((SECONDS - t0)) s" | tee -a "$S"
  grep -E "PASSED|FAILED|passed|failed|took|walk [0-9]|hang alone|probes|met|NOT MET" "$W/$name.log" | head -20 >> "$S"
  gpu_check "$name"
}

nvidia-smi -L | tee -a "$S"
gpu_check start
step 130 walk      python3 -m pytest -m gpu -v -s -p no:cacheprovider tests/test_gpu.py -k walk
step 100 profile   python3 -m pytest -m gpu -v -s -p no:cacheprovider tests/test_gpu.py -k profile_fn
step 110 sweep     python3 -m pytest -m gpu -v -s -p no:cacheprovider tests/test_gpu.py -k sweep
step 130 fixtures  bash devtools/make_fixtures.sh "$W/fx"
step 40  bench     python3 benchmarks/bench_report.py "$W/fx/many300.ncu-rep" --repeat 3 --ncu /usr/local/cuda/bin/ncu
step 60  nsys      env NSYS_GPU_BUDGET_S=55 bash devtools/nsys_on_gpu.sh "$W/nsys"
cp "$S" "$W/"
tar czf "$OUT/evidence.tgz" -C /tmp evidence
ls -la "$OUT"
