"""A local-executor sweep started with SIGINT ignored (`nsightwrap ... &` in a script) must still stop its jobs.

submitit starts the job processes itself, so they inherit SIG_IGN: its cancel (SIGINT to the job's controller)
did nothing and the probe's job, ncu and program kept the GPU after nsightwrap had exited 130."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time

import psutil
import pytest
from helpers import FAKE_APP, ROOT, app, read_until

from nsightwrap.fallback.executor import ProbeEngine
from nsightwrap.fallback.spec import ExecutorSpec
from nsightwrap.ncu.engine import SWEEP_VAR
from nsightwrap.watch.tree import StopPolicy, alive, ignores


@pytest.fixture
def smi(fake_gpus, monkeypatch):
    monkeypatch.setenv("FAKE_SMI_GPUS", "1")
    return fake_gpus


def _in_scope(scope: str) -> dict[int, bytes]:
    """Live processes of this test (its FAKE_SMI_SCOPE): pid -> command line."""
    found = {}
    for d in filter(str.isdigit, os.listdir("/proc")):
        try:
            env = open(f"/proc/{d}/environ", "rb").read()
            state = open(f"/proc/{d}/stat").read().rsplit(")", 1)[1].split()[0]
            cmd = open(f"/proc/{d}/cmdline", "rb").read()
        except OSError:
            continue
        if f"FAKE_SMI_SCOPE={scope}".encode() in env and state != "Z":
            found[int(d)] = cmd
    return found


def _sigint_ignored() -> None:
    """A child's preexec_fn: started as `cmd &` in a script starts it."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _wait_for(condition, seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


@pytest.mark.parametrize("command", [["sweep-sections", "--section", "SourceCounters"],
                                     ["run", "--profile", "default"]], ids=["sweep", "walk"])
def test_a_sweep_or_walk_that_ignores_sigint_still_stops_its_local_jobs(smi, tmp_path, command):
    scope = os.environ["FAKE_SMI_SCOPE"]
    argv = [*command, "--executor", "local", "--json", "--stall-timeout", "60", "--store", str(tmp_path / "hangs.db"),
            "--no-preflight", "--", *app("a@hang")]
    out = tmp_path / "out.json"
    with open(out, "wb") as stdout:  # a file: the jobs left behind (the bug) would hold a pipe open
        p = subprocess.Popen([sys.executable, "-m", "nsightwrap", *argv], stdout=stdout, stderr=subprocess.PIPE,
                             env={**os.environ, "PYTHONPATH": str(ROOT)},
                             preexec_fn=_sigint_ignored)
    try:
        read_until(p, p.stderr, b"1 running", timeout=30)
        program = str(FAKE_APP).encode()
        _wait_for(lambda: any(program in cmd for pid, cmd in _in_scope(scope).items() if pid != p.pid), 20,
                  "the probe's program never started")
        p.send_signal(signal.SIGTERM)
        p.wait(timeout=30)
        assert p.returncode == 130, p.stderr.read()
        assert json.loads(out.read_text())["status"] == "interrupted"
        _wait_for(lambda: not _in_scope(scope), 3, "processes left after the sweep")
    finally:
        p.kill()
        p.wait()
        for pid in _in_scope(scope):  # what this test started, should the sweep have left it
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        p.stderr.close()


# --- the engine's own sweep: what its cancelled local jobs leave, stopped whatever it ignores ----------------------

#: A process deaf to SIGINT and SIGTERM (as a job that inherited SIG_IGN, whose submitit bypasses SIGTERM); with an
#: argument, it first starts another like itself (the job's probe, under its controller).
DEAF = ("import signal, subprocess, sys, time\n"
        "signal.signal(signal.SIGINT, signal.SIG_IGN); signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "if len(sys.argv) > 1:\n"
        "    child = subprocess.Popen([sys.executable, '-c', sys.argv[1]], stdout=subprocess.PIPE)\n"
        "    child.stdout.readline()\n"
        "print('up', flush=True); time.sleep(60)\n")


def _deaf(env: dict, *args: str) -> subprocess.Popen:
    p = subprocess.Popen([sys.executable, "-c", DEAF, *args], env=env, stdout=subprocess.PIPE)
    assert p.stdout.readline() == b"up\n"
    p.stdout.close()
    return p


