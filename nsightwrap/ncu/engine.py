"""options -> command line -> watched run -> Attempt, for any command.

`profile_command` is the one engine: the CLI's `run`, and later the
ladder and `profile(fn)`, all go through it.
"""

from __future__ import annotations

import logging
import os
import shutil
import sys
import threading
import time
from pathlib import Path
from typing import Callable, Iterable, Optional, Sequence

import psutil

from nsightwrap.errors import NsightwrapError, OptionsError, ProfileInterrupted
from nsightwrap.ncu.attempt import Attempt, build_attempt, tally_of
from nsightwrap.ncu.calltime import reported_calibration
from nsightwrap.ncu.context import RunConfig, RunContext
from nsightwrap.ncu.events import Event
from nsightwrap.ncu.known import run_rules
from nsightwrap.ncu.listen import RunListener
from nsightwrap.ncu.options import ProfileOptions, build_argv, control_character, validate
from nsightwrap.ncu.progress import NcuObserver
from nsightwrap.paths import work_dir
from nsightwrap.watch import gpu
from nsightwrap.watch.evidence import TRANSCRIPT, Transcript
from nsightwrap.watch.files import folder_problem, wanted_report
from nsightwrap.watch.launchers import one_rank_argv, one_rank_launch
from nsightwrap.watch.locate import check_program
from nsightwrap.watch.rules import WatchRule
from nsightwrap.watch.run import watch
from nsightwrap.watch.tree import OWNER_VAR, processes_with

__all__ = ["plan_report", "profile_command"]

log = logging.getLogger("nsightwrap")

REPORT_SUFFIX = ".ncu-rep"


def unique_report_path(wanted: Path) -> Path:
    """`wanted`, or `stem-N.ncu-rep` if it exists: a kept report is never overwritten."""
    if not wanted.name.endswith(REPORT_SUFFIX):
        wanted = wanted.with_name(wanted.name + REPORT_SUFFIX)
    if not wanted.exists():
        return wanted
    stem = wanted.name[: -len(REPORT_SUFFIX)]
    n = 1
    while True:
        candidate = wanted.with_name(f"{stem}-{n}{REPORT_SUFFIX}")
        if not candidate.exists():
            return candidate
        n += 1


def plan_report(options: ProfileOptions, command: Sequence[str],
                config: RunConfig) -> tuple[ProfileOptions, Path, list[str]]:
    """Where this run's report goes, and options that say so to ncu."""
    notes = []
    wanted = wanted_report(options.export, command, REPORT_SUFFIX, report_dir=config.report_dir, cwd=config.cwd)
    if options.force_overwrite:
        path = wanted if wanted.name.endswith(REPORT_SUFFIX) else wanted.with_name(wanted.name + REPORT_SUFFIX)
    else:
        path = unique_report_path(wanted)
        if options.export and path.name != wanted.name and path.name != wanted.name + REPORT_SUFFIX:
            notes.append(f"{wanted} already exists and is kept; this run writes {path}")
    _refuse_report_path(path)
    missing = not path.parent.exists()
    problem = folder_problem(path.parent)
    if problem:
        raise OptionsError(f"cannot write the report {path}: {problem}. Choose a writable place with -o/--export "
                           f"(export= in Python), or make {path.parent} writable")
    if missing and options.export:
        notes.append(f"created the folder {path.parent.absolute()} for the report: it did not exist")
    return options.replace(export=str(path.absolute())), path.absolute(), notes


def _refuse_report_path(path: Path) -> None:
    """A report path ncu must not be given: one its output line would cut, or a dangling symbolic link."""
    bad = control_character(str(path.absolute()))
    if bad is not None:
        raise OptionsError(f"cannot use the report path {str(path)!r}: it holds the control character {bad!r}, "
                           "which would cut or garble ncu's `==PROF== Report:` line. Choose a report path without one")
    if path.is_symlink() and not path.exists():
        raise OptionsError(f"cannot write the report {path}: it is a symbolic link to {os.readlink(path)}, which "
                           "does not exist, and ncu would write through it. Remove the link, or choose another "
                           "name with -o/--export (export= in Python)")


