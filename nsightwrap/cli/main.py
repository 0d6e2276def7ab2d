"""`python -m nsightwrap ...`: the command line.

Exit codes of `run`: 0 ok, 3 hang, 4 timeout, 5 error (ncu refused or
failed), 6 no kernels profiled, 7 crashed (the program failed), 130
interrupted, 2 usage or set-up problem found before launching.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Optional, Sequence

from nsightwrap.ncu.attempt import EXIT_CODES, USAGE_EXIT_CODE
from nsightwrap.ncu.engine import ProfileInterrupted, RunConfig, profile_command
from nsightwrap.errors import NsightwrapError
from nsightwrap.ncu.options import KernelFilter, ProfileOptions
from nsightwrap.ncu.progress import DEFAULT_STALL_TIMEOUT
from nsightwrap.cli.cleanup import add_cleanup_parser, cmd_cleanup
from nsightwrap.watch.process import StopPolicy
from nsightwrap.watch.signals import ignore_stop_signals, interruptible

EPILOG = "exit codes: " + ", ".join(f"{v} {k}" for k, v in EXIT_CODES.items()) + f", {USAGE_EXIT_CODE} usage/set-up error"


def _positive(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be > 0 seconds, got {text}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m nsightwrap",
                                     description="Run NVIDIA profilers under a watchdog.")
    sub = parser.add_subparsers(dest="cmd", metavar="COMMAND")

    run = sub.add_parser("run", help="profile a command with ncu, watched for hangs", epilog=EPILOG,
                         usage="%(prog)s [options] -- COMMAND [ARGS...]")
    run.add_argument("--ncu", metavar="PATH", help="ncu to use (default: $NSIGHTWRAP_NCU, PATH, CUDA)")
    run.add_argument("--set", dest="section_set", metavar="SET", help="section set (basic, detailed, full, ...)")
    run.add_argument("--section", action="append", default=[], metavar="ID", help="section id or regex:EXPR (repeatable)")
    run.add_argument("--metrics", action="append", default=[], metavar="M", help="metric names, comma separated (repeatable)")
    run.add_argument("--replay-mode", default="kernel", choices=["kernel", "application", "range", "app-range"])
    run.add_argument("--kernel", metavar="REGEX", help="profile only kernels whose name matches REGEX")
    run.add_argument("--kernel-name", metavar="NAME", help="profile only the kernel named exactly NAME")
    run.add_argument("--kernel-name-base", default="function", choices=["function", "demangled", "mangled"])
    run.add_argument("--launch-skip", type=int, metavar="N")
    run.add_argument("--launch-count", type=int, metavar="N")
    run.add_argument("--stall-timeout", type=_positive, default=DEFAULT_STALL_TIMEOUT, metavar="SEC",
                     help=f"a kernel with no progress for SEC is hung (default {DEFAULT_STALL_TIMEOUT:g}; "
                          "grows with the observed pace of progress)")
    run.add_argument("--timeout", type=_positive, metavar="SEC", help="limit for the whole run")
    run.add_argument("--grace", type=_positive, default=StopPolicy().grace, metavar="SEC",
                     help="after SIGINT, how long ncu may take to write the report and exit")
    run.add_argument("-o", "--export", metavar="REPORT", help="report path (never overwritten; default: ./nsightwrap-reports/)")
    run.add_argument("--no-validate", action="store_true", help="do not check sets/sections against ncu first")
    run.add_argument("--profile", metavar="NAME|FILE",
                     help="walk down this fallback ladder (default, quick, deep, or a YAML file) for kernels that hang")
    run.add_argument("--store", metavar="PATH", help="hang store for --profile (default: $NSIGHTWRAP_STORE or "
                                                      "~/.cache/nsightwrap/hangs.db)")
    run.add_argument("--retry-known-hangs", action="store_true", help="with --profile: try rungs the store knows to hang")
    run.add_argument("--json", action="store_true", help="print one JSON object describing the attempt on stdout")
    run.add_argument("-q", "--quiet", action="store_true", help="do not echo ncu's output")
    run.add_argument("extra", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)

    sweep = sub.add_parser("sweep-sections", help="find which sections hang on which kernels",
                           usage="%(prog)s [options] -- COMMAND [ARGS...]")
    sweep.add_argument("--ncu", metavar="PATH")
    sweep.add_argument("--kernel", metavar="REGEX", help="only kernels whose name matches REGEX")
    sweep.add_argument("--set", dest="section_set", default="full", metavar="SET", help="sections of this set (default full)")
    sweep.add_argument("--section", action="append", default=[], metavar="ID", help="these sections instead of a set")
    sweep.add_argument("--profile", default="default", metavar="NAME|FILE",
                       help="ladder whose first rung's stall timeout the probes use")
    sweep.add_argument("--stall-timeout", type=_positive, metavar="SEC",
                       help=f"stall timeout of every probe (default: the profile's first rung, else {DEFAULT_STALL_TIMEOUT:g})")
    sweep.add_argument("--jobs", type=int, default=1, metavar="N", help="probes at once, one per GPU")
    sweep.add_argument("--store", metavar="PATH", help="hang store (default: $NSIGHTWRAP_STORE or ~/.cache/nsightwrap/hangs.db)")
    sweep.add_argument("--json", action="store_true", help="print the result as JSON on stdout")
    sweep.add_argument("--markdown", metavar="FILE", help="write the debug log of the investigated kernels here")
    sweep.add_argument("-q", "--quiet", action="store_true", help="do not echo ncu's output")
    sweep.add_argument("extra", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)

    from nsightwrap.store.hangstore import add_hangs_parser

    add_hangs_parser(sub)
    add_cleanup_parser(sub)
    doctor = sub.add_parser("doctor", help="say which tools are found and what is missing")
    doctor.add_argument("--ncu", metavar="PATH")
    return parser


def _split_command(extra: Sequence[str]) -> list[str]:
    extra = list(extra)
    if extra and extra[0] == "--":
        extra = extra[1:]
    return extra


def cmd_run(args) -> int:
    command = _split_command(args.extra)
    if not command:
        print("nsightwrap run: give the command to profile after `--`, e.g.\n"
              "  python -m nsightwrap run --set basic -- ./my_app 1024", file=sys.stderr)
        return USAGE_EXIT_CODE
    if args.kernel and args.kernel_name:
        print("nsightwrap run: use --kernel REGEX or --kernel-name NAME, not both", file=sys.stderr)
        return USAGE_EXIT_CODE
    kernel = None
    if args.kernel:
        kernel = KernelFilter(args.kernel[6:] if args.kernel.startswith("regex:") else args.kernel, True,
                              args.kernel_name_base)
    elif args.kernel_name:
        kernel = KernelFilter(args.kernel_name, False, args.kernel_name_base)
    metrics = tuple(m.strip() for chunk in args.metrics for m in chunk.split(",") if m.strip())
    options = ProfileOptions(set=args.section_set, sections=tuple(args.section), metrics=metrics,
                             replay_mode=args.replay_mode, kernel=kernel, launch_skip=args.launch_skip,
                             launch_count=args.launch_count, export=args.export)
    config = RunConfig(ncu=args.ncu, stall_timeout=args.stall_timeout, timeout=args.timeout,
                       stop=StopPolicy(grace=args.grace), validate=not args.no_validate)
    echo = None if args.quiet else _echo
    if args.profile:
        return _run_ladder(args, command, options, config, echo)
    with _signals_as_interrupt():
        try:
            attempt = profile_command(command, options, config, on_output=echo)
        except ProfileInterrupted as e:
            attempt = e.attempt
        if args.json:
            print(attempt.to_json())
        else:
            print("\n" + attempt.describe(), file=sys.stderr)
    return attempt.exit_code


def _echo(text: str) -> None:
    sys.stderr.write(text)
    sys.stderr.flush()


#: SIGTERM and SIGHUP stop the tree like Ctrl-C does, for the whole command
#: (probing ncu and walking a ladder included): no orphan when a CI job is
#: cancelled; the signals that follow the first are counted, not raised.
_signals_as_interrupt = interruptible


def _open_store(path):
    from nsightwrap.store.hangstore import HangStore

    return HangStore(path)


def _run_ladder(args, command, options, config, echo) -> int:
    from nsightwrap.fallback.walk import walk_ladder

    store = _open_store(args.store)
    with _signals_as_interrupt():
        try:
            result = walk_ladder(command, options, args.profile, config, store=store, on_output=echo,
                                 retry_known_hangs=args.retry_known_hangs)
        except ProfileInterrupted as e:
            print(e.attempt.to_json() if args.json else e.attempt.describe())
            return EXIT_CODES["interrupted"]
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
        return EXIT_CODES["error"]
    return EXIT_CODES["hang"] if result.unprofiled else 0


def cmd_sweep(args) -> int:
    from nsightwrap.store.debuglog import debug_log
    from nsightwrap.fallback.sweep import result_json, sweep_sections

    command = _split_command(args.extra)
    if not command:
        print("nsightwrap sweep-sections: give the command after `--`", file=sys.stderr)
        return USAGE_EXIT_CODE
    from nsightwrap.fallback.ladder import load_ladder

    first = load_ladder(args.profile).rungs[0]
    config = RunConfig(ncu=args.ncu, stall_timeout=args.stall_timeout or first.stall_timeout or DEFAULT_STALL_TIMEOUT)
    store = _open_store(args.store)

    def said(probe) -> None:
        if not args.quiet:
            _echo(f"\n[sweep] {probe.kernel}: {probe.label()} -> {probe.outcome}\n")

    with _signals_as_interrupt():
        try:
            result = sweep_sections(command, kernel=args.kernel, set=args.section_set, sections=args.section,
                                    config=config, store=store, jobs=args.jobs, on_probe=said)
        except ProfileInterrupted as e:
            print(f"\nsweep interrupted; every probe so far is in the store ({store.path})\n{e.attempt.describe()}",
                  file=sys.stderr)
            return EXIT_CODES["interrupted"]
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write("\n\n".join(debug_log(store, k.kernel) for k in result.kernels) or "nothing hung\n")
    if args.json:
        print(result_json(result))
    else:
        print(result.table())
    return 0


def cmd_doctor(args) -> int:
    from nsightwrap.watch import gpu
    from nsightwrap.ncu.tools import find_ncu, probe_ncu

    problems = 0
    try:
        ncu = find_ncu(args.ncu)
        info = probe_ncu(ncu)
        print(f"ncu: {ncu} (version {info.version}; {len(info.sets)} sets, {len(info.sections)} sections)")
    except NsightwrapError as e:
        problems += 1
        print(f"ncu: MISSING\n{e}")
    held = gpu.compute_processes()
    if held is None:
        problems += 1
        print("GPU: nvidia-smi not found: no NVIDIA driver here, so nothing can be profiled on this machine.\n"
              "     Run on a machine with an NVIDIA GPU and driver (the tests still run here: `make test`).")
    else:
        print(f"GPU: nvidia-smi works; {len(held)} compute process(es) running")
    return 0 if problems == 0 else USAGE_EXIT_CODE


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.cmd is None:
        parser.print_help()
        return USAGE_EXIT_CODE
    try:
        from nsightwrap.store.hangstore import cmd_hangs

        code = {"run": cmd_run, "cleanup": cmd_cleanup, "doctor": cmd_doctor, "sweep-sections": cmd_sweep,
                "hangs": cmd_hangs}[args.cmd](args)
    except NsightwrapError as e:
        print(f"nsightwrap: {e}", file=sys.stderr)
        return USAGE_EXIT_CODE
    except KeyboardInterrupt:  # outside a watched run: no tree is left (each run stops its own)
        code = EXIT_CODES["interrupted"]
        print("nsightwrap: interrupted", file=sys.stderr)
    if code == EXIT_CODES["interrupted"] and argv is None:
        ignore_stop_signals()  # exiting: a late Ctrl-C or SIGTERM must not turn into a traceback or -15
    return code


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
