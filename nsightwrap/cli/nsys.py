"""`python -m nsightwrap nsys profile|stats|export|kernels|find`: Nsight Systems from the command line.

Runs without pandas too (the GPU machine may lack it): tables are then
printed as CSV.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from pathlib import Path

from nsightwrap.cli.common import positive
from nsightwrap.ncu.context import RunConfig
from nsightwrap.nsys.locate import find_nsys
from nsightwrap.nsys.options import DEFAULT_TRACE, NsysOptions
from nsightwrap.nsys.run import profile_nsys
from nsightwrap.reports.nsys.sqlite import EXPORT_TIMEOUT_S, kernel_records, kernel_rows, nsys_export_sqlite
from nsightwrap.reports.nsys.stats import DEFAULT_STATS_REPORTS, STATS_TIMEOUT_S, stats_tables


def add_nsys_parser(sub) -> None:
    """The `nsys` command and its sub-commands, on the subparsers of `python -m nsightwrap`."""
    p = sub.add_parser("nsys", help="profile with Nsight Systems, watched; read its reports",
                       description="Nsight Systems under the nsightwrap watchdog")
    nsys_sub = p.add_subparsers(dest="nsys_cmd", required=True, metavar="NSYS_COMMAND")
    pr = nsys_sub.add_parser("profile", help="nsys profile a command; prints the run as JSON",
                             usage="%(prog)s [options] -- COMMAND [ARGS...]")
    pr.add_argument("-o", "--output")
    pr.add_argument("--trace", default=",".join(DEFAULT_TRACE))
    pr.add_argument("--capture-range")
    pr.add_argument("--nvtx-capture")
    pr.add_argument("--sample")
    pr.add_argument("--timeout", type=positive, help="total seconds")
    pr.add_argument("--silence-timeout", type=positive)
    pr.add_argument("--nsys")
    pr.add_argument("--extra", action="append", default=[], help="one extra nsys argument (repeat)")
    pr.add_argument("command", nargs=argparse.REMAINDER)
    st = nsys_sub.add_parser("stats", help="nsys stats reports as tables")
    st.add_argument("report")
    st.add_argument("--report", dest="reports", action="append")
    st.add_argument("--nsys")
    st.add_argument("--timeout", type=positive, default=STATS_TIMEOUT_S)
    st.add_argument("--save-dir", help="write NAME.txt (nsys's raw output) and NAME.csv here")
    ex = nsys_sub.add_parser("export", help="nsys export --type sqlite; prints the path")
    ex.add_argument("report")
    ex.add_argument("-o", "--output")
    ex.add_argument("--nsys")
    ex.add_argument("--timeout", type=positive, default=EXPORT_TIMEOUT_S)
    kr = nsys_sub.add_parser("kernels", help="kernel rows of a SQLite export")
    kr.add_argument("sqlite")
    kr.add_argument("--csv", help="write all rows here")
    fd = nsys_sub.add_parser("find", help="print the nsys that would be used")
    fd.add_argument("--nsys")


def cmd_nsys(args) -> int:
    """Run one `nsys` sub-command; NsightwrapError goes up to `main` (exit code 2)."""
    return {"profile": _profile, "stats": _stats, "export": _export, "kernels": _kernels,
            "find": _find}[args.nsys_cmd](args)


def _find(args) -> int:
    print(find_nsys(args.nsys))
    return 0


def _profile(args) -> int:
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    opts = NsysOptions(trace=tuple(args.trace.split(",")), capture_range=args.capture_range,
                       nvtx_capture=args.nvtx_capture, output=args.output, sample=args.sample,
                       extra_args=tuple(args.extra))
    run = profile_nsys(command, opts, RunConfig(timeout=args.timeout, check_gpu=False),
                       on_output=lambda t: (sys.stderr.write(t), sys.stderr.flush()),
                       nsys=args.nsys, silence_timeout=args.silence_timeout)
    d = run.to_dict()
    d["log"] = d["log"][-20000:]
    print(json.dumps(d, indent=1, default=str))
    return run.exit_code


def _stats(args) -> int:
    tables = stats_tables(args.report, tuple(args.reports or DEFAULT_STATS_REPORTS), args.nsys, timeout=args.timeout)
    pandas_ok = _have_pandas()
    for name, t in tables.items():
        if args.save_dir:
            d = Path(args.save_dir)
            d.mkdir(parents=True, exist_ok=True)
            (d / f"{name}.txt").write_text(t.raw)
            (d / f"{name}.csv").write_text(t.to_csv())
        print(f"== {name}: {len(t.rows)} rows" + (f" ({t.note})" if t.note else ""))
        if pandas_ok:
            df = t.to_dataframe()
            print(df.dtypes.to_string())
            print(df.to_string(max_colwidth=80))
        else:
            print(t.to_csv())
    return 0


def _export(args) -> int:
    print(nsys_export_sqlite(args.report, args.nsys, output=args.output, timeout=args.timeout))
    return 0


def _kernels(args) -> int:
    columns, rows, missing, notes = kernel_records(args.sqlite)
    print(f"{len(rows)} kernel rows; missing columns: {missing or 'none'}; {'; '.join(notes)}")
    if args.csv:
        with open(args.csv, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(columns)
            w.writerows(rows)
    if _have_pandas():
        print(kernel_rows(args.sqlite).head(40).to_string(max_colwidth=80))
    else:
        for r in rows[:40]:
            print(r)
    return 0


def _have_pandas() -> bool:
    try:
        import pandas  # noqa: F401
    except ImportError:
        return False
    return True
