"""Multi-process jobs in walks and sweeps: how big the job is, which kernels are collectives,
and, when no rung profiles a kernel, why.

Measured on 2x H100 with ncu 2025.3.1 and a 2-rank torchrun program (FACTS,
"Multi-process programs"): ncu serialises kernel launches across the
processes it profiles, so an all-reduce whose other half runs in another
profiled rank never starts, in every mode; leaving the collectives out
profiles everything else of every rank; and ncu on one rank alone profiles
the collective with a single-pass collection (`--metrics
gpu__time_duration.sum`, `--section LaunchStats`), not with a multi-pass one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Any, Optional, Sequence, Union

from nsightwrap.fallback.ladder import Ladder, exclude_kernels
from nsightwrap.ncu.attempt import SERIALISED
from nsightwrap.ncu.context import RunContext
from nsightwrap.ncu.known import COLLECTIVE_PREFIXES, collective_family  # the families; defined with the rule
from nsightwrap.ncu.options import KernelFilter
from nsightwrap.store.keys import Environment
from nsightwrap.watch.launchers import Launch, parse_launch

__all__ = ["COLLECTIVES_JOB", "JobShape", "UpFront", "family_filter", "unprofiled_reason", "up_front",
           "without_collectives"]

#: Why a kernel of a collective family was not tried with every rank profiled.
COLLECTIVE_ALL_RANKS = f"a collective with every rank profiled: {SERIALISED}"


#: The walk's job that profiles every collective family on one rank, made up front when a launcher is
#: recognised (its name in steps, the store and `unprofiled`).
COLLECTIVES_JOB = "|".join(f"{p}*" for p in COLLECTIVE_PREFIXES)


def family_filter(prefix: Union[str, Sequence[str]], user: Optional[KernelFilter]) -> KernelFilter:
    """Every kernel of a collective family (or of several) that the user's filter (if any) also selects."""
    prefixes = [prefix] if isinstance(prefix, str) else list(prefix)
    start = "|".join(re.escape(p) for p in prefixes)
    start = start if len(prefixes) == 1 else f"(?:{start})"
    base = user.base if user else "function"
    if user is None:
        return KernelFilter(f"^{start}", True, base)
    wanted = user.pattern if user.regex else f"^{re.escape(user.pattern)}$"
    return KernelFilter(f"^(?=.*?(?:{wanted})){start}", True, base)


@dataclass(frozen=True)
class UpFront:
    """What a walk of a recognised multi-process launch does before any collective can hang: leave the
    collective families out of the runs that profile every rank (`main`), and profile them on one rank
    (`collectives`)."""

    main: bool = True
    collectives: bool = True


def up_front(shape: "JobShape", options: Any) -> Optional[UpFront]:
    """The plan for a job of this shape under ProfileOptions `options`; None where nothing is left out: no
    launcher recognised (or it runs one process), one rank chosen for every run (options.rank), or a filter
    naming one kernel exactly that is no collective. A filter naming one collective exactly needs no run of
    every rank."""
    if not shape.launched or options.rank is not None:
        return None
    user = options.kernel
    if user is not None and not user.regex and user.base == "function":
        return UpFront(main=False) if collective_family(user.pattern) else None
    return UpFront()


