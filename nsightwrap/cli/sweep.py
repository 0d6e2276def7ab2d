"""`sweep-sections`: find which sections hang on which kernels."""

from __future__ import annotations

import argparse
import contextlib
import sys
from pathlib import Path
from typing import Any, Optional

from nsightwrap.calibrate.confirm import Calibrator
from nsightwrap.cli.common import (
    UsageError,
    add_calibration_limit,
    add_stuck_timeout,
    configure_logging,
    given,
    interrupted_doc,
    positive,
    print_json,
    split_command,
    store_used,
)
from nsightwrap.cli.executor import add_executor, executor_spec, jobs_of
from nsightwrap.cli.outcome import preflight, refuse, report_interrupt
from nsightwrap.cli.screen import open_screen
from nsightwrap.errors import ProfileInterrupted
from nsightwrap.fallback.ladder import load_ladder
from nsightwrap.fallback.session import Session
from nsightwrap.fallback.sweep import sections_of_set, sweep_sections
from nsightwrap.fallback.sweepresult import Probe
from nsightwrap.ncu.context import RunConfig, RunContext
from nsightwrap.ncu.progress import DEFAULT_STALL_TIMEOUT
from nsightwrap.store.debuglog import debug_log
from nsightwrap.store.hangstore import HangStore
from nsightwrap.store.location import resolve_store
from nsightwrap.store.opening import open_store
from nsightwrap.watch.evidence import StallEvidence
from nsightwrap.watch.files import folder_problem
from nsightwrap.watch.locate import check_program
from nsightwrap.watch.signals import interruptible


def add_parser(sub: Any) -> None:
    sweep = sub.add_parser("sweep-sections", help="find which sections hang on which kernels",
                           usage="%(prog)s [options] -- COMMAND [ARGS...]")
    sweep.add_argument("--ncu", metavar="PATH")
    sweep.add_argument("--kernel", type=given, metavar="REGEX", help="only kernels whose name matches REGEX")
    sweep.add_argument("--set", dest="section_set", default="full", metavar="SET",
                       help="sections of this set (default full)")
    sweep.add_argument("--section", action="append", default=[], metavar="ID", help="these sections instead of a set")
    sweep.add_argument("--profile", default="default", metavar="NAME|FILE",
                       help="ladder whose first rung's stall timeout the probes use")
    sweep.add_argument("--stall-timeout", type=positive, metavar="SEC",
                       help="stall timeout of every probe, whatever the calibration (default: each kernel's "
                            f"calibrated allowance, else the profile's first rung, else {DEFAULT_STALL_TIMEOUT:g})")
    sweep.add_argument("--nsys", metavar="PATH", help="nsys for calibration (default: $NSIGHTWRAP_NSYS, PATH, ...)")
    add_calibration_limit(sweep)
    add_stuck_timeout(sweep)
    sweep.add_argument("--jobs", type=int, metavar="N",
                       help="probes at once, one per GPU (default 1; with --executor local, every GPU)")
    add_executor(sweep)
    sweep.add_argument("--rank", type=int, default=0, metavar="N",
                       help="multi-process jobs (torchrun, mpirun, srun): the rank whose kernels are probed alone")
    sweep.add_argument("--store", metavar="PATH|URL",
                       help="hang store: a file or postgresql://user@host/db (default: $NSIGHTWRAP_STORE or "
                            "~/.cache/nsightwrap/hangs.db)")
    sweep.add_argument("--markdown", metavar="FILE", help="write the debug log of the investigated kernels here")
    # What the sweep shows and prints (kept together).
    sweep.add_argument("--json", action="store_true", help="print the result as one JSON object on stdout")
    sweep.add_argument("-q", "--quiet", action="store_true", help="no ncu output and no live progress on stderr")
    sweep.add_argument("--verbose", action="store_true", help="print nsightwrap's own log (each message once)")
    sweep.add_argument("--no-preflight", action="store_true", help="skip the checks made before the sweep")
    sweep.add_argument("extra", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)


def _markdown_path(path: str) -> Path:
    """--markdown checked before the sweep, not found unwritable after it."""
    target = Path(path)
    if target.is_dir():
        raise UsageError(f"nsightwrap sweep-sections: --markdown {path} is a folder; give a file name")
    problem = folder_problem(target.parent if str(target.parent) else Path("."), create=False)
    if problem:
        raise UsageError(f"nsightwrap sweep-sections: cannot write --markdown {path}: {problem}; "
                         "give a path in a folder you can write")
    return target


def cmd_sweep(args: argparse.Namespace) -> int:
    with contextlib.ExitStack() as closing:  # the store, closed once the sweep answered (main() called in a process
        return _sweep(args, closing)  # of its own, a script or a test, keeps no connection or WAL file open)


def _sweep(args: argparse.Namespace, closing: contextlib.ExitStack) -> int:
    command = split_command(args.extra)
    if not command:
        raise UsageError("nsightwrap sweep-sections: give the command after `--`")
    check_program(command)  # before the preflight and the first probe
    markdown = _markdown_path(args.markdown) if args.markdown else None
    executor = executor_spec(args, "nsightwrap sweep-sections")
    first = load_ladder(args.profile).rungs[0]
    config = RunConfig(ncu=args.ncu, stall_timeout=args.stall_timeout or first.stall_timeout or DEFAULT_STALL_TIMEOUT,
                       stall_timeout_given=args.stall_timeout is not None, calibration_limit=args.calibration_limit,
                       stuck_timeout=args.stuck_timeout, evidence=StallEvidence.default())
    path = resolve_store(args.store)
    store: Optional[HangStore] = None
    screen = open_screen(args.quiet)
    configure_logging(args.verbose, screen.say)

    def said(probe: Probe) -> None:
        screen.line(f"[sweep] {probe.kernel}: {probe.label()} -> {probe.outcome}")

    try:
        with interruptible(), screen:
            context = RunContext.create(config).with_listener(screen)
            refused = preflight(args, context, screen)
            if refused:
                return refuse(args, screen, refused)
            if not args.section:  # a mistyped --set is refused before the store is made
                sections_of_set(context.info, args.section_set)
            store = closing.enter_context(open_store(path))  # after the preflight (its store check would see it made)
            for note in store.notes:  # the team's database is down: recording in the local file instead
                print(f"nsightwrap: {note}", file=sys.stderr)
            calibrator = Calibrator(command, store=store, nsys=args.nsys, say=None if args.quiet else screen.say)
            session = Session(command, context, store=store, calibrator=calibrator, rank=args.rank, executor=executor)
            result = sweep_sections(session, kernel=args.kernel, sections=args.section or args.section_set,
                                    jobs=jobs_of(args), on_probe=said)
    except KeyboardInterrupt as e:
        attempt = e.attempt.to_dict() if isinstance(e, ProfileInterrupted) else None
        used = store_used(path, store)  # the local file when the database was down, with its note
        return report_interrupt(args, screen, interrupted_doc(
            f"sweep interrupted; every probe so far is in the store ({used['store']})", **used, attempt=attempt))
    finally:
        configure_logging(False, screen.line)
    # Hangs found: the sweep did its job (0); a program fault or nothing profiled: its own code.
    code = result.exit_code
    print_json(result.to_dict()) if args.json else print(result.table())  # the store's notes are the result's
    if markdown is not None:
        try:
            markdown.write_text("\n\n".join(debug_log(store, k.kernel) for k in result.kernels) or "nothing hung\n")
        except OSError as e:
            print(f"nsightwrap sweep-sections: could not write {markdown}: {e.strerror or e}", file=sys.stderr)
            return 2
    return code