def _left_on_gpu(pids, config: "RunConfig", settle_s: float = 10.0, *,
                 listing: Optional[gpu.LastListing] = None) -> list[str]:
    """Processes of this run that the GPU still lists; a killed process may take a moment to leave.
    The last listing is kept in `listing`, for the next attempt's look for foreign processes."""
    ours = set(pids)
    deadline = time.monotonic() + settle_s
    while True:
        listed = gpu.compute_processes()
        after = listed or []
        left = [f"{p.pid} ({p.name})" for p in after if p.pid in ours]
        if not left or time.monotonic() >= deadline:
            if listing is not None:
                listing.put(listed)
            return left
        time.sleep(0.5)


#: In each probe's environment when a sweep runs its probes as jobs, each in a process of its own
#: (nsightwrap.fallback.executor): the sweep's token, so its probes on the other GPUs are siblings, not foreign.
SWEEP_VAR = "NSIGHTWRAP_SWEEP"


def _foreign_on_gpu(sweep: Optional[str] = None, held: Optional[list[gpu.GpuProcess]] = None) -> list[gpu.GpuProcess]:
    """GPU processes that are neither this run's nor our parallel siblings' (sweep --jobs; with `sweep`, the
    probes of that sweep's jobs), as far as can be told while the run starts (_ForeignCheck.result also leaves
    out every process the run's tree had). held: a listing just taken (after the previous attempt), else
    nvidia-smi is asked now."""
    held = gpu.compute_processes() if held is None else held
    if not held:  # nothing listed (or nothing known): no scan of /proc for whose they are
        return []
    # Asked after nvidia-smi answered: the run started meanwhile carries OWNER_VAR too, and a member that
    # dropped its environment descends from one that carries it.
    owners = {p.pid for p, e in processes_with(OWNER_VAR, str(os.getpid()))}
    if sweep:
        owners |= {p.pid for p, e in processes_with(SWEEP_VAR, sweep)}
    ours = owners | {p.pid for p in held or () if _descends(p.pid, owners)}
    return gpu.foreign(held, ours)


def _descends(pid: int, ancestors: set[int]) -> bool:
    """`pid` is a live descendant of one of `ancestors`."""
    try:
        return any(p.pid in ancestors for p in psutil.Process(pid).parents())
    except psutil.Error:
        return False


class _ForeignCheck:
    """The foreign-process check, run beside the launch rather than before it.

    nvidia-smi takes a noticeable part of a second on the GPU machines; the
    profiled program takes seconds to reach its first kernel, so the answer
    is in long before it could matter, and a short run pays nothing for it.
    """

    def __init__(self, enabled: bool, sweep: Optional[str] = None,
                 held: Optional[list[gpu.GpuProcess]] = None) -> None:
        self.found: list[gpu.GpuProcess] = []
        self.sweep = sweep
        self.held = held  # a listing taken after the previous attempt, if fresh
        self.thread = threading.Thread(target=self._run, name="nsightwrap-gpu-check", daemon=True) if enabled else None
        if self.thread:
            self.thread.start()

    def _run(self) -> None:
        self.found = _foreign_on_gpu(self.sweep, self.held)

    def result(self, notes: list[str], run_pids: Iterable[int] = ()) -> list[str]:
        """The foreign processes found, less any the run's own tree had (run_pids: every member the watch saw,
        those that exited during the run too): a process of the run itself is never foreign."""
        if self.thread is None:
            return []
        self.thread.join(timeout=20.0)
        mine = set(run_pids)
        found = [f"{p.pid} ({p.name}, {p.used_memory})" for p in self.found if p.pid not in mine]
        if found:
            _note(notes, "the GPU already holds compute processes that are not this run's: "
                  + ", ".join(found) + "; a hang recorded now may be caused by them")
        return found


def _heard(make: Callable[[float], NcuObserver], listener: RunListener,
           rule: WatchRule) -> Callable[[float], NcuObserver]:
    """The observer factory, telling the listener the live state and rule of the attempt it starts."""

    def observer(now: float) -> NcuObserver:
        made = make(now)
        listener.started(made.state, rule)
        return made

    return observer


