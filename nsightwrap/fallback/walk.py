"""Walk down a ladder: only what hung steps down.

The program is profiled at the requested rung. When kernel K hangs, the
kernels finished before it keep their results (the partial report); the
program is profiled again at the same rung from the next launch on with K
excluded; and K alone goes down the ladder until a rung works or the
ladder ends. Rungs the hang store knows to hang for K here are skipped. A
kernel that hangs before its first pass finishes is tried at the ladder's
floor first, which may spare the rungs above it (nsightwrap.fallback.floor).

A multi-process job (torchrun, mpirun, srun, or a run where ncu connects to
several processes at once) differs in four ways (see
nsightwrap.fallback.collectives): the program restarts from its first
launch after a hang (ncu counts launches per process, so a skip count means
nothing across ranks); a recognised launch leaves every collective family
(NCCL, NVSHMEM) out of the main run from the start and profiles them in one
job of their own, as they would hang with every rank profiled (FACTS.md);
without a launcher, a hung collective (called at once: nsightwrap.ncu.known)
leaves the main run with its whole family; a family's job goes down the
ladder skipping rungs that profile every rank (they all hang); and the store
records the job's size, so its hangs are not applied to single-process runs.
"""

from __future__ import annotations

import logging
import sys
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Callable, Optional

from nsightwrap.errors import AttemptFailed
from nsightwrap.fallback.collectives import (
    COLLECTIVE_ALL_RANKS,
    COLLECTIVES_JOB,
    JobShape,
    family_filter,
    unprofiled_reason,
    up_front,
)
from nsightwrap.fallback.executor import open_engine
from nsightwrap.fallback.floor import IMPLIED_HANG, floor_index, implied_by_floor
from nsightwrap.fallback.ladder import Ladder, Rung, exclude_kernels, load_ladder
from nsightwrap.fallback.lines import EngineStopped, Lines, OnEngine
from nsightwrap.fallback.reads import Reads
from nsightwrap.fallback.result import KNOWN_EMPTY, KNOWN_HANG, LadderResult, Step
from nsightwrap.fallback.session import GpuKept, Session, Tag
from nsightwrap.fallback.sidebyside import SideBySide
from nsightwrap.ncu.attempt import Attempt
from nsightwrap.ncu.context import RunContext
from nsightwrap.ncu.known import COLLECTIVE_PREFIXES, collective_family
from nsightwrap.ncu.options import KernelFilter, ProfileOptions
from nsightwrap.status import CRASHED, ERROR, HANG, NO_KERNELS, OK, ONE_RANK, RANGE_MODES, TIMEOUT
from nsightwrap.watch.launchers import meeting_apart, second_run_env

if TYPE_CHECKING:  # pandas loads while the first attempt runs (nsightwrap.fallback.reads), not before it
    import pandas as pd

log = logging.getLogger("nsightwrap")

#: Why a range-replay rung is skipped for a kernel of a program that marks no range (FACTS.md: range replay
#: then profiles nothing, "No ranges were profiled").
NO_RANGES = ("the program marks no range to replay: calibrating it, nsys saw no cudaProfilerStart call, "
             "so range replay would profile nothing")
#: A rung index past the last rung: the job has no rung left.
END = sys.maxsize


def report_rows(attempt: Attempt) -> "pd.DataFrame":
    """The rows of an attempt's report, partial or complete, read with the ncu that wrote it."""
    from nsightwrap.reports.ncu import load_report  # with pandas, on first use

    return load_report(attempt.report, ncu=attempt.ncu)


