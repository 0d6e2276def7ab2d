"""Who hears what a run is doing, while it does it (the CLI's live progress).

A RunListener is handed down inside the RunContext, so a walk, a sweep or
a single run tells it what it is about to run (`stage`), and each watched
attempt hands it its live WatchState and stall rule when it starts and its
Attempt when it ends. The default hears nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from nsightwrap.ncu.attempt import Attempt
    from nsightwrap.ncu.progress import WatchState
    from nsightwrap.watch.rules import WatchRule

__all__ = ["RunListener", "SILENT"]


class RunListener:
    """No-op base: override what you want to hear. Called from the thread that runs the attempt."""

    def stage(self, text: str) -> None:
        """What the caller is about to run or wait for: a rung, a sweep probe, a back-off."""

    def started(self, state: "WatchState", rule: "WatchRule") -> None:
        """A watched attempt began; `state` changes as ncu prints, `rule` says how long silence may last."""

    def finished(self, attempt: "Attempt") -> None:
        """The attempt ended (interrupted ones included)."""


#: The listener that hears nothing (stateless, so one is enough).
SILENT = RunListener()
