"""`python -m nsightwrap cleanup`: stop trees whose nsightwrap was killed and whose guard could not.

Normally nothing is left: a guard process stops the tree within seconds of
nsightwrap's death. This is for the machines where that failed too. Only
trees with a run record of the calling user are stopped (the cookie in the
environment alone proves nothing), only that user's processes in them, and
in the same steps as a normal stop: SIGINT to the profiler front end (so
ncu can finish its report), the grace, then SIGTERM, then SIGKILL. The
temporary folders of nsightwrap processes that are gone are removed too.
"""

from __future__ import annotations

import argparse
import sys

from nsightwrap.errors import NsightwrapError
from nsightwrap.paths import remove_stale_work_dirs, stale_work_dirs
from nsightwrap.watch.orphans import OrphanedRun, orphaned_runs, stop_orphaned, unrecorded
from nsightwrap.watch.records import forget_run
from nsightwrap.watch.tree import StopPolicy, describe


def _positive(text: str) -> float:
    value = float(text)
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"must be >= 0 seconds, got {text}")
    return value


def add_cleanup_parser(sub) -> argparse.ArgumentParser:
    p = sub.add_parser("cleanup", help="stop processes left by nsightwrap runs whose owner was killed",
                       description=__doc__.split("\n\n")[1], epilog="exit codes: 0 nothing left, 1 processes "
                       "survived SIGKILL, 2 the runtime folder cannot be used")
    p.add_argument("--dry-run", action="store_true", help="list what would be stopped, stop nothing")
    p.add_argument("--grace", type=_positive, default=StopPolicy().grace, metavar="SEC",
                   help="after SIGINT, how long ncu may take to write the report and exit")
    return p


def _run_line(run: OrphanedRun) -> str:
    r = run.record
    return (f"run {r.cookie[:12]} (started {r.started()} by pid {r.owner_pid}, which is gone): "
            f"{' '.join(r.argv[:6])}{' ...' if len(r.argv) > 6 else ''}")


def cmd_cleanup(args) -> int:
    try:
        runs = orphaned_runs()
    except NsightwrapError as e:
        print(f"nsightwrap cleanup: {e}", file=sys.stderr)
        return 2
    live = [r for r in runs if r.members]
    failed = False
    for run in live:
        names = ", ".join(describe(p) for p in run.members)
        if args.dry_run:
            print(f"would stop {_run_line(run)}\n  {len(run.members)} process(es): {names}")
            continue
        print(f"stopping {_run_line(run)}\n  {len(run.members)} process(es): {names}")
        rec = stop_orphaned(run, StopPolicy(grace=args.grace))
        print("  " + "; ".join(rec.steps))
        if rec.survivors:
            failed = True
            print(f"  still alive after SIGKILL: {', '.join(rec.survivors)} (uninterruptible? check `ps -o stat`)")
    stale = [r for r in runs if not r.members]
    if stale and not args.dry_run:
        for run in stale:
            forget_run(run.path, run.record.tool_log)
    for p in unrecorded(runs):
        print(f"not touched: {describe(p)} carries an nsightwrap cookie of a dead owner but no run record of "
              "this user, so nothing proves nsightwrap started it; if it is yours, stop it with kill")
    folders = stale_work_dirs() if args.dry_run else remove_stale_work_dirs()
    if folders:
        print(f"{'would remove' if args.dry_run else 'removed'} {len(folders)} temporary folder(s) of killed "
              f"nsightwrap processes: {', '.join(str(f) for f in folders)}")
    if not live:
        print("no processes left by killed nsightwrap runs"
              + (f" ({len(stale)} stale run record(s) {'found' if args.dry_run else 'removed'})" if stale else ""))
    return 1 if failed else 0
