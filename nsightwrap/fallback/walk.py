"""Walk down a ladder: only what hung steps down.

The program is profiled at the requested rung. When kernel K hangs, the
kernels finished before it keep their results (the partial report); the
program is profiled again at the same rung from the next launch on with K
excluded; and K alone goes down the ladder until a rung works or the
ladder ends. Rungs the hang store knows to hang for K here are skipped.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from typing import Callable, Optional, Sequence

import pandas as pd
from tenacity import Retrying, retry_if_result, stop_after_attempt, wait_exponential

from nsightwrap.errors import AttemptFailed
from nsightwrap.fallback.ladder import Ladder, Rung, exclude_kernels, load_ladder
from nsightwrap.ncu.attempt import Attempt
from nsightwrap.ncu.context import RunConfig, RunContext
from nsightwrap.ncu.engine import profile_command
from nsightwrap.ncu.options import KernelFilter, ProfileOptions
from nsightwrap.reports.ncu import load_report
from nsightwrap.status import CRASHED, ERROR, HANG, NO_KERNELS, OK, TIMEOUT
from nsightwrap.store.hangstore import Environment, HangStore, ProfileKey

log = logging.getLogger("nsightwrap")

#: ncu errors worth another try after a pause: someone else held the GPU's
#: performance monitor (DCGM, another profiler) or its lock for a moment.
TRANSIENT_ERRORS = (
    re.compile(r"Failed to prepare kernel for profiling", re.I),
    re.compile(r"nsight-compute-lock|profiling lock|lock is held", re.I),
    re.compile(r"resource (is )?(temporarily )?unavailable|device or resource busy", re.I),
)
#: Columns the walk adds to every row of the merged DataFrame.
RUNG_COLUMN, ATTEMPT_COLUMN, JOB_COLUMN = "rung", "attempt", "job"
#: Why a step was skipped when the hang store knows the rung hangs for the kernel.
KNOWN_HANG = "known to hang here (hang store)"


def is_transient(attempt: Attempt) -> bool:
    return attempt.status == ERROR and any(p.search(e) for e in attempt.errors for p in TRANSIENT_ERRORS)


@dataclass(frozen=True)
class Step:
    """One rung tried (or skipped) for one job: the main program or one kernel."""

    job: str  # "main" or the kernel's name
    rung: Rung
    rung_index: int
    attempt: Optional[Attempt] = None
    skipped: Optional[str] = None  # why it was not run
    notes: tuple[str, ...] = ()

    def describe(self) -> str:
        what = f"[{self.job}] rung {self.rung_index} {self.rung.name!r} ({self.rung.describe()})"
        if self.skipped:
            return f"{what}: skipped, {self.skipped}"
        a = self.attempt
        return f"{what}: {a.status}, {len(a.kernels)} kernel(s)" + (f", hung on {a.stalled_kernel}" if a.stall else "")


@dataclass
class LadderResult:
    """The merged outcome of a walk: rows from every rung, and how they came."""

    ladder: Ladder
    steps: list[Step] = field(default_factory=list)
    frames: list[pd.DataFrame] = field(default_factory=list)
    unprofiled: list[str] = field(default_factory=list)  # hung at every rung
    stopped: Optional[str] = None  # why the walk ended early, if it did

    @property
    def attempts(self) -> list[Attempt]:
        return [s.attempt for s in self.steps if s.attempt is not None]

    @property
    def hangs(self) -> list[tuple[str, str]]:
        """(kernel, rung) for every hang met, skipped known hangs included."""
        out = [(s.attempt.stalled_kernel, s.rung.name) for s in self.steps if s.attempt and s.attempt.status == HANG]
        out += [(s.job, s.rung.name) for s in self.steps if s.skipped == KNOWN_HANG]
        return out

    @property
    def report_paths(self) -> list[str]:
        return [str(a.report) for a in self.attempts if a.report]

    @property
    def df(self) -> pd.DataFrame:
        frames = [f for f in self.frames if len(f)]
        if not frames:
            return pd.DataFrame(columns=[RUNG_COLUMN, ATTEMPT_COLUMN, JOB_COLUMN])
        return pd.concat(frames, ignore_index=True)

    def summary(self) -> str:
        lines = [f"ladder {self.ladder.name}: {len(self.attempts)} attempt(s)"]
        lines += ["  " + s.describe() for s in self.steps]
        if self.unprofiled:
            lines.append("hung at every rung: " + ", ".join(self.unprofiled))
        if self.stopped:
            lines.append("stopped early: " + self.stopped)
        return "\n".join(lines)


def report_rows(attempt: Attempt) -> pd.DataFrame:
    """The rows of an attempt's report, partial or complete, read with the ncu that wrote it."""
    return load_report(attempt.report, ncu=attempt.ncu)


