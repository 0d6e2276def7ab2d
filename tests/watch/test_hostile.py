"""A watchdog that output and signals cannot fool or kill (issue 11), on real process trees.

With the fake ncu: a program flooding its stdout, a chatty program cutting
into ncu's progress lines, a burst of Ctrl-C during a slow stop, SIGKILL of
nsightwrap itself, and `cleanup` for when the guard died too. Each test
checks that no process of the tree is left.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from helpers import app, cli_main, read_until, run_cli, start_cli

from nsightwrap.ncu.context import RunConfig
from nsightwrap.ncu.engine import profile_command
from nsightwrap.ncu.events import Output
from nsightwrap.ncu.options import ProfileOptions
from nsightwrap.watch.records import RUNTIME_VAR
from nsightwrap.watch.rules import TotalTimeout, WatchRule
from nsightwrap.watch.run import watch
from nsightwrap.watch.tree import COOKIE_VAR, OWNER_VAR, StopPolicy, processes_with


@pytest.fixture
def env(fake_env, tmp_path, monkeypatch):
    """The fake ncu, and run records of this test only."""
    monkeypatch.setenv(RUNTIME_VAR, str(tmp_path / "runtime"))
    return dict(os.environ)


def records(tmp_path) -> list[str]:
    folder = tmp_path / "runtime"
    return sorted(p.name for p in folder.glob("*.run.json")) if folder.exists() else []


def wait_for(p: subprocess.Popen, needle: bytes) -> bytes:
    return read_until(p, p.stderr, needle)


def cookie_of(pid: int) -> str:
    return processes_with(OWNER_VAR, str(pid))[0][1][COOKIE_VAR]


def gone_within(cookie: str, seconds: float) -> bool:
    end = time.monotonic() + seconds
    while processes_with(COOKIE_VAR, cookie):
        if time.monotonic() > end:
            return False
        time.sleep(0.05)
    return True


# -- output --------------------------------------------------------------------


def test_a_flood_is_not_a_hang_and_the_timeout_still_stops_it(env, tmp_path):
    t0 = time.monotonic()
    r = run_cli(["run", "-q", "--json", "--timeout", "1.2", "--stall-timeout", "0.6", "-o", str(tmp_path / "r"), "--",
                 *app("vec_add", "flood")], env)
    wall = time.monotonic() - t0
    d = json.loads(r.stdout)
    assert r.returncode == 4 and d["status"] == "timeout", r.stderr
    assert d["kernels"] == [{"name": "vec_add", "id": 0, "passes": 10, "replay": "kernel"}]
    assert d["elapsed_s"] < 3.0  # launch to a stopped tree
    assert wall < 8.0  # with Python's and the fake's start-up, on a loaded machine
    assert processes_with(COOKIE_VAR, d["cookie"]) == []


class Spy(WatchRule):
    """Never stops anything; notes when it was asked."""

    def __init__(self):
        self.times: list[float] = []

    def __call__(self, state, now):
        self.times.append(now)
        return None


def test_rules_are_checked_every_turn_whatever_the_output_rate():
    spy = Spy()
    flood = "import os\nb = b'y' * 65536\nwhile True: os.write(1, b)"  # not even a newline
    # Half a second: ~300 MB of it here (70 times the kept tail); each second of flood is ~0.7 s of CPU (issue 20)
    out = watch([sys.executable, "-c", flood], spy | TotalTimeout(0.5))
    assert out.verdict.status == "timeout" and out.elapsed_s < 2.0
    gaps = sorted(b - a for a, b in zip(spy.times, spy.times[1:]))
    assert gaps[len(gaps) // 2] <= 0.1 and gaps[-1] < 0.5, gaps[-5:]
    assert len(out.log) < 5 << 20  # a bounded head and tail of what may be gigabytes
    assert "characters not kept" in out.log


@pytest.mark.parametrize("chatter", ["chatty:2", "chatty-cr:2"])
@pytest.mark.parametrize("log_channel", [True, False], ids=["log-file", "stdout"])
def test_a_chatty_program_loses_no_kernel(chatter, log_channel, env, tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_NCU_SCALE", "0.3")
    seen, printed = [], []
    cfg = RunConfig(report_dir=str(tmp_path), check_gpu=False, stall_timeout=2.0, log_channel=log_channel)
    a = profile_command(app(chatter, "k1", "k2@slow=0.05", "k3"), ProfileOptions(set="basic"), cfg,
                        on_event=seen.append, on_output=printed.append)
    assert a.status == "ok", a.describe()
    assert [k.name for k in a.kernels] == ["k1", "k2", "k3"]
    assert ("--log-file" in a.command) == log_channel
    out = "".join(printed)
    assert "Profiling \"k2\"" in out and ("step" in out or "%|" in out)  # both reach the caller
    if log_channel:
        assert not any(isinstance(e, Output) for e in seen)  # the program's output is never parsed
    assert processes_with(COOKIE_VAR, a.cookie) == []


# -- signals -------------------------------------------------------------------


def test_five_ctrl_c_during_a_stop_whose_ncu_ignores_the_first_two(env, tmp_path):
    env = dict(env, FAKE_NCU_IGNORE_SIGNALS="2")
    p = start_cli(["run", "--json", "--stall-timeout", "0.5", "--grace", "5", "-o", str(tmp_path / "r"), "--",
                   *app("vec_add", "k@hang")], env)
    try:
        wait_for(p, b"0%..")
        cookie = cookie_of(p.pid)
        time.sleep(1.0)  # the hang is called after 0.5 s: the stop is under way, its SIGINT ignored
        for _ in range(5):
            p.send_signal(signal.SIGINT)
            time.sleep(0.05)
        out, err = p.communicate(timeout=30)
    finally:
        p.kill()
    assert p.returncode == 130, err
    d = json.loads(out)
    assert d["status"] == "interrupted" and "while stopping a hang" in d["reason"]
    assert "more interrupt(s) during the stop" in " ".join(d["stop"]["steps"])
    assert d["kernels"][0]["name"] == "vec_add" and Path(d["report"]).exists()  # the partial report is kept
    assert b"Traceback" not in err
    assert processes_with(COOKIE_VAR, cookie) == []
    assert records(tmp_path) == []


def test_sigkill_of_nsightwrap_mid_hang_leaves_nothing(env, tmp_path):
    p = start_cli(["run", "--stall-timeout", "60", "-o", str(tmp_path / "r"), "--", *app("vec_add", "k@hang")], env)
    try:
        wait_for(p, b"0%..")
        cookie = cookie_of(p.pid)
        assert len(processes_with(COOKIE_VAR, cookie)) >= 4  # ncu, inner ncu, launcher, target
        assert records(tmp_path) == [f"{cookie}.run.json"]
        p.send_signal(signal.SIGKILL)
        p.wait()
        assert gone_within(cookie, 5.0)  # the guard did it: no `cleanup`
    finally:
        p.kill()
    assert (tmp_path / "r.ncu-rep").exists()  # SIGINT first: ncu kept its partial report
    time.sleep(0.2)
    assert records(tmp_path) == []


def guard_of(owner: int) -> psutil.Process:
    """The owner's guard: its child `/bin/sh -c` in a session of its own (the cookie is not in its argv, issue 23)."""
    for q in psutil.Process(owner).children():
        if q.cmdline()[:2] == ["/bin/sh", "-c"]:
            return q
    raise AssertionError("no guard process")


