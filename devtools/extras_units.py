"""GPU machine: the extras ncu_report of ncu 2025.3.1 crashed (SIGSEGV) in IMetric.unit() on reports made
on an H100, not on one made on an H200. Which metric, which call? Prints each step before doing it.

    python3 devtools/extras_units.py REPORT [EXTRAS_DIR]
"""
import faulthandler
import sys

faulthandler.enable()
sys.path.insert(0, sys.argv[2] if len(sys.argv) > 2 else "/opt/nvidia/nsight-compute/2025.3.1/extras/python")
import ncu_report  # noqa: E402

ctx = ncu_report.load_report(sys.argv[1])
for r in range(ctx.num_ranges()):
    rng = ctx.range_by_idx(r)
    for i in range(rng.num_actions()):
        a = rng.action_by_idx(i)
        names = a.metric_names()
        print(f"range {r} action {i} {a.name()}: {len(names)} metrics", flush=True)
        for n in names:
            m = a.metric_by_name(n)
            print(f"  {n} kind={m.kind()} type={m.metric_type()}", end="", flush=True)
            v = m.value()
            print(f" value={str(v)[:30]!r} has_value={m.has_value()}", end="", flush=True)
            print(f" unit={m.unit()!r}", flush=True)
print("all units read")
