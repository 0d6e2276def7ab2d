"""Counts and verdicts are exact however long the run, and memory stays bounded (issue 23, item 2).

A cap of 100,000 kept events once made 60,000 kernels "49999 kernel(s)
profiled", turned a late `==ERROR==` (crashed) into an error, and a million
slow-launch warnings into no-kernels. The runs here go through the fake ncu
(a generated transcript) or the watch loop with a program that prints a
fake log; the long cases feed the watch's two stores directly (the parser is
not what is measured there, and would take seconds). Each case is just over
the old cap (50,001 kernels are 100,002 kept events; 110,000 warnings), not
ten times over it: past the cap every event takes the same path, and each
100,000 events cost a second of CPU (issue 20).
"""

from __future__ import annotations

import json
import sys
import tracemalloc

from helpers import app, assert_tree_gone, run_config

from nsightwrap import ProfileOptions, profile_command
from nsightwrap.ncu.attempt import build_attempt
from nsightwrap.ncu.events import KernelDone, KernelStarted, NcuError, NcuWarning, Progress
from nsightwrap.ncu.output import OutputParser
from nsightwrap.ncu.progress import NcuObserver, WatchState, _warned
from nsightwrap.ncu.tally import KEPT_KERNELS, KEPT_LINES, RunTally
from nsightwrap.watch.channels import EventLog
from nsightwrap.watch.rules import RunState
from nsightwrap.watch.run import READ_BUDGET, RunOutcome, watch

SLOW = ("Launching the workload is taking more time than expected. If this continues to hang, terminate the "
        "profile and re-try by profiling the range of all related launches using '--replay-mode range'.")


def kernel_lines(n: int, start: int = 0, marks: str = "0%....50%....") -> str:
    """n kernels' lines. The long counts pass marks="": a kernel's start and end (its two kept events) without
    the progress marks between them, which are counted, not kept, and each cost the fake ncu a write of its own
    (issue 20: 50,001 kernels with marks were 600,000 writes, 1.5 s of the fake's CPU a run)."""
    return "".join(f'==PROF== Profiling "k{i % 7}" - {i}: {marks}100% - 10 passes\n'
                   for i in range(start, start + n))


def write_transcript(path, kernels: int) -> str:
    """A transcript for the fake ncu (FACTS.md's format): connect, `kernels` kernels, disconnect. The kernels are
    one record: the fake writes each piece of ncu's on its own whatever the records, and matches every piece
    against every record (11 records of 5,000 kernels were 0.25 s of its CPU)."""
    with open(path, "w") as f:
        f.write(json.dumps({"t": 0.0, "out": "==PROF== Connected to process 4242 (/usr/bin/app)\n"}) + "\n")
        f.write(json.dumps({"t": 0.0, "out": kernel_lines(kernels, marks="")}) + "\n")
        f.write(json.dumps({"t": 0.0, "out": "==PROF== Disconnected from process 4242\n"}) + "\n")
        f.write(json.dumps({"status": "exited", "rc": 0}) + "\n")
    return str(path)


def profile_transcript(tmp_path, monkeypatch, kernels: int):
    monkeypatch.setenv("FAKE_NCU_TRANSCRIPT", write_transcript(tmp_path / "long.jsonl", kernels))
    a = profile_command(app(), ProfileOptions(set="basic"), run_config(tmp_path, stall_timeout=30.0))
    assert_tree_gone(a.cookie)
    return a


def test_fifty_thousand_and_one_kernels_through_the_fake_ncu_are_counted_exactly(fake_env, tmp_path,
                                                                                monkeypatch):
    # 100,002 kept events (each kernel's start and end): the old cap counted 49,999 of these kernels.
    a = profile_transcript(tmp_path, monkeypatch, 50_001)
    assert a.status == "ok", a.describe()
    assert a.n_kernels == 50_001 and a.finished_count == 50_001
    assert a.reason == "50001 kernel(s) profiled"
    assert a.report_complete and a.report is not None and a.report.exists()
    assert "50001 kernel(s) profiled" in a.describe()
    d = a.to_dict()
    assert d["kernel_count"] == 50_001 and d["report_complete"] is True
    assert len(d["kernels"]) == 2 * KEPT_KERNELS  # the first and the last, not all
    assert d["kernels"][0]["id"] == 0 and d["kernels"][-1]["id"] == 50_000


def feed(observer: NcuObserver, log: EventLog, events: list, t: float) -> None:
    """What the watch loop does with the events of one chunk: the observer folds, the log keeps."""
    for e in events:
        observer.summary.add(e)
        observer.state.observe(e, t)
    log.add(t, events)


def outcome(observer: NcuObserver, log: EventLog, returncode: int = 0) -> RunOutcome:
    return RunOutcome(argv=["ncu", "app"], cookie="c", returncode=returncode, events=log.events, log="",
                      state=observer.state, elapsed_s=1.0, started_wall=0.0, summary=observer.summary)


