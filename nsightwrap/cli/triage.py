"""`triage`: is it ncu or my kernel? Runs without ncu, compute-sanitizer, optionally the ncu walk; a verdict."""

from __future__ import annotations

import argparse
import sys
from typing import Any, Optional

from nsightwrap.call.triage import with_store_notes
from nsightwrap.cli.common import (
    UsageError,
    add_calibration_limit,
    given,
    interrupted_doc,
    positive,
    print_json,
    split_command,
    store_used,
)
from nsightwrap.cli.outcome import report_interrupt
from nsightwrap.cli.screen import open_screen
from nsightwrap.diagnose.run import TriageOptions, triage_command
from nsightwrap.diagnose.sanitizer import TOOLS
from nsightwrap.ncu.context import RunConfig
from nsightwrap.status import INTERRUPTED
from nsightwrap.store.hangstore import HangStore
from nsightwrap.store.location import resolve_store
from nsightwrap.store.opening import open_store
from nsightwrap.watch.locate import check_program
from nsightwrap.watch.signals import interruptible

__all__ = ["add_parser", "cmd_triage", "parse_tools"]


def parse_tools(text: str) -> tuple[str, ...]:
    """--tools memcheck,racecheck (or `none`): checked against the sanitizer's tools."""
    if text.strip() in ("", "none"):
        return ()
    tools = tuple(t.strip() for t in text.split(",") if t.strip())
    unknown = [t for t in tools if t not in TOOLS]
    if unknown:
        raise argparse.ArgumentTypeError(f"{','.join(unknown)} is not a compute-sanitizer tool; give some of "
                                         f"{','.join(TOOLS)}, or none")
    return tools


def _runs(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: give how many runs without ncu to make (1 or more)")
    return n


def add_parser(sub: Any) -> None:
    p = sub.add_parser("triage", help="is it ncu or my kernel? runs without ncu, compute-sanitizer, a verdict",
                       usage="%(prog)s [options] -- COMMAND [ARGS...]")
    p.add_argument("--runs", type=_runs, default=5, metavar="N", help="runs without ncu (default 5)")
    p.add_argument("--tools", type=parse_tools, default=TOOLS, metavar="T,T",
                   help=f"compute-sanitizer tools (default {','.join(TOOLS)}; `none` for none)")
    p.add_argument("--kernel", type=given, metavar="NAME", help="the kernel in question (sanitizer filter, walk)")
    p.add_argument("--walk", action="store_true", help="also walk the ncu fallback ladder for the kernel")
    p.add_argument("--set", dest="section_set", default="full", metavar="SET", help="the walk's settings (full)")
    p.add_argument("--profile", default="default", metavar="NAME|FILE", help="the walk's ladder (default)")
    p.add_argument("--no-blocking", action="store_true",
                   help="no CUDA_LAUNCH_BLOCKING=1 run after an asynchronous failure")
    p.add_argument("--timeout", type=positive, metavar="SEC",
                   help="each run's limit (default: from the calibration, else 4 x --calibration-limit)")
    p.add_argument("--sanitizer", metavar="PATH", help="compute-sanitizer to use")
    p.add_argument("--ncu", metavar="PATH")
    add_calibration_limit(p)
    p.add_argument("--store", metavar="PATH|URL",
                   help="hang store, a file or a postgresql:// URL (default: $NSIGHTWRAP_STORE or "
                        "~/.cache/nsightwrap/hangs.db)")
    p.add_argument("--json", action="store_true", help="print the result as one JSON object on stdout")
    p.add_argument("-q", "--quiet", action="store_true", help="no program output and no progress on stderr")
    p.add_argument("extra", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)


def cmd_triage(args: argparse.Namespace) -> int:
    command = split_command(args.extra)
    if not command:
        raise UsageError("nsightwrap triage: give the command after `--`")
    check_program(command)
    options = TriageOptions(runs=args.runs, tools=args.tools, kernel=args.kernel, walk=args.walk,
                            set=args.section_set, ladder=args.profile, blocking=not args.no_blocking,
                            timeout=args.timeout, sanitizer=args.sanitizer)
    config = RunConfig(ncu=args.ncu, calibration_limit=args.calibration_limit)
    location = resolve_store(args.store)
    screen = open_screen(args.quiet)
    store: Optional[HangStore] = None
    try:
        with interruptible(), screen:
            store = open_store(location)  # the team's database down: this machine's file, with a note
            for note in store.notes:
                print(f"nsightwrap: {note}", file=sys.stderr)
            result = with_store_notes(triage_command(
                command, options, config, store=store, on_output=screen.on_output,
                say=(lambda _: None) if args.quiet else (lambda s: screen.line(f"[triage] {s}"))), store)
    except KeyboardInterrupt:
        used = store_used(location, store)  # the local file when the database was down, with its note
        return report_interrupt(args, screen, interrupted_doc(
            f"triage interrupted; every run so far is in the store ({used['store']})", **used))
    finally:
        if store is not None:
            store.close()
    if result.status == INTERRUPTED:
        return report_interrupt(args, screen, result.to_dict())
    print_json(result.to_dict()) if args.json else print(result.summary())
    return result.exit_code
