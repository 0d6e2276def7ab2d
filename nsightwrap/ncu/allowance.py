"""How long a kernel may stay silent under ncu, from how long it runs without ncu.

A Calibration says how long each kernel of a program runs without ncu
(timed by nsys, bounded by a plain run's wall time, or by profile(fn)'s
timed calls). Under ncu a kernel runs slower (ncu locks the clocks to base)
and once per replay pass, and ncu prints about ten progress marks per
kernel whatever the pass count, so between two marks come
ceil(passes / 10) passes. The allowance is that time with a safety margin,
on top of a floor that covers ncu's own gaps on small kernels.
`kernel_allowance` is the pure rule; KernelAllowances applies it to one
calibration and one set of profiling settings, for the stall rule.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Mapping, Optional

from nsightwrap.ncu.names import core_matches, cut_short, function_core
from nsightwrap.status import EXIT_CODES, OK

__all__ = ["Allowance", "AllowancePolicy", "BASE_CLOCK_FACTOR", "Calibration", "FLOOR_S", "KNOWN_CAUSE_S",
           "KernelAllowances", "MARGIN", "estimate_passes", "kernel_allowance"]

#: ncu locks the SM clock to base by default (--clock-control base), so cycle-bound work runs longer.
#: Measured on an H100 with ncu 2025.3.1 (FACTS.md, "Slow kernels and clocks"): 1.59 GHz under base
#: clocks, 1.98 GHz with --clock-control none; a kernel spinning 4.0 s of cycles measured 4.99 s under
#: base clocks and 4.00 s with none: 4.99 / 4.00 = 1.245.
BASE_CLOCK_FACTOR = 1.245
CLOCK_FACTORS = {"base": BASE_CLOCK_FACTOR, "none": 1.0}
#: ncu prints about ten marks a kernel whatever the pass count: 0%, four dots, 50%, four dots, 100%.
MARKS_PER_KERNEL = 10
#: Pass counts seen on the GPU machine (FACTS.md): basic and SpeedOfLight 10, detailed 20, full 38,
#: LaunchStats and one duration metric 1. Anything else is assumed to need as many as the full set.
SET_PASSES = {"basic": 10, "detailed": 20, "full": 38}
SECTION_PASSES = {"SpeedOfLight": 10, "LaunchStats": 1}
SINGLE_PASS_METRICS = frozenset({"gpu__time_duration.sum"})
UNKNOWN_PASSES = 38
#: On small kernels the longest silence between two marks was about 1.1 s (--set full, 38 passes,
#: FACTS.md). The floor is more than twice that, and under the 3 s within which a real hang should be
#: called once its kernel is calibrated.
FLOOR_S = 2.5
#: One gap may hold more than its share of passes: a 2 s kernel with 10 passes printed its marks every
#: 2-8 s (FACTS.md), up to three passes' time between two marks; 4 covers that.
MARGIN = 4.0
#: Silence after a kernel's last mark before a hang of a known cause (nsightwrap.ncu.known) is called: such
#: a kernel never moves again, so this need only cover the gap between its header and its first burst of
#: marks (0.1 s on the GPU machine) and a busy host.
KNOWN_CAUSE_S = 1.0

CALIBRATED = "from calibration"
NOT_CALIBRATED = "default (not calibrated)"
GIVEN = "given (--stall-timeout / stall_timeout=)"
#: A hang called at once by a cause FACTS.md records (nsightwrap.ncu.known): trusted, never calibrated.
KNOWN_CAUSE = "known cause"


def kernel_allowance(kernel_s: float, *, passes: int, clock_factor: float = BASE_CLOCK_FACTOR,
                     margin: float = MARGIN, floor_s: float = FLOOR_S) -> float:
    """Seconds without a progress mark allowed to a kernel that runs `kernel_s` alone without ncu.

    floor + margin x (clock factor x kernel time) x the passes between two marks.
    """
    per_gap = max(1, math.ceil(passes / MARKS_PER_KERNEL))
    return floor_s + margin * clock_factor * max(0.0, kernel_s) * per_gap


def estimate_passes(options: Any) -> int:
    """Replay passes per kernel for ProfileOptions (duck-typed), from what the GPU machine showed."""
    if options is None:
        return SET_PASSES["basic"]
    counts = []
    if options.set:
        counts.append(SET_PASSES.get(options.set, UNKNOWN_PASSES))
    if options.sections:
        counts.append(min(UNKNOWN_PASSES, sum(SECTION_PASSES.get(s, UNKNOWN_PASSES) for s in options.sections)))
    if options.metrics:
        counts.append(1 if set(options.metrics) <= SINGLE_PASS_METRICS else UNKNOWN_PASSES)
    return max(counts) if counts else SET_PASSES["basic"]  # ncu's default set is basic


def _fmt(seconds: float) -> str:
    if seconds < 0.001:
        return f"{seconds * 1e3:.3f} ms"
    if seconds < 1.0:
        return f"{seconds * 1e3:.{2 if seconds < 0.01 else 0}f} ms"
    return f"{seconds:.2f} s"


@dataclass(frozen=True)
class Calibration:
    """How long a program's kernels run without ncu; what the allowances are based on.

    kernels: (name, longest launch in seconds) as timed (nsys). bound_s bounds
    every kernel not listed (a plain run's wall time, profile(fn)'s calls);
    program_s is the whole program's time (silence in application replay may
    be the program's own work). status is the plain run's own status: a
    program that hangs or fails without ncu is reported as such.
    """

    source: str
    kernels: tuple[tuple[str, float], ...] = ()
    bound_s: Optional[float] = None
    program_s: Optional[float] = None
    bound_label: str = "the program"
    status: str = OK
    reason: str = ""
    measured_at: Optional[str] = None  # when it came from the hang store: when it was measured
    notes: tuple[str, ...] = ()
    #: Whether the program called cu(da)ProfilerStart, which range replay needs (nsys saw its API calls);
    #: None when not known (a plain run, a stored calibration).
    marks_ranges: Optional[bool] = None
    #: (kernel, seconds it had run) in flight without ncu when the run ended
    unfinished: tuple[tuple[str, float], ...] = ()

    @classmethod
    def from_call(cls, seconds: float, source: str = "profile(fn) calibration call") -> "Calibration":
        """profile(fn)'s entry point: fn's calls took `seconds` without ncu, which bounds each of their kernels."""
        return cls(source, bound_s=float(seconds), bound_label="fn's calls")

    @classmethod
    def from_wall(cls, seconds: float, source: str = "plain run") -> "Calibration":
        """A plain run of the program took `seconds`: that bounds every kernel in it."""
        return cls(source, bound_s=float(seconds), program_s=float(seconds))

    @classmethod
    def from_kernels(cls, durations: Mapping[str, float], *, program_s: Optional[float] = None,
                     source: str = "nsys", marks_ranges: Optional[bool] = None) -> "Calibration":
        """Per-kernel times (the longest launch of each name); program_s bounds kernels not listed."""
        kernels = tuple(sorted((str(k), float(v)) for k, v in durations.items()))
        return cls(source, kernels, bound_s=program_s, program_s=program_s, marks_ranges=marks_ranges)

    @classmethod
    def failed(cls, status: str, reason: str, source: str) -> "Calibration":
        """The program itself hung or failed without ncu (status and why)."""
        return cls(source, status=status, reason=reason)

    @property
    def ok(self) -> bool:
        return self.status == OK

    @property
    def exit_code(self) -> int:
        """The CLI's exit code for the plain run's status (nsightwrap.status.EXIT_CODES)."""
        return EXIT_CODES[self.status]

    @cached_property
    def _times(self) -> tuple[dict[str, float], dict[str, float]]:
        """The kernels' times by name, and by function_core (the longest of the names sharing one):
        built once, as the stall rule asks at every turn of the watch loop."""
        by_core: dict[str, float] = {}
        for k, t in self.kernels:
            core = function_core(k)
            if core:
                by_core[core] = max(t, by_core.get(core, t))
        return dict(self.kernels), by_core

    @cached_property
    def _cut_names(self) -> dict[str, Optional[float]]:
        """What kernel_time found for names ncu cut short (a prefix matches several cores): asked once each."""
        return {}

    def kernel_time(self, name: str) -> Optional[tuple[float, str]]:
        """(seconds, what they are) for a kernel as ncu names it; None when nothing bounds it.

        Matched by name, else by function_core (ncu's and nsys's spellings of one function)."""
        times, by_core = self._times
        if name in times:
            return times[name], f"{name} ran {_fmt(times[name])} without ncu"
        key = function_core(name)
        found = by_core.get(key)  # never "": a name with no core matches no other
        # ncu cuts long names with "...": "ncclDevKernel_AllReduce_Sum_f..." (2x H200, 2026-11-26) is
        # nsys's ncclDevKernel_AllReduce_Sum_f32_RING_LL(...).
        if key and cut_short(name):
            cut = self._cut_names
            if name not in cut:
                cut[name] = max((t for k, t in by_core.items() if core_matches(k, name)), default=None)
            found = cut[name]
        if found is not None:
            return found, f"{name} ran {_fmt(found)} without ncu"
        if self.bound_s is not None:
            return self.bound_s, f"{self.bound_label} ran {_fmt(self.bound_s)} without ncu, bounding {name}"
        return None

    def describe(self) -> str:
        if not self.ok:
            return f"calibration ({self.source}) failed: {self.reason}"
        bits = [f"{len(self.kernels)} kernel(s) timed"] if self.kernels else []
        if self.bound_s is not None:
            bits.append(f"{self.bound_label} ran {_fmt(self.bound_s)}")
        stored = f", stored {self.measured_at}" if self.measured_at else ""
        return f"calibration ({self.source}{stored}): " + ", ".join(bits or ["nothing timed"])

    def to_dict(self) -> dict[str, Any]:
        return {"source": self.source, "status": self.status, "exit_code": self.exit_code, "reason": self.reason,
                "kernels": {k: round(v, 6) for k, v in self.kernels},
                "bound_s": self.bound_s, "program_s": self.program_s, "measured_at": self.measured_at,
                "marks_ranges": self.marks_ranges, "notes": list(self.notes),
                "unfinished": [[k, round(v, 3)] for k, v in self.unfinished]}


@dataclass(frozen=True)
class Allowance:
    """Seconds of silence allowed, and what they are based on (for the verdict's evidence)."""

    seconds: float
    basis: str
    calibrated: bool = False


@dataclass(frozen=True)
class AllowancePolicy:
    """The margin and floor of `kernel_allowance`, and the grace of a known cause (tests shrink the floor
    and the grace; the defaults are FACTS-based)."""

    margin: float = MARGIN
    floor_s: float = FLOOR_S
    known_cause_s: float = KNOWN_CAUSE_S

    def __post_init__(self) -> None:
        if not (self.margin > 0 and self.floor_s > 0 and self.known_cause_s > 0):
            raise ValueError("allowance margin, floor and known-cause grace must be > 0")


@dataclass(frozen=True)
class KernelAllowances:
    """Per-kernel allowances from one calibration under one set of profiling settings.

    The stall rule asks `for_stall`: `kernel(name)` (None: not calibrated,
    the rule's default applies) and, in application replay before ncu's
    slow-launch warning, `program()`.
    """

    calibration: Calibration
    passes: int
    clock_factor: float = BASE_CLOCK_FACTOR
    policy: AllowancePolicy = AllowancePolicy()

    @classmethod
    def for_options(cls, calibration: Calibration, options: Any = None,
                    policy: AllowancePolicy = AllowancePolicy()) -> "KernelAllowances":
        clock = getattr(options, "clock_control", None) or "base"
        return cls(calibration, estimate_passes(options), CLOCK_FACTORS.get(clock, BASE_CLOCK_FACTOR), policy)

    def _basis(self, evidence: str) -> str:
        return f"{CALIBRATED} ({evidence}, {self.calibration.source})"

    def kernel(self, name: str, passes_seen: Optional[int] = None) -> Optional[Allowance]:
        timed = self.calibration.kernel_time(name) if self.calibration.ok else None
        if timed is None:
            return None
        seconds = kernel_allowance(timed[0], passes=passes_seen or self.passes, clock_factor=self.clock_factor,
                                   margin=self.policy.margin, floor_s=self.policy.floor_s)
        return Allowance(seconds, self._basis(timed[1]), True)

    def for_stall(self, name: str, passes_seen: Optional[int] = None,
                  quiet_replay: bool = False) -> Optional[Allowance]:
        """The allowance of a silence in kernel `name`: in quiet application replay (a pass line and no
        slow-launch warning since), the program's own time (`program`), else the kernel's (`kernel`).
        The one choice of the stall rule, and of the confirmation that re-judges its stall."""
        return self.program() if quiet_replay else self.kernel(name, passes_seen)

    def program(self) -> Optional[Allowance]:
        """For silence that may be the program's own work: its whole time, scaled."""
        w = self.calibration.program_s if self.calibration.ok else None
        if w is None:
            return None
        seconds = kernel_allowance(w, passes=1, clock_factor=self.clock_factor, margin=self.policy.margin,
                                   floor_s=self.policy.floor_s)
        return Allowance(seconds, self._basis(f"{self.calibration.bound_label} ran {_fmt(w)} without ncu"), True)
