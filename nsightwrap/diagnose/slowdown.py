"""How long compute-sanitizer may stay silent: the kernel's calibrated time, scaled by the tool's slowdown.

compute-sanitizer slows kernels by a large factor that depends on the tool (FACTS.md: initcheck took 10.2 s
for one kernel that runs well under 1 s alone; racecheck's hazard report 7.1 s against 1.2 s for its
default report), and it prints nothing while a kernel runs. So the allowance of a silence is

    floor (the tool's fixed cost: its start, instrumenting a module)
      + host time + margin x slowdown x kernel time

where the kernel time comes from the calibration (the longest kernel the filter selects, else what bounds
every kernel), and the slowdown starts at a conservative prior per tool and grows with what the run shows:
each silence that ended in output (a finding, a progress line of the program, the summary) proves the tool
can take that long for the work in it, so the measured slowdown is the longest such silence over the kernel
time. The host time is the whole plain run's (the calibration's program_s, when it has one): a silence may be
the program's own host work (an import, a data load), which the tool barely slows. The rule
(SanitizerStall) is a WatchRule like watch/rules.py's: time is given to it, `|` combines it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional

from nsightwrap.ncu.names import function_core
from nsightwrap.status import HANG
from nsightwrap.watch.rules import RunState, Verdict, WatchRule

__all__ = ["DEFAULT_PRIORS", "DEFAULT_SLOWDOWN_POLICY", "SanitizerStall", "SlowdownMeter", "SlowdownPolicy",
           "ToolPrior", "host_seconds", "kernel_seconds"]


@dataclass(frozen=True)
class ToolPrior:
    """What a tool costs before the run shows otherwise: `floor_s` once per silence, `factor` x kernel time."""

    factor: float
    floor_s: float

    def __post_init__(self) -> None:
        if not (self.factor >= 1 and self.floor_s > 0):
            raise ValueError(f"a tool's slowdown factor must be >= 1 and its floor > 0 s (got {self})")


#: Conservative priors (FACTS.md, compute-sanitizer 2025.3.1 on an H200): initcheck took 10.2 s for one
#: kernel reading 65,536 floats once (well under 1 s alone) and racecheck 1.2 s for one 64-block kernel
#: (7.1 s with --racecheck-report hazard, RACECHECK_HAZARD_FACTOR times more). The floors cover such fixed
#: costs with room; the factors are the tools' documented order of slowdown (10-100x) at its top. On the
#: planted-bug kernels (H200, FACTS.md) each whole tool run of those sub-second programs took 0.8-1.4 s (the
#: hazard report 4.2 s): the floors are kept well above that for programs that load many kernels, each
#: instrumented at its first launch while nothing is printed.
DEFAULT_PRIORS: Mapping[str, ToolPrior] = {
    "memcheck": ToolPrior(factor=100.0, floor_s=10.0),
    "racecheck": ToolPrior(factor=200.0, floor_s=10.0),
    "initcheck": ToolPrior(factor=200.0, floor_s=20.0),
    "synccheck": ToolPrior(factor=100.0, floor_s=10.0),
}
#: --racecheck-report hazard (or all) lists each hazard: 7.1 s against 1.2 s (FACTS.md), about 6x.
RACECHECK_HAZARD_FACTOR = 6.0
#: One silence may hold more than the work of the longest silence seen (ncu's allowance uses the same 4).
MARGIN = 4.0
#: Kernel time assumed when the calibration bounds nothing (seconds): the allowance is then the tool's
#: floor plus a few seconds of slowed work, and grows only with what the run shows.
UNCALIBRATED_KERNEL_S = 0.01


@dataclass(frozen=True)
class SlowdownPolicy:
    """The priors and margin (tests shrink them; the defaults are FACTS-based)."""

    priors: Mapping[str, ToolPrior] = field(default_factory=lambda: dict(DEFAULT_PRIORS))
    margin: float = MARGIN
    uncalibrated_kernel_s: float = UNCALIBRATED_KERNEL_S

    def prior(self, tool: str, hazard_report: bool = False) -> ToolPrior:
        p = self.priors[tool]
        return ToolPrior(p.factor * RACECHECK_HAZARD_FACTOR, p.floor_s) if hazard_report else p


DEFAULT_SLOWDOWN_POLICY = SlowdownPolicy()


def kernel_seconds(calibration: Any, pattern: Optional[str] = None) -> tuple[Optional[float], str]:
    """(seconds, what they are) of the longest kernel the filter selects, from a Calibration (duck-typed).

    pattern: a function name the filter selects (a substring of the kernel's name), or None for every
    kernel. Kernels the filter leaves out run uninstrumented, at about their own speed. (None, why) when
    the calibration times nothing.
    """
    if calibration is None or not getattr(calibration, "ok", False):
        return None, "not calibrated"
    kernels = list(calibration.kernels)
    if pattern:
        kernels = [(k, t) for k, t in kernels if pattern in k or pattern in (function_core(k) or "")]
    if kernels:
        name, seconds = max(kernels, key=lambda kt: kt[1])
        return seconds, f"{name} ran {seconds:.3g} s without a tool ({calibration.source})"
    if calibration.bound_s is not None:
        return calibration.bound_s, f"{calibration.bound_label} ran {calibration.bound_s:.3g} s ({calibration.source})"
    return None, "the calibration timed no kernel"


def host_seconds(calibration: Any) -> float:
    """The whole plain run's time (Calibration.program_s), 0 when the calibration has none."""
    if calibration is None or not getattr(calibration, "ok", False):
        return 0.0
    return float(getattr(calibration, "program_s", None) or 0.0)


class SlowdownMeter:
    """The slowdown the run has shown: the longest silence that ended in output, over the kernel time.

    `observe(state)` is called with the run's state at every turn (the rule does it); a change of
    `last_output_at` ends a silence. Only grows: a run that was once slow may be slow again.
    """

    def __init__(self, started_at: float):
        self.last_seen = started_at
        self.longest_gap_s = 0.0
        self.outputs = 0

    def observe(self, state: RunState) -> None:
        if state.last_output_at > self.last_seen:
            self.longest_gap_s = max(self.longest_gap_s, state.last_output_at - self.last_seen)
            self.last_seen = state.last_output_at
            self.outputs += 1

    def factor(self, kernel_s: float) -> float:
        return self.longest_gap_s / kernel_s if kernel_s > 0 else math.inf


class SanitizerStall(WatchRule):
    """compute-sanitizer (`tool`) silent for longer than floor + margin x slowdown x kernel time: a HANG.

    kernel_s: the calibrated kernel time (kernel_seconds), None when not calibrated. The slowdown is the
    larger of the tool's prior and the meter's measurement. Its state (the meter) is what the run showed;
    the verdict says the allowance and what it was built from.
    """

    def __init__(self, tool: str, kernel_s: Optional[float], basis: str, *, hazard_report: bool = False,
                 policy: SlowdownPolicy = DEFAULT_SLOWDOWN_POLICY, started_at: float = 0.0, host_s: float = 0.0):
        self.tool, self.basis, self.policy, self.host_s = tool, basis, policy, max(0.0, host_s or 0.0)
        self.calibrated = kernel_s is not None
        self.kernel_s = kernel_s if kernel_s is not None else policy.uncalibrated_kernel_s
        self.prior = policy.prior(tool, hazard_report)
        self.meter = SlowdownMeter(started_at)

    def slowdown(self) -> float:
        return max(self.prior.factor, self.meter.factor(self.kernel_s))

    def allowance(self) -> float:
        return self.prior.floor_s + self.host_s + self.policy.margin * self.slowdown() * self.kernel_s

    def deadline(self, state: RunState) -> float:
        self.meter.observe(state)
        return state.last_output_at + self.allowance()

    def __call__(self, state: RunState, now: float) -> Optional[Verdict]:
        if now < self.deadline(state):
            return None
        return Verdict(HANG, self.describe(now - state.last_output_at), stall=self.to_dict())

    def describe(self, silent_s: float) -> str:
        measured = self.meter.factor(self.kernel_s) if self.meter.outputs else 0.0
        how = (f"slowdown {self.slowdown():.0f}x ({'measured' if measured > self.prior.factor else 'prior'}; "
               f"prior {self.prior.factor:.0f}x, measured {measured:.0f}x)")
        kernel = self.basis if self.calibrated else f"not calibrated, {self.kernel_s:g} s assumed"
        return (f"compute-sanitizer ({self.tool}) printed nothing for {silent_s:.1f} s, beyond its allowance of "
                f"{self.allowance():.1f} s = {self.prior.floor_s:g} s + host {self.host_s:.3g} s + "
                f"{self.policy.margin:g} x {how} x kernel "
                f"time {self.kernel_s:.3g} s ({kernel}); it was stopped and the findings printed so far are kept. "
                "If the program only runs this slowly under the tool, narrow it with a kernel filter (--kernel); "
                "if it also hangs without the tool, the kernel hangs by itself")

    def to_dict(self) -> dict[str, Any]:
        return {"tool": self.tool, "allowance_s": round(self.allowance(), 3), "floor_s": self.prior.floor_s,
                "margin": self.policy.margin, "prior_factor": self.prior.factor,
                "measured_factor": round(self.meter.factor(self.kernel_s), 3) if self.meter.outputs else None,
                "kernel_s": self.kernel_s, "host_s": self.host_s, "calibrated": self.calibrated, "basis": self.basis,
                "longest_gap_s": round(self.meter.longest_gap_s, 3)}

    def __repr__(self) -> str:
        return f"SanitizerStall({self.tool}, allowance {self.allowance():.1f} s)"