@dataclass
class _Job:
    """The main program (kernel None) or one kernel, at one rung, from one launch on."""

    kernel: Optional[str]
    rung_index: int
    skip: int = 0
    excluded: tuple[str, ...] = ()
    done: list[str] = field(default_factory=list)  # names of results kept, main job only
    #: A collective family (prefix) profiled together, multi-process jobs only; all of them (a tuple) for
    #: the job made up front (`upfront`) when a launcher is recognised.
    family: "Optional[str | tuple[str, ...]]" = None
    tried_one_rank: bool = False
    then: Optional[tuple[int, ...]] = None  # the rungs after this one, in order (None: the ladder's order)
    floor_first: bool = False  # at the floor before the rungs above it (nsightwrap.fallback.floor)
    provisional: Optional[int] = None  # the step whose rows (at the floor) stand unless a rung above works
    collectives_out: bool = False  # main job: every collective family left out up front (a recognised launcher)
    upfront: bool = False  # the collectives' job made up front: when it profiles nothing, the program has none

    @property
    def name(self) -> str:
        return self.kernel or "main"

    def lower(self, skip: Optional[int] = None, one_rank: bool = False) -> "_Job":
        """This kernel's job at its next rung."""
        if self.then is None:
            index, then = self.rung_index + 1, None
        else:
            index, then = (self.then[0], self.then[1:]) if self.then else (END, ())
        return _Job(self.kernel, index, self.skip if skip is None else skip, family=self.family,
                    tried_one_rank=self.tried_one_rank or one_rank, then=then, provisional=self.provisional,
                    upfront=self.upfront)


@dataclass(frozen=True)
class _Settings:
    """How walk_ladder was asked to walk (its policy; what attempts share is the session's)."""

    retry_known_hangs: bool
    max_attempts: int
    reader: Callable[[Attempt], "pd.DataFrame"]


def walk_ladder(
    session: Session,
    options: Optional[ProfileOptions] = None,
    ladder: "Ladder | str" = "default",
    *,
    retry_known_hangs: bool = False,
    max_attempts: int = 64,
    reader: Optional[Callable[[Attempt], "pd.DataFrame"]] = None,
) -> LadderResult:
    """Profile the session's program, stepping down `ladder` for each kernel that hangs.

    The session (nsightwrap.fallback.session) holds what every attempt
    shares: ncu found and probed once, the store, the environment, the
    calibrator, the job's shape, and the stall-timeout choice: an explicit
    one is used at every rung, over the rungs' own. Otherwise kernels get
    calibrated allowances: the calibration is taken from the store, else
    measured at the first stall, and a stall is a hang only once calibrated.
    reader turns an attempt into rows (default: its report, through
    load_report); it is called in a thread of the walk's own while the next
    attempt runs (nsightwrap.fallback.reads), one read at a time, in order (in each line's order where lines run
    at once: nsightwrap.fallback.lines),
    and an exception it raises ends the walk. One-rank rungs profile session.rank in a multi-process job
    (unless options.rank chooses one for every rung). The verdict is the
    result's: status, exit_code, to_dict().
    """
    options = options or ProfileOptions()
    context = session.context
    ladder = load_ladder(ladder) if isinstance(ladder, str) else ladder
    ladder.validate(context.info)
    settings = _Settings(retry_known_hangs, max_attempts, reader or report_rows)
    ladder = ladder.for_request(options, context.info).for_processes(session.shape.one_rank_possible)
    walk = _Walk(session, options, ladder, settings)
    if session.executor is not None:
        return _on_engine(walk)
    return _side_by_side(walk) if _side_by_side_possible(walk) else walk.run()


