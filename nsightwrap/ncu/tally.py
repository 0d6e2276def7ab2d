"""What a run's verdict needs from every ncu event, folded as the events come: exact and bounded.

A run may profile a million kernels or print a million warnings; nsightwrap
keeps none of them all. The tally counts every kernel, error and warning
exactly, and keeps what the attempt record and its verdict read: the first
and last KEPT_KERNELS kernels, the first and last KEPT_LINES errors and
warnings, the last report written, the processes ncu was connected to.
`RunTally.of(events)` folds a list of (time, event) the same way (a
RunOutcome made without an observer's summary).
"""

from __future__ import annotations

from typing import Any, Iterable, Optional

from nsightwrap.ncu.events import (
    SLOW_LAUNCH_WARNING,
    Connected,
    Disconnected,
    KernelDone,
    NcuError,
    NcuWarning,
    ReplayPass,
    ReportWritten,
)
from nsightwrap.watch.channels import FirstLast

#: Kernels kept by name and id: the first this many and the last this many (all are counted).
KEPT_KERNELS = 1000
#: ncu's error and warning lines kept: the first this many and the last this many (all are counted).
KEPT_LINES = 100
#: Processes ncu connected to, kept for the look at the GPU after a stop (the last this many).
KEPT_PIDS = 1000


class RunTally:
    """Counters and bounded samples of one run's ncu events (see the module's docstring)."""

    def __init__(self) -> None:
        self.done = FirstLast(KEPT_KERNELS, KEPT_KERNELS)  # (name, id, passes) of each KernelDone
        self.replay: dict[tuple[int, str], int] = {}  # application replay: (id, name) -> passes seen
        self.replay_more = 0  # application-replay kernels beyond the ones in `replay`
        self.errors = FirstLast(KEPT_LINES, KEPT_LINES)
        self.warnings = FirstLast(KEPT_LINES, KEPT_LINES)
        self.slow_warnings = 0
        self.report: Optional[str] = None  # the last `==PROF== Report:` path
        self.live: set[int] = set()  # processes ncu is connected to now
        self.most_connected = 0
        self.pids = FirstLast(0, KEPT_PIDS)  # every process ncu connected to (the last KEPT_PIDS)
        self._fold = {KernelDone: self._done, ReplayPass: self._pass, NcuError: self._error,
                      NcuWarning: self._warning, ReportWritten: self._report, Connected: self._connected,
                      Disconnected: self._disconnected}

    @classmethod
    def of(cls, events: Iterable[tuple[float, Any]]) -> "RunTally":
        tally = cls()
        for _, e in events:
            tally.add(e)
        return tally

    def add(self, event: Any) -> None:
        fold = self._fold.get(type(event))
        if fold is not None:
            fold(event)

    # -- what the attempt reads -------------------------------------------

    @property
    def kernel_count(self) -> int:
        """Kernels profiled: finished (kernel replay), else seen in application replay."""
        return self.done.count or len(self.replay) + self.replay_more

    @property
    def application_replay(self) -> bool:
        return not self.done.count and bool(self.replay)

    # -- folding ------------------------------------------------------------

    def _done(self, e: KernelDone) -> None:
        self.done.add((e.name, e.kernel_id, e.passes))

    def _pass(self, e: ReplayPass) -> None:
        key = (e.kernel_id, e.name)
        if key in self.replay:
            self.replay[key] = max(self.replay[key], e.pass_number)
        elif len(self.replay) < 2 * KEPT_KERNELS:
            self.replay[key] = e.pass_number
        elif e.pass_number == 1:  # every kernel has one first pass: counted once, not kept
            self.replay_more += 1

    def _error(self, e: NcuError) -> None:
        self.errors.add(e.text)

    def _warning(self, e: NcuWarning) -> None:
        self.warnings.add(e.text)
        if SLOW_LAUNCH_WARNING in e.text:
            self.slow_warnings += 1

    def _report(self, e: ReportWritten) -> None:
        self.report = e.path

    def _connected(self, e: Connected) -> None:
        self.live.add(e.pid)
        self.pids.add(e.pid)
        self.most_connected = max(self.most_connected, len(self.live))

    def _disconnected(self, e: Disconnected) -> None:
        self.live.discard(e.pid)
