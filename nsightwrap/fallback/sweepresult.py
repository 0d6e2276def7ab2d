"""What a section sweep found (nsightwrap.fallback.sweep): each probe, each kernel's culprits, and the sweep's
result with one shape (status, exit_code, to_dict) and its table."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Optional

from nsightwrap.fallback.executor import JobTimes
from nsightwrap.ncu.attempt import Attempt
from nsightwrap.secrets import mask_doc, mask_text
from nsightwrap.status import ERROR, EXIT_CODES, HANG, NO_KERNELS, OK

__all__ = ["FAILED", "HUNG", "KernelSweep", "Probe", "SweepResult", "WORKS", "wrap_sections"]

#: A probe's outcomes, in the one vocabulary of statuses.
HUNG, WORKS, FAILED = HANG, OK, ERROR


@dataclass(frozen=True)
class Probe:
    """One answer: does this kernel hang when these sections are collected?"""

    kernel: str
    sections: frozenset
    outcome: str  # hang | ok | error
    seconds: float
    passes: Optional[int] = None
    from_store: bool = False
    reason: str = ""
    gpu: Optional[str] = None  # CUDA_VISIBLE_DEVICES of the probe, with --jobs > 1 or --executor (slurm: host:GPU)
    metrics: tuple[str, ...] = ()  # the one-metric probe (no section): does the kernel hang at all?

    def label(self) -> str:
        return "+".join(sorted(self.sections)) or "+".join(self.metrics) or "(nothing)"


@dataclass
class KernelSweep:
    """What the sweep found for one kernel."""

    kernel: str
    universe: tuple[str, ...]
    singles: list[str] = field(default_factory=list)  # sections that hang alone
    combinations: list[tuple[str, ...]] = field(default_factory=list)  # hang only together
    largest_working: tuple[str, ...] = ()
    probes: list[Probe] = field(default_factory=list)
    unresolved: list[str] = field(default_factory=list)
    hangs_whatever: bool = False  # hung with one metric alone: every section hangs, none needs its own probe

    @property
    def probes_run(self) -> int:
        return sum(not p.from_store for p in self.probes)

    @property
    def naive_probes(self) -> int:
        return len(self.universe)

    def budget(self) -> int:
        """The issue's goal: k * ceil(log2 S) + 2 probes for k culprit sections among S."""
        k = len(self.singles) + sum(len(c) for c in self.combinations)
        return k * math.ceil(math.log2(max(2, len(self.universe)))) + 2


