#!/usr/bin/env bash
# Does nsys's --trace cuda record cuProfilerStart (driver API) as well as cudaProfilerStart (runtime)? The walk
# skips range replay for programs that call neither (issue 10); this checks the evidence it relies on.
#   (needs LD_LIBRARY_PATH with libdw, as gpu_evidence.sh sets)   command: bash devtools/gpu_range_calls.sh DIR
set -u
D=${1:?dir}; mkdir -p "$D"
NSYS=${NSYS:-/opt/nvidia/nsight-compute/2025.3.1/host/target-linux-x64/nsys}
cat > "$D/ranges.cu" <<'CU'
#include <cstdio>
#include <cstring>
#include <cuda.h>
#include <cudaProfiler.h>
#include <cuda_profiler_api.h>
__global__ void k(int* x) { x[threadIdx.x] += 1; }
int main(int argc, char** argv) {
  int* x; cudaMalloc(&x, 128);
  const char* mode = argc > 1 ? argv[1] : "none";
  if (!strcmp(mode, "driver")) cuProfilerStart();
  if (!strcmp(mode, "runtime")) cudaProfilerStart();
  k<<<1, 32>>>(x);
  cudaDeviceSynchronize();
  if (!strcmp(mode, "driver")) cuProfilerStop();
  if (!strcmp(mode, "runtime")) cudaProfilerStop();
  printf("%s: %s\n", mode, cudaGetErrorString(cudaGetLastError()));
  return 0;
}
CU
nvcc -O2 -arch=sm_90 -o "$D/ranges" "$D/ranges.cu" -lcuda || exit 1
for mode in none runtime driver; do
  rm -f "$D/$mode".*
  timeout 60 "$NSYS" profile --trace=cuda --sample=none --cpuctxsw=none --backtrace=none --export=sqlite \
    -o "$D/$mode" "$D/ranges" "$mode" > "$D/$mode.log" 2>&1
  python3 -c "
import sys
from nsightwrap.reports.nsys.sqlite import api_calls
from nsightwrap.calibrate.measure import marks_ranges
c = api_calls('$D/$mode.sqlite')
print('$mode: marks_ranges =', marks_ranges(c), '; profiler calls seen:', sorted(x for x in (c or ()) if 'rofiler' in x))
"
done
