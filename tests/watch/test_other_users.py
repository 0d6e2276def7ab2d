"""Another user on the machine (issue 23, item 7): the cookie stays secret, and the stop trusts descent, not names.

The run's cookie used to be in the guard's argv, which every user reads in
`ps`; and the watch loop's stop trusted any process carrying it, so another
user's process named `ncu` got root's SIGINT. A process of another user is
part of the tree only by descent from the run, and only root may stop it.
Tests that need a second user start one as `nobody` and are skipped unless
they run as root.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from helpers import app, fast_stop, run_config

from nsightwrap.ncu.engine import profile_command
from nsightwrap.ncu.options import ProfileOptions
from nsightwrap.watch.guard import Guard
from nsightwrap.watch.launchers import WRAPPER_MODULE
from nsightwrap.watch.notes import stop_notes
from nsightwrap.watch.records import RUNTIME_VAR
from nsightwrap.watch.rules import RunState, TotalTimeout
from nsightwrap.watch.run import RunOutcome, watch
from nsightwrap.watch.tree import COOKIE_VAR, ProcessTree, StopPolicy, alive, sleeping_wait, stop_tree

NOBODY = 65534
#: An interpreter every user may run (the tests' own may live in root's home).
WORLD_PYTHON = "/usr/bin/python3" if os.access("/usr/bin/python3", os.X_OK) else sys.executable
needs_root = pytest.mark.skipif(os.getuid() != 0, reason="needs root, to start a process as another user")

#: A process calling itself ncu (its comm, which psutil's name() reads) that says which signals it got.
POSER = """\
import ctypes, signal, sys, time
ctypes.CDLL(None).prctl(15, b"ncu", 0, 0, 0)
def said(sig, frame):
    print("got", sig, flush=True)
for s in (signal.SIGINT, signal.SIGTERM):
    signal.signal(s, said)
print("ready", flush=True)
time.sleep(30)
"""


@pytest.fixture
def env(tmp_path, monkeypatch):
    monkeypatch.setenv(RUNTIME_VAR, str(tmp_path / "runtime"))
    return dict(os.environ)


def start_poser(cookie: str) -> subprocess.Popen:
    p = subprocess.Popen([WORLD_PYTHON, "-c", POSER], user=NOBODY, cwd="/", stdout=subprocess.PIPE, text=True,
                         env={COOKIE_VAR: cookie, "PATH": "/usr/bin:/bin"})
    assert p.stdout.readline().strip() == "ready"
    return p


def end_poser(p: subprocess.Popen) -> str:
    """What the poser printed about signals, once it is killed by the test."""
    alive = p.poll() is None
    p.kill()
    out, _ = p.communicate(timeout=10)
    assert alive, "the other user's process was killed by the run's stop"
    return out


def argv_holding(secret: str) -> list[str]:
    found = []
    for p in psutil.process_iter():
        try:
            if any(secret in a for a in p.cmdline()):
                found.append(f"{p.pid} {p.cmdline()[:3]}")
        except psutil.Error:
            continue
    return found


def test_the_guard_gets_the_cookie_through_its_pipe_not_argv():
    cookie = "c00c1e" * 5
    guard = Guard(cookie, StopPolicy(), ("ncu",))
    try:
        cmdline = Path(f"/proc/{guard.proc.pid}/cmdline").read_bytes()
        assert cookie.encode() not in cmdline
        assert argv_holding(cookie) == []
    finally:
        guard.release(wait=5)
    assert guard.proc.returncode == 0


def test_no_helper_of_a_run_shows_the_cookie_in_ps(env):
    """The program prints its cookie; while it runs no process's argv holds it (the guard's included)."""
    seen: list[list[str]] = []

    def look(text: str) -> None:
        for line in text.splitlines():
            if line.startswith("cookie="):
                seen.append(argv_holding(line.split("=", 1)[1]))

    program = ["sh", "-c", f'echo cookie=${COOKIE_VAR}; sleep 0.3']
    out = watch(program, None, policy=fast_stop(), on_output=look)
    assert out.returncode == 0
    assert seen == [[]]


@needs_root
def test_another_users_ncu_carrying_the_cookie_gets_no_signal(env):
    """The audit's attack: nobody's `ncu` with the run's cookie; the hung run is stopped without touching it."""
    posers: list[subprocess.Popen] = []

    def pose(text: str) -> None:
        for line in text.splitlines():
            if line.startswith("cookie=") and not posers:
                posers.append(start_poser(line.split("=", 1)[1]))

    program = ["sh", "-c", f'echo cookie=${COOKIE_VAR}; exec sleep 30']
    try:
        t = time.monotonic()
        out = watch(program, TotalTimeout(1.0), policy=fast_stop(), on_output=pose)
        took = time.monotonic() - t
    finally:
        said = [end_poser(p) for p in posers]
    assert said == [""]
    assert out.stop is not None and out.stop.graceful, out.stop
    assert "SIGINT to " in out.stop.steps[0] and "ncu" not in out.stop.steps[0]
    assert took < 1.0 + fast_stop().grace


