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
from pathlib import Path
from typing import Callable, Optional, Sequence

import pandas as pd
from tenacity import Retrying, retry_if_result, stop_after_attempt, wait_exponential

from nsightwrap.ncu.attempt import CRASHED, ERROR, HANG, NO_KERNELS, OK, TIMEOUT, Attempt
from nsightwrap.ncu.engine import RunConfig, profile_command
from nsightwrap.errors import AttemptFailed
from nsightwrap.fallback.ladder import Ladder, Rung, exclude_kernels, load_ladder
from nsightwrap.ncu.options import KernelFilter, ProfileOptions
from nsightwrap.ncu.catalog import probe_ncu
from nsightwrap.ncu.locate import find_ncu

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
        out += [(s.job, s.rung.name) for s in self.steps if s.skipped and "known to hang" in s.skipped]
        return out

    @property
    def report_paths(self) -> list[str]:
        return [str(a.report) for a in self.attempts if a.report]

    @property
    def df(self) -> pd.DataFrame:
        frames = [f for f in self.frames if len(f)]
        return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=[RUNG_COLUMN, ATTEMPT_COLUMN, JOB_COLUMN])

    def summary(self) -> str:
        lines = [f"ladder {self.ladder.name}: {len(self.attempts)} attempt(s)"]
        lines += ["  " + s.describe() for s in self.steps]
        if self.unprofiled:
            lines.append("hung at every rung: " + ", ".join(self.unprofiled))
        if self.stopped:
            lines.append("stopped early: " + self.stopped)
        return "\n".join(lines)


def report_rows(attempt: Attempt) -> pd.DataFrame:
    """The rows of an attempt's report, partial or complete (the default reader)."""
    from nsightwrap.reports.ncu import load_report

    return load_report(attempt.report)


def _frame(attempt: Attempt, rung: Rung, index: int, job: str, reader) -> pd.DataFrame:
    if attempt.report is None or not attempt.kernels:
        return pd.DataFrame()
    df = reader(attempt)
    df[RUNG_COLUMN] = rung.name
    df[ATTEMPT_COLUMN] = index
    df[JOB_COLUMN] = job
    return df


@dataclass
class _Job:
    kernel: Optional[str]  # None: the main program
    rung_index: int
    skip: int = 0
    excluded: tuple[str, ...] = ()
    done: list = field(default_factory=list)  # names of results kept, main job only


