"""A job's stall, told while the job runs: what lets the engine start the next whole-program run early.

A sweep's whole-program runs come one after the other: run i+1 leaves out the kernel run i was found hanging
on, so it cannot start before run i's verdict, which comes an allowance after the kernel went silent (and,
the first time, after a calibration). On an engine with a free GPU that wait need not be idle: once the
kernel has been silent for half its allowance, the node tells the engine (StallAnnouncer writes a small
file in the job folder), and the engine may start run i+1 as a speculation beside it (see
nsightwrap.fallback.executor: adopted when run i ends hanging on that kernel, cancelled otherwise).

Half the allowance: the stall rule's own deadline (the kernel's calibrated allowance, else the uncalibrated
suspicion), so a kernel that is slow by calibration is not announced before half its time, and the silences
between the marks of ordinary kernels (about 1 s, FACTS.md) stay below it. A wrong guess costs a cancelled
job on a GPU that had nothing else to do.
"""

from __future__ import annotations

import json
import math
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Optional

from nsightwrap.ncu.listen import RunListener

if TYPE_CHECKING:  # pragma: no cover
    from nsightwrap.ncu.progress import WatchState
    from nsightwrap.watch.rules import WatchRule

__all__ = ["StallAnnouncer", "Suspect", "read_suspect", "suspected_kernel"]

#: What the watch state calls a phase that is not a kernel of the program.
NOT_A_KERNEL = frozenset({"<report creation>", "?"})

#: How often the announcer looks at the live state (seconds).
LOOK_S = 0.1


@dataclass(frozen=True)
class Suspect:
    """The kernel a running job suspects, and how many kernels it has announced so far (1, 2, ...)."""

    kernel: str
    count: int


def suspected_kernel(state: "WatchState", rule: "WatchRule", now: float) -> Optional[str]:
    """The kernel in progress once it has been silent for half of what the rule allows it, else None.

    Called from another thread than the watch's: the state may change under it, so a state that moved on
    while it was read answers None (the next look sees the new one)."""
    try:
        cur = state.current
        if cur is None or cur.name in NOT_A_KERNEL:
            return None
        allowed = rule.deadline(state) - cur.last_mark_at
        if not math.isfinite(allowed):
            return None  # no rule bounds its silence: nothing to guess from
        return cur.name if now - cur.last_mark_at >= allowed / 2 else None
    except (AttributeError, TypeError):  # state.current became None between two reads
        return None


def read_suspect(path: Path) -> Optional[Suspect]:
    """The latest announcement in `path`, or None (none yet, or unreadable: the writer replaces it whole)."""
    try:
        data = json.loads(path.read_text())
        return Suspect(str(data["kernel"]), int(data["count"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _write_suspect(path: Path, suspect: Suspect) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps({"kernel": suspect.kernel, "count": suspect.count}))
    os.replace(tmp, path)  # whole or not at all for the reader


class StallAnnouncer(RunListener):
    """Writes each newly suspected kernel of the job's attempt(s) to `path` (see the module docstring).

    A thread per watched run looks at its live state every LOOK_S; `finished` stops it. A kernel is announced
    once per job (a calibrated second run of the same attempt does not announce it again)."""

    def __init__(self, path: Path, clock: Callable[[], float] = time.monotonic, look_s: float = LOOK_S) -> None:
        self.path, self.clock, self.look_s = path, clock, look_s
        self.announced: list[str] = []
        self._stop: Optional[threading.Event] = None
        self._thread: Optional[threading.Thread] = None

    def look(self, state: "WatchState", rule: "WatchRule") -> Optional[str]:
        """One look: the kernel announced now, if any."""
        kernel = suspected_kernel(state, rule, self.clock())
        if kernel is None or kernel in self.announced:
            return None
        self.announced.append(kernel)
        try:
            _write_suspect(self.path, Suspect(kernel, len(self.announced)))
        except OSError:
            return None  # the job folder is gone (the engine closed): nobody is listening
        return kernel

    def started(self, state: "WatchState", rule: "WatchRule") -> None:
        self.finished(None)
        stop = self._stop = threading.Event()

        def watch() -> None:
            while not stop.wait(self.look_s):
                self.look(state, rule)

        self._thread = threading.Thread(target=watch, name="nsightwrap-announce", daemon=True)
        self._thread.start()

    def finished(self, attempt: Any) -> None:
        if self._stop is not None:
            self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=1.0)
        self._stop = self._thread = None
