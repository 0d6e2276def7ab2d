#!/usr/bin/env python3
"""What the command line's start costs, with the garbage collector paused while it loads (cli.main's
CollectorPause, issue 20) and without, measured side by side in one run.

    python3 benchmarks/cli_start.py [--rounds 15] [-o FILE]

Each round runs every case once in each variant, each as its own process, the variants in turn first:
  version  `python -m nsightwrap --version` (every command's module loaded for the parser)
  run      `python -m nsightwrap run --json -- app vec_add` on the fake ncu of tests/ (the command line, the fake
           ncu and its program: the CPU of the whole tree)
`paused` is the command line as shipped; `collecting` the same with CollectorPause made a no-op before main
runs (python -c). The table gives the median CPU (user + system of the process tree, getrusage of the children) and the
ratio paused / collecting. Runs on a machine without a GPU: the fakes stand in for ncu.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
COLLECTING = ("import runpy, sys, nsightwrap.cli.main as m\n"
              "m.CollectorPause.pause = lambda self: None\n"
              "sys.argv[0] = 'nsightwrap'\n"
              "runpy.run_module('nsightwrap', run_name='__main__', alter_sys=True)\n")


def cases(folder: str) -> dict[str, list[str]]:
    app = [sys.executable, "-S", str(ROOT / "tests" / "fake_ncu" / "app.py"), "vec_add"]
    return {"version": ["--version"], "run": ["run", "--json", "-o", f"{folder}/r", "--", *app]}


def cpu_of(argv: list[str], env: dict, cwd: str) -> float:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run(argv, capture_output=True, env=env, cwd=cwd, timeout=60)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"{argv} exited with {done.returncode}: {done.stderr.decode(errors='replace')[-500:]}")
    return after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("-o", "--output", help="also write the table here")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="nsightwrap-bench-") as folder:
        env = {**os.environ, "NSIGHTWRAP_NCU": str(ROOT / "tests" / "fake_ncu" / "ncu"),
               "NSIGHTWRAP_CACHE_DIR": folder, "NSIGHTWRAP_RUNTIME_DIR": folder, "FAKE_NCU_SCALE": "0.01",
               "NSIGHTWRAP_TRACER": "off", "NSIGHTWRAP_EVIDENCE": "off",
               "PYTHONPATH": os.pathsep.join(filter(None, (str(ROOT), os.environ.get("PYTHONPATH"))))}
        variants = {"paused": [sys.executable, "-m", "nsightwrap"],
                    "collecting": [sys.executable, "-c", COLLECTING]}
        cpu: dict[tuple[str, str], list[float]] = {}
        for round_ in range(args.rounds):
            for case, rest in cases(folder).items():
                order = list(variants.items())  # A B, then B A: neither variant always runs first
                for variant, head in order if round_ % 2 == 0 else reversed(order):
                    cpu.setdefault((case, variant), []).append(cpu_of([*head, *rest], env, folder))
    lines = [f"{'case':8} {'paused ms':>10} {'collecting ms':>14} {'ratio':>6}   (median CPU of {args.rounds} rounds)"]
    for case in cases("x"):
        paused, collecting = (statistics.median(cpu[case, v]) * 1000 for v in variants)
        lines.append(f"{case:8} {paused:10.0f} {collecting:14.0f} {paused / collecting:6.2f}")
    text = "\n".join(lines)
    print(text)
    if args.output:
        Path(args.output).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
