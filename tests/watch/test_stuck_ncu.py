"""An ncu stuck after its program ended is judged, and the stop is prompt (issue 23, item 3).

Without --timeout, a front end that wedged or was stopped (SIGSTOP) after
the program's last `Disconnected` kept nsightwrap waiting for ever; the
stop never sent SIGCONT (a stopped ncu cost the whole grace, a SIGKILL and
the report) and waited its whole grace even when the process it waited for
had exited. The rule is tested with injected time, the runs with the fake
ncu's FAKE_NCU_STUCK modes.
"""

from __future__ import annotations

import json
import math
import sys
import textwrap
import time
from typing import Optional

import pytest
from helpers import app, assert_clean, cli_main, fast_stop, no_leftovers, run_config

from nsightwrap import ProfileOptions, profile_command
from nsightwrap.ncu.context import RunConfig
from nsightwrap.ncu.events import Connected, Disconnected, KernelDone, KernelStarted
from nsightwrap.ncu.progress import WatchState
from nsightwrap.status import ERROR, TIMEOUT
from nsightwrap.watch.rules import DEFAULT_STUCK_TIMEOUT, RunState, ToolStuck, Verdict, WatchRule
from nsightwrap.watch.run import watch
from nsightwrap.watch.tree import SETTLE_S, StopPolicy

# --- the rule, time injected ----------------------------------------------------------------------------


def test_the_rule_waits_while_the_program_runs():
    rule = ToolStuck(5.0, "ncu")
    state = RunState(started_at=0.0, last_output_at=0.0)
    assert rule(state, 1e6) is None and rule.deadline(state) == math.inf


def test_the_rule_calls_a_silent_tool_stuck_after_the_program_ended():
    rule = ToolStuck(5.0, "ncu")
    state = RunState(started_at=0.0, last_output_at=10.0, program_ended_at=10.0)
    assert rule.deadline(state) == 15.0
    assert rule(state, 14.9) is None
    verdict = rule(state, 15.0)
    assert verdict is not None and verdict.status == ERROR and verdict.stall is None
    assert "ncu itself is stuck, not a kernel" in verdict.reason and "--stuck-timeout" in verdict.reason


def test_output_after_the_program_ended_restarts_the_clock():
    """ncu prints its results page, or application replay's report creation: not stuck."""
    rule = ToolStuck(5.0, "ncu")
    state = RunState(started_at=0.0, last_output_at=13.0, program_ended_at=10.0)
    assert rule(state, 17.0) is None and rule.deadline(state) == 18.0


def test_the_limit_has_a_documented_default_and_must_be_positive():
    assert ToolStuck().seconds == DEFAULT_STUCK_TIMEOUT == 60.0
    with pytest.raises(ValueError):
        ToolStuck(0.0)
    with pytest.raises(ValueError):
        RunConfig(stuck_timeout=-1.0)


def test_the_program_ends_with_the_last_process_ncu_was_connected_to():
    s = WatchState(started_at=0.0, last_output_at=0.0)
    s.observe(Connected(1, "/a"), 1.0)
    s.observe(Connected(2, "/a"), 1.5)
    s.observe(KernelStarted("k", 0), 2.0)
    s.observe(KernelDone("k", 0, 10), 2.5)
    s.observe(Disconnected(1), 3.0)
    assert s.program_ended_at is None  # one process still runs
    s.observe(Disconnected(2), 4.0)
    assert s.program_ended_at == 4.0
    s.observe(Connected(3, "/a"), 4.2)  # application replay runs the program again
    assert s.program_ended_at is None


# --- the fake ncu stuck after the program ended ----------------------------------------------------------


def stuck_run(tmp_path, monkeypatch, mode: str):
    monkeypatch.setenv("FAKE_NCU_STUCK", mode)
    t0 = time.monotonic()
    # The total timeout only keeps a failing test from waiting for ever (as nsightwrap once did).
    a = profile_command(app("vec_add", "gemm_kernel"), ProfileOptions(set="basic"),
                        run_config(tmp_path, stuck_timeout=0.5, timeout=30.0))
    return a, time.monotonic() - t0


@pytest.mark.parametrize("mode", ["wedge", "stop"])
def test_an_ncu_stuck_after_the_program_ended_is_called_and_stopped(mode, fake_env, tmp_path, monkeypatch):
    a, took = stuck_run(tmp_path, monkeypatch, mode)
    assert a.status == ERROR and a.exit_code == 5, a.describe()
    assert "ncu itself is stuck" in a.reason and a.stall is None
    assert a.n_kernels == 2  # the kernels profiled before are kept
    assert a.stop.graceful, a.stop.steps  # SIGINT (with SIGCONT) was enough, even for a stopped ncu
    assert not any("SIGKILL" in s or "SIGTERM" in s for s in a.stop.steps), a.stop.steps
    assert a.report is not None and a.report.exists()  # finished on SIGINT
    assert a.stop.duration_s < 1.5 and took < 15.0
    assert_clean(a)


