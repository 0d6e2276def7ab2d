"""sweep-sections: which sections hang on which kernels, by group testing.

First the whole requested set, on the whole program. Each kernel that hangs
is then investigated alone (kernel filter, one launch): the set is split and
the halves tested, recursing into the half that hangs; where no half hangs
alone, the culprit is a combination and its members are found by halving
each side against the other. Clean sets are remembered, so later searches
skip sections already shown innocent. Every probe is a watched run recorded
in the hang store, and outcomes already stored are used instead of probing.

In a multi-process job (torchrun, mpirun, srun) the whole-program runs leave
out the collective families that hung (nsightwrap.fallback.collectives),
and each kernel's probes run on one rank alone (the rank wrapper): with
every rank profiled a collective hangs whatever the sections. The first
whole-program run keeps the collectives, as their names are what is probed;
their hang there is a known cause, called at once (nsightwrap.ncu.known).
"""

from __future__ import annotations

import concurrent.futures as cf
import functools
import math
import queue
import threading
from typing import Any, Callable, Iterable, Optional, Sequence

from nsightwrap.errors import NsightwrapError, OptionsError, did_you_mean
from nsightwrap.fallback.collectives import JobShape
from nsightwrap.fallback.engineattempts import EngineAttempts
from nsightwrap.fallback.executor import ProbeEngine, open_engine
from nsightwrap.fallback.ladder import exclude_kernels
from nsightwrap.fallback.session import SWEEP, Session, Tag
from nsightwrap.fallback.spec import ExecutorSpec
from nsightwrap.fallback.sweepresult import FAILED, HUNG, WORKS, KernelSweep, Probe, SweepResult
from nsightwrap.ncu.attempt import Attempt
from nsightwrap.ncu.known import collective_family
from nsightwrap.ncu.options import KernelFilter, ProfileOptions
from nsightwrap.status import HANG, NO_KERNELS, OK
from nsightwrap.watch import gpu


class _Prober:
    """Runs (or infers) probes for one kernel.

    Hanging is monotone: a superset of a hanging set hangs, a subset of a
    set that worked works. Both are inferred without a probe.
    """

    def __init__(self, kernel: str, run: Callable[[str, frozenset], Probe], record: list[Probe]) -> None:
        self.kernel = kernel
        self.run = run
        self.record = record
        self.hanging: list[frozenset] = []
        self.working: list[frozenset] = []

    def hangs(self, sections: Iterable[str]) -> bool:
        s = frozenset(sections)
        if any(h <= s for h in self.hanging):
            return True
        if any(s <= w for w in self.working):
            return False
        p = self.run(self.kernel, s)
        self.record.append(p)
        if p.outcome == FAILED:
            raise NsightwrapError(f"probe of {self.kernel} with {p.label() or 'no section'} failed: {p.reason}")
        (self.hanging if p.outcome == HUNG else self.working).append(s)
        return p.outcome == HUNG

    def order(self, items: Sequence[str]) -> list[str]:
        """Sections of the largest set known to work first: their prefixes need no probe."""
        best = max(self.working, key=lambda w: len(w & frozenset(items)), default=frozenset())
        return sorted(i for i in items if i in best) + sorted(i for i in items if i not in best)


#: The least ncu can collect: one metric in one pass. A kernel that hangs with it hangs whatever is collected.
LEAST = ("gpu__time_duration.sum",)


def _chunk(n: int, found: int) -> Optional[int]:
    """Sections added per probe when `found` culprits are known (Hwang's generalized binary
    splitting, expecting one more): None (plain halving) until one is found, 1 when they are dense."""
    if found == 0:
        return None
    d = found + 1
    if n <= 2 * d - 2:
        return 1
    return 2 ** int(math.floor(math.log2((n - d + 1) / d)))


def _first_needed(pr: _Prober, order: list[str], base: frozenset, chunk: Optional[int] = None) -> int:
    """Smallest i with base + order[:i] hanging (base + order hangs, base alone works).

    With a chunk, prefixes grow by `chunk` sections until one hangs; then halving.
    """
    lo, hi = 0, len(order)
    while chunk and hi - lo > chunk:
        if pr.hangs(base | frozenset(order[: lo + chunk])):
            hi = lo + chunk
            break
        lo += chunk
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if pr.hangs(base | frozenset(order[:mid])):
            hi = mid
        else:
            lo = mid
    return hi


