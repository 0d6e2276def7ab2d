"""GPU machine: does the extras ncu_report (ncu 2025.3.1) crash when numpy was imported before it?

    python3 devtools/extras_order.py REPORT
"""
import subprocess
import sys

REPORT = sys.argv[1]
READ = ("from nsightwrap.reports.ncu import load_report; df = load_report(R, ncu='/usr/local/cuda/bin/ncu'); "
        "print(df.attrs['reader'], df.shape)")
CASES = {
    "extras first, numpy later": READ,
    "numpy first": "import numpy; " + READ,
    "pandas first": "import pandas; " + READ,
    "torch first": "import torch; " + READ,
    "numpy first, plain extras": "import numpy; "
                                 "sys.path.insert(0, '/opt/nvidia/nsight-compute/2025.3.1/extras/python'); "
                                 "import ncu_report; c = ncu_report.load_report(R); "
                                 "a = c.range_by_idx(0).action_by_idx(0); "
                                 "print('plain', [a.metric_by_name(n).unit() for n in a.metric_names()][:3])",
}
for name, body in CASES.items():
    code = f"import faulthandler, sys; faulthandler.enable(); sys.path.insert(0, '.'); R = {REPORT!r}; " + body
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    print(f"=== {name}: rc={p.returncode}\n{p.stdout}{p.stderr[-800:]}", flush=True)