class _Walk:
    """One walk: a queue of jobs, and a method per decision about them."""

    def __init__(self, session: Session, options: ProfileOptions, ladder: Ladder, settings: _Settings) -> None:
        self.session, self.options, self.ladder, self.s = session, options, ladder, settings
        self.command = session.command
        self.result = LadderResult(ladder)
        self.lines: Optional[Lines] = None  # lines walked at once: the walk's lines (this one is one of them)
        self.first = True  # the walk's first line: its first attempt is the walk's
        self.pops: list[tuple[int, int]] = []  # (steps, unprofiled) before each job taken from the queue
        self.origin: Optional[_Job] = None  # a line's first job
        #: (pop, step index, step, frame index, frame) before a later job of the pop changed them (_supersede)
        self.undo: list[tuple[int, int, Step, int, "pd.DataFrame"]] = []
        self.chain = ""  # a line's name on the engine (its jobs depend on each other: one at a time)
        self._note_shape()
        self.floor = floor_index(ladder, options)
        self.floor_hung: set[str] = set()  # kernels seen to hang at the floor in this walk
        self.reads = Reads(settings.reader)
        self.jobs = self._first_jobs()

    @property
    def shape(self) -> JobShape:
        return self.session.shape

    def run(self) -> LadderResult:
        try:
            while self.jobs:
                if len(self.result.attempts) >= self.s.max_attempts:
                    self.result.stopped = f"the walk reached max_attempts={self.s.max_attempts}"
                    break
                self.reads.check(self.result.frames)
                self.pops.append((len(self.result.steps), len(self.result.unprofiled)))
                if not self._step(self.jobs.pop(0)):
                    break
            self.result.frames = self.reads.resolved(self.result.frames)
        except BaseException:
            self.reads.close(wait=False)  # an interrupt or an error is answered now; a read under way ends alone
            raise
        self.reads.close()
        store = self.session.store
        self.result.notes = list(store.notes) if store is not None else []
        return self.result

    def _note_shape(self) -> None:
        env = self.session.environment
        self.result.processes = self.shape.processes
        self.result.gpus = env.gpus if env is not None else None

    def _first_jobs(self) -> list[_Job]:
        """The main program; kernels of it known to hang at the first rung start lower down.

        A recognised launcher's collectives (nsightwrap.fallback.collectives.up_front) are left out of
        the main program from the start and profiled in a job of their own, so no attempt waits on them.
        """
        plan = up_front(self.shape, self.options)
        main = _Job(None, 0, collectives_out=plan is not None)
        jobs = [main] if plan is None or plan.main else []
        families = set(COLLECTIVE_PREFIXES) if plan is not None else set()  # the up-front job covers them
        if plan is not None and plan.collectives:
            jobs.append(_Job(COLLECTIVES_JOB, 0, family=COLLECTIVE_PREFIXES, upfront=True))
            log.info(f"a {self.shape.describe()}: its collectives ({', '.join(COLLECTIVE_PREFIXES)}) are left out of "
                     "the runs of every rank and profiled on one rank, as they would hang with every rank profiled")
        if self.s.retry_known_hangs:
            return jobs
        first_opts, _ = self.ladder[0].apply(self.options, self.session.rank)
        known = self.session.hanging_kernels(first_opts)
        main.excluded = tuple(known)
        for k in known:
            family = collective_family(k) if self.shape.multi or plan is not None else None
            if family is None or family not in families:  # one job profiles a whole family
                jobs.append(_Job(k, 0, family=family))
                families.add(family)
        return jobs

    def _step(self, job: _Job) -> bool:
        """Try one job at its rung; False when the walk must stop."""
        if job.rung_index >= len(self.ladder):
            if job.provisional is not None:  # profiled at the floor, and no rung above it worked
                return True
            self.result.unprofiled.append(job.kernel)
            self.result.why_unprofiled[job.kernel] = unprofiled_reason(job.kernel, self.shape, self.ladder,
                                                                       job.tried_one_rank)
            return True
        rung = self.ladder[job.rung_index]
        planned = self._options(job, rung)
        if planned is None:
            return True
        opts, notes = planned
        if rung.ranks == ONE_RANK and self.options.rank is None and not (self.shape.multi
                                                                          and self.shape.one_rank_possible):
            self.jobs.insert(0, job.lower())  # a one-rank rung, but the job turned out to have one process
            return True
        skipped = self._skip_reason(job, opts)
        if skipped:
            self.result.steps.append(Step(job.name, rung, job.rung_index, skipped=skipped))
            if not (job.upfront and skipped == KNOWN_EMPTY):  # else: the program launches no collective
                self.jobs.insert(0, job.lower())
            return True
        why = ", the floor first: it hung before its first pass finished" if job.floor_first else ""
        self.session.context.listener.stage(
            f"rung {job.rung_index + 1}/{len(self.ladder)} {rung.name!r} for {job.name}{why}")
        shape = self.shape
        # The reports of the attempts before are read while this one runs, once it has started.
        context = self.reads.start(self.session.context_for(rung.stall_timeout))
        try:
            attempt = self._attempt(opts, Tag(job.kernel, rung.name, self.ladder.name), context)
        except GpuKept as e:  # recorded; what would follow on that GPU would be false
            self._record(job, rung, notes, e.attempt, shape)
            self.result.stopped = str(e)
            return False
        except EngineStopped as e:  # the engine gave up (no GPU or node left): the walk so far is the answer
            self.result.stopped = str(e)
            return False
        where = self.lines.attempts.note(self) if self.lines is not None else None  # e.g. beside another run
        self._record(job, rung, [*notes, where] if where else notes, attempt, shape)
        return self._follow(job, rung, attempt, one_rank=opts.rank is not None)

    def _attempt(self, options: ProfileOptions, tag: Tag, context: RunContext) -> Attempt:
        """The session's attempt, here or as one of a line (nsightwrap.fallback.lines)."""
        if self.lines is None:
            return self.session.attempt(options, tag, context)
        return self.lines.attempt(self, options, tag, context)

    def _options(self, job: _Job, rung: Rung) -> Optional[tuple[ProfileOptions, list[str]]]:
        """The options of this job at this rung (None: nothing left to profile), and notes."""
        o = self.options
        if job.kernel is not None:
            base = o.kernel.base if o.kernel else "function"
            alone = family_filter(job.family, o.kernel) if job.family else KernelFilter(job.kernel, False, base)
            return rung.apply(o.replace(kernel=alone, launch_skip=job.skip or None, launch_count=None),
                              self.session.rank)
        skip = (o.launch_skip or 0) + job.skip
        count = None if o.launch_count is None else o.launch_count - job.skip
        if count is not None and count <= 0:
            return None
        families = {collective_family(k) for k in job.excluded} - {None} if self.shape.multi else set()
        families |= set(COLLECTIVE_PREFIXES) if job.collectives_out else set()
        return rung.apply(o.replace(kernel=exclude_kernels(o.kernel, job.excluded, sorted(families)),
                                    launch_skip=skip or None, launch_count=count), self.session.rank)

    def _skip_reason(self, job: _Job, opts: ProfileOptions) -> Optional[str]:
        """Why this kernel's job need not run these options, if it need not."""
        if job.kernel is None:
            return None
        if not self.s.retry_known_hangs:
            if self.session.hangs_for(job.kernel, opts):
                return KNOWN_HANG
            if self.session.profiled_nothing(job.kernel, opts, self._program(job)):
                return KNOWN_EMPTY
        if self._implied(job):
            return IMPLIED_HANG.format(floor=self.ladder[self.floor].name)
        if opts.replay_mode in RANGE_MODES and not (opts.nvtx or opts.nvtx_include) and self._no_ranges():
            return NO_RANGES
        if job.family and self.shape.multi and opts.rank is None and not self.s.retry_known_hangs:
            return COLLECTIVE_ALL_RANKS
        return None

    def _program(self, job: _Job) -> list[str]:
        """The command as the store recorded this job's attempts: a one-rank rung's command is rewritten
        around the launch's program, which it ends with."""
        launch = self.shape.launch
        return list(launch.program) if job.upfront and launch is not None else self.command

    def _no_ranges(self) -> bool:
        """The calibration at hand saw the program call no cu(da)ProfilerStart."""
        known = self.session.calibrator.known()
        return known is not None and known.marks_ranges is False

    # --- the floor (nsightwrap.fallback.floor) --------------------------------------
    def _implied(self, job: _Job) -> bool:
        """A rung above the floor, which hangs for this kernel, that serialises the kernel as the floor does."""
        return (self.floor is not None and job.family is None and job.rung_index < self.floor
                and implied_by_floor(self.ladder[job.rung_index], self.options) and self._floor_hangs(job))

    def _floor_hangs(self, job: _Job) -> bool:
        """Seen in this walk, or known to the store (unless known hangs are retried)."""
        if job.kernel in self.floor_hung:
            return True
        if self.s.retry_known_hangs or self.floor is None:
            return False
        planned = self._options(job, self.ladder[self.floor])
        return planned is not None and self.session.hangs_for(job.kernel, planned[0])

    def _floor_first(self, job: _Job, attempt: Attempt) -> _Job:
        """The next job of a kernel that hung: at the floor first when that may spare rungs, else `job`."""
        f, stall = self.floor, attempt.stall
        if (f is None or job.then is not None or job.family is not None or stall is None or not stall.first_pass
                or job.rung_index >= f or self._floor_hangs(job)):
            return job
        if not any(implied_by_floor(self.ladder[r], self.options) for r in range(job.rung_index, f)):
            return job
        order = tuple(r for r in range(job.rung_index, len(self.ladder)) if r != f)
        log.info(f"{job.name} hung before its first pass finished: trying it at the floor "
                 f"({self.ladder[f].name!r}) before the rungs above it")
        return replace(job, rung_index=f, then=order, floor_first=True)

    def _after_floor_worked(self, job: _Job) -> None:
        """The floor profiled the kernel: its rows stand unless a rung above it works, tried next in order."""
        above = tuple(r for r in job.then or () if r < (self.floor or 0))
        if above:
            step = len(self.result.steps) - 1
            self.jobs.insert(0, _Job(job.kernel, above[0], job.skip, then=above[1:], provisional=step))

    def _supersede(self, job: _Job, rung: Rung) -> None:
        """A rung above the floor worked: the floor's rows, tried first, give way."""
        i = job.provisional
        f = sum(1 for s in self.result.steps[:i] if s.attempt is not None)  # the floor attempt's frame
        self.undo.append((len(self.pops) - 1, i, self.result.steps[i], f, self.result.frames[f]))
        self.result.frames[f] = self.reads.drop(self.result.frames[f])
        step = self.result.steps[i]
        self.result.steps[i] = replace(step, notes=step.notes + (
            f"its rows give way to rung {rung.name!r}, above it, which worked too",))

    def _record(self, job: _Job, rung: Rung, notes: list[str], attempt: Attempt, shape: JobShape) -> None:
        """The attempt as a step of the walk (the session recorded it in the store)."""
        if self.shape != shape:  # a program that no launcher announced may still run several processes
            self._note_shape()
            log.info(f"ncu connected to {attempt.connected} processes at once: a multi-process program")
        index = len(self.result.steps)
        self.result.steps.append(Step(job.name, rung, job.rung_index, attempt, notes=tuple(notes)))
        self.result.frames.append(self.reads.frame(attempt, rung, index, job.name))
        log.info(self.result.steps[-1].describe())

    def _follow(self, job: _Job, rung: Rung, attempt: Attempt, one_rank: bool) -> bool:
        """What the attempt's outcome means for the jobs left; False when the walk must stop."""
        status = attempt.status
        if attempt.program_fault:
            self.result.stopped = f"the program hangs or fails by itself, without ncu ({status}): {attempt.reason}"
            return False
        if status == OK and job.floor_first:
            self._after_floor_worked(job)
            return True
        if status == OK and job.provisional is not None:
            self._supersede(job, rung)
            return True
        if status == OK or (status == NO_KERNELS and job.kernel is None):
            return True
        if status == NO_KERNELS and job.upfront:  # the filter is the same at every rung: none would find any
            step = self.result.steps[-1]
            self.result.steps[-1] = replace(step, notes=step.notes + (
                f"no collective kernel ({job.name}) was profiled: the program launches none"
                + (" that your kernel filter selects" if self.options.kernel is not None else "")
                + ", so nothing is left to profile",))
            return True
        if status == HANG and attempt.stall is not None:
            self._after_hang(job, attempt, one_rank)
            return True
        if job.kernel is not None and status in (NO_KERNELS, ERROR, TIMEOUT):
            # This rung profiled nothing of the kernel (e.g. range replay without marked ranges),
            # ncu refused it, or it ran too long: try the next.
            self.jobs.insert(0, job.lower(one_rank=one_rank))
            return True
        if status in (ERROR, CRASHED) and self.first and not self.result.frames[:-1]:  # the walk's first attempt
            raise AttemptFailed(attempt, f"{status} at rung {rung.name!r}: {attempt.reason}")
        self.result.stopped = f"{status} at rung {rung.name!r} ({job.name}): {attempt.reason}"
        return False

    def _after_hang(self, job: _Job, attempt: Attempt, one_rank: bool) -> None:
        """Keep what finished; resume the program past it without the hung kernel, which steps down alone.

        A multi-process job restarts from its first launch instead: ncu counts launches per
        process, so no skip count fits every rank; the rows of the hung attempt, profiled again,
        are dropped.
        """
        multi = self.shape.multi
        finished = [] if multi else [k.name for k in attempt.finished_kernels]
        if job.kernel is not None:
            if job.rung_index == self.floor:
                self.floor_hung.add(job.kernel)
            lower = job.lower(skip=job.skip + len(finished), one_rank=one_rank)
            self.jobs.insert(0, self._floor_first(lower, attempt))
            return
        hung = attempt.stalled_kernel
        excluded = tuple(sorted(set(job.excluded) | {hung}))
        kept = [k for k in job.done + finished if k not in excluded]
        if multi:
            self.result.frames[-1] = self.reads.drop(self.result.frames[-1])  # profiled again
        self.jobs.insert(0, _Job(None, job.rung_index, len(kept), excluded, kept,
                                 collectives_out=job.collectives_out))
        family = collective_family(hung) if multi else None
        if family is None or not any(j.family == family for j in self._waiting()):
            self._later(self._floor_first(_Job(hung, job.rung_index + 1, family=family), attempt))

    def _waiting(self) -> list[_Job]:
        """The jobs after this one: this queue's, or (lines walked at once) the first job of every line."""
        return self.jobs if self.lines is None else self.lines.firsts()

    def _later(self, job: _Job) -> None:
        """A job independent of this one: at the queue's end, or (lines walked at once) a line of its own."""
        if self.lines is None:
            self.jobs.append(job)
        else:
            self.lines.start(job)