def investigate(kernel: str, universe: Sequence[str], run: Callable[[str, frozenset], Probe],
                known_hang: bool = True, max_combination: int = 3,
                least: Optional[Callable[[str], Probe]] = None) -> KernelSweep:
    """Culprit sections of one kernel, by adaptive group testing.

    Each round finds the first section x (in an order that puts known-good
    sections first) whose prefix hangs; x hangs alone, or its partners are
    found the same way among the sections before it. A single culprit costs
    at most ceil(log2 S) + 1 probes, plus one final probe that the rest
    works: the goal ceil(log2 S) + 2. Each further culprit costs two probes
    more than ceil(log2 S) (the probe that tells "alone" from "together",
    and the one that shows the rest still hangs), and once culprits are
    found the prefixes grow in smaller steps (generalized binary splitting).

    When the first section tried alone hangs, `least` (one probe with a
    single metric) asks whether the kernel hangs whatever is collected: then
    every section hangs and no other probe is needed. So a kernel that hangs
    whatever is collected costs ceil(log2 S) + 1 probes (basic: 3; one at a
    time: 4; 7 before). No adaptive search can beat one-at-a-time somewhere
    and never lose to it: a kernel that works with one metric yet hangs with
    every section alone still costs more than S probes (basic: 7).
    """
    result = KernelSweep(kernel, tuple(sorted(universe)))
    pr = _Prober(kernel, run, result.probes)
    if known_hang:
        pr.hanging.append(frozenset(universe))
    remaining = sorted(universe)
    while remaining and pr.hangs(remaining):
        order = pr.order(remaining)
        found = len(result.singles) + len(result.combinations)
        chunk = _chunk(len(order), found)
        alone = [x for x in order if pr.hangs([x])] if chunk == 1 else []
        if alone:  # dense: one section at a time is the cheapest now
            result.singles.extend(alone)
            remaining = [x for x in remaining if x not in alone]
            continue
        i = _first_needed(pr, order, frozenset(), chunk)
        x = order[i - 1]
        if pr.hangs([x]):
            result.singles.append(x)
            remaining.remove(x)
            if i == 1 and found == 0 and least is not None and _hangs_whatever(least, result):
                result.singles.extend(remaining)
                remaining = []
            continue
        members = _partners(pr, x, order[: i - 1], max_combination)
        if members is None:
            result.unresolved.append(f"{x} hangs only with more than {max_combination - 1} others among "
                                     + "+".join(order[: i - 1]))
        else:
            result.combinations.append(members)
        remaining.remove(x)  # the others may work once x is gone
    result.largest_working = tuple(remaining)
    return result


def _hangs_whatever(least: Callable[[str], Probe], result: KernelSweep) -> bool:
    """One probe with a single metric: does the kernel hang whatever ncu collects?"""
    p = least(result.kernel)
    result.probes.append(p)
    result.hangs_whatever = p.outcome == HUNG
    return result.hangs_whatever


def _partners(pr: _Prober, x: str, before: list[str], max_combination: int) -> Optional[tuple[str, ...]]:
    """The sections that hang together with x (x hangs with all of `before`, not alone); None if too many."""
    members, pool = [x], before
    while not pr.hangs(members) and pool and len(members) < max_combination:
        pool = pr.order(pool)
        j = _first_needed(pr, pool, frozenset(members))
        members.append(pool[j - 1])
        pool = pool[: j - 1]
    return tuple(sorted(members)) if pr.hangs(members) else None


def sections_of_set(info: Any, name: str) -> list[str]:
    """The sections of set `name` of this ncu; OptionsError (with the close names) for a set it lacks."""
    if name not in info.set_ids:
        hint = did_you_mean(name, info.set_ids)
        raise OptionsError(f"unknown section set {name!r}" + (f" ({hint})" if hint else "")
                           + f"; this ncu's sets: {', '.join(info.set_ids)}")
    return list(info.sections_of_set(name))


