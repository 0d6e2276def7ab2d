#!/usr/bin/env bash
# Issue 19: how soon the CUPTI tracer reports launches and finished kernels (devtools/tracer_lag.py), on
# kernels.cu's programs and a PyTorch one; also a kernel that hangs by itself and one launched in a graph.
#   command: bash devtools/gpu_tracer_lag.sh "$OUT"
set -u
OUT=${1:?outdir}
exec > >(tee "$OUT/tracer-lag.log") 2>&1
W=/tmp/tr; mkdir -p "$W"
nvidia-smi -L
g++ -shared -fPIC -O2 -Wall nsightwrap/calibrate/cupti/tracer.cpp -I/usr/local/cuda/include \
  -L/usr/local/cuda/targets/x86_64-linux/lib -lcupti -Wl,-rpath,/usr/local/cuda/targets/x86_64-linux/lib \
  -ldl -pthread -o $W/libtracer.so || exit 1
cp $W/libtracer.so $W/libtracer-4096.so
for b in 1024 65536 1048576; do
  g++ -shared -fPIC -O2 -DNSW_BUFFER_BYTES=$b nsightwrap/calibrate/cupti/tracer.cpp -I/usr/local/cuda/include \
    -L/usr/local/cuda/targets/x86_64-linux/lib -lcupti -Wl,-rpath,/usr/local/cuda/targets/x86_64-linux/lib \
    -ldl -pthread -o $W/libtracer-$b.so || exit 1
done
[ -x $W/app ] || /usr/local/cuda/bin/nvcc -O2 -arch=sm_90 -lineinfo -o $W/app tests/gpu/kernels.cu || exit 1
lag() { echo "### $*"; timeout -s KILL 100 python3 devtools/tracer_lag.py $W/libtracer.so "$@"; \
        echo "GPU: $(nvidia-smi --query-compute-apps=pid --format=csv,noheader | tr '\n' ' ')"; }
for b in 1024 65536 1048576; do
  echo "### buffer $b bytes"; timeout -s KILL 30 python3 devtools/tracer_lag.py $W/libtracer-$b.so 20 -- $W/app graph 2 | grep -E "kernel|error|exited"
  timeout -s KILL 30 python3 devtools/tracer_lag.py $W/libtracer-$b.so 8 -- $W/app selfhang 6 | grep -E "kernel|error|exited|killed"
done
for i in 1 2 3; do for b in 1024 4096 1048576; do s=$(date +%s%N); CUDA_INJECTION64_PATH=$W/libtracer-$b.so \
  NSIGHTWRAP_TRACE_DIR=$(mktemp -d) $W/app many 3000 >/dev/null; echo "many 3000, buffer $b: $(( ($(date +%s%N) - s) / 1000000 )) ms"; done
  s=$(date +%s%N); $W/app many 3000 >/dev/null; echo "many 3000 plain: $(( ($(date +%s%N) - s) / 1000000 )) ms"; done
lag 15 -- $W/app selfhang 12
lag 20 -- $W/app varied 0.1,3,0.2
lag 20 -- $W/app graph 2
lag 20 -- $W/app spin 4 2
lag 40 -- /opt/torch/.venv/bin/python3 tests/gpu/torch_then_hang.py 6
