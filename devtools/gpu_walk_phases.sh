#!/usr/bin/env bash
# A first walk's phases on a fresh machine (cold), again with a fresh tool cache (warm disk), and again with
# the tool cache kept (the program's first walk on a machine nsightwrap already ran on). Diagnostics, issue 10.
#   carry: [".whl", ".debs"]   command: bash devtools/gpu_walk_phases.sh
set -u
mkdir -p /tmp/libdw /tmp/nw
for d in .debs/*.deb; do dpkg -x "$d" /tmp/libdw 2>/dev/null; done
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=$PWD:/tmp/site PYTHONUNBUFFERED=1
export LD_LIBRARY_PATH=/tmp/libdw/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
NSYS=/opt/nvidia/nsight-compute/2025.3.1/host/target-linux-x64/nsys
nvidia-smi -L
nvcc -O2 -arch=sm_90 -lineinfo -o /tmp/nw/app tests/gpu/kernels.cu || exit 1
walk() {  # label cache-dir store
  echo "### $1"
  s=$(date +%s.%N)
  NSIGHTWRAP_CACHE_DIR=$2 timeout 120 python3 devtools/walk_phases.py run -q --store "$3" --ncu /usr/local/cuda/bin/ncu \
    --nsys $NSYS --profile default --set basic -- /tmp/nw/app mixed 60 2>&1 | grep -E "^\[phase|rung|^ok|^hang|stopped|attempt"
  echo "### $1: $(python3 -c "import time; print(round(time.time() - $s, 2))") s; GPU: $(nvidia-smi --query-compute-apps=pid --format=csv,noheader | tr '\n' ' ')"
}
walk "cold machine, fresh tool cache" /tmp/cache1 /tmp/s1.db
walk "warm machine, fresh tool cache" /tmp/cache2 /tmp/s2.db
walk "warm machine, tool cache kept" /tmp/cache2 /tmp/s3.db
for i in 1 2 3; do /usr/bin/time -f "nvidia-smi query-gpu: %e s" nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >/dev/null; done
for i in 1 2; do /usr/bin/time -f "nvidia-smi compute-apps: %e s" nvidia-smi --query-compute-apps=pid --format=csv,noheader >/dev/null; done
ps -eo pid,cmd | grep -E "[n]cu |[a]pp mixed" || echo "no leftovers"
