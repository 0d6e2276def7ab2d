"""An attempt's rows, read from its report while the walk goes on.

The walk decides from attempts alone (their statuses, stalls, kernels), never from the rows of their
reports, so a report can be read while the next attempt runs: Reads hands each read to a thread of its
own and gives the frames back, in order, when the walk ends. pandas (0.5-0.8 s to import on the GPU
machine, issue 19) is imported by that thread too, while the first attempt runs, before any report is
read: numpy is then loaded before a report reader is chosen, as when it was imported up front
(nsightwrap.reports.ncu.module: ncu 2025.3.1's extras module is passed over once numpy is loaded).
"""

from __future__ import annotations

import concurrent.futures as cf
import threading
from typing import TYPE_CHECKING, Any, Callable, Optional

from nsightwrap.fallback.ladder import Rung
from nsightwrap.fallback.result import ATTEMPT_COLUMN, JOB_COLUMN, RUNG_COLUMN
from nsightwrap.ncu.attempt import Attempt
from nsightwrap.ncu.context import RunContext
from nsightwrap.ncu.listen import RunListener

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["Pending", "Reads", "frame_of", "no_rows"]


def no_rows() -> "pd.DataFrame":
    """An empty frame (pandas imported on first use)."""
    import pandas as pd

    return pd.DataFrame()


def frame_of(attempt: Attempt, rung: Rung, index: int, job: str, reader: Callable[[Attempt], "pd.DataFrame"]
             ) -> "pd.DataFrame":
    """The attempt's rows (none without a report or a finished kernel), marked with its rung, index and job;
    pandas is imported before the reader runs."""
    empty = no_rows()
    if not has_rows(attempt):
        return empty
    df = reader(attempt)
    df[RUNG_COLUMN] = rung.name
    df[ATTEMPT_COLUMN] = index
    df[JOB_COLUMN] = job
    return df


def has_rows(attempt: Attempt) -> bool:
    """The attempt kept a report holding at least one finished kernel."""
    return attempt.report is not None and bool(attempt.finished_kernels)


#: How long the reads wait for the attempt they run beside to start (seconds): an attempt that fails before
#: its watch begins does not hold them up longer.
LAUNCH_WAIT_S = 2.0


class _Began(RunListener):
    """`listener`, and an event set when a watched attempt begins; everything else it hears is passed on."""

    def __init__(self, listener: RunListener, began: threading.Event) -> None:
        self.listener, self.began = listener, began

    def started(self, state: Any, rule: Any) -> None:
        self.began.set()
        self.listener.started(state, rule)

    def stage(self, text: str) -> None:
        self.listener.stage(text)

    def finished(self, attempt: Any) -> None:
        self.listener.finished(attempt)

    def calibrating(self, progress: Any) -> None:
        self.listener.calibrating(progress)


class Pending:
    """A frame to read (Reads), then being read: in the result's frames until the walk ends."""

    def __init__(self, args: tuple) -> None:
        self.args = args  # frame_of's, less the reader
        self.future: Optional[cf.Future] = None  # once started


class Reads:
    """The rows of each attempt's report, read in a thread of their own while the walk goes on: the next
    attempt starts as soon as this one is recorded, not after its report is read (the report of a torchrun job's
    main run, 42 kernels, and the reader's start-up, came between its two attempts; issue 19). The walk's
    decisions never look at rows, only at attempts. Reads start as the next attempt starts (`start`), so the
    walk's own work before it does not share the interpreter with them; the first start imports pandas first.
    background=False reads at once (the lines of a cluster engine, each a thread already). A read that failed
    is raised at the next step (check) or at the end (resolved)."""

    def __init__(self, reader: Callable[[Attempt], "pd.DataFrame"], background: bool = True) -> None:
        self.reader, self.background = reader, background
        self.pool: Optional[cf.ThreadPoolExecutor] = None
        self.waiting: list[Pending] = []

    def frame(self, attempt: Attempt, rung: Rung, index: int, job: str) -> "pd.DataFrame | Pending":
        """The attempt's rows now (background=False, or nothing to read), else a Pending read."""
        if not self.background or not has_rows(attempt):
            return frame_of(attempt, rung, index, job, self.reader)
        pending = Pending((attempt, rung, index, job))
        self.waiting.append(pending)
        return pending

    def start(self, context: Optional[RunContext] = None) -> Optional[RunContext]:
        """For an attempt about to run in `context`: pandas imported (the first time), then the reads waiting, in
        the reads' thread (one thread: they run one at a time, in order), once the attempt has started (its
        watch begun: `context`'s listener, wrapped, says so), so they never slow its launch; the context to run
        it in. Without a context (the walk's end) they start at once."""
        if not self.background or (self.pool is not None and not self.waiting):
            return context
        first = self.pool is None
        if first:
            self.pool = cf.ThreadPoolExecutor(max_workers=1, thread_name_prefix="nsightwrap-report")
        if context is not None:
            began = threading.Event()
            self.pool.submit(began.wait, LAUNCH_WAIT_S)
            context = context.with_listener(_Began(context.listener, began))
        if first:
            self.pool.submit(no_rows)
        for pending in self.waiting:
            pending.future = self.pool.submit(frame_of, *pending.args, self.reader)
        self.waiting = []
        return context

    def drop(self, frame: "pd.DataFrame | Pending") -> "pd.DataFrame":
        """`frame`'s rows given up (the walk replaced them): its read is not started, or cancelled if it can
        be; the empty frame that replaces it."""
        if isinstance(frame, Pending):
            if frame.future is None:
                self.waiting = [p for p in self.waiting if p is not frame]
            else:
                frame.future.cancel()
        return no_rows()

    @staticmethod
    def check(frames: list) -> None:
        """A read that has failed already: raised now, before another attempt, as a read at once would be."""
        for f in frames:
            if isinstance(f, Pending) and f.future is not None and f.future.done() and f.future.exception():
                f.future.result()

    def resolved(self, frames: list) -> "list[pd.DataFrame]":
        """The frames, the reads still waiting started and each read waited for (its exception raised)."""
        self.start()
        return [f.future.result() if isinstance(f, Pending) and f.future else f for f in frames]

    def close(self, wait: bool = True) -> None:
        """Reads not started are dropped; one under way is waited for (no thread outlives the walk), unless
        not `wait` (the walk is interrupted: its thread ends once that read is over)."""
        self.waiting = []
        if self.pool is not None:
            self.pool.shutdown(wait=wait, cancel_futures=True)
            self.pool = None
