"""ncu's progress as watch state, and the stall rule that reads it.

The state folds the parser's events (a kernel started, a progress mark, a
kernel done) into "which kernel is open, when did it last move"; the
StallRule turns a silence longer than its allowance into a hang verdict.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Optional

from nsightwrap.ncu.allowance import NOT_CALIBRATED, Allowance, KernelAllowances
from nsightwrap.ncu.events import (
    SLOW_LAUNCH_WARNING,
    Connected,
    Disconnected,
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
from nsightwrap.ncu.tally import RunTally
from nsightwrap.status import HANG
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
    last_slow_warning_at: float = -math.inf  # when ncu's last slow-launch warning came (the count: RunTally)
    max_passes: int = 0  # the most replay passes a finished kernel of this run needed
    connected: set = field(default_factory=set)  # pids ncu is connected to now
    most_connected: int = 0  # the most processes ncu was connected to at once (2+: a multi-process program)

    def observe(self, event: Event, now: float) -> None:
        """Fold one event (received at `now`) into the state."""
        cur = self.current
        if isinstance(event, (Connected, Disconnected)):
            self._connection(event, now)  # and, as any other line, ends an application-replay pass below
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
            self.max_passes = max(self.max_passes, event.passes)
        elif isinstance(event, ReplayPass):
            if cur is not None and cur.replay_pass is not None:
                self._mark(cur, now)
            self.current = KernelInProgress(event.name, event.kernel_id, now, now,
                                            replay_pass=event.pass_number, marks=1)
        elif isinstance(event, NcuWarning):
            if SLOW_LAUNCH_WARNING in event.text:
                self.last_slow_warning_at = now  # recorded, never a verdict
        elif cur is not None and cur.replay_pass is not None:
            self.current = None  # the program went on after an application-replay pass
        self.last_output_at = now

    def _connection(self, event: "Connected | Disconnected", now: float) -> None:
        """Who ncu is connected to; the program ended when the last of them left (see RunState)."""
        if isinstance(event, Connected):
            self.connected.add(event.pid)
            self.most_connected = max(self.most_connected, len(self.connected))
            self.program_ended_at = None
        else:
            self.connected.discard(event.pid)
            if not self.connected:
                self.program_ended_at = now

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
    """Where a kernel stopped moving, how long it was given, and on what basis."""

    kernel: str
    kernel_id: Optional[int]
    where: str
    silent_s: float
    allowance_s: float
    detected_at_s: float
    before_first_progress: bool
    slow_warning_seen: bool
    basis: str = NOT_CALIBRATED  # e.g. "from calibration (k ran 0.02 ms without ncu, nsys)"
    calibrated: bool = False
    pace_s: float = 0.0  # growth x the longest gap seen: the least allowance, calibrated or not
    #: No pass of the kernel had finished: silent since its first burst of marks, or in application
    #: replay pass 1. What any collection would meet if the kernel waits for the host or another kernel.
    first_pass: bool = False
    #: Silent after an application-replay pass line with no slow-launch warning since: the silence may
    #: be the program's own work (StallRule.quiet_replay_factor, KernelAllowances.for_stall).
    quiet_replay: bool = False
    #: Called at once by a cause FACTS.md records (nsightwrap.ncu.known; `basis` says which): a trusted
    #: verdict that needs no calibration.
    known_cause: bool = False

    def evidence(self) -> str:
        """`silent 3.1 s; allowance 3.0 s from calibration (...)`: the verdict's grounds in one line."""
        return f"silent {self.silent_s:.1f} s; allowance {self.allowance_s:.1f} s {self.basis}"

    def message(self) -> str:
        kid = "" if self.kernel_id is None else f" (id {self.kernel_id})"
        text = (f'kernel "{self.kernel}"{kid} stalled at {self.where}: no progress for '
                f"{self.silent_s:.1f} s (allowance {self.allowance_s:.1f} s {self.basis})")
        if self.before_first_progress and not (self.calibrated or self.known_cause):
            text += (". A single replay pass longer than the stall timeout looks the same: if this "
                     "kernel is merely slow, raise the timeout (--stall-timeout SEC, or "
                     "stall_timeout=SEC in Python)")
        return text


def _warned(state: WatchState) -> bool:
    """ncu's slow-launch warning came since the current kernel (or replay pass) started."""
    cur = state.current
    return cur is not None and state.last_slow_warning_at >= cur.started_at


def _quiet_replay(state: WatchState, warned: bool) -> bool:
    """Silent after an application-replay pass line, with no slow-launch warning since."""
    return state.current is not None and state.current.replay_pass is not None and not warned