# --- lines walked at once (nsightwrap.fallback.lines) -------------------------------------------------


def _on_engine(walk: _Walk) -> LadderResult:
    """The walk with its independent jobs run at once, each attempt a job of the engine; the engine's jobs
    cancelled on Ctrl-C."""
    session = walk.session
    spec = session.executor
    assert spec is not None
    with open_engine(spec, spec.jobs, on_counts=session.context.listener.stage) as engine:
        try:
            return Lines(walk, OnEngine(session, engine)).run()
        finally:
            walk.result.jobs = list(engine.timeline)
            session.close()  # the lines' own store connections


def _side_by_side_possible(walk: _Walk) -> bool:
    """The collectives' run may go beside the main program's (nsightwrap.fallback.sidebyside): the session allows
    it, the main program and the collectives' job made up front are both queued, and the launch can keep two
    runs' ranks apart."""
    session = walk.session
    if not (session.side_by_side and walk.jobs[0].kernel is None and any(j.upfront for j in walk.jobs)):
        return False
    env, why = second_run_env(session.command, session.context.env)
    if env is None:
        log.info(f"the collectives' run waits for the main program's: {why}")
    return env is not None


def _side_by_side(walk: _Walk) -> LadderResult:
    """The walk with its collectives' run beside the main program's, on the same GPUs; each other job in turn
    (nsightwrap.fallback.sidebyside)."""
    session = walk.session
    log.info("the collectives' run (one rank profiled) runs beside the main program's, on the same GPUs; its "
             f"ranks meet on a port of their own (a free one for each run: {', '.join(meeting_apart())})")
    try:
        return Lines(walk, SideBySide(session, meeting_apart)).run()
    finally:
        session.close()  # the lines' own store connections
