#!/usr/bin/env bash
# Issue 19: does the CUPTI injection tracer (nsightwrap/calibrate/cupti/tracer.cpp) build and trace on the
# GPU machine? Builds it with the toolkit's CUPTI, builds tests/gpu/kernels.cu, and runs programs under it,
# each under `timeout`, printing what the trace files hold and plain-vs-traced times.
#   command: bash devtools/gpu_tracer_probe.sh "$OUT"
set -u
OUT=${1:?outdir}
exec > >(tee "$OUT/tracer-probe.log") 2>&1
W=/tmp/tr; mkdir -p "$W"
PY=/opt/torch/.venv/bin/python3
nvidia-smi -L; g++ --version | head -1; /usr/local/cuda/bin/nvcc --version | tail -1
ls -la /usr/local/cuda/targets/x86_64-linux/lib/ | grep -i cupti | head
ls /usr/local/cuda/include/cupti.h /usr/local/cuda/targets/x86_64-linux/include/cupti.h 2>&1
s=$SECONDS
g++ -shared -fPIC -O2 -Wall nsightwrap/calibrate/cupti/tracer.cpp -I/usr/local/cuda/include \
  -I/usr/local/cuda/targets/x86_64-linux/include -L/usr/local/cuda/targets/x86_64-linux/lib -lcupti \
  -Wl,-rpath,/usr/local/cuda/targets/x86_64-linux/lib -ldl -pthread -o $W/libtracer.so
echo "tracer build rc=$? in $((SECONDS - s)) s"
s=$SECONDS
/usr/local/cuda/bin/nvcc -O2 -arch=sm_90 -lineinfo -o $W/app tests/gpu/kernels.cu; echo "app build rc=$? in $((SECONDS - s)) s"
now() { date +%s%N; }
traced() {  # name limit cmd...
  local name=$1 limit=$2; shift 2
  local d=$W/$name; rm -rf "$d"; mkdir -p "$d"
  local t0; t0=$(now)
  CUDA_INJECTION64_PATH=$W/libtracer.so NSIGHTWRAP_TRACE_DIR=$d timeout -s KILL "$limit" "$@" > "$d.out" 2>&1
  local rc=$?
  echo "### $name traced: rc=$rc in $(( ($(now) - t0) / 1000000 )) ms; output: $(tail -c 300 "$d.out" | tr '\n' '|')"
  for f in "$d"/*.jsonl; do echo "-- $f: $(wc -l < "$f") lines"; grep -c '"ev":"launch"' "$f"; grep -c '"ev":"kernel"' "$f"; head -c 1500 "$f"; echo; tail -n 4 "$f" | cut -c1-400; done
  nvidia-smi --query-compute-apps=pid,process_name --format=csv,noheader
}
plain() {  # name limit cmd...
  local name=$1 limit=$2; shift 2
  local t0; t0=$(now)
  timeout -s KILL "$limit" "$@" > /dev/null 2>&1
  echo "### $name plain: rc=$? in $(( ($(now) - t0) / 1000000 )) ms"
}
traced ok 30 $W/app ok
traced varied 60 $W/app varied 0.1,2,0.3
traced graph 60 $W/app graph 1
traced selfhang 10 $W/app selfhang 20
traced hang_alone 30 $W/app hang 5
traced range 30 $W/app range
traced spin14 40 $W/app spin 14
for i in 1 2 3; do plain ok$i 30 $W/app ok; traced ok$i 30 $W/app ok | head -1; done
traced torch 90 $PY tests/gpu/torch_then_hang.py 10
for i in 1 2; do plain torch$i 90 $PY tests/gpu/torch_then_hang.py 10; traced torch$i 90 $PY tests/gpu/torch_then_hang.py 10 | head -1; done
echo "### leftovers: $(nvidia-smi --query-compute-apps=pid --format=csv,noheader) $(pgrep -fa 'app |torch_then' | grep -v pgrep)"