def test_a_stopped_ncu_is_continued_by_every_stop(fake_env, tmp_path, monkeypatch):
    """Even with the stuck rule off, a stop for another reason (here --timeout) continues a stopped ncu."""
    monkeypatch.setenv("FAKE_NCU_STUCK", "stop")
    a = profile_command(app("vec_add"), ProfileOptions(set="basic"),
                        run_config(tmp_path, stuck_timeout=None, timeout=1.5, stop=fast_stop(grace=3.0)))
    assert a.status == "timeout", a.describe()
    assert a.stop.graceful and a.stop.duration_s < 1.5, a.stop.steps
    assert a.report is not None and a.report.exists()
    assert_clean(a)


# --- the stop waits for what it waits for, not its whole grace --------------------------------------------

FRONT = textwrap.dedent("""
    import os, signal, subprocess, sys, time
    # A helper that ignores SIGINT and is left behind when the front end exits.
    subprocess.Popen([sys.executable, "-c", "import signal, time; signal.signal(signal.SIGINT, signal.SIG_IGN); "
                      "print('helper ready', flush=True); time.sleep(60)"])
    signal.signal(signal.SIGINT, lambda *a: os._exit(0))
    print("started", flush=True)
    time.sleep(60)
""")


class OnceSaid(WatchRule):
    """A timeout once every one of `words` was printed (both processes have set their signals up), rather than
    after a fixed second; `seconds` only bounds a run that never says them."""

    def __init__(self, seconds: float, *words: str):
        self.seconds = seconds
        self.waiting = set(words)

    def hear(self, text: str) -> None:
        self.waiting -= {w for w in self.waiting if w in text}

    def deadline(self, state: RunState) -> float:
        return state.started_at + (0.0 if not self.waiting else self.seconds)

    def __call__(self, state: RunState, now: float) -> Optional[Verdict]:
        if not self.waiting or now - state.started_at >= self.seconds:
            return Verdict(TIMEOUT, "both processes are up" if not self.waiting else "they never said so")
        return None


def test_the_stop_moves_on_once_the_front_end_has_exited(tmp_path):
    front = tmp_path / "ncu"  # looks like a profiler front end to the stop
    front.write_text(FRONT)
    policy = StopPolicy(grace=4.0, term_wait=2.0, kill_wait=2.0, drain=1.0)
    rule = OnceSaid(30.0, "started", "helper ready")
    out = watch([sys.executable, str(front)], rule, policy=policy, guard=False, on_output=rule.hear)
    stop = out.stop
    assert stop is not None and "SIGINT to profiler" in stop.steps[0], stop.steps
    assert any("SIGTERM" in s for s in stop.steps), stop.steps  # the helper, once the front end was gone
    assert stop.survivors == []
    assert stop.duration_s < policy.grace - 1.0, (stop.duration_s, stop.steps)  # not the whole grace
    assert stop.duration_s >= SETTLE_S * 0.8  # the others were given their moment to follow
    no_leftovers()


def test_the_cli_sets_the_limit_and_says_ncu_is_stuck(fake_env, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("FAKE_NCU_STUCK", "wedge")
    code, out, err = cli_main(["run", "--json", "-q", "--stuck-timeout", "0.5", "--timeout", "30", "--set", "basic",
                               "-o", str(tmp_path / "r"), "--", *app("vec_add")], capsys)
    d = json.loads(out)
    assert code == 5 and d["status"] == ERROR and "ncu itself is stuck" in d["reason"], err
    assert d["kernel_count"] == 1 and d["stop"]["graceful"]
    assert cli_main(["run", "--stuck-timeout", "0", "--", *app("vec_add")], capsys)[0] == 2


def test_sweep_sections_takes_the_limit_its_reason_names(fake_env, tmp_path, capsys, monkeypatch):
    """The stuck reason says "raise the limit with --stuck-timeout SEC": sweep-sections has the flag too, and
    its probes' RunConfig gets it (without it, the sweep would wait the default 60 s)."""
    monkeypatch.setenv("FAKE_NCU_STUCK", "wedge")
    monkeypatch.setenv("NSIGHTWRAP_STORE", str(tmp_path / "s.db"))
    t0 = time.monotonic()
    code, out, err = cli_main(["sweep-sections", "--json", "-q", "--no-preflight", "--stuck-timeout", "0.5",
                               "--stall-timeout", "0.4", "--set", "basic", "--", *app("vec_add")], capsys)
    took = time.monotonic() - t0
    d = json.loads(out)
    assert "ncu itself is stuck" in d["error"] and "--stuck-timeout SEC" in d["error"], err
    assert "stuck_timeout=SEC in Python" in d["error"]  # the Python hint is kept as it is
    assert took < 30, took
    assert cli_main(["sweep-sections", "--stuck-timeout", "0", "--", *app("vec_add")], capsys)[0] == 2


def test_run_and_sweep_share_one_stuck_timeout_option():
    from nsightwrap.cli.commands import build_parser

    parser = build_parser()
    helps = {name: next(a for a in parser.commands[name]._actions if "--stuck-timeout" in a.option_strings)
             for name in ("run", "sweep-sections")}
    assert helps["run"].help == helps["sweep-sections"].help and helps["run"].default == DEFAULT_STUCK_TIMEOUT