def _frame(attempt: Attempt, rung: Rung, index: int, job: str, reader: Callable[[Attempt], pd.DataFrame]
           ) -> pd.DataFrame:
    if attempt.report is None or not attempt.finished_kernels:
        return pd.DataFrame()
    df = reader(attempt)
    df[RUNG_COLUMN] = rung.name
    df[ATTEMPT_COLUMN] = index
    df[JOB_COLUMN] = job
    return df


@dataclass
class _Job:
    """The main program (kernel None) or one kernel, at one rung, from one launch on."""

    kernel: Optional[str]
    rung_index: int
    skip: int = 0
    excluded: tuple[str, ...] = ()
    done: list[str] = field(default_factory=list)  # names of results kept, main job only

    @property
    def name(self) -> str:
        return self.kernel or "main"

    def lower(self, skip: Optional[int] = None) -> "_Job":
        """This kernel's job one rung down."""
        return _Job(self.kernel, self.rung_index + 1, self.skip if skip is None else skip)


@dataclass(frozen=True)
class _Settings:
    """How walk_ladder was asked to walk (its keyword arguments)."""

    store: Optional[HangStore]
    retry_known_hangs: bool
    on_output: Optional[Callable[[str], None]]
    max_attempts: int
    retry_wait: tuple[float, float]
    reader: Callable[[Attempt], pd.DataFrame]
    stall_timeout_floor: Optional[float]
    stall_timeout: Optional[float]
    environment: Optional[Environment] = None


def walk_ladder(
    command: Sequence[str],
    options: Optional[ProfileOptions] = None,
    ladder: "Ladder | str" = "default",
    config: Optional[RunConfig] = None,
    *,
    context: Optional[RunContext] = None,
    store: Optional[HangStore] = None,
    retry_known_hangs: bool = False,
    on_output: Optional[Callable[[str], None]] = None,
    max_attempts: int = 64,
    retry_wait: tuple[float, float] = (1.0, 8.0),
    reader: Optional[Callable[[Attempt], pd.DataFrame]] = None,
    stall_timeout_floor: Optional[float] = None,
    stall_timeout: Optional[float] = None,
    environment: Optional[Environment] = None,
) -> LadderResult:
    """Profile `command`, stepping down `ladder` for each kernel that hangs.

    ncu is located and probed once (`context`, else one made from `config`)
    and used by every attempt. reader turns an attempt into rows (default:
    its report, through load_report); stall_timeout_floor is the least stall
    timeout any rung may use, and stall_timeout, when given, is used at
    every rung. environment: this machine as the store knows it, when the
    caller already detected it (else detected here, when there is a store).
    """
    options = options or ProfileOptions()
    context = RunContext.resolve(config, context)
    ladder = load_ladder(ladder) if isinstance(ladder, str) else ladder
    ladder.validate(context.info)
    settings = _Settings(store, retry_known_hangs, on_output, max_attempts, retry_wait, reader or report_rows,
                         stall_timeout_floor, stall_timeout, environment)
    return _Walk(list(command), options, ladder.for_request(options, context.info), context, settings).run()


