"""GPU machine: where does the extras ncu_report of ncu 2025.3.1 crash? Each probe in its own process.

    python3 devtools/extras_crash.py REPORT
"""
import os
import subprocess
import sys

REPORT = sys.argv[1]
EXTRAS = "/opt/nvidia/nsight-compute/2025.3.1/extras/python"
PROBES = {
    "methods": """
import ncu_report
ctx = ncu_report.load_report(R)
a = ctx.range_by_idx(0).action_by_idx(0)
print("name", a.name())
m = a["gpu__time_duration.sum"]
print("kind", m.kind()); print("value", m.value()); print("has_value", m.has_value()); print("unit", m.unit())
names = a.metric_names(); print("n metrics", len(names))
bad = 0
for n in names:
    x = a.metric_by_name(n); x.kind(); x.value()
print("values ok")
for n in names:
    a.metric_by_name(n).unit()
print("units ok")
""",
    "flat": """
import ncu_report
from ncu_report import _ncu_report as F
ctx = ncu_report.load_report(R)
a = ctx.range_by_idx(0).action_by_idx(0)
m = F.IAction_metric_by_name(a, "gpu__time_duration.sum")
print("flat metric", type(m)); print("flat kind", F.IMetric_kind(m)); print("flat as_double", F.IMetric_as_double(m))
print("flat unit", F.IMetric_unit(m))
for n in F.IAction_metric_names(a):
    F.IMetric_unit(F.IAction_metric_by_name(a, n))
print("flat units ok")
""",
    "nsightwrap": """
sys.path.insert(0, os.getcwd())
from nsightwrap.reports.ncu import load_report
df = load_report(R, ncu="/usr/local/cuda/bin/ncu")
print(df.attrs["reader"], df.shape)
""",
}
for extra_env in ({}, {"LD_LIBRARY_PATH": ":".join(sorted({os.path.dirname(p) for p in subprocess.run(
        ["find", "/opt/nvidia/nsight-compute/2025.3.1", "-name", "libnvperf_host.so*"], capture_output=True,
        text=True).stdout.split()}))}):
    for name, body in PROBES.items():
        code = (f"import faulthandler, os, sys; faulthandler.enable(); sys.path.insert(0, {EXTRAS!r}); "
                f"R = {REPORT!r}\n" + body)
        env = dict(os.environ, **extra_env)
        p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
        print(f"=== {name} {extra_env or ''}: rc={p.returncode}\n{p.stdout}{p.stderr[-1500:]}", flush=True)
print(subprocess.run(["ldd", EXTRAS + "/_ncu_report.so"], capture_output=True, text=True).stdout)