def _note(notes: list[str], msg: str) -> None:
    notes.append(msg)
    log.warning(msg)


def profile_command(
    command: Sequence[str],
    options: Optional[ProfileOptions] = None,
    run: "RunConfig | RunContext | None" = None,
    *,
    on_output: Optional[Callable[[str], None]] = None,
    on_event: Optional[Callable[[Event], None]] = None,
    rules: Optional[WatchRule] = None,
    clock: Callable[[], float] = time.monotonic,
) -> Attempt:
    """Profile `command` under ncu, watched; return what happened.

    `run` is a RunContext, which carries the ncu found (and probed) once by a
    caller that runs many attempts, or a RunConfig to make one from here
    (default: RunConfig()).
    A hang, a timeout or a failure of the program is an Attempt status, not
    an exception (call `attempt.raise_for_status()` to turn it into one).
    Problems found before launching (ncu missing, bad options) raise an
    NsightwrapError; Ctrl-C raises ProfileInterrupted after the tree is
    stopped, with the attempt attached.
    """
    options = options or ProfileOptions()
    command = list(command)
    if not command:
        raise NsightwrapError("nothing to profile: give a command, e.g. `-- ./my_app --size 1024`")
    context = run if isinstance(run, RunContext) else RunContext.create(run)
    config, env = context.config, dict(context.env)
    check_program(command, env, config.cwd)  # missing or not executable: said now, not as a crash of the program
    if config.validate:
        validate(options, context.info)
    if options.rank is not None:
        one_rank_launch(command, options.rank)  # refused before anything is made: not a launch to rewrite
    options, report, notes = plan_report(options, command, config)
    own_log = config.log_channel and "--log-file" not in options.extra_args
    log_dir = str(work_dir("ncu")) if own_log else None
    tool_log = os.path.join(log_dir, "ncu.log") if log_dir else None
    argv = build_argv(context.ncu, options, command, log_file=tool_log)
    if options.rank is not None:  # ncu around one rank of a multi-process launch
        argv = one_rank_argv(command, argv, options.rank, sys.executable)

    foreign_check = _ForeignCheck(config.check_gpu, env.get(SWEEP_VAR),
                                  context.gpu_listing.take() if config.check_gpu else None)
    if context.orphans:
        _note(notes, context.orphans)

    rule = rules or run_rules(command, options, config)
    kept = Transcript(Path(log_dir) / TRANSCRIPT) if config.evidence and log_dir else None  # for `hangs bundle`
    try:
        outcome = watch(argv, config.watched(rule), policy=config.stop, env=env, cwd=config.cwd, clock=clock,
                        on_output=kept.tap(on_output) if kept else on_output, on_event=on_event,
                        observer=_heard(NcuObserver, context.listener, rule), tool_log=tool_log,
                        evidence=config.evidence)
        if kept:
            kept.close()
            config.evidence.keep(outcome.cookie, [Path(tool_log), kept.path])
    finally:
        if kept:
            kept.close()
        if log_dir:
            shutil.rmtree(log_dir, ignore_errors=True)

    # The tree's members, and every process ncu connected to (each rank of a multi-process job).
    pids = {*outcome.pids, *tally_of(outcome).pids.items()}
    foreign_before = foreign_check.result(notes, pids)
    # A tree that ended by itself, fully, holds no GPU context; only a stopped one needs the (slow) look.
    stopped = outcome.stop is not None
    left_after = (_left_on_gpu(pids, config, listing=context.gpu_listing) if config.check_gpu and stopped and pids
                  else [])
    if left_after:
        _note(notes, "the GPU still lists processes of this run after it was stopped: " + ", ".join(left_after)
              + "; a kernel may still spin there, and later profiles on this GPU would hang or fail")
    calibration = None if config.stall_timeout_given else reported_calibration(rule) or config.calibration
    attempt = build_attempt(outcome, export=report, notes=notes, ncu=context.ncu, calibration=calibration,
                            gpu_foreign_before=foreign_before, gpu_left_after=left_after)
    context.listener.finished(attempt)
    if outcome.interrupted:
        raise ProfileInterrupted(attempt)
    if outcome.exception is not None:
        raise outcome.exception
    return attempt
