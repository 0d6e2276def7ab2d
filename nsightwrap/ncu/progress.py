"""ncu's progress as watch state, and the stall rule that reads it.

The state folds the parser's events (a kernel started, a progress mark, a
kernel done) into "which kernel is open, when did it last move"; the
StallRule turns a silence longer than its allowance into a hang verdict.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Optional

from nsightwrap.ncu.events import (
    SLOW_LAUNCH_WARNING,
    Event,
    KernelDone,
    KernelStarted,
    NcuWarning,
    Output,
    Progress,
    ReplayPass,
    ReportCreation,
)
from nsightwrap.ncu.output import OutputParser
from nsightwrap.watch.rules import RunState, Verdict, WatchRule

#: Used by the CLI and profile(): catches the real hang (output stops at
#: "0%..") within about 10 s of its last progress mark.
DEFAULT_STALL_TIMEOUT = 10.0
#: The allowance is at least this many times the longest gap seen between
#: progress marks, so a kernel whose passes are slow but steady goes on.
DEFAULT_GROWTH = 4.0
#: ncu prints `0%..` in one burst as a kernel starts (0.1 s on the GPU
#: machine); marks within this time of the start are not yet progress.
FIRST_BURST_S = 0.5


@dataclass
class KernelInProgress:
    """The kernel whose progress line is open (or the app-replay pass running)."""

    name: str
    kernel_id: Optional[int]
    started_at: float
    last_mark_at: float
    percent: int = 0
    dots: int = 0
    marks: int = 0
    replay_pass: Optional[int] = None

    def where(self) -> str:
        if self.replay_pass is not None:
            return f"application replay pass {self.replay_pass}"
        return f"{self.percent}%" + "." * self.dots if self.marks else "before its first progress mark"


@dataclass
class WatchState(RunState):
    """What the watched run knows so far; updated by `observe`."""

    current: Optional[KernelInProgress] = None
    longest_gap: float = 0.0
    kernels_done: int = 0
    slow_warnings: list = field(default_factory=list)

    def observe(self, event: Event, now: float) -> None:
        """Fold one event (received at `now`) into the state."""
        cur = self.current
        if isinstance(event, KernelStarted):
            self.current = KernelInProgress(event.name, event.kernel_id, now, now)
        elif isinstance(event, Progress):
            if cur is None or (event.kernel_id is not None and cur.kernel_id != event.kernel_id):
                cur = self.current = KernelInProgress(
                    "<report creation>" if event.kernel_id is None else "?", event.kernel_id, now, now)
            self._mark(cur, now)
            cur.percent, cur.dots = event.percent, event.dots
        elif isinstance(event, ReportCreation):
            self.current = KernelInProgress("<report creation>", None, now, now)
        elif isinstance(event, KernelDone):
            if cur is not None:
                self._mark(cur, now)
            self.current = None
            self.kernels_done += 1
        elif isinstance(event, ReplayPass):
            if cur is not None and cur.replay_pass is not None:
                self._mark(cur, now)
            self.current = KernelInProgress(event.name, event.kernel_id, now, now,
                                            replay_pass=event.pass_number, marks=1)
        elif isinstance(event, NcuWarning):
            if SLOW_LAUNCH_WARNING in event.text:
                self.slow_warnings.append(now)  # recorded, never a verdict
        elif cur is not None and cur.replay_pass is not None:
            self.current = None  # the program went on after an application-replay pass
        self.last_output_at = now

    def header_seen(self, header: KernelStarted, now: float) -> None:
        """A kernel's header is complete but undecided (see OutputParser.pending_header)."""
        cur = self.current
        if cur is None or cur.kernel_id != header.kernel_id or cur.name != header.name:
            self.current = KernelInProgress(header.name, header.kernel_id, now, now)

    def _mark(self, cur: KernelInProgress, now: float) -> None:
        if cur.marks:
            self.longest_gap = max(self.longest_gap, now - cur.last_mark_at)
        cur.last_mark_at = now
        cur.marks += 1


