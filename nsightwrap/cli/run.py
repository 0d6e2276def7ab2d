"""`run`: profile a command under ncu, watched; with --profile, walk a fallback ladder."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, Callable, Optional

from nsightwrap.cli.common import EPILOG, echo_unless, positive, signals_as_interrupt, split_command
from nsightwrap.errors import ProfileInterrupted
from nsightwrap.ncu.context import RunConfig, RunContext
from nsightwrap.ncu.engine import profile_command
from nsightwrap.ncu.options import KernelFilter, ProfileOptions
from nsightwrap.ncu.progress import DEFAULT_STALL_TIMEOUT
from nsightwrap.status import ERROR, EXIT_CODES, HANG, INTERRUPTED, OK, REPLAY_MODES, USAGE_EXIT_CODE
from nsightwrap.store.hangstore import HangStore
from nsightwrap.watch.process import StopPolicy


def add_parser(sub: Any) -> None:
    run = sub.add_parser("run", help="profile a command with ncu, watched for hangs", epilog=EPILOG,
                         usage="%(prog)s [options] -- COMMAND [ARGS...]")
    run.add_argument("--ncu", metavar="PATH", help="ncu to use (default: $NSIGHTWRAP_NCU, PATH, CUDA)")
    run.add_argument("--set", dest="section_set", metavar="SET", help="section set (basic, detailed, full, ...)")
    run.add_argument("--section", action="append", default=[], metavar="ID",
                     help="section id or regex:EXPR (repeatable)")
    run.add_argument("--metrics", action="append", default=[], metavar="M",
                     help="metric names, comma separated (repeatable)")
    run.add_argument("--replay-mode", default="kernel", choices=list(REPLAY_MODES))
    run.add_argument("--kernel", metavar="REGEX", help="profile only kernels whose name matches REGEX")
    run.add_argument("--kernel-name", metavar="NAME", help="profile only the kernel named exactly NAME")
    run.add_argument("--kernel-name-base", default="function", choices=["function", "demangled", "mangled"])
    run.add_argument("--launch-skip", type=int, metavar="N")
    run.add_argument("--launch-count", type=int, metavar="N")
    run.add_argument("--stall-timeout", type=positive, default=DEFAULT_STALL_TIMEOUT, metavar="SEC",
                     help=f"a kernel with no progress for SEC is hung (default {DEFAULT_STALL_TIMEOUT:g}; "
                          "grows with the observed pace of progress)")
    run.add_argument("--timeout", type=positive, metavar="SEC", help="limit for the whole run")
    run.add_argument("--grace", type=positive, default=StopPolicy().grace, metavar="SEC",
                     help="after SIGINT, how long ncu may take to write the report and exit")
    run.add_argument("-o", "--export", metavar="REPORT",
                     help="report path (never overwritten; default: ./nsightwrap-reports/)")
    run.add_argument("--no-validate", action="store_true", help="do not check sets/sections against ncu first")
    run.add_argument("--profile", metavar="NAME|FILE",
                     help="walk down this fallback ladder (default, quick, deep, or a YAML file) for kernels that hang")
    run.add_argument("--store", metavar="PATH", help="hang store for --profile (default: $NSIGHTWRAP_STORE or "
                                                      "~/.cache/nsightwrap/hangs.db)")
    run.add_argument("--retry-known-hangs", action="store_true",
                     help="with --profile: try rungs the store knows to hang")
    run.add_argument("--json", action="store_true", help="print one JSON object describing the attempt on stdout")
    run.add_argument("-q", "--quiet", action="store_true", help="do not echo ncu's output")
    run.add_argument("extra", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)


def _kernel(args: argparse.Namespace) -> Optional[KernelFilter]:
    if args.kernel:
        return KernelFilter.from_user(args.kernel, args.kernel_name_base)
    if args.kernel_name:
        return KernelFilter.from_user(args.kernel_name, args.kernel_name_base, exact=True)
    return None


def cmd_run(args: argparse.Namespace) -> int:
    command = split_command(args.extra)
    if not command:
        print("nsightwrap run: give the command to profile after `--`, e.g.\n"
              "  python -m nsightwrap run --set basic -- ./my_app 1024", file=sys.stderr)
        return USAGE_EXIT_CODE
    if args.kernel and args.kernel_name:
        print("nsightwrap run: use --kernel REGEX or --kernel-name NAME, not both", file=sys.stderr)
        return USAGE_EXIT_CODE
    metrics = tuple(m.strip() for chunk in args.metrics for m in chunk.split(",") if m.strip())
    options = ProfileOptions(set=args.section_set, sections=tuple(args.section), metrics=metrics,
                             replay_mode=args.replay_mode, kernel=_kernel(args), launch_skip=args.launch_skip,
                             launch_count=args.launch_count, export=args.export)
    config = RunConfig(ncu=args.ncu, stall_timeout=args.stall_timeout, timeout=args.timeout,
                       stop=StopPolicy(grace=args.grace), validate=not args.no_validate)
    echo = echo_unless(args.quiet)
    with signals_as_interrupt():
        context = RunContext.create(config)
        if args.profile:
            return _run_ladder(args, command, options, context, echo)
        try:
            attempt = profile_command(command, options, context=context, on_output=echo)
        except ProfileInterrupted as e:
            attempt = e.attempt
        if args.json:
            print(attempt.to_json())
        else:
            print("\n" + attempt.describe(), file=sys.stderr)
    return attempt.exit_code


def _run_ladder(args: argparse.Namespace, command: list[str], options: ProfileOptions, context: RunContext,
                echo: Optional[Callable[[str], None]]) -> int:
    # Lazy on purpose: the walk imports pandas and the report reader, which a plain `run` never needs.
    from nsightwrap.fallback.walk import walk_ladder

    store = HangStore(args.store)
    try:
        result = walk_ladder(command, options, args.profile, context=context, store=store, on_output=echo,
                             retry_known_hangs=args.retry_known_hangs)
    except ProfileInterrupted as e:
        print(e.attempt.to_json() if args.json else e.attempt.describe())
        return EXIT_CODES[INTERRUPTED]
    df = result.df
    if args.json:
        print(json.dumps({
            "ladder": result.ladder.name,
            "steps": [{"job": s.job, "rung": s.rung.name, "skipped": s.skipped, "notes": list(s.notes),
                       "attempt": s.attempt.to_dict() if s.attempt else None} for s in result.steps],
            "rows": [{"function": f, "rung": r} for f, r in zip(df.get("function", []), df.get("rung", []))],
            "hangs": [list(h) for h in result.hangs], "unprofiled": result.unprofiled, "stopped": result.stopped,
            "reports": result.report_paths}))
    else:
        print("\n" + result.summary(), file=sys.stderr)
    if result.stopped:
        return EXIT_CODES[ERROR]
    return EXIT_CODES[HANG] if result.unprofiled else EXIT_CODES[OK]
