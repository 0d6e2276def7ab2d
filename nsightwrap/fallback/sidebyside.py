"""A torchrun walk's two runs of the job at once, on the same GPUs: the main program's and the collectives'.

A walk of a recognised torchrun job (nsightwrap.fallback.collectives.up_front) makes two runs of the whole job: every
rank without the collectives, and the collectives profiled on one rank. SideBySide (the lines' LineAttempts,
nsightwrap.fallback.lines) makes the collectives' line start with the main one, its ranks meeting on a free port of
their own (`meeting`: nsightwrap.watch.launchers.meeting_apart); every other line waits for the lines before it, as
in the serial walk. FACTS.md, session 9: on 2x H200 the walk took 38.8 s and 34.9 s (first and second) against
48.7 s and 45.9 s one run after the other.

Two runs at once can disturb each other where nsightwrap cannot see it: a program that fixes its own rendezvous
port, GPU memory too small for two, ncu's machine-wide profiling lock holding one run's kernel while the other
run's is profiled (a silence that is not a hang). So only an attempt that ended well (ok, or no kernels) while
another ran beside it is taken at once; any other outcome of such an attempt (a hang, an error, a crash, a
timeout, a program fault) is not recorded: the attempt is made again alone, as the serial walk would have made it,
and from then on the runs go one at a time. A hang is "beside" another run when that run was under way during
the hang's silence. A GPU that keeps processes of an attempt stops every line (the other run is stopped, not
recorded), as it stops the serial walk.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Optional

from nsightwrap.errors import ProfileInterrupted
from nsightwrap.fallback.lines import EngineStopped
from nsightwrap.fallback.session import GpuKept, Session, Tag
from nsightwrap.ncu.attempt import Attempt
from nsightwrap.ncu.context import RunContext
from nsightwrap.ncu.options import ProfileOptions
from nsightwrap.status import HANG, NO_KERNELS, OK

if TYPE_CHECKING:
    from nsightwrap.fallback.walk import _Walk

__all__ = ["SideBySide"]

log = logging.getLogger("nsightwrap")

#: A run under way this long before a hang's silence began counts as beside it (seconds): ncu's output comes in
#: pieces, so the silence may have begun a little before its last mark was read.
SILENCE_MARGIN_S = 1.0


@dataclass
class _Window:
    """When one attempt of a line ran (monotonic seconds; end None while it runs)."""

    line: int
    start: float
    end: Optional[float] = None


def _number(chain: str) -> int:
    """A line's number in the walk's order, from its chain name ("N:job", nsightwrap.fallback.lines.Lines.start)."""
    return int(chain.partition(":")[0])


class SideBySide:
    """The lines' attempts, made here in their threads: see the module docstring."""

    here = True

    def __init__(self, session: Session, meeting: Callable[[], dict[str, str]],
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.session, self.meeting, self.clock = session, meeting, clock
        self.stop = threading.Event()  # every run's cancel: Ctrl-C, or a GPU that keeps processes
        self.changed = threading.Condition()
        self.ended: set[int] = set()
        self.windows: list[_Window] = []
        self.apart: Optional[str] = None  # why the runs now go one at a time
        self.kept: Optional[str] = None  # why every line stops: a GPU keeps processes of an attempt
        self.said: dict[int, str] = {}  # line index -> where its last attempt ran, when that is worth a note

    @staticmethod
    def _index(line: "_Walk") -> int:
        return _number(line.chain)

    @staticmethod
    def _side(line: "_Walk") -> bool:
        return line.origin is not None and line.origin.upfront

    # --- LineAttempts ----------------------------------------------------------------------------------
    def turn(self, line: "_Walk") -> None:
        """The collectives' line at once (while the runs may go side by side); every other line once the lines
        before it have ended."""
        if self._side(line) and self.apart is None:
            return
        before = set(range(self._index(line)))
        with self.changed:
            while not before <= self.ended and not self.stop.is_set():
                self.changed.wait(0.5)
        if self.stop.is_set() and self.kept is None:
            raise KeyboardInterrupt("the walk was interrupted")

    def attempt(self, line: "_Walk", options: ProfileOptions, tag: Tag, context: RunContext) -> Attempt:
        if self.kept is not None:
            raise EngineStopped(self.kept)
        index = self._index(line)
        beside = self._side(line) and self.apart is None
        if self._side(line) and not beside:
            self.turn(line)  # one at a time now: after the lines before it
        meeting = self.meeting() if beside else None
        ctx = context.replace(env={**context.env, **meeting}) if meeting else context
        attempt, window = self._run(index, options, tag, ctx)
        others = self._beside(window, attempt)
        if others and attempt.status not in (OK, NO_KERNELS):
            self._apart(index, f"with another run of the job beside it ({others}), this run ended {attempt.status} "
                               f"({attempt.reason}); not taken, it was made again alone")
            self._alone(line)
            attempt, _ = self._run(index, options, tag, context)
        elif others and meeting:
            where = ", ".join(f"{k}={v}" for k, v in meeting.items())
            self.said[index] = f"run beside another run of the job ({others}), on the same GPUs, its ranks meeting " \
                               f"apart ({where})"
        return self._keep(attempt, options, tag)

    def chain_done(self, chain: str) -> None:
        with self.changed:
            self.ended.add(_number(chain))
            self.changed.notify_all()

    def note(self, line: "_Walk") -> Optional[str]:
        return self.said.pop(self._index(line), None)

    def cancel(self) -> None:
        with self.changed:
            self.stop.set()
            self.changed.notify_all()

    # --- the pieces --------------------------------------------------------------------------------------
    def _run(self, index: int, options: ProfileOptions, tag: Tag, context: RunContext) -> tuple[Attempt, _Window]:
        """One run, not recorded yet, and the window it ran in; EngineStopped when a GPU that keeps processes
        stopped it."""
        window = _Window(index, self.clock())
        with self.changed:
            self.windows.append(window)
        try:
            return self.session.run(options, context, what=Session.what(tag), cancel=self.stop), window
        except ProfileInterrupted:
            if self.kept is not None:
                raise EngineStopped(self.kept) from None
            raise
        finally:
            with self.changed:
                window.end = self.clock()
                self.changed.notify_all()

    def _beside(self, window: _Window, attempt: Attempt) -> str:
        """Which other lines' attempts ran beside the part of `attempt` that decided it (a hang: its silence; else
        the whole run), named by their lines ("" when none)."""
        assert window.end is not None
        low = window.start
        if attempt.status == HANG and attempt.stall is not None:
            low = max(window.start, window.end - attempt.stall.silent_s - SILENCE_MARGIN_S)
        with self.changed:
            lines = sorted({w.line for w in self.windows if w.line != window.line and w.start < window.end
                            and (w.end is None or w.end > low)})
        return ", ".join("the main program's run" if i == 0 else f"line {i}" for i in lines)

    def _apart(self, index: int, why: str) -> None:
        """An attempt disturbed, maybe, by another run beside it: from now on one run at a time; its step says why."""
        self.said[index] = why
        log.info(f"line {index}: {why}")
        with self.changed:
            self.apart = self.apart or why

    def _alone(self, line: "_Walk") -> None:
        """Wait until no other line runs: the collectives' line after the lines before it, another once no
        other attempt is under way (the lines after it wait for it)."""
        if self._side(line):
            self.turn(line)
            return
        index = self._index(line)
        with self.changed:
            while any(w.end is None and w.line != index for w in self.windows) and not self.stop.is_set():
                self.changed.wait(0.5)

    def _keep(self, attempt: Attempt, options: ProfileOptions, tag: Tag) -> Attempt:
        """The attempt recorded; a GPU that keeps its processes stops every line (the other run now)."""
        try:
            return self.session.keep(attempt, options, tag)
        except GpuKept as e:
            with self.changed:
                self.kept = self.kept or str(e)
                self.stop.set()
                self.changed.notify_all()
            raise