def sweep_sections(
    session: Session,
    *,
    kernel: Optional[str] = None,
    sections: "str | Sequence[str]" = "full",
    jobs: int = 1,
    on_probe: Optional[Callable[[Probe], None]] = None,
) -> SweepResult:
    """Find which sections hang on which kernels of the session's program.

    kernel: the user's kernel text (a regex; see KernelFilter.from_user).
    sections: the name of a section set of this ncu (default full), or the
    sections themselves. The session (nsightwrap.fallback.session) holds ncu,
    found and probed once, the store, the calibrator and the rank whose
    kernels are probed in a multi-process job (session.rank). Kernels get
    calibrated allowances (stored, else measured at the first stall; see
    nsightwrap.calibrate), for every later probe too. The verdict is the
    result's: status, exit_code, to_dict().
    jobs: probes at once here, one per GPU. With session.executor (an
    ExecutorSpec), the probes run as jobs of a cluster engine
    (nsightwrap.fallback.executor) instead of threads here: local (one per
    local GPU: the spec's `jobs` says how many) or slurm.
    """
    universe = sections_of_set(session.context.info, sections) if isinstance(sections, str) else list(sections)
    user_filter = KernelFilter.from_user(kernel) if kernel is not None else None  # '' is refused, not "all"
    try:
        if session.executor is not None:
            result = _on_engine(session, on_probe, session.executor, universe, user_filter)
        else:
            result = SweepResult(tuple(universe))
            try:
                _sweep(_ProbeRunner(session, _gpu_ids(jobs), on_probe), universe, user_filter, result, jobs)
            except _ProgramFault as e:  # the program hangs or fails by itself: nothing more to learn about ncu
                result.program_fault = e.attempt
    finally:
        session.close()  # the worker threads' own store connections
    result.notes = list(session.store.notes) if session.store is not None else []
    return result


# --- the hook of the cluster engine (nsightwrap.fallback.executor): probes dispatched as jobs ----------


def _on_engine(session: Session, on_probe: Optional[Callable[[Probe], None]], executor: ExecutorSpec,
               universe: list[str], user_filter: Optional[KernelFilter]) -> SweepResult:
    """The sweep with every probe a job of the engine; the engine's jobs cancelled on Ctrl-C."""
    with open_engine(executor, executor.jobs, on_counts=session.context.listener.stage) as engine:
        runner = _ProbeRunner(session, [None], on_probe, engine=engine)
        result = SweepResult(tuple(universe))
        try:
            _pipelined(runner, universe, user_filter, result, engine)
        except _ProgramFault as e:
            result.program_fault = e.attempt
        finally:
            result.jobs = list(engine.timeline)
        return result


def _pipelined(runner: "_ProbeRunner", universe: list[str], user_filter: Optional[KernelFilter],
               result: SweepResult, engine: ProbeEngine) -> None:
    """_sweep, each hanging kernel investigated as soon as a whole-program run finds it, beside the next
    whole-program run (the engine gives each job its own GPU). The next whole-program run is queued only once
    the new kernel's first probe is: when both wait for one GPU, the engine's order (the chain with the fewest
    jobs first) then gives it to the probe, whose chain has the most work left."""
    # A thread per kernel's chain (they wait on the engine, which alone bounds the GPUs): a chain never waits
    # for another to end before it starts.
    with cf.ThreadPoolExecutor(max_workers=max(engine.parallel, CHAINS_AT_ONCE)) as pool:
        futures: list[cf.Future] = []

        def found(kernel: str) -> None:
            started = threading.Event()
            futures.append(pool.submit(runner.chain, started, kernel, investigate, kernel, universe, runner.probe,
                                       least=runner.least))
            while not started.wait(0.5):  # short waits: Ctrl-C reaches this thread between them
                pass

        try:
            if not _hanging_kernels(runner, frozenset(universe), user_filter, result, on_found=found):
                result.clean = result.status == OK
            result.kernels = [f.result() for f in futures]
        except BaseException:
            runner.cancel.set()  # no new probe; the jobs running now are cancelled, their callers told
            engine.cancel()
            raise


#: Kernels investigated at once on the engine (threads that wait on it; its GPUs bound the probes).
CHAINS_AT_ONCE = 64


class _ProgramFault(Exception):
    """A probe found the program hanging or failing by itself, without ncu (Attempt.program_fault)."""

    def __init__(self, attempt: Attempt) -> None:
        super().__init__(attempt.reason)
        self.attempt = attempt


