#!/usr/bin/env bash
# Run on the GPU machine: make the small real reports the tests read, their raw CSV
# exports (to check values against), and a 300-kernel report for benchmarks/bench_report.py.
# Usage: bash devtools/make_fixtures.sh OUTDIR [NAME...]   (default: all of them)
#   full_two        --set full, 2 kernels
#   app_replay_two  --set basic, application replay, 2 kernels
#   torch_nvtx      PyTorch matmul + softmax inside two NVTX ranges, --nvtx, the softmax kernel only
#                   (every profiled kernel's module is embedded: all of PyTorch's kernels made 21 MB)
#   many300         --set basic, 300 kernels (16 MB: for the benchmark, not committed)
#   csv             the raw CSV exports of all of the above and of the committed basic reports
set -u
OUT=${1:?outdir}
shift
WANT=" ${*:-full_two app_replay_two torch_nvtx many300 csv} "
want() { [[ "$WANT" == *" $1 "* ]]; }
NCU=${NCU:-/usr/local/cuda/bin/ncu}
mkdir -p "$OUT" /tmp/nw
cd /tmp/nw || exit 1   # a neutral folder: no personal path ends up in the reports
nvcc -O2 -arch=sm_90 -lineinfo -o /tmp/nw/app "$OLDPWD/tests/gpu/kernels.cu" || exit 1
set -x
want full_two && timeout 120 $NCU --set full -o "$OUT/full_two" /tmp/nw/app two
want app_replay_two && timeout 120 $NCU --set basic --replay-mode application -o "$OUT/app_replay_two" /tmp/nw/app two
if want torch_nvtx; then
  cat > /tmp/nw/torch_nvtx.py <<'PY'
import torch

torch.cuda.nvtx.range_push("outer")
torch.cuda.nvtx.range_push("matmul_softmax")
a = torch.randn(1024, 1024, device="cuda")
c = torch.softmax(a @ a, dim=-1)
torch.cuda.synchronize()
torch.cuda.nvtx.range_pop()
torch.cuda.nvtx.range_pop()
print("torch nvtx ok", tuple(c.shape))
PY
  timeout 180 $NCU --set basic --nvtx --kernel-name regex:softmax --launch-count 1 -o "$OUT/torch_nvtx" \
    python3 /tmp/nw/torch_nvtx.py
fi
want many300 && timeout 300 $NCU --set basic -o "$OUT/many300" /tmp/nw/app many 300
if want csv; then
  for r in full_two app_replay_two torch_nvtx many300; do
    [ -e "$OUT/$r.ncu-rep" ] || continue
    timeout 120 $NCU --import "$OUT/$r.ncu-rep" --csv --page raw --print-units base > "$OUT/$r.raw.csv" 2>&1
  done
  for r in basic_ok partial_mixed_basic; do
    timeout 120 $NCU --import "$OLDPWD/tests/data/reports/$r.ncu-rep" --csv --page raw --print-units base > "$OUT/$r.raw.csv" 2>&1
  done
fi
set +x
ls -la "$OUT"
