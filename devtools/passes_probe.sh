#!/usr/bin/env bash
# GPU machine: does kernel replay restore host-mapped memory? `app passes K` counts its executions on the host
# there and spins from the K+1-th on. Which sections need how many passes, and which hang?
# Usage: bash devtools/passes_probe.sh
mkdir -p /tmp/nw && nvcc -O2 -arch=sm_90 -o /tmp/nw/app tests/gpu/kernels.cu || exit 1
cd /tmp/nw || exit 1
echo "plain: $(./app passes 2 6 | head -1)"
run() {  # K limit options...
  local k=$1; shift
  local s=$SECONDS
  local out
  out=$(timeout -k 3 25 /usr/local/cuda/bin/ncu "$@" ./app passes "$k" 6 2>&1)
  local rc=$?
  echo "--- K=$k ncu $* -> rc=$rc in $((SECONDS - s)) s"
  echo "$out" | grep -E "Profiling|wait_for_count ran|WARNING|ERROR" | sed 's/^/    /'
  pkill -9 -f "/tmp/nw/app" 2>/dev/null
}
run 1 --metrics gpu__time_duration.sum
run 1 --section LaunchStats
run 1 --section Occupancy
run 1 --section LaunchStats --section Occupancy
run 1 --section SpeedOfLight
run 1 --section WorkloadDistribution
run 1 --set basic
run 12 --set basic
nvidia-smi --query-compute-apps=pid --format=csv,noheader
