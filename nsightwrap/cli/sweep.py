"""`sweep-sections`: find which sections hang on which kernels."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from nsightwrap.cli.common import echo, positive, signals_as_interrupt, split_command
from nsightwrap.errors import ProfileInterrupted
from nsightwrap.fallback.ladder import load_ladder
from nsightwrap.fallback.sweep import Probe, result_json, sweep_sections
from nsightwrap.ncu.context import RunConfig
from nsightwrap.ncu.progress import DEFAULT_STALL_TIMEOUT
from nsightwrap.status import EXIT_CODES, INTERRUPTED, USAGE_EXIT_CODE
from nsightwrap.store.debuglog import debug_log
from nsightwrap.store.hangstore import HangStore


def add_parser(sub: Any) -> None:
    sweep = sub.add_parser("sweep-sections", help="find which sections hang on which kernels",
                           usage="%(prog)s [options] -- COMMAND [ARGS...]")
    sweep.add_argument("--ncu", metavar="PATH")
    sweep.add_argument("--kernel", metavar="REGEX", help="only kernels whose name matches REGEX")
    sweep.add_argument("--set", dest="section_set", default="full", metavar="SET",
                       help="sections of this set (default full)")
    sweep.add_argument("--section", action="append", default=[], metavar="ID", help="these sections instead of a set")
    sweep.add_argument("--profile", default="default", metavar="NAME|FILE",
                       help="ladder whose first rung's stall timeout the probes use")
    sweep.add_argument("--stall-timeout", type=positive, metavar="SEC",
                       help="stall timeout of every probe "
                            f"(default: the profile's first rung, else {DEFAULT_STALL_TIMEOUT:g})")
    sweep.add_argument("--jobs", type=int, default=1, metavar="N", help="probes at once, one per GPU")
    sweep.add_argument("--store", metavar="PATH",
                       help="hang store (default: $NSIGHTWRAP_STORE or ~/.cache/nsightwrap/hangs.db)")
    sweep.add_argument("--json", action="store_true", help="print the result as JSON on stdout")
    sweep.add_argument("--markdown", metavar="FILE", help="write the debug log of the investigated kernels here")
    sweep.add_argument("-q", "--quiet", action="store_true", help="do not echo ncu's output")
    sweep.add_argument("extra", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)


def cmd_sweep(args: argparse.Namespace) -> int:
    command = split_command(args.extra)
    if not command:
        print("nsightwrap sweep-sections: give the command after `--`", file=sys.stderr)
        return USAGE_EXIT_CODE
    first = load_ladder(args.profile).rungs[0]
    config = RunConfig(ncu=args.ncu, stall_timeout=args.stall_timeout or first.stall_timeout or DEFAULT_STALL_TIMEOUT)
    store = HangStore(args.store)

    def said(probe: Probe) -> None:
        if not args.quiet:
            echo(f"\n[sweep] {probe.kernel}: {probe.label()} -> {probe.outcome}\n")

    with signals_as_interrupt():
        try:
            result = sweep_sections(command, kernel=args.kernel, set=args.section_set, sections=args.section,
                                    config=config, store=store, jobs=args.jobs, on_probe=said)
        except ProfileInterrupted as e:
            print(f"\nsweep interrupted; every probe so far is in the store ({store.path})\n{e.attempt.describe()}",
                  file=sys.stderr)
            return EXIT_CODES[INTERRUPTED]
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write("\n\n".join(debug_log(store, k.kernel) for k in result.kernels) or "nothing hung\n")
    print(result_json(result) if args.json else result.table())
    return 0