@dataclass(frozen=True)
class Stall:
    """Where a kernel stopped moving, and how long it was given."""

    kernel: str
    kernel_id: Optional[int]
    where: str
    silent_s: float
    allowance_s: float
    detected_at_s: float
    before_first_progress: bool
    slow_warning_seen: bool

    def message(self) -> str:
        kid = "" if self.kernel_id is None else f" (id {self.kernel_id})"
        text = (f'kernel "{self.kernel}"{kid} stalled at {self.where}: no progress for '
                f"{self.silent_s:.1f} s (allowance {self.allowance_s:.1f} s)")
        if self.before_first_progress:
            text += (". A single replay pass longer than the stall timeout looks the same: if this "
                     "kernel is merely slow, raise the timeout (--stall-timeout SEC, or "
                     "stall_timeout=SEC in Python)")
        return text


@dataclass(frozen=True)
class StallRule(WatchRule):
    """A kernel in progress with no progress mark for its allowance is stalled.

    allowance = max(timeout, growth x the longest gap seen between marks), so
    a kernel that keeps printing progress, however slowly, is never stopped.
    """

    timeout: float = DEFAULT_STALL_TIMEOUT
    growth: float = DEFAULT_GROWTH
    #: In application replay the program runs on between kernels, so silence
    #: after a pass line may be its own CPU work. Both real hangs there were
    #: followed by ncu's slow-launch warning within 3 s; without it, the
    #: allowance is this many times longer.
    quiet_replay_factor: float = 3.0

    def __post_init__(self):
        if not self.timeout > 0:
            raise ValueError("stall timeout must be > 0 seconds")

    def allowance(self, state: WatchState) -> float:
        base = max(self.timeout, self.growth * state.longest_gap)
        cur = state.current
        quiet = cur is not None and cur.replay_pass is not None and not any(
            t >= cur.started_at for t in state.slow_warnings)
        if quiet:
            return base * self.quiet_replay_factor
        return base

    def deadline(self, state: WatchState) -> float:  # type: ignore[override]
        if state.current is None:
            return math.inf
        return state.current.last_mark_at + self.allowance(state)

    def __call__(self, state: WatchState, now: float) -> Optional[Verdict]:  # type: ignore[override]
        cur = state.current
        if cur is None:
            return None
        silent = now - cur.last_mark_at
        allowance = self.allowance(state)
        if silent < allowance:
            return None
        stall = Stall(
            kernel=cur.name, kernel_id=cur.kernel_id, where=cur.where(), silent_s=silent,
            allowance_s=allowance, detected_at_s=now - state.started_at,
            before_first_progress=cur.replay_pass is None and cur.last_mark_at - cur.started_at <= FIRST_BURST_S,
            slow_warning_seen=any(t >= cur.started_at for t in state.slow_warnings),
        )
        return Verdict("hang", stall.message(), stall)


class NcuObserver:
    """Turns ncu's output into events and folds them into a WatchState.

    The watch loop (nsightwrap.watch) calls `feed` with each decoded chunk
    of ncu's own channel (or of the merged stdout, for an ncu that cannot
    log to a file) and `close` at the end; it knows nothing of ncu beyond
    this object. Progress marks and program lines are folded into the state
    and counted, not kept (`keep`): a flood of them costs no memory.
    """

    @staticmethod
    def keep(event: Event) -> bool:
        return not isinstance(event, (Progress, Output))

    def __init__(self, now: float):
        self.parser = OutputParser()
        self.state = WatchState(started_at=now, last_output_at=now)

    def feed(self, text: str, now: float) -> list[Event]:
        events = self.parser.feed(text) if text else []
        return self._fold(events, now)

    def close(self, now: float) -> list[Event]:
        return self._fold(self.parser.close(), now)

    def _fold(self, events: list[Event], now: float) -> list[Event]:
        state = self.state
        for ev in events:
            if type(ev) is Output and (state.current is None or state.current.replay_pass is None):
                continue  # a program line changes nothing but the time of the last output
            state.observe(ev, now)
        if events:
            state.last_output_at = now
        header = self.parser.pending_header
        if header is not None:
            self.state.header_seen(header, now)
        return events
