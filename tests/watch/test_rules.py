"""The stall rule and the total timeout, on injected time (no processes, no waiting)."""

import math

import pytest

from nsightwrap.ncu.events import KernelDone, KernelStarted, NcuWarning, Output, Progress, ReplayPass
from nsightwrap.ncu.output import OutputParser
from nsightwrap.ncu.progress import StallRule, WatchState
from nsightwrap.watch.rules import TotalTimeout

WARNING = "Launching the workload is taking more time than expected. If this continues to hang, ..."


def feed(state, t, *events):
    for e in events:
        state.observe(e, t)


def marks(kid, t0, gap, n=4):
    """n dots `gap` seconds apart after a 0% at t0: [(t, event), ...]."""
    out = [(t0, Progress(kid, "0%", 0, 0))]
    for i in range(1, n + 1):
        out.append((t0 + i * gap, Progress(kid, ".", 0, i)))
    return out


def test_no_kernel_in_progress_never_stalls():
    s = WatchState(0.0, 0.0)
    rule = StallRule(1.0)
    assert rule(s, 1000.0) is None
    assert rule.deadline(s) == math.inf


def test_real_hang_shape_is_caught_after_the_timeout():
    # hang-at-0pct.jsonl: header at 1.49, "0%.." at 1.55, warning at 4.56, silence.
    s = WatchState(0.0, 0.0)
    feed(s, 1.552, KernelStarted("wait_for_host", 0), Progress(0, "0%", 0, 0), Progress(0, ".", 0, 1),
         Progress(0, ".", 0, 2))
    feed(s, 4.556, NcuWarning(WARNING))
    rule = StallRule(10.0)
    assert rule(s, 11.5) is None
    v = rule(s, 11.56)
    assert v.status == "hang"
    assert v.stall.kernel == "wait_for_host" and v.stall.where == "0%.."
    assert v.stall.before_first_progress and v.stall.slow_warning_seen
    assert "single replay pass longer than the stall timeout" in v.reason
    assert "--stall-timeout" in v.reason
    assert rule.deadline(s) == pytest.approx(11.552)


def test_warning_is_not_progress_and_not_a_verdict():
    s = WatchState(0.0, 0.0)
    feed(s, 1.0, KernelStarted("k", 0), Progress(0, "0%", 0, 0))
    feed(s, 4.0, NcuWarning(WARNING))
    assert StallRule(10.0)(s, 10.9) is None
    assert StallRule(10.0)(s, 11.0) is not None


def test_progress_resets_the_clock():
    s = WatchState(0.0, 0.0)
    feed(s, 0.0, KernelStarted("k", 0))
    for t, e in marks(0, 0.0, 3.0, n=9):
        feed(s, t, e)
    rule = StallRule(5.0)
    assert rule(s, 27.0 + 4.9) is None


def test_allowance_grows_with_observed_gaps():
    s = WatchState(0.0, 0.0)
    feed(s, 0.0, KernelStarted("k", 0))
    for t, e in marks(0, 0.0, 4.0, n=3):  # gaps of 4 s
        feed(s, t, e)
    rule = StallRule(5.0, growth=4.0)
    assert rule.allowance(s) == pytest.approx(16.0)
    assert rule(s, 12.0 + 15.9) is None
    assert rule(s, 12.0 + 16.0).stall.allowance_s == pytest.approx(16.0)
    assert not rule(s, 30.0).stall.before_first_progress


def test_gaps_between_kernels_are_not_progress_gaps():
    s = WatchState(0.0, 0.0)
    feed(s, 0.0, KernelStarted("a", 0))
    feed(s, 0.1, KernelDone("a", 0, 10))
    feed(s, 60.0, Output("cpu work took a minute"))  # not a kernel: no stall, no gap
    assert s.longest_gap == pytest.approx(0.0, abs=0.2)
    assert StallRule(1.0)(s, 100.0) is None


def test_application_replay_pass_is_in_progress_until_the_next_event():
    # hang-application-replay.jsonl: the pass line, the warning 3 s later, silence.
    s = WatchState(0.0, 0.0)
    feed(s, 1.0, ReplayPass("k", 0, 1))
    feed(s, 4.0, NcuWarning(WARNING))
    assert StallRule(2.0)(s, 3.5).stall.where == "application replay pass 1"
    feed(s, 1.5, Output("program output"))
    assert StallRule(2.0)(s, 100.0) is None


def test_quiet_application_replay_gets_a_longer_allowance():
    """Silence after a pass line without ncu's warning may be the program's own CPU work."""
    s = WatchState(0.0, 0.0)
    feed(s, 1.0, ReplayPass("k", 0, 1))
    rule = StallRule(2.0)
    assert rule(s, 3.5) is None and rule(s, 6.9) is None
    assert rule(s, 7.0).stall.allowance_s == pytest.approx(6.0)
    feed(s, 4.0, NcuWarning(WARNING))
    assert rule(s, 3.5).stall.allowance_s == pytest.approx(2.0)


def test_total_timeout_and_composition():
    s = WatchState(10.0, 10.0)
    rule = StallRule(5.0) | TotalTimeout(30.0)
    assert rule.deadline(s) == 40.0
    assert rule(s, 39.9) is None
    assert rule(s, 40.0).status == "timeout"
    feed(s, 12.0, KernelStarted("k", 0), Progress(0, "0%", 0, 0))
    assert rule(s, 17.0).status == "hang"  # the stall comes first
    assert rule.deadline(s) == 17.0
    three = rule | TotalTimeout(5.0)
    assert len(three.rules) == 3


def test_invalid_timeouts_fail_when_built():
    with pytest.raises(ValueError):
        StallRule(0)
    with pytest.raises(ValueError):
        TotalTimeout(-1)


def test_cut_progress_line_resumes_after_the_warning():
    """A slow kernel whose line the warning cut goes on: its marks still count."""
    text = ('==PROF== Profiling "k" - 0: 0%.\n==WARNING== ' + WARNING +
            '\n...50%....100% - 10 passes\n==PROF== Profiling "j" - 1: 0%\n3 items\n')
    events = OutputParser().feed(text)
    assert KernelDone("k", 0, 10) in events
    assert [e for e in events if isinstance(e, Progress) and e.kernel_id == 0][-1].percent == 100
    assert Output("3 items") in events  # digits that are not a mark stay program output
    s = WatchState(0.0, 0.0)
    feed(s, 1.0, *events)
    assert s.kernels_done == 1


def test_a_header_without_its_first_mark_is_watched():
    """`Profiling "range" - 0: ` and then nothing (a range whose first pass never ends)."""
    parser = OutputParser()
    assert parser.feed('==PROF== Profiling "range" - 0: ') == []
    header = parser.pending_header
    assert header == KernelStarted("range", 0)
    s = WatchState(0.0, 0.0)
    s.header_seen(header, 1.0)
    v = StallRule(5.0)(s, 6.0)
    assert v.stall.kernel == "range" and v.stall.where == "before its first progress mark"
    s.header_seen(header, 2.0)  # the same header again does not reset the clock
    assert StallRule(5.0)(s, 6.0) is not None