def test_cleanup_when_the_guard_died_too(env, tmp_path, capsys):
    p = start_cli(["run", "--stall-timeout", "60", "-o", str(tmp_path / "r"), "--", *app("vec_add", "k@hang")], env)
    cookie = None
    try:
        wait_for(p, b"0%..")
        cookie = cookie_of(p.pid)
        guard_of(p.pid).kill()  # e.g. the OOM killer took both
        time.sleep(0.1)
        p.send_signal(signal.SIGKILL)
        p.wait()
        time.sleep(0.5)
        left = processes_with(COOKIE_VAR, cookie)
        assert len(left) >= 4
        # `cleanup` in this process (the environment is env: the fixture set it here): its answer is what is
        # tested, not its process.
        code, out, err = cli_main(["cleanup", "--dry-run"], capsys)
        assert code == 0 and f"would stop run {cookie[:12]}" in out, out + err
        assert all(str(q.pid) in out for q, _ in left)
        assert len(processes_with(COOKIE_VAR, cookie)) == len(left)  # a dry run stops nothing
        code, out, err = cli_main(["cleanup", "--grace", "3"], capsys)
        assert code == 0, out + err
        assert "SIGINT to profiler" in out  # ncu gets to write its report first
        assert processes_with(COOKIE_VAR, cookie) == []
        assert records(tmp_path) == []
    finally:
        p.kill()
        for q, _ in processes_with(COOKIE_VAR, cookie) if cookie else []:
            q.kill()


def test_cleanup_never_stops_a_process_on_its_cookie_alone(env, tmp_path, capsys):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    forged = dict(env, **{COOKIE_VAR: "forged", OWNER_VAR: str(dead.pid)})
    victim = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], env=forged)
    try:
        deadline = time.monotonic() + 5
        while not processes_with(COOKIE_VAR, "forged") and time.monotonic() < deadline:
            time.sleep(0.05)
        code, out, _ = cli_main(["cleanup"], capsys)
        assert code == 0
        assert f"not touched: {victim.pid}" in out
        assert victim.poll() is None
    finally:
        victim.kill()


def test_a_normal_run_leaves_no_guard_and_no_record(env, tmp_path):
    a = profile_command(app("vec_add"), ProfileOptions(set="basic"),
                        RunConfig(report_dir=str(tmp_path), check_gpu=False, stop=StopPolicy(grace=2.0)))
    assert a.status == "ok"
    time.sleep(0.3)
    assert not [q for q in psutil.process_iter(["cmdline"]) if any(a.cookie in x for x in (q.info["cmdline"] or []))]
    assert records(tmp_path) == []