def walk_ladder(
    command: Sequence[str],
    options: Optional[ProfileOptions] = None,
    ladder: "Ladder | str" = "default",
    config: Optional[RunConfig] = None,
    *,
    store=None,
    retry_known_hangs: bool = False,
    on_output: Optional[Callable[[str], None]] = None,
    max_attempts: int = 64,
    retry_wait: tuple[float, float] = (1.0, 8.0),
    reader: Optional[Callable[[Attempt], pd.DataFrame]] = None,
    stall_timeout_floor: Optional[float] = None,
    stall_timeout: Optional[float] = None,
) -> LadderResult:
    """Profile `command`, stepping down `ladder` for each kernel that hangs.

    reader turns an attempt into rows (default: its report, through
    load_report); stall_timeout_floor is the least stall timeout any rung
    may use, and stall_timeout, when given, is used at every rung.
    """
    options = options or ProfileOptions()
    config = config or RunConfig()
    reader = reader or report_rows
    ladder = load_ladder(ladder) if isinstance(ladder, str) else ladder
    command = list(command)
    info = probe_ncu(find_ncu(config.ncu, config.env), Path(config.cache_dir) if config.cache_dir else None,
                     env=config.env)
    ladder.validate(info)
    ladder = ladder.for_request(options, info)
    env = None
    if store is not None:
        from nsightwrap.store.hangstore import Environment

        env = Environment.detect(ncu_version=info.version)
    result = LadderResult(ladder)

    def run(opts: ProfileOptions, rung: Rung) -> Attempt:
        # A rung's own stall timeout wins over the config's, but never goes below the floor
        # (profile(fn) sets it from a timed plain call, so a long single pass is not called hung).
        stall = stall_timeout or max(rung.stall_timeout or config.stall_timeout, stall_timeout_floor or 0.0)
        cfg = config.replace(stall_timeout=stall)
        retrying = Retrying(retry=retry_if_result(is_transient), stop=stop_after_attempt(3),
                            wait=wait_exponential(min=retry_wait[0], max=retry_wait[1]), reraise=True,
                            retry_error_callback=lambda state: state.outcome.result())
        return retrying(profile_command, command, opts, cfg, on_output=on_output)

    def key_of(opts):
        from nsightwrap.store.hangstore import ProfileKey

        return ProfileKey.from_options(opts)

    def known_to_hang(kernel: str, opts: ProfileOptions) -> bool:
        return store is not None and not retry_known_hangs and store.hangs_for(kernel, key_of(opts), env)

    jobs = [_Job(None, 0)]
    first_opts, _ = ladder[0].apply(options)
    if store is not None and not retry_known_hangs:
        # Kernels of this program known to hang at the first rung start lower down.
        known = _known_hanging_kernels(store, env, key_of(first_opts), command)
        if known:
            jobs[0].excluded = tuple(known)
            for k in known:
                jobs.append(_Job(k, 0))
    while jobs:
        if len(result.attempts) >= max_attempts:
            result.stopped = f"the walk reached max_attempts={max_attempts}"
            break
        job = jobs.pop(0)
        if job.rung_index >= len(ladder):
            result.unprofiled.append(job.kernel)
            continue
        rung = ladder[job.rung_index]
        opts, notes = rung.apply(options)
        name = job.kernel or "main"
        if job.kernel is not None:
            opts, notes = rung.apply(options.replace(
                kernel=KernelFilter(job.kernel, False, options.kernel.base if options.kernel else "function"),
                launch_skip=job.skip or None, launch_count=None))
            if known_to_hang(job.kernel, opts):
                result.steps.append(Step(name, rung, job.rung_index, skipped="known to hang here (hang store)"))
                jobs.insert(0, _Job(job.kernel, job.rung_index + 1, job.skip))
                continue
        else:
            skip = (options.launch_skip or 0) + job.skip
            count = None if options.launch_count is None else options.launch_count - job.skip
            if count is not None and count <= 0:
                continue
            opts, notes = rung.apply(options.replace(kernel=exclude_kernels(options.kernel, job.excluded),
                                                     launch_skip=skip or None, launch_count=count))
        attempt = run(opts, rung)
        index = len(result.steps)
        result.steps.append(Step(name, rung, job.rung_index, attempt, notes=tuple(notes)))
        result.frames.append(_frame(attempt, rung, index, name, reader))
        if store is not None:
            store.record_attempt(attempt, key_of(opts), env, kernel=job.kernel, rung=rung.name,
                                 ladder=ladder.name)
        log.info(result.steps[-1].describe())
        if attempt.gpu_left_after:
            # FACTS: a target left spinning makes every later run on that GPU hang; what follows would be false.
            result.stopped = ("the GPU still runs processes of the last attempt (" + ", ".join(attempt.gpu_left_after)
                              + "): stopped so as not to record false hangs; free the GPU and run again")
            break

        if attempt.status == OK or (attempt.status == NO_KERNELS and job.kernel is None):
            continue
        if attempt.status == NO_KERNELS:
            # This rung profiled nothing of the kernel (e.g. range replay without marked ranges): go on down.
            jobs.insert(0, _Job(job.kernel, job.rung_index + 1, job.skip))
            continue
        if attempt.status == HANG and attempt.stall is not None:
            hung = attempt.stalled_kernel
            if job.kernel is None:
                kept = job.done + [k.name for k in attempt.kernels]
                excluded = tuple(sorted(set(job.excluded) | {hung}))
                kept = [k for k in kept if k not in excluded]
                jobs.insert(0, _Job(None, job.rung_index, len(kept), excluded, kept))
                jobs.append(_Job(hung, job.rung_index + 1))
            else:
                jobs.insert(0, _Job(job.kernel, job.rung_index + 1, job.skip + len(attempt.kernels)))
            continue
        if job.kernel is not None and attempt.status in (ERROR, TIMEOUT):
            # A lower rung that ncu refuses (or that runs too long) for this kernel: try the next.
            jobs.insert(0, _Job(job.kernel, job.rung_index + 1, job.skip))
            continue
        if attempt.status in (ERROR, CRASHED) and not result.frames[:-1]:
            raise AttemptFailed(attempt, f"{attempt.status} at rung {rung.name!r}: {attempt.reason}")
        result.stopped = f"{attempt.status} at rung {rung.name!r} ({name}): {attempt.reason}"
        break
    return result


def _known_hanging_kernels(store, env, key, command: Sequence[str]) -> list[str]:
    """Kernels recorded (trusted) as hanging with `key` here, for this same program."""
    names = []
    for r in store.records():
        if (r.hung and r.trusted and r.key == key.canonical() and r.gpu == env.gpu
                and r.ncu_version == env.ncu_version and list(r.command[-len(command):]) == list(command)
                and r.kernel not in names and r.kernel != "*"):
            names.append(r.kernel)
    return names
