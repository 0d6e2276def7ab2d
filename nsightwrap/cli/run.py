"""`run`: profile a command under ncu, watched; with --profile, walk a fallback ladder."""

from __future__ import annotations

import argparse
import dataclasses
import sys
from typing import Any, Optional

from nsightwrap.calibrate.confirm import Calibrator
from nsightwrap.cli.common import (
    EPILOG,
    LineLog,
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
    without_logged,
)
from nsightwrap.cli.executor import add_executor, executor_spec
from nsightwrap.cli.outcome import preflight, refuse, report_interrupt
from nsightwrap.cli.screen import PlainScreen, open_screen
from nsightwrap.errors import AttemptFailed, ProfileInterrupted
from nsightwrap.fallback.collectives import one_rank_hint, without_collectives
from nsightwrap.fallback.session import Session
from nsightwrap.ncu.context import RunConfig, RunContext
from nsightwrap.ncu.options import KernelFilter, ProfileOptions
from nsightwrap.ncu.progress import DEFAULT_STALL_TIMEOUT
from nsightwrap.secrets import mask_text
from nsightwrap.status import CRASHED, EXIT_CODES, HANG, REPLAY_MODES, TIMEOUT
from nsightwrap.store.hangstore import HangStore
from nsightwrap.store.location import resolve_store
from nsightwrap.store.opening import open_store
from nsightwrap.watch.evidence import StallEvidence
from nsightwrap.watch.locate import check_program
from nsightwrap.watch.signals import interruptible
from nsightwrap.watch.tree import StopPolicy


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
    run.add_argument("--kernel", type=given, metavar="REGEX", help="profile only kernels whose name matches REGEX")
    run.add_argument("--kernel-name", type=given, metavar="NAME", help="profile only the kernel named exactly NAME")
    run.add_argument("--kernel-name-base", default="function", choices=["function", "demangled", "mangled"])
    run.add_argument("--launch-skip", type=int, metavar="N")
    run.add_argument("--launch-count", type=int, metavar="N")
    run.add_argument("--stall-timeout", type=positive, metavar="SEC",
                     help="a kernel with no progress for SEC is hung, whatever its calibration and at every "
                          f"rung (default: each kernel's calibrated allowance, else {DEFAULT_STALL_TIMEOUT:g} and "
                          "a stall is confirmed by calibrating first; grows with the observed pace of progress)")
    run.add_argument("--calibrate", action="store_true",
                     help="time the program without ncu first (nsys, else a plain run; kept in the hang store), "
                          "so that each kernel gets its own stall allowance from the start")
    run.add_argument("--nsys", metavar="PATH", help="nsys for calibration (default: $NSIGHTWRAP_NSYS, PATH, ...)")
    add_calibration_limit(run)
    run.add_argument("--timeout", type=positive, metavar="SEC", help="limit for the whole run")
    add_stuck_timeout(run)
    run.add_argument("--grace", type=positive, default=StopPolicy().grace, metavar="SEC",
                     help="after SIGINT, how long ncu may take to write the report and exit")
    run.add_argument("-o", "--export", type=given, metavar="REPORT",
                     help="report path (never overwritten; default: ./nsightwrap-reports/)")
    run.add_argument("--no-validate", action="store_true", help="do not check sets/sections against ncu first")
    run.add_argument("--profile", metavar="NAME|FILE",
                     help="walk down this fallback ladder (default, quick, deep, or a YAML file) for kernels that hang")
    run.add_argument("--store", metavar="PATH|URL", help="hang store for --profile: a file or "
                                                          "postgresql://user@host/db (default: $NSIGHTWRAP_STORE or "
                                                          "~/.cache/nsightwrap/hangs.db)")
    run.add_argument("--retry-known-hangs", action="store_true",
                     help="with --profile: try rungs the store knows to hang")
    run.add_argument("--rank", type=int, metavar="N",
                     help="multi-process jobs (torchrun, mpirun, srun): ncu wraps rank N alone; with --profile, the "
                          "rank that the ladder's one-rank rungs profile (default 0)")
    run.add_argument("--jobs", type=int, metavar="N",
                     help="with --executor local: the walk's attempts use the first N GPUs (default: every GPU)")
    run.add_argument("--serial", action="store_true",
                     help="with --profile, a torchrun job: run its collectives (profiled on one rank) after the main "
                          "program, not beside it on the same GPUs (twice the GPU memory; its own rendezvous port)")
    add_executor(run, "walk attempt", "the walk")
    # What the run shows and prints (kept together).
    run.add_argument("--json", action="store_true", help="print one JSON object on stdout, whatever happens")
    run.add_argument("-q", "--quiet", action="store_true", help="no ncu output and no live progress on stderr")
    run.add_argument("--verbose", action="store_true", help="print nsightwrap's own log (each message once)")
    run.add_argument("--no-preflight", action="store_true",
                     help="with --profile: skip the checks made before the walk (doctor's cheap ones)")
    run.add_argument("extra", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)