@dataclass(frozen=True)
class JobShape:
    """How many processes a command runs, and whether ncu can wrap one of its ranks alone.

    From the launcher's command line when it says (torchrun --nproc-per-node,
    mpirun -np, srun -n), else from the most processes ncu was connected to at
    once in a run of it.
    """

    processes: int = 1
    local_processes: Optional[int] = None
    launch: Optional[Launch] = None
    counted: bool = False  # processes came from the command line

    @classmethod
    def of(cls, command: Sequence[str]) -> "JobShape":
        launch = parse_launch(command)
        if launch is not None and launch.processes is not None:
            return cls(launch.processes, launch.local_processes, launch, True)
        return cls(1, None, launch, False)

    def seen(self, connected: int) -> "JobShape":
        """This shape after a run that connected to `connected` processes at once."""
        if self.counted or connected <= self.processes:
            return self
        return replace(self, processes=connected, local_processes=connected)

    @property
    def multi(self) -> bool:
        return self.processes > 1

    @property
    def launched(self) -> bool:
        """A launcher nsightwrap recognises starts this command, not known to run one process: with every
        rank profiled, its collectives would hang (FACTS.md), so walks leave them out up front."""
        return self.launch is not None and not (self.counted and self.processes == 1)

    @property
    def one_rank_possible(self) -> bool:
        """Can ncu wrap one rank alone? A launch nsightwrap can rewrite, not known to be of one process."""
        return (self.launch is not None and self.launch.problem is None
                and not (self.counted and self.processes == 1))

    def why_not_one_rank(self) -> str:
        if self.launch is None:
            return ("nsightwrap cannot start one rank of this command alone under ncu (it starts no launcher "
                    "nsightwrap knows: torchrun, python -m torch.distributed.run, mpirun/mpiexec, srun)")
        return self.launch.problem or "the job has one process"

    def environment(self, context: RunContext, caller: Optional[Environment] = None) -> Environment:
        """This machine and the job's size, as the store records them: the caller's environment when it has
        as many processes, else detected (nvidia-smi) with the ncu of `context`."""
        if caller is not None and caller.processes == self.processes:
            return caller
        return Environment.detect(ncu_version=context.info.version, processes=self.processes,
                                  local_processes=self.local_processes,
                                  cuda_visible=context.env.get("CUDA_VISIBLE_DEVICES"), gpus=lambda: context.gpus)

    def describe(self) -> str:
        what = self.launch.kind + " job" if self.launch else "program"
        return f"{what} of {self.processes} process{'es' if self.processes != 1 else ''}"


def unprofiled_reason(kernel: str, shape: JobShape, ladder: Ladder, tried_one_rank: bool) -> str:
    """Plain words on why no rung of `ladder` profiled `kernel` in a job of this shape."""
    if not shape.multi:
        return (f"every rung of ladder {ladder.name!r} hung, profiled nothing, or was skipped as sure to: the kernel "
                "probably waits for the host or for another kernel, which kernel replay never lets happen; profile "
                "a range that holds it (range replay, the program marking it), or leave it out")
    head = f"in this {shape.describe()}, {SERIALISED}"
    if not shape.one_rank_possible:
        return f"{head}; and {shape.why_not_one_rank()}; leave it out, or time it with nsys"
    if not ladder.has_one_rank_rung:
        return (f"{head}; ladder {ladder.name!r} has no one-rank rung (`ranks: one`) to profile it on one rank "
                "alone with a single-pass collection (the default ladder has two)")
    if tried_one_rank:
        return (f"{head}; on one rank alone, multi-pass collections hang too (the other ranks do not replay the "
                "kernel), and here the single-pass ones hung as well: ncu cannot profile this kernel in this "
                "job; time it with nsys (`python -m nsightwrap nsys profile`)")
    return f"{head}; the one-rank rungs were not reached"


def without_collectives(command: Sequence[str], options: Any) -> tuple[Any, Optional[str]]:
    """A single `run` of a recognised launcher (no ladder): ProfileOptions that leave its collectives out,
    which would hang with every rank profiled, and the note that says so and what to run for them; the
    options as given, and None, where up_front leaves nothing out."""
    shape = JobShape.of(command)
    plan = up_front(shape, options)
    if plan is None or not plan.main:
        return options, None
    kept = exclude_kernels(options.kernel, (), COLLECTIVE_PREFIXES)
    note = (f"in this {shape.describe()} the collectives ({COLLECTIVES_JOB}) are left out of the run "
            f"(--kernel-name {kept.value}): with every rank profiled they would hang, as {SERIALISED}. Profile "
            "them on one rank with a single-pass collection (--rank 0 --metrics gpu__time_duration.sum), or let "
            "a ladder do both (--profile default)")
    return options.replace(kernel=kept), note


def one_rank_hint(command: Sequence[str], connected: int, kernel: Optional[str]) -> Optional[str]:
    """What to run instead after `kernel` hung in a multi-process job with every rank profiled (else None)."""
    shape = JobShape.of(command).seen(connected)
    if not shape.multi:
        return None
    what = f"{kernel} hung in a {shape.describe()} with every rank profiled: {SERIALISED}. "
    if not shape.one_rank_possible:
        return what + f"Leave it out (--kernel 'regex:^(?!{collective_family(kernel) or re.escape(kernel or '')})')."
    return (what + "Profile it on one rank with a single-pass collection (--rank 0 --metrics gpu__time_duration.sum), "
            "or let a ladder do both (--profile default)")
