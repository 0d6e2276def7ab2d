#!/usr/bin/env python3
"""Overhead of the watched run against raw ncu, and hang detection time.

Measured side by side in one run (raw and watched alternate), printed as one
table. With the real ncu (default: found as nsightwrap finds it) it needs a
GPU and the programs built from tests/gpu/kernels.cu; with --fake it uses
the fake ncu of the tests at real-time speed (FAKE_NCU_SCALE=1).

    python benchmarks/run_overhead.py --fake
    python benchmarks/run_overhead.py --app /tmp/app ok --hang /tmp/app hang 60

Goals (issue 2): overhead <= 3 % or <= 0.5 s; a real hang caught within 15 s.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from nsightwrap import ProfileOptions, RunConfig, find_ncu, profile_command  # noqa: E402
from nsightwrap.ncu.options import build_argv  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--fake", action="store_true", help="use the fake ncu of tests/ (no GPU needed)")
    ap.add_argument("--ncu", help="ncu to use")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--stall-timeout", type=float, default=10.0)
    ap.add_argument("--app", nargs="+", help="non-hanging program to profile")
    ap.add_argument("--hang", nargs="+", help="program that hangs under ncu")
    args = ap.parse_args()

    env = dict(os.environ)
    if args.fake:
        env["NSIGHTWRAP_NCU"] = str(ROOT / "tests/fake_ncu/ncu")
        env["FAKE_NCU_SCALE"] = "1.0"
        fake_app = [sys.executable, str(ROOT / "tests/fake_ncu/app.py")]
        args.app = args.app or fake_app + ["vec_add"] * 3 + ["block_reduce", "vec_add", "block_reduce", "vec_add",
                                                              "block_reduce"]
        args.hang = args.hang or fake_app + ["vec_add"] * 3 + ["wait_for_host@hang"]
    if not args.app or not args.hang:
        ap.error("give --app and --hang (or --fake)")
    ncu = find_ncu(args.ncu, env)
    tmp = Path(tempfile.mkdtemp(prefix="nsightwrap-bench-"))
    options = ProfileOptions(set="basic")
    config = RunConfig(ncu=ncu, report_dir=str(tmp), env=env, cache_dir=str(tmp / "cache"),
                       stall_timeout=args.stall_timeout)

    def raw(i):
        argv = build_argv(ncu, options.replace(export=str(tmp / f"raw{i}.ncu-rep")), args.app)
        t = time.perf_counter()
        subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL,
                       env=env, check=True)
        return time.perf_counter() - t

    def watched(i):
        t = time.perf_counter()
        a = profile_command(args.app, options.replace(export=str(tmp / f"watched{i}.ncu-rep")), config)
        took = time.perf_counter() - t
        assert a.status == "ok", a.describe()
        return took

    raw(-1), watched(-1)  # warm-up: caches, page cache, the GPU's clocks
    raws, watcheds = [], []
    for i in range(args.repeat):
        pair = [(raws, raw), (watcheds, watched)] if i % 2 == 0 else [(watcheds, watched), (raws, raw)]
        for bucket, fn in pair:
            bucket.append(fn(i))
    r, w = statistics.median(raws), statistics.median(watcheds)

    t = time.perf_counter()
    hang = profile_command(args.hang, options, config)
    total = time.perf_counter() - t
    assert hang.status == "hang", hang.describe()
    stall_start = hang.stall.detected_at_s - hang.stall.silent_s

    rows = [
        (f"raw ncu, median of {args.repeat} (s)", f"{r:.3f}", ""),
        (f"watched, median of {args.repeat} (s)", f"{w:.3f}", ""),
        ("overhead (s)", f"{w - r:+.3f}", "<= 0.5 s or <= 3 %"),
        ("overhead (%)", f"{100 * (w - r) / r:+.1f}", "met" if (w - r) <= 0.5 or (w - r) / r <= 0.03 else "NOT MET"),
        ("hang: last progress mark at (s)", f"{stall_start:.2f}", ""),
        ("hang: stall detected after (s)", f"{hang.detection_s:.2f}", f"stall timeout {args.stall_timeout:g} s"),
        ("hang: verdict to clean tree (s)", f"{hang.stop_s:.2f}", "graceful" if hang.stop.graceful else "forced"),
        ("hang: stall to clean (s)", f"{hang.detection_s + hang.stop_s:.2f}",
         "met (< 15 s)" if hang.detection_s + hang.stop_s < 15 else "NOT MET"),
        ("hang: whole run (s)", f"{total:.2f}", ""),
    ]
    print(f"\nncu: {ncu}  ({'fake' if args.fake else 'real'})")
    print(f"app: {' '.join(args.app)}\nhang: {' '.join(args.hang)}\n")
    width = max(len(x[0]) for x in rows)
    print(f"| {'measure'.ljust(width)} | value    | goal / note")
    print(f"|{'-' * (width + 2)}|----------|------------")
    for name, value, note in rows:
        print(f"| {name.ljust(width)} | {value.rjust(8)} | {note}")
    print("\nraw:     " + " ".join(f"{x:.3f}" for x in raws))
    print("watched: " + " ".join(f"{x:.3f}" for x in watcheds))
    return 0


if __name__ == "__main__":
    sys.exit(main())