def _sweep(runner: "_ProbeRunner", universe: list[str], user_filter: Optional[KernelFilter], result: SweepResult,
           jobs: int) -> None:
    hanging = _hanging_kernels(runner, frozenset(universe), user_filter, result)
    if not hanging:
        result.clean = result.status == OK
        return
    # Each hanging kernel alone, in parallel where there are GPUs for it.
    with cf.ThreadPoolExecutor(max_workers=max(1, min(jobs, len(hanging)))) as pool:
        futures = [pool.submit(investigate, k, universe, runner.probe, least=runner.least) for k in hanging]
        try:
            result.kernels = [f.result() for f in futures]
        except BaseException:
            runner.cancel.set()  # Ctrl-C (or a program fault) reaches this thread only: stop the workers' probes
            raise


def _hanging_kernels(runner: "_ProbeRunner", full: frozenset, user_filter: Optional[KernelFilter],
                     result: SweepResult, on_found: Optional[Callable[[str], None]] = None) -> list[str]:
    """The whole set on the whole program, excluding each kernel found hanging, until none hangs
    (on_found hears each such kernel at once)."""
    hanging: list[str] = []

    def whole(without: list[str]) -> ProfileOptions:
        families = sorted({collective_family(k) for k in without} - {None}) if runner.shape.multi else []
        return _options(full, exclude_kernels(user_filter, without, families))

    def suspected(kernel: str, without: list[str]) -> None:
        """Run i+1 started beside run i, where a GPU is idle, once run i's kernel has gone silent
        (nsightwrap.fallback.announce): taken if run i ends hanging on it, cancelled otherwise."""
        if kernel not in without:
            runner.speculate(whole([*without, kernel]))

    try:
        while True:
            runner.context.listener.stage(f"whole program, all {len(full)} sections"
                                          + (f", without {', '.join(hanging)}" if hanging else ""))
            now = list(hanging)
            a, where = runner.watched(whole(now), on_suspect=functools.partial(suspected, without=now))
            result.whole_runs.append(a)
            result.whole_gpus.append(where)
            if a.status == HANG and a.stalled_kernel and a.stalled_kernel not in hanging:
                hanging.append(a.stalled_kernel)
                if on_found is not None:
                    on_found(a.stalled_kernel)
                continue
            if a.status not in (OK, HANG, NO_KERNELS) and not hanging:
                raise NsightwrapError(f"the first probe (all {len(full)} sections) ended {a.status}: {a.reason}")
            return hanging
    finally:
        runner.drop_speculations()  # a guess the last run did not bear out
        runner.end_chain("")


def _options(sections: frozenset, kernel: Optional[KernelFilter], **kw: Any) -> ProfileOptions:
    return ProfileOptions(sections=tuple(sorted(sections)), kernel=kernel, **kw)


