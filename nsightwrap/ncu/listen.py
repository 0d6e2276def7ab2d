"""Who hears what a run is doing, while it does it (the CLI's live progress).

A RunListener is handed down inside the RunContext, so a walk, a sweep or
a single run tells it what it is about to run (`stage`), and each watched
attempt hands it its live WatchState and stall rule when it starts and its
Attempt when it ends. While a calibration times the program without ncu,
it hears `calibrating` with what runs there now. The default hears nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional

if TYPE_CHECKING:  # pragma: no cover
    from nsightwrap.ncu.attempt import Attempt
    from nsightwrap.ncu.progress import WatchState
    from nsightwrap.watch.rules import WatchRule

__all__ = ["CalibrationProgress", "RunListener", "SILENT"]


@dataclass(frozen=True)
class CalibrationProgress:
    """A calibration run (the program without ncu) as seen at monotonic time `at`.

    running: (kernel, seconds in flight at `at`), oldest first; kernels_done: launches finished so far;
    waiting_for: the stalled kernel whose end stops the run early; done: the run ended.
    """

    source: str
    at: float
    elapsed_s: float
    running: tuple[tuple[str, float], ...] = ()
    kernels_done: int = 0
    waiting_for: Optional[str] = None
    done: bool = False

    def line(self, now: float) -> str:
        """One line for a live screen (seconds brought forward to `now`)."""
        late = max(0.0, now - self.at)
        text = f"calibrating without ncu ({self.source}, {self.elapsed_s + late:.0f} s)"
        if self.running:
            name, seconds = self.running[0]
            more = f" (+{len(self.running) - 1} more in flight)" if len(self.running) > 1 else ""
            text += f': kernel "{name}" running {seconds + late:.1f} s{more}'
        else:
            text += ": no kernel running"
        text += f"; {self.kernels_done} kernel(s) done"
        return text + (f'; stops when "{self.waiting_for}" finishes' if self.waiting_for else "")


class RunListener:
    """No-op base: override what you want to hear. Called from the thread that runs the attempt."""

    def stage(self, text: str) -> None:
        """What the caller is about to run or wait for: a rung, a sweep probe, a back-off."""

    def started(self, state: "WatchState", rule: "WatchRule") -> None:
        """A watched attempt began; `state` changes as ncu prints, `rule` says how long silence may last."""

    def finished(self, attempt: "Attempt") -> None:
        """The attempt ended (interrupted ones included)."""

    def calibrating(self, progress: CalibrationProgress) -> None:
        """A calibration run's progress, a few times a second while it runs, and once with done=True."""


#: The listener that hears nothing (stateless, so one is enough).
SILENT = RunListener()
