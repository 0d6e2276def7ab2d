#!/usr/bin/env python3
"""Peak memory of nsightwrap over a long run's ncu log (issue 23, item 2).

    python benchmarks/long_run_rss.py [--mb 100] [--kernels 100000]    # goal: peak RSS <= 100 MB

A stand-in for ncu writes its log (`--log-file`) as fast as it can and
exits, so nearly all of it is read after the end of the run (where the log
was once parsed in one piece: 100 MB of progress dots peaked at 12 GB).
Each case runs in a fresh interpreter, through the watch loop
(nsightwrap.watch.run.watch with the ncu observer) and build_attempt,
and prints that interpreter's peak resident memory (VmHWM), its time, and
the attempt's kernel count (exact, whatever the size):
- `dots`: one kernel whose progress line is MB megabytes of dots;
- `kernels`: KERNELS whole kernel lines, then MB megabytes of slow-launch
  warnings (a million lines are about 200 MB), then one more kernel.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GOAL_MB = 100

#: Writes the log: argv[1] the path, argv[2] the case, argv[3] megabytes, argv[4] kernels.
WRITER = r"""
import sys
path, case, mb, kernels = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
line = lambda i: f'==PROF== Profiling "k" - {i}: 0%....50%....100% - 10 passes\n'
warning = ("==WARNING== Launching the workload is taking more time than expected. If this continues to hang, "
           "terminate the profile and re-try by profiling the range of all related launches using "
           "'--replay-mode range'.\n")
with open(path, "w") as f:
    f.write("==PROF== Connected to process 1 (/app)\n")
    if case == "dots":
        f.write('==PROF== Profiling "k" - 0: 0%')
        for _ in range(mb):
            f.write("." * (1 << 20))
        f.write("100% - 10 passes\n")
    else:
        for start in range(0, kernels, 10000):
            f.write("".join(line(i) for i in range(start, min(kernels, start + 10000))))
        block = warning * ((1 << 20) // len(warning))
        for _ in range(mb):
            f.write(block)
        f.write(line(kernels))
    f.write("==PROF== Disconnected from process 1\n")
"""

DRIVER = r"""
import json, sys, time
sys.path.insert(0, {root!r})
from nsightwrap.ncu.attempt import build_attempt
from nsightwrap.ncu.progress import NcuObserver
from nsightwrap.watch.run import watch
t0 = time.monotonic()
out = watch([sys.executable, "-c", {writer!r}, {log!r}, {case!r}, "{mb}", "{kernels}"], None,
            observer=NcuObserver, tool_log={log!r}, guard=False)
a = build_attempt(out)
with open("/proc/self/status") as f:
    peak = next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))
print(json.dumps({{"status": a.status, "kernels": a.n_kernels, "warnings": a.slow_launch_warnings,
                  "peak_mb": peak / 1024, "seconds": time.monotonic() - t0}}))
"""


def run_case(case: str, mb: int, kernels: int, tmp: str) -> dict:
    log = os.path.join(tmp, f"{case}.log")
    code = DRIVER.format(root=str(ROOT), writer=WRITER, log=log, case=case, mb=mb, kernels=kernels)
    try:
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    finally:
        if os.path.exists(log):
            os.unlink(log)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mb", type=int, default=100, help="megabytes of dots / of warnings (default 100)")
    ap.add_argument("--kernels", type=int, default=100_000, help="kernel lines in the `kernels` case")
    args = ap.parse_args()
    print(f"peak RSS of nsightwrap over an ncu log read after the run (goal <= {GOAL_MB} MB)")
    worst = 0.0
    with tempfile.TemporaryDirectory(prefix="nsightwrap-long-run-") as tmp:
        for case, expect in (("dots", 1), ("kernels", args.kernels + 1)):
            t0 = time.monotonic()
            d = run_case(case, args.mb, args.kernels, tmp)
            worst = max(worst, d["peak_mb"])
            exact = "exact" if d["kernels"] == expect else f"WRONG (expected {expect})"
            print(f"  {case:8} {args.mb:5d} MB  peak {d['peak_mb']:6.1f} MB  {time.monotonic() - t0:6.1f} s  "
                  f"status {d['status']}, {d['kernels']} kernel(s) ({exact}), "
                  f"{d['warnings']} slow-launch warning(s)")
            if d["kernels"] != expect:
                worst = float("inf")
    print(f"goal: {'met' if worst <= GOAL_MB else 'NOT met'} (worst {worst:.1f} MB)")
    return 0 if worst <= GOAL_MB else 1


if __name__ == "__main__":
    sys.exit(main())