def _kernel(args: argparse.Namespace) -> Optional[KernelFilter]:
    if args.kernel is not None:
        return KernelFilter.from_user(args.kernel, args.kernel_name_base)
    if args.kernel_name is not None:
        return KernelFilter.from_user(args.kernel_name, args.kernel_name_base, exact=True)
    return None


def cmd_run(args: argparse.Namespace) -> int:
    command = split_command(args.extra)
    if not command:
        raise UsageError("nsightwrap run: give the command to profile after `--`, e.g.\n"
                         "  python -m nsightwrap run --set basic -- ./my_app 1024")
    if args.kernel and args.kernel_name:
        raise UsageError("nsightwrap run: use --kernel REGEX or --kernel-name NAME, not both")
    check_program(command)  # before calibrating or launching: a missing program is not a crash
    executor = _executor(args)
    metrics = tuple(m.strip() for chunk in args.metrics for m in chunk.split(",") if m.strip())
    options = ProfileOptions(set=args.section_set, sections=tuple(args.section), metrics=metrics,
                             replay_mode=args.replay_mode, kernel=_kernel(args), launch_skip=args.launch_skip,
                             launch_count=args.launch_count, export=args.export,
                             rank=None if args.profile else args.rank)
    config = RunConfig(ncu=args.ncu, stall_timeout=args.stall_timeout or DEFAULT_STALL_TIMEOUT,
                       stall_timeout_given=args.stall_timeout is not None, timeout=args.timeout,
                       stop=StopPolicy(grace=args.grace), validate=not args.no_validate,
                       stuck_timeout=args.stuck_timeout, calibration_limit=args.calibration_limit,
                       evidence=StallEvidence.default())
    screen = open_screen(args.quiet)
    log = configure_logging(args.verbose, screen.say)
    store: Optional[_LazyStore] = None
    try:
        with interruptible(), screen:  # SIGTERM and SIGHUP stop the tree as Ctrl-C does
            context = RunContext.create(config).with_listener(screen)
            if args.profile:  # ncu answers the probe while the walk's modules and the store's SQLAlchemy load
                context.prefetch()  # (pandas loads while the first attempt runs: nsightwrap.fallback.reads)
                import nsightwrap.fallback.walk  # noqa: F401
                import nsightwrap.store.database  # noqa: F401
            refused = preflight(args, context, screen) if args.profile else None
            if refused:  # before anything is run or stored
                return refuse(args, screen, refused)
            calibrator, store = _calibrator(args, command, screen)
            if args.calibrate and not config.stall_timeout_given:
                calibration = calibrator.calibrate(config, listener=screen)
                if not calibration.ok:  # the program hangs or fails by itself: nothing to profile
                    screen.close()
                    return _program_fault(args, calibration)
            # The one session of this program: a walk records in the store; a single run records nothing.
            session = Session(command, context, store=store() if args.profile else None, calibrator=calibrator,
                              on_output=screen.on_output, rank=args.rank or 0, executor=executor,
                              side_by_side=not args.serial)
            if args.profile:
                return _run_ladder(args, session, options, screen, log)
            return _run_once(args, session, options, screen, log, store)
    except KeyboardInterrupt:
        # Between attempts (back-off, GPU settle wait, probing ncu): nothing of ours is running.
        return report_interrupt(args, screen, None)
    finally:
        configure_logging(False, screen.line)
        if store is not None:
            store.close()  # once the run answered: a caller of main() in its own process keeps no connection


def _executor(args: argparse.Namespace) -> Any:
    """--executor (the walk's independent jobs on a cluster engine) and --jobs, which need --profile."""
    if args.jobs is not None and args.executor != "local":
        raise UsageError("nsightwrap run: --jobs N needs --executor local (the walk's attempts on the first N GPUs)")
    spec = executor_spec(args, "nsightwrap run")
    if spec is not None and not args.profile:
        raise UsageError("nsightwrap run: --executor runs the attempts of a walk: add --profile NAME "
                         "(e.g. --profile default)")
    return spec


def _calibrator(args: argparse.Namespace, command: list[str], screen: PlainScreen) -> tuple[Calibrator, "_LazyStore"]:
    """The run's calibrator, and the hang store opened on first use.

    A run without a stall pays nothing for calibration: the store is read up
    front only when it exists (a calibration kept by an earlier run is used
    from the start), else opened on a stall.
    """
    location = resolve_store(args.store)
    store = _LazyStore(location)
    known = location.is_database or location.path.exists()
    calibrator = Calibrator(command, store=store, nsys=args.nsys, say=None if args.quiet else screen.say,
                            lazy=not (args.profile or known))
    return calibrator, store