class DeafJob:
    """A local job whose controller (`_process`, as submitit's LocalJob has) and probe ignore SIGINT and SIGTERM."""

    job_id = "deaf"

    def __init__(self, controller: subprocess.Popen) -> None:
        self._process = controller

    def done(self) -> bool:
        return False

    def cancel(self, check: bool = True) -> None:
        self._process.send_signal(signal.SIGINT)  # what submitit's cancel does


class DeafBackend:
    """One GPU; its job a deaf controller with a deaf child, and a deaf process of the probe that is no
    descendant of it (as one left by a job that died) but carries the engine's token."""

    def __init__(self) -> None:
        self.engine, self.started = None, []

    def room(self) -> int:
        return 1 - len(self.started) // 2

    def submit(self, tasks):
        env = {**os.environ, SWEEP_VAR: self.engine.token}
        controller = _deaf(dict(os.environ), DEAF)
        self.started += [controller, _deaf(env)]
        return [(DeafJob(controller), "0")]

    def release(self, slot) -> None:
        pass


def _run_interrupted(engine: ProbeEngine) -> None:
    with contextlib.suppress(KeyboardInterrupt):
        engine.run("probe")


def test_cancel_stops_what_a_local_job_leaves_even_when_it_ignores_sigint_and_sigterm(tmp_path):
    backend = DeafBackend()
    engine = ProbeEngine(ExecutorSpec("local", poll_s=0.01), backend, tmp_path, owned=False)
    backend.engine = engine
    engine.cancel_wait_s, engine.stop_policy = 0.3, StopPolicy(grace=0.3, term_wait=0.3, kill_wait=3)
    caller = threading.Thread(target=_run_interrupted, args=(engine,))
    caller.start()
    pids: list[int] = []
    try:
        _wait_for(lambda: engine.counts()[1] == 1, 10, "the job never ran")
        pids = [p.pid for p in backend.started] + [c.pid for c in psutil.Process(backend.started[0].pid).children()]
        assert len(pids) == 3
        began = time.monotonic()
        engine.cancel()
        assert time.monotonic() - began < 5
        # Each was sent SIGKILL (deaf to SIGINT and SIGTERM); one whose parent died first is no longer found as
        # a descendant, so cancel may return while it is still dying: given a moment to go (a SIGKILL not sent
        # leaves it sleeping its 60 s).
        _wait_for(lambda: not [pid for pid in pids if psutil.pid_exists(pid) and alive(psutil.Process(pid))], 5,
                  "processes left after cancel")
    finally:
        engine.close()
        caller.join(5)
        for pid in pids:  # what this test started, should cancel have left it
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        for p in backend.started:
            p.wait()


def test_ignores_reads_a_processs_ignored_signals_and_a_job_hears_sigint_again():
    hears = ("import signal, sys, time\n"
             "from nsightwrap.watch.signals import hear_interrupts\n"
             "hear_interrupts()\n"
             "try:\n    print('up', flush=True)\n    time.sleep(30)\nexcept KeyboardInterrupt:\n    sys.exit(7)\n")
    p = subprocess.Popen([sys.executable, "-c", hears], stdout=subprocess.PIPE,
                         env={**os.environ, "PYTHONPATH": str(ROOT)}, preexec_fn=_sigint_ignored)
    try:
        assert p.stdout.readline() == b"up\n"
        assert not ignores(p.pid, signal.SIGINT)  # it was started with SIGINT ignored, and hears it again
        p.send_signal(signal.SIGINT)
        assert p.wait(timeout=10) == 7
    finally:
        p.kill()
        p.wait()
        p.stdout.close()
    deaf = _deaf(dict(os.environ))
    try:
        assert ignores(deaf.pid, signal.SIGINT) and ignores(deaf.pid, signal.SIGTERM)
        # A signal this process does not ignore as the one it hears: `nohup make test` starts every process with
        # SIGHUP ignored, `perf record -- make test` with SIGUSR2 ignored
        heard = next(s for s in (signal.SIGUSR2, signal.SIGUSR1, signal.SIGHUP) if not ignores(os.getpid(), s))
        assert not ignores(deaf.pid, heard) and not ignores(-1, signal.SIGINT)
    finally:
        deaf.kill()
        deaf.wait()
