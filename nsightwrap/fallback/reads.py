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
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Optional

from nsightwrap.fallback.ladder import Rung
from nsightwrap.fallback.result import ATTEMPT_COLUMN, JOB_COLUMN, RUNG_COLUMN
from nsightwrap.ncu.attempt import Attempt

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


@dataclass(frozen=True)
class Pending:
    """A frame being read (Reads): in the result's frames until the walk ends."""

    future: cf.Future


class Reads:
    """The rows of each attempt's report, read in a thread of their own while the walk goes on: the next
    attempt starts as soon as this one is recorded, not after its report is read (the report of a torchrun job's
    main run, 42 kernels, and the reader's start-up, came between its two attempts; issue 19). The walk's
    decisions never look at rows, only at attempts. background=False reads at once (the lines of a cluster
    engine, each a thread already). A read that failed is raised at the next step (check) or at the end."""

    def __init__(self, reader: Callable[[Attempt], "pd.DataFrame"], background: bool = True) -> None:
        self.reader, self.background = reader, background
        self.pool: Optional[cf.ThreadPoolExecutor] = None

    def warm(self) -> None:
        """pandas imported in the reads' thread now (the walk starts its first attempt meanwhile)."""
        if self.background:
            self._pool().submit(no_rows)

    def frame(self, attempt: Attempt, rung: Rung, index: int, job: str) -> "pd.DataFrame | Pending":
        if not self.background or not has_rows(attempt):
            return frame_of(attempt, rung, index, job, self.reader)
        return Pending(self._pool().submit(frame_of, attempt, rung, index, job, self.reader))

    def _pool(self) -> cf.ThreadPoolExecutor:
        if self.pool is None:  # one thread: pandas first, then the reports one at a time, in order
            self.pool = cf.ThreadPoolExecutor(max_workers=1, thread_name_prefix="nsightwrap-report")
        return self.pool

    @staticmethod
    def check(frames: list) -> None:
        """A read that has failed already: raised now, before another attempt, as a read at once would be."""
        for f in frames:
            if isinstance(f, Pending) and f.future.done() and f.future.exception() is not None:
                f.future.result()

    @staticmethod
    def resolved(frames: list) -> "list[pd.DataFrame]":
        """The frames, each pending read waited for (its exception raised)."""
        return [f.future.result() if isinstance(f, Pending) else f for f in frames]

    def close(self) -> None:
        """Reads not started are dropped; one under way is waited for (no thread outlives the walk)."""
        if self.pool is not None:
            self.pool.shutdown(wait=True, cancel_futures=True)
            self.pool = None
