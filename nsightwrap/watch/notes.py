"""What every watched run says about processes, whichever profiler it ran (ncu, nsys)."""

from __future__ import annotations

from typing import Optional

from nsightwrap.watch.orphans import find_orphans
from nsightwrap.watch.run import RunOutcome

__all__ = ["orphans_note", "stop_notes"]


def orphans_note() -> Optional[str]:
    """A warning when processes of a killed nsightwrap are still alive (their guard could not stop them)."""
    orphans = find_orphans()
    if not orphans:
        return None
    return ("processes of an earlier nsightwrap run whose owner was killed are still alive: "
            + ", ".join(str(p.pid) for p in orphans) + "; run `python -m nsightwrap cleanup` to stop them")


def stop_notes(outcome: RunOutcome, what: str) -> list[str]:
    """Notes on how the tree of `what` (the program, nsys) had to be stopped after it ended."""
    stop, notes = outcome.stop, []
    if stop and stop.reason == "leftovers":
        notes.append(f"{what} ended but left processes behind; they were stopped: "
                     + ", ".join(stop.killed or stop.steps))
    if stop and stop.survivors:
        notes.append("processes survived SIGKILL (uninterruptible?): " + ", ".join(stop.survivors))
    if outcome.foreign:
        notes.append(f"{what} started processes as other users, which only they or root may signal, so they were "
                     "not stopped: " + ", ".join(outcome.foreign) + "; check that they are gone, or run as root")
    return notes