@needs_root
def test_the_guard_leaves_another_users_ncu_alone(env):
    """The guard and `cleanup` stop a tree by cookie too: the poser is not of the tree."""
    cookie = "feed" * 8
    root = subprocess.Popen(["sleep", "30"], env={**env, COOKIE_VAR: cookie}, start_new_session=True)
    poser = start_poser(cookie)
    try:
        tree = ProcessTree(root.pid, cookie, ("ncu",), root_running=lambda: root.poll() is None)
        assert [p.pid for p in tree.members()] == [root.pid]
        rec = stop_tree(tree, fast_stop(), "test", sleeping_wait(tree))
        assert rec.survivors == [] and rec.graceful
    finally:
        root.kill()
        root.wait()
        said = end_poser(poser)
    assert said == ""


@needs_root
def test_root_stops_a_helper_that_dropped_to_another_user(env):
    """A root-run program whose helper runs as nobody: the helper descends from the run, so it is stopped."""
    helper = (f"import subprocess, sys; subprocess.Popen([{WORLD_PYTHON!r}, '-c', 'import time; time.sleep(30)'], "
              f"user={NOBODY}, cwd='/', env={{}}); print('started', flush=True); "
              "import time; time.sleep(30)")
    root = subprocess.Popen([sys.executable, "-c", helper], stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert root.stdout.readline().strip() == "started"
        tree = ProcessTree(root.pid, "no-cookie", ("ncu",), root_running=lambda: root.poll() is None)
        members = tree.members()
        uids = sorted(p.uids().real for p in members)
        assert uids == [0, NOBODY]
        rec = stop_tree(tree, fast_stop(), "test", sleeping_wait(tree))
        assert rec.survivors == []
        assert not any(alive(p) for p in members)
        assert tree.foreign == {}
    finally:
        root.kill()
        root.wait()


def test_a_user_who_may_not_signal_them_notes_other_users_processes():
    """For a tree of another uid (as a non-root user sees root's helpers): not members, named in `foreign`."""
    root = subprocess.Popen(["sleep", "30"], start_new_session=True)
    try:
        tree = ProcessTree(root.pid, "no-cookie", ("ncu",), root_running=lambda: root.poll() is None,
                           uid=os.getuid() + 12345)
        assert tree.members() == []
        assert list(tree.foreign) == [root.pid]
        assert f"of uid {os.getuid()}" in tree.foreign[root.pid]
    finally:
        root.kill()
        root.wait()


def test_a_helper_that_cleared_its_environment_is_found_by_its_session(env):
    """Not a child of the root any more and no cookie, but still in the run's session: part of the tree."""
    code = ("import subprocess, time; p = subprocess.Popen(['sh', '-c', 'sleep 30 & echo $!'], env={}, "
            "stdout=subprocess.PIPE, text=True); print(p.stdout.readline().strip(), flush=True); time.sleep(30)")
    root = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        orphan = int(root.stdout.readline())
        assert psutil.Process(orphan).ppid() != root.pid  # reparented: no descent from the root
        tree = ProcessTree(root.pid, "no-cookie", ("ncu",), root_running=lambda: root.poll() is None)
        assert orphan in {p.pid for p in tree.members()}
        rec = stop_tree(tree, fast_stop(), "test", sleeping_wait(tree))
        assert rec.survivors == []
    finally:
        root.kill()
        root.wait()


def test_the_result_names_other_users_processes_that_were_not_stopped():
    outcome = RunOutcome(argv=["x"], cookie="c", returncode=0, events=[], log="", state=RunState(0.0, 0.0),
                         elapsed_s=0.1, started_wall=0.0, foreign=["4242 (helper) of uid 0"])
    notes = stop_notes(outcome, "the program")
    assert len(notes) == 1 and "4242 (helper) of uid 0" in notes[0] and "not stopped" in notes[0]


def test_no_process_of_a_one_rank_profile_shows_the_cookie_in_ps(fake_env, tmp_path):
    """The fake ncu around rank 0 of the fake torchrun, through the rank wrapper: no argv of the tree holds it."""
    seen: list[list[str]] = []

    def look(text: str) -> None:
        for line in text.splitlines():
            if line.startswith(f"{COOKIE_VAR}=") and not seen:
                seen.append(argv_holding(line.split("=", 1)[1]))

    dist = Path(__file__).parents[1] / "fake_dist" / "torchrun"
    command = [str(dist), "--nproc-per-node", "2", *app("env:" + COOKIE_VAR, "sleep:0.3", "vec_add")[1:]]
    a = profile_command(command, ProfileOptions(metrics=("gpu__time_duration.sum",), rank=0),
                        run_config(tmp_path, report_dir=str(tmp_path / "r"), stop=fast_stop()), on_output=look)
    assert a.status == "ok", a.log
    assert WRAPPER_MODULE in a.command
    assert seen == [[]]
