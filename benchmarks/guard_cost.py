#!/usr/bin/env python3
"""What the guard process costs a watched run (issue 11, item 4: "no extra second per run").

    python benchmarks/guard_cost.py [--repeat 20]

A watched run of /bin/true with and without its guard, alternating; the
guard is started without waiting for it and released with one write, so it
should add milliseconds, not seconds. Also: how long the guard takes to stop
a tree once its owner is SIGKILLed (the fake ncu, a hung kernel).
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from nsightwrap.watch.rules import TotalTimeout  # noqa: E402
from nsightwrap.watch.run import watch  # noqa: E402
from nsightwrap.watch.tree import COOKIE_VAR, OWNER_VAR, processes_with  # noqa: E402


def one(guard: bool) -> float:
    t0 = time.perf_counter()
    watch(["true"], TotalTimeout(30), guard=guard)
    return time.perf_counter() - t0


def kill_and_time(tmp: str) -> float:
    """SIGKILL `nsightwrap run` mid-hang; seconds until no process of the tree is left."""
    tests = ROOT / "tests"
    env = dict(os.environ, NSIGHTWRAP_NCU=str(tests / "fake_ncu" / "ncu"), FAKE_NCU_SCALE="0.1",
               NSIGHTWRAP_CACHE_DIR=os.path.join(tmp, "cache"), PYTHONPATH=str(ROOT))
    p = subprocess.Popen([sys.executable, "-m", "nsightwrap", "run", "--stall-timeout", "60", "-o",
                          os.path.join(tmp, "r"), "--", sys.executable, str(tests / "fake_ncu" / "app.py"),
                          "vec_add", "k@hang"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    os.set_blocking(p.stderr.fileno(), False)
    buf = b""
    while b"0%.." not in buf:
        time.sleep(0.02)
        buf += p.stderr.read() or b""
    cookie = processes_with(OWNER_VAR, str(p.pid))[0][1][COOKIE_VAR]
    p.send_signal(signal.SIGKILL)
    p.wait()
    t0 = time.perf_counter()
    while processes_with(COOKIE_VAR, cookie):
        time.sleep(0.02)
    return time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=20)
    args = ap.parse_args()
    one(True), one(False)  # warm up
    times = {True: [], False: []}
    for _ in range(args.repeat):
        for guard in (True, False):
            times[guard].append(one(guard))
    with_g, without = statistics.median(times[True]), statistics.median(times[False])
    print(f"watched /bin/true, median of {args.repeat}: with guard {with_g * 1000:.1f} ms, "
          f"without {without * 1000:.1f} ms, the guard adds {(with_g - without) * 1000:.1f} ms")
    with tempfile.TemporaryDirectory() as tmp:
        stops = [kill_and_time(tmp) for _ in range(3)]
    print(f"SIGKILL of `nsightwrap run` mid-hang: tree gone after {', '.join(f'{s:.2f}' for s in stops)} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