@dataclass
class SweepResult:
    sets: tuple[str, ...]
    kernels: list[KernelSweep] = field(default_factory=list)
    clean: bool = False  # the whole set worked on every kernel
    whole_runs: list[Attempt] = field(default_factory=list)  # step 1: the whole set on the whole program
    whole_gpus: list[Optional[str]] = field(default_factory=list)  # where each whole run ran (as Probe.gpu)
    #: The probe that found the program hanging or failing by itself, without ncu: the sweep stopped there.
    program_fault: Optional[Attempt] = None
    notes: list[str] = field(default_factory=list)  # the store's, e.g. the team's database was down
    #: On a cluster engine: each job's timeline (executor.JobTimes: where, submitted, node times, seen).
    jobs: list[JobTimes] = field(default_factory=list)

    @property
    def first(self) -> Optional[Attempt]:
        """The first run of the whole set on the whole program."""
        return self.whole_runs[0] if self.whole_runs else None

    @property
    def status(self) -> str:
        """A program fault's own status (timeout, crashed); no-kernels when the whole set profiled nothing
        (a mistyped --kernel?), hang when kernels hung (see .kernels), else ok."""
        if self.program_fault is not None:
            return self.program_fault.status
        if self.first is not None and self.first.status == NO_KERNELS:
            return NO_KERNELS
        return HANG if self.kernels else OK

    @property
    def exit_code(self) -> int:
        """The exit code of sweep-sections: 0 when it did its job (hangs found or none), else the status's
        own (a program fault, nothing profiled)."""
        return EXIT_CODES[self.status] if self.status not in (OK, HANG) else 0

    def _whole_gpus(self) -> list[Optional[str]]:
        return self.whole_gpus + [None] * (len(self.whole_runs) - len(self.whole_gpus))

    def table(self) -> str:
        lines = [f"{'kernel':<32} {'sections':<60} {'outcome':<7} {'passes':>6} {'s':>6}"]
        for a, where in zip(self.whole_runs, self._whole_gpus()):
            lines.append(f"{'(whole program)':<32} {'all ' + str(len(self.sets)) + ' sections':<60} "
                         f"{a.status[:7]:<7} {'':>6} {a.elapsed_s:>6.1f}"
                         + (f"  on {a.stalled_kernel}" if a.status == HANG and a.stalled_kernel else "")
                         + (f"  GPU {where}" if where else ""))
        for k in self.kernels:
            for p in k.probes:
                first, *rest = wrap_sections(p.label())
                lines.append(f"{k.kernel[:32]:<32} {first:<60} {p.outcome:<7} "
                             f"{'' if p.passes is None else p.passes:>6} {p.seconds:>6.1f}"
                             + ("  (stored)" if p.from_store else "") + (f"  GPU {p.gpu}" if p.gpu else ""))
                lines.extend(f"{'':<32} {more}" for more in rest)
        lines.append("")
        for k in self.kernels:
            lines.append(f"{k.kernel}: hang alone: {', '.join(k.singles) or 'none'}; "
                         f"hang together: {', '.join('+'.join(c) for c in k.combinations) or 'none'}; "
                         f"largest working set: {len(k.largest_working)} of {len(k.universe)} sections; "
                         f"probes {k.probes_run} (naive {k.naive_probes}, goal <= {k.budget()})"
                         + ("; it hangs even with one metric alone, whatever is collected" if k.hangs_whatever
                            else ""))
            if k.unresolved:
                lines.append(f"  unresolved: {'; '.join(k.unresolved)}")
        if self.kernels:
            lines.append(f"before them: {len(self.whole_runs)} run(s) of the whole set on the whole program")
        if self.clean:
            lines.append("the requested sections worked on every kernel: nothing to find")
        if self.status == NO_KERNELS:
            lines.append(f"nothing was profiled, so nothing was found: {self.first.reason}")
        if self.program_fault is not None:
            lines.append(f"stopped: {self.program_fault.reason}")
        return mask_text("\n".join(lines))

    def to_dict(self) -> dict:
        """Plain types for JSON, secret values masked."""
        fault = self.program_fault
        return mask_doc({
            "exit_code": self.exit_code, "status": self.status, "clean": self.clean,
            "program_fault": fault.program_fault if fault else None, "reason": fault.reason if fault else None,
            "kernels": [{
            "kernel": k.kernel, "sections": list(k.universe), "hang_alone": k.singles,
            "hang_together": [list(c) for c in k.combinations], "largest_working_set": list(k.largest_working),
            "probes_run": k.probes_run, "naive_probes": k.naive_probes, "probe_goal": k.budget(),
            "unresolved": k.unresolved, "hangs_whatever_is_collected": k.hangs_whatever,
            "probes": [{"sections": sorted(p.sections), "metrics": list(p.metrics), "outcome": p.outcome,
                        "passes": p.passes,
                        "seconds": round(p.seconds, 2), "from_store": p.from_store, "reason": p.reason,
                        "gpu": p.gpu}
                       for p in k.probes]} for k in self.kernels],
            "whole_program_runs": [{"status": a.status, "stalled_kernel": a.stalled_kernel,
                                    "seconds": round(a.elapsed_s, 2), "gpu": where}
                                   for a, where in zip(self.whole_runs, self._whole_gpus())],
            "engine_jobs": self._jobs(),
            "notes": list(self.notes)})

    def _jobs(self) -> list[dict]:
        """The engine's jobs (with --executor), times in seconds since the first was submitted."""
        t0 = min((j.submitted for j in self.jobs), default=0.0)

        def since(t: Optional[float]) -> Optional[float]:
            return None if t is None else round(t - t0, 3)

        return [{"chain": j.chain, "where": j.where, "submitted_s": since(j.submitted), "seen_s": since(j.seen),
                 "speculative": j.speculative, "dropped": j.dropped} for j in self.jobs]


def wrap_sections(label: str, width: int = 60) -> list[str]:
    """A probe's `A+B+C` label on lines of at most `width` characters, cut only after a `+`
    (never cut short: the sections of a probe are what the table is read for)."""
    lines = [""]
    for i, name in enumerate(label.split("+")):
        piece = name + ("+" if i < label.count("+") else "")
        if lines[-1] and len(lines[-1]) + len(piece) > width:
            lines.append("")
        lines[-1] += piece
    return lines
