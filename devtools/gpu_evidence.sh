#!/usr/bin/env bash
# The GPU evidence for issues 3-6, in device calls of at most 600 s.
# Each step has its own time limit; between steps the GPU is checked and anything
# an earlier step left behind is reported and killed, so one bad step cannot poison
# the next (see the 2026-11-26 H100 run in devtools/gpu-runs/).
#
#   carry: [".whl", ".debs"]   (tenacity wheel; libdw1 and friends for nsys)
#   command: bash devtools/gpu_evidence.sh "$OUT" STEP...
#   steps: walk profile sweep nsys (about 460 s)   fixtures bench (about 250 s)
#          extras (which ncu_report module, why)   many (only the 300-kernel report, for bench)
#          jobs (sweep --jobs 2 beside --jobs 1; needs two GPUs)
#          executor2 (sweep on the local executor, submitit: 2 GPUs beside 1, ratio and culprits; needs two GPUs)
#          torchfx (the PyTorch NVTX fixture and its CSV)   examples (examples/profile_*.py)
#          gputests (every gpu-marked test)   sigkill chatty (issue 11)   fncost (issue 15's benchmark)
#          dropped (session 12: a SIGTERM that Python drops while `run` imports; the guard is /bin/sh)
#          calib (issue 10's benchmark)   probe (doctor's counter probe under raw ncu)
#          tracertests (tests/gpu/test_gpu_tracer.py)   lag (how soon the CUPTI tracer reports, devtools/gpu_tracer_lag.sh)
#          verdicts (issue 19's benchmark: no nsys, the CUPTI tracer; CALIB_STEPS, CALIB_BUDGET)
#          triagetests (tests/gpu/test_triage_gpu.py)   triage (issue 21's benchmark on the planted-bug kernels; TRIAGE_CASES)
#          perrank (issue 19: raw ncu per rank of a torchrun job, devtools/gpu_perrank.sh; PERRANK_STEPS; two GPUs)
#          executor2 (issue 22: a sweep on 1 and 2 GPUs of the local executor; needs two GPUs)
#          fnhang (profile(fn) on a hang, defaults)   ranges (does nsys see cuProfilerStart?)   phases (a first walk's phases, cold and warm)
#          walks (the README's first and second walk: benchmarks/walk_overhead.py --gpu, side by side and serial; two GPUs)
# The tarball is remade after every step, so a call cut at its limit still brings back the steps done.
#
# Writes $OUT/evidence.tgz (logs, small fixtures, nsys output; reports over 3 MB stay
# behind) and $OUT/summary.txt.
set -u
OUT=${1:?outdir}
shift
STEPS=" $* "
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
  grep -E "PASSED|FAILED|passed|failed|took|walk [0-9]|hang alone|probes|met|NOT MET|### |chooses|find_report_module|^=== |ok$|chatty:|program lines|==|ratio|median" "$W/$name.log" | head -20 >> "$S"
  gpu_check "$name"
  cp "$S" "$W/"
  tar czf "$OUT/evidence.tgz" -C /tmp $(cd /tmp && find evidence -type f -size -3000k)
}

