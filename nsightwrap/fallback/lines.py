"""A walk's lines: its independent jobs, each walked in a thread of its own, put together in the serial order.

Two ways to make a line's attempts (its `LineAttempts`):
- OnEngine: each attempt a job of a cluster engine (Session.executor; nsightwrap.fallback.executor), on a GPU or
  node of its own, so the lines run at once as far as the engine has room;
- SideBySide (nsightwrap.fallback.sidebyside): each attempt made here, in the line's thread, on the job's own GPUs:
  a torchrun job's collectives' run beside its main run, every other line after the lines before it.
Lines whose attempts are made here read their reports in a thread of their own each (while their next attempt
runs), one report at a time across the lines (the report reader is not known to be thread-safe).
"""

from __future__ import annotations

import concurrent.futures as cf
import copy
import threading
from typing import TYPE_CHECKING, Callable, Optional, Protocol

from nsightwrap.errors import NsightwrapError, ProfileInterrupted
from nsightwrap.fallback.engineattempts import EngineAttempts
from nsightwrap.fallback.executor import ProbeEngine
from nsightwrap.fallback.reads import Reads
from nsightwrap.fallback.result import ATTEMPT_COLUMN, LadderResult
from nsightwrap.fallback.session import Session, Tag
from nsightwrap.ncu.attempt import Attempt
from nsightwrap.ncu.context import RunContext
from nsightwrap.ncu.options import ProfileOptions

if TYPE_CHECKING:
    import pandas as pd

    from nsightwrap.fallback.walk import _Job, _Walk

__all__ = ["EngineStopped", "LineAttempts", "Lines", "OnEngine"]

class LineAttempts(Protocol):
    """How the lines' attempts are made."""

    #: Made in this process (a Ctrl-C then ends the walk as the attempt it stopped, ProfileInterrupted), not as
    #: jobs of an engine (the engine's jobs are cancelled, KeyboardInterrupt).
    here: bool

    def turn(self, line: "_Walk") -> None:
        """Return when `line` may start (KeyboardInterrupt once the walk is cancelled)."""

    def attempt(self, line: "_Walk", options: ProfileOptions, tag: Tag, context: RunContext) -> Attempt:
        """One attempt of `line`."""

    def chain_done(self, chain: str) -> None:
        """The line `chain` asks for no more attempts."""

    def note(self, line: "_Walk") -> Optional[str]:
        """What the steps of `line` say of where they ran, if anything."""

    def cancel(self) -> None:
        """Stop the attempts under way; no new one starts."""


class OnEngine:
    """Each attempt a job of the engine; the engine's GPUs bound how many run at once."""

    here = False

    def __init__(self, session: Session, engine: ProbeEngine) -> None:
        self.engine = engine
        self.dispatch = EngineAttempts(session, engine)

    def turn(self, line: "_Walk") -> None:
        return None

    def attempt(self, line: "_Walk", options: ProfileOptions, tag: Tag, context: RunContext) -> Attempt:
        try:
            attempt, _ = self.dispatch.attempt(options, tag, context, chain=line.chain)
        except NsightwrapError as e:  # every GPU or node set aside, the engine stopped, the store unreachable
            raise EngineStopped(str(e)) from e
        return attempt

    def chain_done(self, chain: str) -> None:
        self.engine.chain_done(chain)

    def note(self, line: "_Walk") -> Optional[str]:
        return None

    def cancel(self) -> None:
        self.engine.cancel()


