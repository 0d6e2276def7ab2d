#!/usr/bin/env bash
# Run on the GPU machine: make the small real reports the tests read, their raw CSV
# exports (to check values against), and a 300-kernel report for benchmarks/bench_report.py.
# Usage: bash devtools/make_fixtures.sh OUTDIR [NAME...]   (default: all of them)
#   full_two        --set full, 2 kernels
#   app_replay_two  --set basic, application replay, 2 kernels
#   torch_nvtx      a Triton kernel on PyTorch tensors, twice, inside nested NVTX ranges (--nvtx); each
#                   profiled kernel's module is embedded: all of PyTorch's kernels made 21 MB, softmax alone 6 MB
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
  # A Triton kernel on PyTorch tensors: its module is small (PyTorch's own softmax, alone, made 6 MB).
  cat > /tmp/nw/torch_nvtx.py <<'PY'
import torch
import triton
import triton.language as tl


@triton.jit
def scale_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) * 2.0, mask=mask)


x = torch.rand(1 << 20, device="cuda")
out = torch.empty_like(x)
scale_kernel[(x.numel() // 1024,)](x, out, x.numel(), BLOCK=1024)  # compile outside the ranges
torch.cuda.synchronize()
torch.cuda.nvtx.range_push("outer")
for step in range(2):
    torch.cuda.nvtx.range_push(f"step{step}")
    scale_kernel[(x.numel() // 1024,)](x, out, x.numel(), BLOCK=1024)
    torch.cuda.nvtx.range_pop()
torch.cuda.nvtx.range_pop()
torch.cuda.synchronize()
print("torch nvtx ok", float(out.sum()))
PY
  timeout 180 $NCU --set basic --nvtx --kernel-name regex:scale_kernel --launch-skip 1 -o "$OUT/torch_nvtx" \
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