@dataclass(frozen=True)
class StallRule(WatchRule):
    """A kernel in progress with no progress mark for its allowance is stalled.

    The allowance is the kernel's own from `allowances` (a calibration; see
    nsightwrap.ncu.allowance), else `timeout`; and at least growth x the
    longest gap seen between marks, so a kernel that keeps printing
    progress, however slowly, is never stopped. `basis` says what `timeout`
    is (the default, or a value the user gave).
    """

    timeout: float = DEFAULT_STALL_TIMEOUT
    growth: float = DEFAULT_GROWTH
    #: In application replay the program runs on between kernels, so silence
    #: after a pass line may be its own CPU work. Both real hangs there were
    #: followed by ncu's slow-launch warning within 3 s; without it, the
    #: allowance is this many times longer (or, calibrated, the program's own time).
    quiet_replay_factor: float = 3.0
    allowances: Optional[KernelAllowances] = None
    basis: str = NOT_CALIBRATED

    def __post_init__(self):
        if not self.timeout > 0:
            raise ValueError("stall timeout must be > 0 seconds")

    def judge(self, state: WatchState) -> Allowance:
        """The current kernel's allowance and its basis (before the pace rule)."""
        return self._judge(state, _quiet_replay(state, _warned(state)))

    def _judge(self, state: WatchState, quiet_replay: bool) -> Allowance:
        cur = state.current
        found = None
        if cur is not None and self.allowances is not None:
            found = self.allowances.for_stall(cur.name, state.max_passes or None, quiet_replay)
        if found is not None:
            return found
        factor = self.quiet_replay_factor if quiet_replay else 1.0
        return Allowance(self.timeout * factor, self.basis if factor == 1.0
                         else f"{self.basis}, x{factor:g} in quiet application replay")

    def allowance(self, state: WatchState) -> float:
        return max(self.judge(state).seconds, self.growth * state.longest_gap)

    def deadline(self, state: WatchState) -> float:  # type: ignore[override]
        if state.current is None:
            return math.inf
        return state.current.last_mark_at + self.allowance(state)

    def __call__(self, state: WatchState, now: float) -> Optional[Verdict]:  # type: ignore[override]
        cur = state.current
        if cur is None:
            return None
        silent = now - cur.last_mark_at
        warned = _warned(state)
        quiet_replay = _quiet_replay(state, warned)
        judged = self._judge(state, quiet_replay)
        pace = self.growth * state.longest_gap
        allowance = max(judged.seconds, pace)
        if silent < allowance:
            return None
        basis = judged.basis if judged.seconds >= pace else (
            f"{self.growth:g} x the longest gap between marks ({state.longest_gap:.1f} s); {judged.basis}")
        before = cur.replay_pass is None and cur.last_mark_at - cur.started_at <= FIRST_BURST_S
        stall = Stall(
            kernel=cur.name, kernel_id=cur.kernel_id, where=cur.where(), silent_s=silent,
            allowance_s=allowance, detected_at_s=now - state.started_at, before_first_progress=before,
            slow_warning_seen=warned, quiet_replay=quiet_replay,
            basis=basis, calibrated=judged.calibrated, pace_s=pace, first_pass=before or cur.replay_pass == 1,
        )
        return Verdict(HANG, stall.message(), stall)


class NcuObserver:
    """Turns ncu's output into events and folds them into a WatchState.

    The watch loop (nsightwrap.watch) calls `feed` with each decoded chunk
    of ncu's own channel (or of the merged stdout, for an ncu that cannot
    log to a file) and `close` at the end; it knows nothing of ncu beyond
    this object. Progress marks and program lines are folded into the state
    and counted, not kept (`keep`): a flood of them costs no memory. Every
    event is folded into `summary` (a RunTally), which the attempt reads:
    its counts are exact however many events the run's log kept.
    """

    @staticmethod
    def keep(event: Event) -> bool:
        return not isinstance(event, (Progress, Output))

    def __init__(self, now: float):
        self.parser = OutputParser()
        self.state = WatchState(started_at=now, last_output_at=now)
        self.summary = RunTally()

    def feed(self, text: str, now: float) -> list[Event]:
        events = self.parser.feed(text) if text else []
        return self._fold(events, now)

    def close(self, now: float) -> list[Event]:
        return self._fold(self.parser.close(), now)

    def _fold(self, events: list[Event], now: float) -> list[Event]:
        state = self.state
        for ev in events:
            self.summary.add(ev)
            if type(ev) is Output and (state.current is None or state.current.replay_pass is None):
                continue  # a program line changes nothing but the time of the last output
            state.observe(ev, now)
        if events:
            state.last_output_at = now
        header = self.parser.pending_header
        if header is not None:
            self.state.header_seen(header, now)
        return events
