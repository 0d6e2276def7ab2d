"""A walk reads each attempt's report while it goes on (issue 19): the next attempt starts once the last one is
recorded, not once its report is read; the rows, their order and a failed read are the same as before. The program
walks in three attempts: it hangs on k (its partial report is read too), it runs again without k, k alone at the
ladder's second rung works (single-process attempts: a third of the CPU of a 2-rank torchrun job's two)."""

from __future__ import annotations

import os
import threading

import pandas as pd
import pytest
from helpers import app, attempt_rows, fast_stop, run_config

from nsightwrap.errors import ReportError
from nsightwrap.fallback.ladder import ladder_from_dict
from nsightwrap.fallback.session import Session
from nsightwrap.fallback.walk import walk_ladder
from nsightwrap.ncu.context import RunContext
from nsightwrap.ncu.listen import RunListener
from nsightwrap.ncu.options import ProfileOptions

JOB = app("vec_add", "k@hang-if=SpeedOfLight", "vec_add")
TWO = ladder_from_dict({"name": "two", "rungs": [
    {"name": "requested", "requested": True}, {"name": "duration", "metrics": ["gpu__time_duration.sum"]}]})


class Watched(Session):
    """A session that says when each attempt starts."""

    def __init__(self, *a, **kw) -> None:
        super().__init__(*a, **kw)
        self.started: list[threading.Event] = [threading.Event(), threading.Event()]
        self.calls = 0

    def attempt(self, *a, **kw):
        self.started[min(self.calls, 1)].set()
        self.calls += 1
        return super().attempt(*a, **kw)


@pytest.fixture
def session(tmp_path, fake_env, tag):
    cfg = run_config(tmp_path, stall_timeout=0.6, stall_timeout_given=True, env=dict(os.environ),
                     stop=fast_stop(grace=0.5))
    return Watched.open(JOB, cfg)


def test_the_next_attempt_starts_while_the_last_report_is_read(session):
    seen = []

    def reader(attempt):
        if not seen:  # the first report: read while the second attempt runs, not before it starts
            seen.append(session.started[1].wait(timeout=10))
        seen.append(threading.current_thread().name)
        return attempt_rows(attempt)

    r = walk_ladder(session, ProfileOptions(set="basic"), TWO, reader=reader)
    assert [a.status for a in r.attempts] == ["hang", "ok", "ok"] and session.calls == 3
    assert seen[0] is True  # the old walk read it first: the second attempt had not started (False after 10 s)
    assert all(name.startswith("nsightwrap-report") for name in seen[1:])
    # The rows as before: each attempt's, in order, marked with its attempt's index.
    assert list(r.df["function"]) == [k.name for a in r.attempts for k in a.kernels]
    assert sorted(set(r.df["attempt"])) == [i for i, s in enumerate(r.steps) if s.attempt is not None]
    assert not [t for t in threading.enumerate() if t.name.startswith("nsightwrap-report")]  # no thread left


def test_reads_wait_until_the_next_attempt_has_begun(tmp_path, fake_env, tag):
    """pandas and the reports are read beside an attempt once its watch has begun, never during its launch."""
    events = []

    class Heard(RunListener):
        def started(self, state, rule):
            events.append("started")

    def reader(attempt):
        events.append("read")
        return attempt_rows(attempt)

    cfg = run_config(tmp_path, stall_timeout=0.6, stall_timeout_given=True, env=dict(os.environ),
                     stop=fast_stop(grace=0.5))
    session = Session.open(JOB, RunContext.create(cfg).with_listener(Heard()))
    r = walk_ladder(session, ProfileOptions(set="basic"), TWO, reader=reader)
    assert len(r.attempts) == 3 and sorted(events) == ["read"] * 3 + ["started"] * 3
    started = [i for i, e in enumerate(events) if e == "started"]
    read = [i for i, e in enumerate(events) if e == "read"]
    assert all(read[i] > started[i + 1] for i in range(2)), events  # attempt i's report once attempt i+1's watch began


def test_a_report_that_cannot_be_read_still_fails_the_walk(session):
    def reader(attempt):
        raise ReportError(attempt.report, "cut short", "read it again")

    with pytest.raises(ReportError, match="cut short"):
        walk_ladder(session, ProfileOptions(set="basic"), TWO, reader=reader)
    assert gone("nsightwrap-report")  # raised at once; the idle thread ends by itself


def gone(prefix: str) -> bool:
    for _ in range(500):
        if not [t for t in threading.enumerate() if t.name.startswith(prefix)]:
            return True
        threading.Event().wait(0.01)
    return False


def test_a_failed_read_is_raised_before_the_next_attempt_once_it_is_known(tmp_path):
    """Reads.check, which the walk calls before each step: a read that has failed by then is raised then."""
    from nsightwrap.fallback.ladder import load_ladder
    from nsightwrap.fallback.reads import Pending, Reads

    def reader(attempt):
        raise ReportError(attempt.report, "cut short", "read it again")

    class Done:  # what frame_of needs of an attempt that kept a report with a finished kernel
        report, finished_kernels = tmp_path / "r.ncu-rep", ["k"]

    reads = Reads(reader)
    try:
        frames = [reads.frame(Done(), load_ladder("default")[0], 0, "main")]
        assert isinstance(frames[0], Pending) and frames[0].future is None  # started with the next attempt
        reads.check(frames)
        reads.start()
        frames[0].future.exception(timeout=20)  # the read is over
        with pytest.raises(ReportError, match="cut short"):
            reads.check(frames)
        with pytest.raises(ReportError, match="cut short"):
            reads.resolved(frames)
    finally:
        reads.close()
    assert not [t for t in threading.enumerate() if t.name.startswith("nsightwrap-report")]


def test_rows_the_walk_gives_up_are_not_read(tmp_path):
    """A restarted multi-process job drops the rows of its hung attempt: that report is not read at all."""
    from nsightwrap.fallback.ladder import load_ladder
    from nsightwrap.fallback.reads import Reads

    read = []

    class Done:
        report, finished_kernels = tmp_path / "r.ncu-rep", ["k"]

    reads = Reads(lambda attempt: read.append(attempt) or pd.DataFrame({"function": ["k"]}))
    try:
        rung = load_ladder("default")[0]
        frames = [reads.frame(Done(), rung, 0, "main"), reads.frame(Done(), rung, 1, "main")]
        frames[0] = reads.drop(frames[0])
        kept = reads.resolved(frames)
    finally:
        reads.close()
    assert len(read) == 1 and len(kept[0]) == 0 and list(kept[1]["attempt"]) == [1]