nvidia-smi -L | tee -a "$S"
gpu_check start
want() { [[ "$STEPS" == *" $1 "* ]]; }
want walk     && step 200 walk     python3 -m pytest -m gpu -v -s -p no:cacheprovider tests/gpu/test_gpu.py -k walk
want profile  && step 110 profile  python3 -m pytest -m gpu -v -s -p no:cacheprovider tests/gpu/test_gpu.py -k profile_fn
want sweep    && step 200 sweep    python3 -m pytest -m gpu -v -s -p no:cacheprovider tests/gpu/test_gpu.py -k sweep
want nsys     && step 170 nsys     env NSYS_GPU_BUDGET_S=165 bash devtools/nsys_on_gpu.sh "$W/nsys"
want extras   && step 30  extras   python3 devtools/extras_probe.py /usr/local/cuda/bin/ncu
want crash    && step 120 crash    python3 devtools/extras_crash.py "$PWD/tests/data/reports/basic_ok.ncu-rep"
want jobs     && step 240 jobs     python3 -m pytest -m gpu -v -s -p no:cacheprovider tests/gpu/test_gpu.py -k jobs_2
want executor2 && step ${EXECUTOR_LIMIT:-420} executor2 bash -c 'mkdir -p /tmp/nsightwrap-bench && nvcc -O2 -arch=sm_90 -lineinfo -o /tmp/nsightwrap-bench/app tests/gpu/kernels.cu && python3 benchmarks/sweep_executor.py --app /tmp/nsightwrap-bench/app -o "$0/sweep_executor.txt" ${EXECUTOR_ARGS:-}' "$W"
want many     && step 120 many     bash -c 'mkdir -p /tmp/nw "$0" && nvcc -O2 -arch=sm_90 -o /tmp/nw/app tests/gpu/kernels.cu && cd /tmp/nw && /usr/local/cuda/bin/ncu --set basic -o "$0/many300" /tmp/nw/app many 300 | tail -3' "$W/fx"
want torchfx  && step 150 torchfx  bash devtools/make_fixtures.sh "$W/fx" torch_nvtx csv
want examples && step 300 examples bash -c 'for e in profile_torch profile_cupy profile_triton profile_hang; do echo "### $e"; s=$SECONDS; timeout 150 python3 examples/$e.py; echo "### $e: rc=$? in $((SECONDS - s)) s"; done; nvidia-smi --query-compute-apps=pid --format=csv,noheader; ps -eo pid,cmd | grep -E "ncu|python3 -m nsightwrap" | grep -v grep'
want gputests && step 480 gputests python3 -m pytest -m gpu -v -s -p no:cacheprovider tests/gpu/test_gpu.py
want tracertests && step 240 tracertests python3 -m pytest -m gpu -v -s -p no:cacheprovider tests/gpu/test_gpu_tracer.py
want triagetests && step 300 triagetests python3 -m pytest -m gpu -v -s -p no:cacheprovider tests/gpu/test_triage_gpu.py
want triage   && step 420 triage   python3 benchmarks/bench_triage.py --gpu --ncu /usr/local/cuda/bin/ncu --sanitizer /usr/local/cuda/bin/compute-sanitizer --cases "${TRIAGE_CASES:-clean,oob,race,uninit,flaky,selfhang,ncuhang,ncupasses}"
want perrank  && step 400 perrank  env STEPS="${PERRANK_STEPS:-}" bash devtools/gpu_perrank.sh "$W/perrank"
want sigkill  && step 120 sigkill  bash devtools/gpu_sigkill.sh "$W/sigkill"
want dropped  && step 120 dropped  bash devtools/gpu_dropped_signal.sh "$W/dropped"
want chatty   && step 150 chatty   bash devtools/gpu_chatty.sh
want walks    && step 330 walks    python3 benchmarks/walk_overhead.py --gpu --ncu /usr/local/cuda/bin/ncu --timeline --timeout 120 --modes side-by-side,serial -o "$W/walk-overhead.txt"
want fncost   && step 320 fncost   python3 benchmarks/bench_profile_fn.py --ncu /usr/local/cuda/bin/ncu --out "$W/bench_profile_fn.md" --work /tmp/bench-fn
want calib    && step 560 calib    bash -c 'mkdir -p /tmp/nsightwrap-bench && nvcc -O2 -arch=sm_90 -lineinfo -o /tmp/nsightwrap-bench/app tests/gpu/kernels.cu && LD_LIBRARY_PATH=/tmp/libdw/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-} python3 benchmarks/bench_calibration.py --app /tmp/nsightwrap-bench/app -o "$0/bench_calibration.txt" --ncu /usr/local/cuda/bin/ncu --nsys /opt/nvidia/nsight-compute/2025.3.1/host/target-linux-x64/nsys --budget ${CALIB_BUDGET:-470} --steps ${CALIB_STEPS:-walk,hang,spin,sweep,overhead} ${CALIB_ARGS:-}' "$W"
want verdicts && step 580 verdicts bash -c 'mkdir -p /tmp/nsightwrap-bench && nvcc -O2 -arch=sm_90 -lineinfo -o /tmp/nsightwrap-bench/app tests/gpu/kernels.cu && python3 benchmarks/bench_calibration.py --app /tmp/nsightwrap-bench/app -o "$0/bench_verdicts.txt" --ncu /usr/local/cuda/bin/ncu --budget ${CALIB_BUDGET:-540} --steps ${CALIB_STEPS:-torchhang,selfhang,varied,graph,hang,walk,overhead} ${CALIB_ARGS:-}' "$W"
want lag      && step 150 lag      bash devtools/gpu_tracer_lag.sh "$W"
want fnhang   && step 150 fnhang   python3 devtools/gpu_profile_fn_hang.py
want ranges   && step 90  ranges   env LD_LIBRARY_PATH=/tmp/libdw/usr/lib/x86_64-linux-gnu bash devtools/gpu_range_calls.sh "$W/ranges"
want phases   && step 150 phases   bash devtools/gpu_walk_phases.sh
want probe    && step 60  probe    bash -c 'set -x; timeout 50 /usr/local/cuda/bin/ncu --metrics gpu__time_duration.sum -c 1 python3 nsightwrap/watch/cudaprobe.py; echo rc=$?'
want doctor   && step 120 doctor   bash -c 'python3 -m nsightwrap doctor; echo "rc=$?"; python3 -m nsightwrap doctor --json | python3 -c "import json,sys; print([(c[\"name\"], c[\"status\"]) for c in json.load(sys.stdin)[\"checks\"]])"'
want fixtures && step 230 fixtures bash devtools/make_fixtures.sh "$W/fx"
want bench    && step 100 bench    python3 benchmarks/bench_report.py "$W/fx/many300.ncu-rep" --repeat 3 --ncu /usr/local/cuda/bin/ncu
cp "$S" "$W/"
find "$W" -type f -size +3000k -printf "left behind: %p %s bytes\n" | tee -a "$S"
tar czf "$OUT/evidence.tgz" -C /tmp $(cd /tmp && find evidence -type f -size -3000k)
ls -la "$OUT"