class _LazyStore:
    """The hang store, opened on first call, its notes then said on stderr at once (the team's database is down:
    recording here instead); `opened` is None until then."""

    def __init__(self, location: Any) -> None:
        self.location, self.opened = location, None

    def __call__(self) -> HangStore:
        if self.opened is None:
            self.opened = open_store(self.location)
            for note in self.opened.notes:
                print(f"nsightwrap: {note}", file=sys.stderr)
        return self.opened

    def notes(self) -> tuple[str, ...]:
        """The notes of the store, if the run opened it."""
        return tuple(self.opened.notes) if self.opened is not None else ()

    def close(self) -> None:
        if self.opened is not None:
            self.opened.close()


def _program_fault(args: argparse.Namespace, calibration: Any) -> int:
    """An up-front calibration that failed: the program hangs or fails by itself (timeout, crashed: a program
    fault), or could not be run (error)."""
    fault = calibration.reason if calibration.status in (TIMEOUT, CRASHED) else None
    doc = {"status": calibration.status, "reason": calibration.reason, "program_fault": fault,
           "exit_code": EXIT_CODES[calibration.status], "calibration": calibration.to_dict()}
    if args.json:
        print_json(doc)
    else:
        print(f"\n{calibration.status}: {calibration.reason}", file=sys.stderr)
    return EXIT_CODES[calibration.status]


def _run_once(args: argparse.Namespace, session: Session, options: ProfileOptions, screen: PlainScreen,
              log: Optional[LineLog], store: _LazyStore) -> int:
    command = session.command
    options, left_out = without_collectives(command, options)  # they would hang with every rank profiled
    if left_out and not args.quiet:
        screen.say(f"[nsightwrap] {left_out}\n")
    try:
        attempt = session.run(options, tries=1)  # one run, as asked: no retry
    except ProfileInterrupted as e:
        attempt = e.attempt
    hint = one_rank_hint(command, attempt.connected, attempt.stalled_kernel) if attempt.status == HANG else None
    if hint and options.rank is None:
        attempt = dataclasses.replace(attempt, notes=(*attempt.notes, hint))
    if left_out:
        attempt = dataclasses.replace(attempt, notes=(*attempt.notes, left_out))
    screen.close()
    if args.json:  # the store's notes were said on stderr when it was opened
        doc = attempt.to_dict()
        print_json({**doc, "notes": [*doc.get("notes", []), *store.notes()]})
        _say_notes([attempt], log)  # the JSON holds them too; said where a person reads them
    else:
        print("\n" + without_logged(attempt.describe(), log), file=sys.stderr)
    return attempt.exit_code


def _run_ladder(args: argparse.Namespace, session: Session, options: ProfileOptions, screen: PlainScreen,
                log: Optional[LineLog]) -> int:
    # Lazy on purpose: the walk imports pandas and the report reader, which a plain `run` never needs.
    from nsightwrap.fallback.walk import walk_ladder

    used = store_used(resolve_store(args.store), session.store)
    try:
        result = walk_ladder(session, options, args.profile, retry_known_hangs=args.retry_known_hangs)
    except ProfileInterrupted as e:  # the store used (the local file when the database was down), its notes
        return report_interrupt(args, screen, interrupted_doc(e.attempt.reason, ladder=args.profile,
                                                               attempt=e.attempt.to_dict(), **used))
    except KeyboardInterrupt:  # on a cluster engine (--executor): its jobs were cancelled, nothing is left running
        if session.executor is None:
            raise
        return report_interrupt(args, screen, interrupted_doc(
            f"interrupted (Ctrl-C or a termination signal): the walk's jobs on the {session.executor.kind} executor "
            "were cancelled", ladder=args.profile, **used))
    except AttemptFailed as e:  # the first rung failed outright: nothing to step down from
        screen.close()
        print(f"\nnsightwrap: {e}", file=sys.stderr)
        if args.json:
            print_json({"status": e.attempt.status, "exit_code": e.attempt.exit_code, "ladder": args.profile,
                        "reason": str(e), "attempt": e.attempt.to_dict(), **used})
        return e.attempt.exit_code
    screen.close()
    if args.json:
        print_json(result.to_dict())  # the store's notes are the result's
    else:
        print("\n" + result.summary(), file=sys.stderr)
    _say_notes([s.attempt for s in result.steps if s.attempt], log)  # e.g. the report folder it created
    return result.exit_code


def _say_notes(attempts: list[Any], log: Optional[LineLog]) -> None:
    """The attempts' notes on stderr, each once (and none that --verbose's log already printed)."""
    notes = dict.fromkeys(n for a in attempts for n in a.notes)
    text = without_logged("\n".join(f"note: {n}" for n in notes), log)
    if text:
        print(mask_text(text), file=sys.stderr)
