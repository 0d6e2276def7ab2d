"""`doctor`: a preflight, one line per check with what to do: ncu, driver, counters, GPU, nsys, store."""

from __future__ import annotations

import argparse
from typing import Any

from nsightwrap.cli.common import print_json
from nsightwrap.cli.preflight import DOCTOR_CHECKS, FAIL, Facts, as_json, failed, run_checks
from nsightwrap.ncu.context import RunConfig, RunContext
from nsightwrap.status import ERROR, EXIT_CODES, OK, USAGE_EXIT_CODE


def add_parser(sub: Any) -> None:
    doctor = sub.add_parser("doctor", help="check ncu, the driver, counter permission, the GPU, nsys and the store",
                            description="Each check prints a line (ok, warn, FAIL, skip) and, where something is "
                                        "wrong, what to do. Exit code 2 when a check FAILs.")
    doctor.add_argument("--ncu", metavar="PATH", help="ncu to check (default: $NSIGHTWRAP_NCU, PATH, CUDA)")
    doctor.add_argument("--store", metavar="PATH", help="hang store to check (default: $NSIGHTWRAP_STORE, XDG cache)")
    doctor.add_argument("--json", action="store_true", help="print one JSON object on stdout")


def cmd_doctor(args: argparse.Namespace) -> int:
    facts = Facts.gather(lambda: RunContext.create(RunConfig(ncu=args.ncu)), args.store)
    checks = run_checks(facts, DOCTOR_CHECKS)
    code = USAGE_EXIT_CODE if failed(checks) else EXIT_CODES[OK]
    if args.json:
        print_json({"status": ERROR if code else OK, "exit_code": code, "checks": as_json(checks)})
    else:
        for c in checks:
            print(c.line())
        if code:
            print(f"\n{len(failed(checks))} check(s) {FAIL}: fix them before profiling (see the lines with ->)")
    return code