class _Walk:
    """One walk: a queue of jobs, and a method per decision about them."""

    def __init__(self, command: list[str], options: ProfileOptions, ladder: Ladder, context: RunContext,
                 settings: _Settings) -> None:
        self.command, self.options, self.ladder = command, options, ladder
        self.context, self.s = context, settings
        self.env = None if settings.store is None else (
            settings.environment or Environment.detect(ncu_version=context.info.version))
        self.result = LadderResult(ladder)
        self.jobs = self._first_jobs()

    def run(self) -> LadderResult:
        while self.jobs:
            if len(self.result.attempts) >= self.s.max_attempts:
                self.result.stopped = f"the walk reached max_attempts={self.s.max_attempts}"
                break
            if not self._step(self.jobs.pop(0)):
                break
        return self.result

    def _first_jobs(self) -> list[_Job]:
        """The main program; kernels of it known to hang at the first rung start lower down."""
        main = _Job(None, 0)
        if self.s.store is None or self.s.retry_known_hangs:
            return [main]
        first_opts, _ = self.ladder[0].apply(self.options)
        known = _known_hanging_kernels(self.s.store, self.env, ProfileKey.from_options(first_opts), self.command)
        main.excluded = tuple(known)
        return [main] + [_Job(k, 0) for k in known]

    def _step(self, job: _Job) -> bool:
        """Try one job at its rung; False when the walk must stop."""
        if job.rung_index >= len(self.ladder):
            self.result.unprofiled.append(job.kernel)
            return True
        rung = self.ladder[job.rung_index]
        planned = self._options(job, rung)
        if planned is None:
            return True
        opts, notes = planned
        if job.kernel is not None and self._known_to_hang(job.kernel, opts):
            self.result.steps.append(Step(job.name, rung, job.rung_index, skipped=KNOWN_HANG))
            self.jobs.insert(0, job.lower())
            return True
        attempt = self._attempt(opts, rung)
        self._record(job, rung, opts, notes, attempt)
        if attempt.gpu_left_after:
            # FACTS: a target left spinning makes every later run on that GPU hang; what follows would be false.
            self.result.stopped = ("the GPU still runs processes of the last attempt ("
                                   + ", ".join(attempt.gpu_left_after)
                                   + "): stopped so as not to record false hangs; free the GPU and run again")
            return False
        return self._follow(job, rung, attempt)

    def _options(self, job: _Job, rung: Rung) -> Optional[tuple[ProfileOptions, list[str]]]:
        """The options of this job at this rung (None: nothing left to profile), and notes."""
        o = self.options
        if job.kernel is not None:
            alone = KernelFilter(job.kernel, False, o.kernel.base if o.kernel else "function")
            return rung.apply(o.replace(kernel=alone, launch_skip=job.skip or None, launch_count=None))
        skip = (o.launch_skip or 0) + job.skip
        count = None if o.launch_count is None else o.launch_count - job.skip
        if count is not None and count <= 0:
            return None
        return rung.apply(o.replace(kernel=exclude_kernels(o.kernel, job.excluded), launch_skip=skip or None,
                                    launch_count=count))

    def _known_to_hang(self, kernel: str, opts: ProfileOptions) -> bool:
        store = self.s.store
        return (store is not None and not self.s.retry_known_hangs
                and store.hangs_for(kernel, ProfileKey.from_options(opts), self.env))

    def _attempt(self, opts: ProfileOptions, rung: Rung) -> Attempt:
        """One watched run, retried after a pause when ncu's error is transient."""
        s = self.s
        # A rung's own stall timeout wins over the config's, but never goes below the floor
        # (profile(fn) sets it from a timed plain call, so a long single pass is not called hung).
        stall = s.stall_timeout or max(rung.stall_timeout or self.context.config.stall_timeout,
                                       s.stall_timeout_floor or 0.0)
        retrying = Retrying(retry=retry_if_result(is_transient), stop=stop_after_attempt(3),
                            wait=wait_exponential(min=s.retry_wait[0], max=s.retry_wait[1]), reraise=True,
                            retry_error_callback=lambda state: state.outcome.result())
        return retrying(profile_command, self.command, opts, context=self.context.replace(stall_timeout=stall),
                        on_output=s.on_output)

    def _record(self, job: _Job, rung: Rung, opts: ProfileOptions, notes: list[str], attempt: Attempt) -> None:
        index = len(self.result.steps)
        self.result.steps.append(Step(job.name, rung, job.rung_index, attempt, notes=tuple(notes)))
        self.result.frames.append(_frame(attempt, rung, index, job.name, self.s.reader))
        if self.s.store is not None:
            self.s.store.record_attempt(attempt, ProfileKey.from_options(opts), self.env, kernel=job.kernel,
                                        rung=rung.name, ladder=self.ladder.name)
        log.info(self.result.steps[-1].describe())

    def _follow(self, job: _Job, rung: Rung, attempt: Attempt) -> bool:
        """What the attempt's outcome means for the jobs left; False when the walk must stop."""
        status = attempt.status
        if status == OK or (status == NO_KERNELS and job.kernel is None):
            return True
        if status == HANG and attempt.stall is not None:
            self._after_hang(job, attempt)
            return True
        if job.kernel is not None and status in (NO_KERNELS, ERROR, TIMEOUT):
            # This rung profiled nothing of the kernel (e.g. range replay without marked ranges),
            # ncu refused it, or it ran too long: try the next.
            self.jobs.insert(0, job.lower())
            return True
        if status in (ERROR, CRASHED) and not self.result.frames[:-1]:
            raise AttemptFailed(attempt, f"{status} at rung {rung.name!r}: {attempt.reason}")
        self.result.stopped = f"{status} at rung {rung.name!r} ({job.name}): {attempt.reason}"
        return False

    def _after_hang(self, job: _Job, attempt: Attempt) -> None:
        """Keep what finished; resume the program past it without the hung kernel, which steps down alone."""
        finished = [k.name for k in attempt.finished_kernels]
        if job.kernel is not None:
            self.jobs.insert(0, job.lower(skip=job.skip + len(finished)))
            return
        hung = attempt.stalled_kernel
        excluded = tuple(sorted(set(job.excluded) | {hung}))
        kept = [k for k in job.done + finished if k not in excluded]
        self.jobs.insert(0, _Job(None, job.rung_index, len(kept), excluded, kept))
        self.jobs.append(_Job(hung, job.rung_index + 1))


def _known_hanging_kernels(store: HangStore, env: Environment, key: ProfileKey, command: Sequence[str]) -> list[str]:
    """Kernels recorded (trusted) as hanging with `key` here, for this same program."""
    names: list[str] = []
    for r in store.records():
        if (r.hung and r.trusted and r.key == key.canonical() and r.gpu == env.gpu
                and r.ncu_version == env.ncu_version and list(r.command[-len(command):]) == list(command)
                and r.kernel not in names and r.kernel != "*"):
            names.append(r.kernel)
    return names