class _ProbeRunner:
    """Runs the session's attempts as probes, one per GPU at a time, and answers from the store where it can."""

    def __init__(self, session: Session, gpus: Sequence[Optional[str]],
                 on_probe: Optional[Callable[[Probe], None]], engine: Optional[ProbeEngine] = None) -> None:
        self.session, self.on_probe = session, on_probe
        self.context = session.context
        self.engine = engine
        self.dispatch = EngineAttempts(session, engine) if engine is not None else None
        self.gpus: "queue.Queue[Optional[str]]" = queue.Queue()
        for g in gpus:
            self.gpus.put(g)
        self.cancel = threading.Event()
        self._local = threading.local()  # per chain's thread: who waits for its first job to be queued

    @property
    def shape(self) -> JobShape:
        return self.session.shape

    @property
    def probe_rank(self) -> Optional[int]:
        """The rank probes profile alone, or None to profile the whole program."""
        return self.session.rank if self.shape.multi and self.shape.one_rank_possible else None

    def chain(self, started: threading.Event, name: str, investigation: Callable[..., Any], *args: Any,
              **kw: Any) -> Any:
        """investigation(*args, **kw) in this thread, `started` set once its first job is queued on the engine
        (or once it ends without one); the engine told when the chain `name` asks for nothing more."""
        self._local.queued = started.set
        try:
            return investigation(*args, **kw)
        finally:
            self._local.queued = None
            started.set()
            self.end_chain(name)

    def watched(self, opts: ProfileOptions, chain: str = "",
                on_suspect: Optional[Callable[[str], None]] = None) -> tuple[Attempt, Optional[str]]:
        """One attempt of the session on a free GPU, recorded in the store; (attempt, the GPU it ran on).
        chain: the kernel whose probe it is ("" for a whole-program run): the engine's order of jobs;
        on_suspect: on the engine, told each kernel the running job suspects (see speculate)."""
        if self.engine is not None:
            return self._dispatched(opts, chain, on_suspect)
        gpu_id = self.gpus.get()
        try:
            if self.cancel.is_set():
                raise KeyboardInterrupt("the sweep was interrupted")
            attempt = self.session.attempt(opts, Tag(ladder=SWEEP), self.session.context_for(gpu=gpu_id),
                                           cancel=self.cancel)
        finally:
            self.gpus.put(gpu_id)
        if attempt.program_fault:  # never recorded: it says nothing about ncu's settings
            raise _ProgramFault(attempt)
        return attempt, gpu_id

    def _dispatched(self, opts: ProfileOptions, chain: str,
                    on_suspect: Optional[Callable[[str], None]]) -> tuple[Attempt, Optional[str]]:
        """watched() as a job of the engine: the node runs and records it (run_probe); (attempt, where)."""
        if self.cancel.is_set():
            raise KeyboardInterrupt("the sweep was interrupted")
        assert self.dispatch is not None
        queued, self._local.queued = getattr(self._local, "queued", None), None
        attempt, where = self.dispatch.attempt(opts, Tag(ladder=SWEEP), chain=chain, queued=queued,
                                               on_suspect=on_suspect)
        if attempt.program_fault:
            raise _ProgramFault(attempt)
        return attempt, where

    def speculate(self, opts: ProfileOptions, chain: str = "") -> None:
        """On the engine, the attempt started early where a GPU is idle (ProbeEngine.speculate); else nothing."""
        if self.dispatch is not None and not self.cancel.is_set():
            self.dispatch.speculate(opts, Tag(ladder=SWEEP), chain)

    def drop_speculations(self, chain: str = "") -> None:
        if self.engine is not None:
            self.engine.drop_speculations(chain)

    def end_chain(self, chain: str) -> None:
        """On the engine, the chain's claim on a GPU given up (ProbeEngine.chain_done): it asks for no more."""
        if self.engine is not None:
            self.engine.chain_done(chain)

    def stored(self, kernel: str, opts: ProfileOptions) -> Optional[str]:
        """The outcome the store already knows for this kernel with these options here, if any."""
        r = self.session.verdict(kernel, opts)
        if r is None:
            return None
        return HUNG if r.hung else WORKS if r.outcome == OK else None

    def probe(self, kernel: str, sections: frozenset, metrics: tuple[str, ...] = ()) -> Probe:
        """Does `kernel` hang with `sections` (or `metrics`)? From the store, else one launch of it alone."""
        opts = _options(sections, KernelFilter(kernel, False), launch_count=1, metrics=metrics, rank=self.probe_rank)
        known = self.stored(kernel, opts)
        if known is not None:
            p = Probe(kernel, sections, known, 0.0, from_store=True, reason="from the hang store", metrics=metrics)
        else:
            self.context.listener.stage(f"probe {kernel}: {len(sections)} section(s) {'+'.join(sorted(sections))}")
            a, gpu_id = self.watched(opts, kernel)
            outcome = HUNG if a.status == HANG else WORKS if a.status == OK else FAILED
            passes = a.kernels[0].passes if a.kernels else None
            p = Probe(kernel, sections, outcome, a.elapsed_s, passes, reason=a.reason, gpu=gpu_id, metrics=metrics)
        if self.on_probe:
            self.on_probe(p)
        return p

    def least(self, kernel: str) -> Probe:
        """The kernel with one metric alone (see LEAST): does it hang whatever is collected?"""
        return self.probe(kernel, frozenset(), LEAST)


def _gpu_ids(jobs: int) -> list[Optional[str]]:
    """One token per GPU to use; None (no CUDA_VISIBLE_DEVICES) when jobs is 1."""
    if jobs <= 1:
        return [None]
    count = gpu.gpu_count()
    if count is None:
        raise NsightwrapError(f"--jobs {jobs} needs one GPU per probe, but the GPUs cannot be listed here "
                              "(nvidia-smi not found); use --jobs 1")
    if count < jobs:
        raise NsightwrapError(f"--jobs {jobs} needs {jobs} GPUs (one probe per GPU), but {count} found; "
                              f"use --jobs {max(1, count)}")
    return [str(i) for i in range(jobs)]
