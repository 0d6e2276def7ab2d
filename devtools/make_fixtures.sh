#!/usr/bin/env bash
# Run on the GPU machine: make the small real reports the tests read, their raw CSV
# exports (to check values against), and a 300-kernel report for benchmarks/bench_report.py.
# Usage: bash devtools/make_fixtures.sh OUTDIR
set -u
OUT=${1:?outdir}
NCU=${NCU:-/usr/local/cuda/bin/ncu}
mkdir -p "$OUT" /tmp/nw
cd /tmp/nw || exit 1   # a neutral folder: no personal path ends up in the reports
nvcc -O2 -arch=sm_90 -lineinfo -o /tmp/nw/app "$OLDPWD/tests/gpu/kernels.cu" || exit 1
set -x
timeout 120 $NCU --set full -o "$OUT/full_two" /tmp/nw/app two
timeout 120 $NCU --set basic --replay-mode application -o "$OUT/app_replay_ok" /tmp/nw/app ok
cp "$OLDPWD/examples/torch_matmul_softmax.py" /tmp/nw/torch_nvtx.py
cat >> /tmp/nw/torch_nvtx.py <<'PY'

def nvtx_run():
    import torch
    torch.cuda.nvtx.range_push("outer")
    torch.cuda.nvtx.range_push("matmul_softmax")
    main(1024)
    torch.cuda.nvtx.range_pop()
    torch.cuda.nvtx.range_pop()
PY
sed -i 's/^    main()$/    nvtx_run()/' /tmp/nw/torch_nvtx.py
timeout 180 $NCU --set basic --nvtx -o "$OUT/torch_nvtx" python3 /tmp/nw/torch_nvtx.py
timeout 300 $NCU --set basic -o "$OUT/many300" /tmp/nw/app many 300
for r in full_two app_replay_ok torch_nvtx many300; do
  timeout 120 $NCU --import "$OUT/$r.ncu-rep" --csv --page raw --print-units base > "$OUT/$r.raw.csv" 2>&1
done
for r in basic_ok partial_mixed_basic; do
  timeout 120 $NCU --import "$OLDPWD/tests/data/reports/$r.ncu-rep" --csv --page raw --print-units base > "$OUT/$r.raw.csv" 2>&1
done
set +x
ls -la "$OUT"
