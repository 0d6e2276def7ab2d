"""A program's own word on how long one call of its work takes, for the stall rule.

profile(fn)'s child times its warm-up calls (device synchronised, outside
the profiled range) and writes the times to a small JSON file in the call's
private folder *before* it opens the profiled range. The stall rule below
reads that file when it judges a silence, so the allowance of the profiled
calls comes from the program's own measurement: no separate plain run of
the program, and nothing parsed out of its output (which interleaves with
ncu's, FACTS.md). The file is the only channel: it needs no pipe, no
protocol in the output, and works the same under every replay mode.

The call time is a calibration like any other (`Calibration.from_call`: one
call bounds each of its kernels), and each kernel's allowance follows the
one rule of nsightwrap.ncu.allowance, scaled for the passes of the collection.

Formats are versioned; an unreadable or half-written file counts as absent
(the writer replaces the file atomically, so a reader never sees half of one).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional, Sequence, Union

from nsightwrap.ncu.allowance import AllowancePolicy, Calibration, KernelAllowances
from nsightwrap.watch.files import write_atomic
from nsightwrap.watch.rules import WatchRule

if TYPE_CHECKING:  # annotations only: profile(fn)'s child writes the file without the stall rule's modules
    from nsightwrap.ncu.progress import StallRule, WatchState

__all__ = ["CALL_TIME_FORMAT", "REPORTED", "ReportedCallTime", "read_call_time",
           "reported_calibration", "typical_call", "write_call_time"]

CALL_TIME_FORMAT = 1
#: The source of the calibration that a reported call time makes (in each verdict's basis).
REPORTED = "profile(fn) warm-up calls"

PathLike = Union[str, "os.PathLike[str]"]


def typical_call(call_s: Sequence[float]) -> float:
    """One number for several timed calls: the slowest after the first, which alone pays one-time
    set-up (CUDA context, library handles, lazy module loading); the first when it is the only one."""
    if not call_s:
        raise ValueError("no call was timed")
    return max(call_s[1:] or call_s)


def write_call_time(path: PathLike, call_s: Sequence[float]) -> None:
    """Write the timed calls to `path`, replacing it atomically (no temporary file is left on failure)."""
    write_atomic(path, json.dumps({"format": CALL_TIME_FORMAT, "call_s": [float(s) for s in call_s],
                                   "pid": os.getpid()}))


def read_call_time(path: PathLike) -> Optional[float]:
    """The typical call time (s) that `path` reports, or None when it reports none (yet)."""
    try:
        data = json.loads(Path(path).read_text())
        calls = [float(s) for s in data["call_s"]]
        if data.get("format") != CALL_TIME_FORMAT or not calls or min(calls) < 0:
            return None
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return typical_call(calls)


@dataclass
class ReportedCallTime(WatchRule):
    """`rule`, calibrated once the program reports its call time.

    The program writes the file before its profiled range opens, and this
    rule looks for it every time it judges (before any verdict), so no
    kernel of the range is judged without it. Once reported, the call time
    is a calibration like any other (`Calibration.from_call`: one call
    bounds each of its kernels) and each kernel gets its allowance under
    `options` (their passes, the clock control) and `policy`, in place of
    the uncalibrated default, as a calibration measured beforehand would;
    until the file appears, `rule` applies unchanged.
    """

    rule: StallRule
    path: str
    options: Any = None  # ProfileOptions: the passes a kernel needs and the clock control
    policy: AllowancePolicy = field(default_factory=AllowancePolicy)
    calibration: Optional[Calibration] = field(default=None, init=False, compare=False)  # once reported
    _reported: Optional[StallRule] = field(default=None, init=False, repr=False, compare=False)

    @property
    def call_s(self) -> Optional[float]:
        """The call time the program reported (s); None before."""
        return None if self.calibration is None else self.calibration.bound_s

    def current(self) -> StallRule:
        """The stall rule in force now (the file is read until it reports)."""
        if self._reported is None:
            call_s = read_call_time(self.path)
            if call_s is not None:
                self.calibration = Calibration.from_call(call_s, REPORTED)
                allowances = KernelAllowances.for_options(self.calibration, self.options, self.policy)
                self._reported = replace(self.rule, allowances=allowances)
        return self._reported or self.rule

    def allowance(self, state: WatchState) -> float:
        """The current kernel's allowance now (the live status line shows it)."""
        return self.current().allowance(state)

    def deadline(self, state):
        # The watch loop asks just after __call__, which has read the file: the rule in force stands.
        return (self._reported or self.rule).deadline(state)

    def __call__(self, state, now):
        return self.current()(state, now)


def reported_calibration(rule: WatchRule) -> Optional[Calibration]:
    """The calibration that a reported call time made, in `rule` or the rules combined in it; None before."""
    for r in getattr(rule, "rules", (rule,)):
        if isinstance(r, ReportedCallTime) and r.calibration is not None:
            return r.calibration
    return None
