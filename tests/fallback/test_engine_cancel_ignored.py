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
import time
import uuid

import pytest
from helpers import FAKE_APP, FAKE_SMI_DIR, ROOT, app, read_until


@pytest.fixture
def smi(fake_env, monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", f"{FAKE_SMI_DIR}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_GPU_TARGET", "1")
    monkeypatch.setenv("FAKE_SMI_SCOPE", uuid.uuid4().hex)
    monkeypatch.setenv("FAKE_SMI_GPUS", "1")
    return tmp_path


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


def _wait_for(condition, seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def test_a_sweep_that_ignores_sigint_still_stops_its_local_jobs(smi, tmp_path):
    scope = os.environ["FAKE_SMI_SCOPE"]
    argv = ["sweep-sections", "--executor", "local", "--section", "SourceCounters", "--json", "--stall-timeout",
            "60", "--store", str(tmp_path / "hangs.db"), "--no-preflight", "--", *app("a@hang")]
    out = tmp_path / "out.json"
    with open(out, "wb") as stdout:  # a file: the jobs left behind (the bug) would hold a pipe open
        p = subprocess.Popen([sys.executable, "-m", "nsightwrap", *argv], stdout=stdout, stderr=subprocess.PIPE,
                             env={**os.environ, "PYTHONPATH": str(ROOT)},
                             preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
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