def test_more_slow_launch_warnings_than_the_old_cap_and_then_kernels_is_ok():
    observer = NcuObserver(0.0)
    log = EventLog(NcuObserver.keep)
    warning = NcuWarning(SLOW)
    for t in range(11):
        feed(observer, log, [warning] * 10_000, float(t))
    feed(observer, log, [KernelStarted("k", 0), KernelDone("k", 0, 10), KernelStarted("k", 1),
                         KernelDone("k", 1, 10)], 100.0)
    a = build_attempt(outcome(observer, log))
    assert a.status == "ok" and a.n_kernels == 2, a.describe()
    assert a.slow_launch_warnings == 110_000
    assert len(a.warnings) == 2 * KEPT_LINES and a.warnings_not_kept == 110_000 - 2 * KEPT_LINES
    assert observer.summary.slow_warnings == 110_000  # a count, not a list of every warning's time
    assert len(log.events) < 2 * 1000 * 4  # bounded: the first and last of each kept type


def test_nothing_kept_grows_with_the_number_of_events():
    observer = NcuObserver(0.0)
    log = EventLog(NcuObserver.keep)
    sizes = []
    for n in (3_000, 30_000):  # both past the 2 x KEPT_KERNELS kept kernels: the second adds only counts
        for i in range(n):
            feed(observer, log, [KernelStarted("k", i), Progress(i, "50%", 50, 3), KernelDone("k", i, 10),
                                 NcuError(f"e{i}")], float(i))
        sizes.append((len(log.events), len(observer.summary.done.items()), len(observer.summary.errors.items())))
    assert sizes[0] == sizes[1]  # 10x the events, the same memory
    assert observer.summary.kernel_count == 33_000 and observer.summary.errors.count == 33_000
    assert log.counts["Progress"] == 33_000


def test_the_tally_folds_kept_events_alike_for_an_outcome_without_a_summary():
    events = [(0.0, KernelDone("k", i, 10)) for i in range(3)] + [(1.0, NcuError("x"))]
    t = RunTally.of(events)
    assert t.kernel_count == 3 and t.errors.items() == ["x"]
    a = build_attempt(RunOutcome(argv=["ncu"], cookie="c", returncode=0, events=events, log="",
                                 state=RunState(0.0, 0.0), elapsed_s=1.0, started_wall=0.0))
    assert a.status == "ok" and a.n_kernels == 3


PRINT_FILE = "import sys; sys.stdout.write(open(sys.argv[1]).read()); sys.exit(int(sys.argv[2]))"
WRITE_FILE = "import shutil, sys; shutil.copyfile(sys.argv[1], sys.argv[2])"


def test_the_watch_loop_counts_fifty_thousand_and_one_kernels_and_an_error_after_them_gives_crashed(tmp_path):
    """One run for two checks (each costs a second of parsing): the watch loop's count past the old cap (the
    fake ncu's run above counts them through the log file, ok), and an ==ERROR== after 100,002 kept events
    (each kernel's start and end), which the old cap lost: an error, not crashed."""
    log = tmp_path / "ncu.txt"
    log.write_text(kernel_lines(50_001, marks="") + "==ERROR== The application returned an error code (3).\n"
                   "==PROF== Disconnected from process 4242\n")
    out = watch([sys.executable, "-c", PRINT_FILE, str(log), "1"], None, observer=NcuObserver, guard=False)
    a = build_attempt(out)
    assert a.status == "crashed" and a.exit_code == 7, a.describe()
    assert "exit code 3" in a.reason
    assert a.n_kernels == 50_001 and a.finished_count == 50_001
    assert len(out.events) <= 4 * KEPT_KERNELS + 2  # the first and last kernels' two events; the error, the end


def test_the_unread_log_is_parsed_in_bounded_pieces(tmp_path):
    """A log the tool wrote just before it exited is read at the end in pieces, not in one."""
    source = tmp_path / "source.txt"
    source.write_text(kernel_lines(10_000) + "0%" + "." * (2 << 20))  # 2.6 MB (2.6 x READ_BUDGET), dots unended
    fed = []

    class Measured(NcuObserver):
        def feed(self, text, now):
            fed.append(len(text))
            return super().feed(text, now)

    tool_log = tmp_path / "ncu.log"
    out = watch([sys.executable, "-c", WRITE_FILE, str(source), str(tool_log)], None, observer=Measured,
                tool_log=str(tool_log), guard=False)
    assert sum(fed) == source.stat().st_size
    assert max(fed) <= READ_BUDGET
    assert build_attempt(out).n_kernels == 10_000


def test_the_slow_launch_warning_still_counts_for_the_kernel_in_progress():
    state = WatchState(started_at=0.0, last_output_at=0.0)
    state.observe(NcuWarning(SLOW), 1.0)
    state.observe(KernelStarted("k", 0), 2.0)
    assert not _warned(state)
    state.observe(NcuWarning(SLOW), 3.0)
    assert _warned(state)
    assert not hasattr(state, "slow_warnings")  # the count is RunTally's (the attempt's); the rules read the time


def test_a_long_run_of_progress_marks_is_parsed_in_little_memory():
    """Megabytes of dots in one chunk: the regex engine once kept ~150 bytes a mark (1 MB of dots, 150 MB)."""
    parser = OutputParser()
    dots = "." * (4 << 20)
    parser.feed('==PROF== Profiling "k" - 0: 0%')
    tracemalloc.start()
    try:
        events = parser.feed(dots + "100% - 10 passes\n")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 16 << 20, f"{peak >> 20} MB"
    assert events[-1] == KernelDone("k", 0, 10)
    assert sum(isinstance(e, Progress) for e in events) <= len(dots) // (64 * 1024) + 2
