"""When to stop a watched run: small rules combined with `|`.

A rule looks at the run's state and answers None (keep going) or a
Verdict. Rules are pure functions of the state and the time they are
given, so they are tested without waiting (time is injected). This layer
knows no profiler: the state here is what any watched program has (when it
started, when it last printed); ncu's progress rules build on it
(nsightwrap.ncu.progress).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Optional

from nsightwrap.status import ERROR, INTERRUPTED, TIMEOUT

#: How long the tool may stay silent after the program it runs has ended before it
#: is called stuck (ToolStuck; seconds). ncu writes its report and exits well within
#: a second of its last `Disconnected` on the GPU machine; its results page and
#: application replay's report creation print as they go, and reset this clock.
DEFAULT_STUCK_TIMEOUT = 60.0


@dataclass
class RunState:
    """What every watched run knows: when it started and last printed, and when its program ended.

    `program_ended_at` is set by the observer when the tool says the last
    process it runs has left (ncu: `Disconnected` from the last connected
    process) and cleared when one starts again; None while the program runs.
    """

    started_at: float
    last_output_at: float
    program_ended_at: Optional[float] = None


@dataclass(frozen=True)
class Verdict:
    """Why the run must stop: status is HANG, TIMEOUT, ERROR (ToolStuck) or INTERRUPTED (nsightwrap.status)."""

    status: str
    reason: str
    stall: Optional[Any] = None  # the profiler's detail (nsightwrap.ncu.progress.Stall for ncu)


class WatchRule:
    """Base of the rules; `a | b` stops when either says so."""

    def __call__(self, state: RunState, now: float) -> Optional[Verdict]:  # pragma: no cover
        raise NotImplementedError

    def deadline(self, state: RunState) -> float:
        """The earliest time at which this rule could fire (for the poll timeout)."""
        return math.inf

    def __or__(self, other: "WatchRule") -> "AnyRule":
        return AnyRule(self, other)


class AnyRule(WatchRule):
    def __init__(self, *rules: WatchRule):
        flat: list[WatchRule] = []
        for r in rules:
            flat.extend(r.rules if isinstance(r, AnyRule) else [r])
        self.rules = tuple(flat)

    def __call__(self, state: RunState, now: float) -> Optional[Verdict]:
        for r in self.rules:
            verdict = r(state, now)
            if verdict is not None:
                return verdict
        return None

    def deadline(self, state: RunState) -> float:
        return min((r.deadline(state) for r in self.rules), default=math.inf)

    def __repr__(self):
        return " | ".join(map(repr, self.rules))


@dataclass(frozen=True)
class TotalTimeout(WatchRule):
    """The whole run may take at most `seconds`."""

    seconds: float

    def __post_init__(self):
        if not self.seconds > 0:
            raise ValueError("total timeout must be > 0 seconds")

    def deadline(self, state: RunState) -> float:
        return state.started_at + self.seconds

    def __call__(self, state: RunState, now: float) -> Optional[Verdict]:
        if now - state.started_at >= self.seconds:
            return Verdict(TIMEOUT, f"the run exceeded its total timeout of {self.seconds:g} s "
                                    "(raise it with --timeout SEC, or timeout=SEC in Python)")
        return None


@dataclass(frozen=True)
class ToolStuck(WatchRule):
    """The program has ended, but the tool running it neither exits nor prints for `seconds`.

    Then the tool itself is stuck (a wedged or stopped front end), not a
    kernel: the verdict is an error that says so, and the stop (SIGINT and
    SIGCONT to the front end) lets it finish the report where it still can.
    """

    seconds: float = DEFAULT_STUCK_TIMEOUT
    tool: str = "the profiler"

    def __post_init__(self):
        if not self.seconds > 0:
            raise ValueError("stuck timeout must be > 0 seconds")

    def deadline(self, state: RunState) -> float:
        if state.program_ended_at is None:
            return math.inf
        return max(state.program_ended_at, state.last_output_at) + self.seconds

    def __call__(self, state: RunState, now: float) -> Optional[Verdict]:
        if now < self.deadline(state):
            return None
        return Verdict(ERROR, f"{self.tool} itself is stuck, not a kernel: the program ended "
                              f"{now - state.program_ended_at:.1f} s ago and {self.tool} neither exited nor "
                              f"printed for {self.seconds:g} s; it was stopped (its report, if any, is kept). "
                              "Look for a stopped or wedged profiler process, or raise the limit with "
                              "--stuck-timeout SEC (stuck_timeout=SEC in Python)")


@dataclass(frozen=True)
class Cancelled(WatchRule):
    """Stop when `event` is set: how another thread (the one Ctrl-C reached) stops a run in a worker thread."""

    event: Any  # threading.Event

    def __call__(self, state, now):
        if self.event.is_set():
            return Verdict(INTERRUPTED, "interrupted (Ctrl-C or a termination signal); the tree was stopped")
        return None