class Lines:
    """The walk's lines, each in a thread of its own, their attempts made by `attempts`.

    A line is a job of the queue and the jobs that follow from it (the same kernel lower down, the program past
    its hang), which the serial walk runs one after another before it takes the next job of the queue: lines are
    independent (each kernel's steps depend on its own outcomes; the store's answers a line asks are about its
    own kernel). So each line walks on its own (a _Walk of its own queue and result) and the lines' results are
    put together in the serial walk's order: the same steps, statuses and rows, and the same max_attempts cut.
    A line that stops the walk (a program fault, a crash) ends it there: the lines after it are cancelled, and
    what they had run stays in the store (the serial walk would not have run it).
    """

    def __init__(self, walk: "_Walk", attempts: LineAttempts) -> None:
        self.walk, self.attempts = walk, attempts
        self.reader = _one_at_a_time(walk.s.reader) if attempts.here else walk.s.reader
        self.cancel = threading.Event()
        self.lock = threading.Lock()
        self.lines: list[tuple["_Walk", cf.Future]] = []
        self.pool = cf.ThreadPoolExecutor(max_workers=LINES_AT_ONCE, thread_name_prefix="nsightwrap-walk-line")

    def firsts(self) -> list["_Job"]:
        """The first job of every line so far (the serial walk's queue, as the program's line sees it)."""
        with self.lock:
            return [line.origin for line, _ in self.lines if line.origin is not None]

    def start(self, job: "_Job") -> None:
        """A line of its own for `job`, started at once (it waits for its turn: LineAttempts.turn)."""
        line = copy.copy(self.walk)
        line.result, line.jobs, line.floor_hung, line.pops = LadderResult(self.walk.ladder), [job], set(), []
        # A line on an engine reads at once (its thread waits on the engine anyway); here, beside its next attempt.
        line.undo, line.reads = [], Reads(self.reader, background=self.attempts.here)
        line.lines, line.origin = self, job
        with self.lock:
            line.first = not self.lines
            line.chain = f"{len(self.lines)}:{job.name}"
            self.lines.append((line, self.pool.submit(self._run_line, line)))

    def _run_line(self, line: "_Walk") -> LadderResult:
        """The line's walk, once its turn comes; `attempts` told when it asks for no more (on an engine, its claim
        on a GPU ends)."""
        try:
            self.attempts.turn(line)
            return line.run()
        finally:
            self.attempts.chain_done(line.chain)

    def attempt(self, line: "_Walk", options: ProfileOptions, tag: Tag, context: RunContext) -> Attempt:
        if self.cancel.is_set():
            raise KeyboardInterrupt("the walk was interrupted")
        return self.attempts.attempt(line, options, tag, context)

    def run(self) -> LadderResult:
        try:
            for job in self.walk.jobs:  # inside: an interrupt while they start cancels those started
                self.start(job)
            done = self._wait()
        except BaseException as e:
            self.cancel.set()  # no new attempt; the jobs running now are cancelled, their lines told
            self.attempts.cancel()
            self.pool.shutdown(wait=True, cancel_futures=True)
            stopped = self._interrupted() if isinstance(e, KeyboardInterrupt) and self.attempts.here else None
            if stopped is not None:  # attempts made here: the first line's stopped attempt says what was stopped
                raise stopped from e
            raise
        self.pool.shutdown(wait=True, cancel_futures=True)
        return self._merged(done)

    def _interrupted(self) -> Optional[ProfileInterrupted]:
        """The first line's attempt that the interrupt stopped, where attempts are made in this process."""
        with self.lock:
            futures = [future for _, future in self.lines]
        for future in futures:
            if future.done() and not future.cancelled() and isinstance(future.exception(), ProfileInterrupted):
                return future.exception()
        return None

    def _wait(self) -> list["_Walk"]:
        """The lines in order, each waited for, up to the first that stops the walk (the later ones cancelled)."""
        done: list["_Walk"] = []
        while True:
            with self.lock:
                if len(done) == len(self.lines):
                    return done
                line, future = self.lines[len(done)]
            while not cf.wait([future], timeout=0.5).done:  # short waits: Ctrl-C reaches this thread between them
                pass
            future.result()  # the line's own exception, if any
            done.append(line)
            if line.result.stopped:
                self.cancel.set()
                self.attempts.cancel()
                return done

    def _merged(self, lines: list["_Walk"]) -> LadderResult:
        """The lines' steps in the serial walk's order, the rows' attempt numbers those of the whole walk."""
        result = self.walk.result
        for line in lines:
            part = line.result
            cut = self._cut(line, len(result.attempts))
            steps, unprofiled = line.pops[cut] if cut is not None else (len(part.steps), len(part.unprofiled))
            kept, frames = list(part.steps[:steps]), list(part.frames)
            for pop, i, step, f, frame in reversed(line.undo if cut is not None else []):
                if pop >= cut and i < len(kept):  # a job past the cut changed an earlier step: never run serially
                    kept[i], frames[f] = step, frame
            base = len(result.steps)
            for frame in frames[:sum(1 for s in kept if s.attempt is not None)]:
                if len(frame):
                    frame = frame.copy()
                    frame[ATTEMPT_COLUMN] = frame[ATTEMPT_COLUMN] + base
                result.frames.append(frame)
            result.steps += kept
            for kernel in part.unprofiled[:unprofiled]:
                result.unprofiled.append(kernel)
                result.why_unprofiled[kernel] = part.why_unprofiled[kernel]
            result.stopped = (f"the walk reached max_attempts={self.walk.s.max_attempts}" if cut is not None
                              else part.stopped)
            if result.stopped:
                break
        self.walk._note_shape()  # the job's shape as the attempts showed it
        store = self.walk.session.store
        result.notes = list(store.notes) if store is not None else []
        return result

    def _cut(self, line: "_Walk", before: int) -> Optional[int]:
        """The job of `line` at which the serial walk, `before` attempts in, would reach max_attempts."""
        for i, (steps, _) in enumerate(line.pops):
            if before + sum(1 for s in line.result.steps[:steps] if s.attempt is not None) >= self.walk.s.max_attempts:
                return i
        return None


def _one_at_a_time(reader: Callable[[Attempt], "pd.DataFrame"]) -> Callable[[Attempt], "pd.DataFrame"]:
    """`reader`, called by one thread at a time."""
    lock = threading.Lock()

    def read(attempt: Attempt) -> "pd.DataFrame":
        with lock:
            return reader(attempt)

    return read


class EngineStopped(Exception):
    """An engine attempt that could not be made (every GPU or node set aside, the engine stopped): the line stops
    there as the serial walk stops on a GPU that keeps processes, its steps so far kept."""


#: Lines walked at once on the engine (threads that wait on it; its GPUs bound the attempts).
LINES_AT_ONCE = 64
