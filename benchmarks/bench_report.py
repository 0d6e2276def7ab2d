#!/usr/bin/env python3
"""How fast a report becomes a DataFrame: nsightwrap against the plain ways.

For (a) all metrics and (b) ten chosen metrics, side by side in one run
(the methods alternate in every round, median of the rounds), each from the
file to a DataFrame:

- nsightwrap: ``load_report(path)`` / ``load_report(path, metrics=TEN)``
- plain loop: ``ncu_report.load_report``, every action, every metric by
  ``action[name].value()``, a list of dicts, ``pandas.DataFrame`` (then the
  ten columns, for (b))
- CSV: ``ncu --import FILE --csv --page raw --print-units base`` and
  ``pandas.read_csv`` (then the ten columns); "n/a (no ncu)" where no ncu is found

    python benchmarks/bench_report.py                        # the largest fixture
    python benchmarks/bench_report.py run.ncu-rep --repeat 50 --ncu /usr/local/cuda/bin/ncu

Goals (issue): ten metrics at least 5x faster than the CSV path; all
metrics no slower than the plain loop.
"""

from __future__ import annotations

import argparse
import gc
import io
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import pandas as pd  # noqa: E402

from nsightwrap.errors import ToolNotFound  # noqa: E402
from nsightwrap.ncu.locate import find_ncu  # noqa: E402
from nsightwrap.reports.ncu import IDENTITY_COLUMNS, load_report, raw_csv_argv  # noqa: E402
from nsightwrap.reports.ncu.module import choose_reader  # noqa: E402

FIXTURES = ROOT / "tests" / "data" / "reports"
TEN = [
    "gpu__time_duration.sum",
    "sm__throughput.avg.pct_of_peak_sustained_elapsed",
    "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed",
    "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed",
    "l1tex__throughput.avg.pct_of_peak_sustained_active",
    "lts__throughput.avg.pct_of_peak_sustained_elapsed",
    "sm__warps_active.avg.pct_of_peak_sustained_active",
    "gpc__cycles_elapsed.max",
    "launch__registers_per_thread",
    "launch__waves_per_multiprocessor",
]


def plain_loop(module, path: str, columns=None) -> pd.DataFrame:
    """What one writes without nsightwrap."""
    ctx = module.load_report(path)
    rows = []
    for r in range(ctx.num_ranges()):
        rng = ctx.range_by_idx(r)
        for a in range(rng.num_actions()):
            action = rng.action_by_idx(a)
            row = {"kernel": action.name()}
            for name in action.metric_names():
                row[name] = action[name].value()
            rows.append(row)
    df = pd.DataFrame(rows)
    return df[["kernel", *columns]] if columns else df


def csv_path(ncu: str, path: str, columns=None) -> pd.DataFrame:
    out = subprocess.run(raw_csv_argv(ncu, path), capture_output=True, text=True, check=True).stdout
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith('"ID"'))
    df = pd.read_csv(io.StringIO("\n".join(lines[start:])), skiprows=[1], thousands=",")
    return df[["Kernel Name", *[c for c in columns if c in df]]] if columns else df


def timed(fn) -> float:
    """One call, with the garbage of the previous one collected first and the
    collector off meanwhile (as timeit does), so no method pays for another."""
    gc.collect()
    gc.disable()
    try:
        start = time.perf_counter()
        fn()
        return time.perf_counter() - start
    finally:
        gc.enable()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("report", nargs="?", help="the .ncu-rep to read (default: the largest fixture)")
    ap.add_argument("--repeat", type=int, default=30, help="rounds (the CSV path runs at most 5)")
    ap.add_argument("--ncu", help="ncu for the CSV path (default: found as nsightwrap finds it)")
    args = ap.parse_args()

    path = args.report or str(max(FIXTURES.glob("*.ncu-rep"), key=lambda p: p.stat().st_size))
    try:
        ncu = find_ncu(args.ncu)
    except ToolNotFound:
        ncu = None

    first = load_report(path, ncu=args.ncu)  # warm up: imports, caches
    module = choose_reader(args.ncu).module  # the plain loop uses the module nsightwrap chose
    if module is None:
        ap.error("no ncu_report module imports here: pip install ncu-report")
    names = list(first.columns[len(IDENTITY_COLUMNS):])
    ten = [m for m in TEN if m in names]
    ten += [m for m in names if m not in ten][: 10 - len(ten)]
    plain_loop(module, path)

    cases = {
        "all metrics": (lambda: load_report(path, ncu=args.ncu), lambda: plain_loop(module, path),
                        (lambda: csv_path(ncu, path)) if ncu else None),
        "10 selected metrics": (lambda: load_report(path, metrics=ten, ncu=args.ncu),
                                lambda: plain_loop(module, path, ten),
                                (lambda: csv_path(ncu, path, ten)) if ncu else None),
    }
    results = {}
    for case, (ours, loop, csv) in cases.items():
        times = {"ours": [], "loop": [], "csv": []}
        for i in range(args.repeat):
            times["ours"].append(timed(ours))
            times["loop"].append(timed(loop))
            if csv is not None and i < 5:
                times["csv"].append(timed(csv))
        results[case] = {k: statistics.median(v) if v else None for k, v in times.items()}

    size = Path(path).stat().st_size
    print(f"report: {path} ({size:,} bytes, {len(first)} results, {len(names)} metric columns)")
    print(f"reader: {first.attrs['reader']} ({first.attrs['reader_origin']}); ncu: {ncu or 'none found'}")
    print(f"median of {args.repeat} rounds (CSV: {min(args.repeat, 5)}), from the file to a DataFrame\n")
    print("| case                | nsightwrap (ms) | plain loop (ms) | ncu --csv (ms) "
          "| loop/nsightwrap | csv/nsightwrap | goal")
    print("|---------------------|-----------------|-----------------|----------------"
          "|-----------------|----------------|-----")
    for case, r in results.items():
        ours, loop, csv = r["ours"], r["loop"], r["csv"]
        csv_ms = f"{csv * 1e3:14.1f}" if csv else f"{'n/a (no ncu)':>14}"
        csv_ratio = f"{csv / ours:14.1f}x" if csv else f"{'n/a':>15}"
        if case == "all metrics":
            goal = "no slower than the loop: " + ("met" if ours <= loop else "NOT met")
        else:
            goal = ">= 5x faster than CSV: " + (("met" if csv / ours >= 5 else "NOT met") if csv else "n/a (no ncu)")
        print(f"| {case:<19} | {ours * 1e3:15.2f} | {loop * 1e3:15.2f} | {csv_ms} | {loop / ours:14.1f}x | "
              f"{csv_ratio} | {goal}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
