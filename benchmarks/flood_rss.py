#!/usr/bin/env python3
"""Peak memory of nsightwrap while the profiled program floods its output (issue 11, item 2).

    python benchmarks/flood_rss.py [--gb 1] [--fallback-gb 0.1]    # goal: peak RSS <= 100 MB

The fake ncu (tests/fake_ncu) profiles one kernel of a program that then
writes GB gigabytes of "y\\n" and exits. Measured: the peak resident memory
(VmHWM) of the nsightwrap process, and the run's time, for
- `python -m nsightwrap run -q` (ncu's output on its --log-file; the
  program's output read and dropped),
- the same with the output echoed (to /dev/null),
- profile_command(..., RunConfig(log_channel=False)): the merged stdout
  parsed, the fallback for an ncu that cannot log to a file. Every line of
  the program becomes an event there (about a million lines a second), so
  it gets a smaller flood by default (--fallback-gb).
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
TESTS = ROOT / "tests"
GOAL_MB = 100

DRIVER = """
import sys
sys.path[:0] = [{root!r}, {tests!r}]
from conftest import app
from nsightwrap import ProfileOptions, RunConfig, profile_command
a = profile_command(app("vec_add", "flood:{n}"), ProfileOptions(set="basic"),
                    RunConfig(check_gpu=False, report_dir={out!r}, log_channel=False), on_output=lambda t: None)
print(a.to_json())
"""


def peak_kb(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def measure(argv: list[str], env: dict, stderr) -> tuple[float, float, dict]:
    t0 = time.monotonic()
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=stderr, env=env)
    peak = 0
    while p.poll() is None:
        peak = max(peak, peak_kb(p.pid))
        time.sleep(0.02)
    out = p.stdout.read()
    return time.monotonic() - t0, peak / 1024, json.loads(out.decode().strip().splitlines()[-1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gb", type=float, default=1.0)
    ap.add_argument("--fallback-gb", type=float, default=0.1)
    args = ap.parse_args()
    n = int(args.gb * (1 << 30))
    n_fallback = int(args.fallback_gb * (1 << 30))
    tmp = tempfile.mkdtemp(prefix="nsightwrap-flood-")
    env = dict(os.environ, NSIGHTWRAP_NCU=str(TESTS / "fake_ncu" / "ncu"), FAKE_NCU_SCALE="0.1",
               NSIGHTWRAP_CACHE_DIR=os.path.join(tmp, "cache"), PYTHONPATH=str(ROOT))
    app = [sys.executable, str(TESTS / "fake_ncu" / "app.py"), "vec_add", f"flood:{n}"]
    cli = [sys.executable, "-m", "nsightwrap", "run", "--json", "--timeout", "600", "-o"]
    runs = [
        ("run -q (--log-file channel)", n, cli + [os.path.join(tmp, "a"), "-q", "--", *app]),
        ("run, echoed to /dev/null", n, cli + [os.path.join(tmp, "b"), "--", *app]),
        ("merged stdout parsed (fallback)", n_fallback,
         [sys.executable, "-c", DRIVER.format(root=str(ROOT), tests=str(TESTS), n=n_fallback, out=tmp)]),
    ]
    print(f"peak RSS of the nsightwrap process while the program writes (goal <= {GOAL_MB} MB)")
    worst = 0.0
    for name, size, argv in runs:
        took, mb, d = measure(argv, env, subprocess.DEVNULL)
        worst = max(worst, mb)
        print(f"  {name:34} {size / (1 << 30):5.2f} GB {mb:7.1f} MB  {took:6.1f} s  status {d['status']}, "
              f"{len(d['kernels'])} kernel(s), {size / took / (1 << 20):.0f} MB/s")
    print(f"goal: {'met' if worst <= GOAL_MB else 'NOT met'} (worst {worst:.1f} MB)")
    return 0 if worst <= GOAL_MB else 1


if __name__ == "__main__":
    sys.exit(main())
