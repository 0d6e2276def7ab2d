"""Issue 21 item 2: the evidence of a stall (nvidia-smi -q, host stacks) is taken when the watch calls a hang,
before the tree is stopped, within a few seconds, and no stack tool is left running (no gdb left attached).

Fake tools stand in for nvidia-smi, py-spy and gdb: each prints what it was asked and, for the stack tools,
whether the process it was pointed at was still alive (so "before the stop" is checked, not assumed).
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Optional

import psutil
import pytest
from helpers import fast_stop

from nsightwrap.status import HANG, OK
from nsightwrap.watch.evidence import STALL_DIR, StallEvidence, Transcript, stack_command
from nsightwrap.watch.rules import RunState, Verdict, WatchRule
from nsightwrap.watch.run import watch

#: A Python program that starts a native child and both wait forever, printing nothing.
STUCK = [sys.executable, "-c", "import subprocess, time; subprocess.Popen(['sleep', '60']); time.sleep(60)"]
ALIVE = 'if kill -0 "$PID" 2>/dev/null; then echo "target $PID alive"; else echo "target $PID gone"; fi'


class SilentFor(WatchRule):
    """A hang after `seconds` of silence (the watch's own rules are tested elsewhere)."""

    def __init__(self, seconds: float):
        self.seconds = seconds

    def __call__(self, state: RunState, now: float) -> Optional[Verdict]:
        if now - state.last_output_at >= self.seconds:
            return Verdict(HANG, f"silent for {self.seconds} s")
        return None

    def deadline(self, state: RunState) -> float:
        return state.last_output_at + self.seconds


def _tool(folder: Path, name: str, body: str) -> Path:
    path = folder / name
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(0o755)
    return path


def fake_tools(tmp_path: Path, gdb_sleeps: bool = False) -> dict[str, Path]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    marker = tmp_path / "gdb-marker"
    return {
        "nvidia-smi": _tool(bin_dir, "nvidia-smi", 'echo "==============NVSMI LOG==============";'
                                                   ' echo "Attached GPUs : 1"; echo "args: $*"'),
        "py-spy": _tool(bin_dir, "py-spy", f'PID=$3; echo "py-spy $*"; {ALIVE}; echo "Thread 1 (idle): MainThread"'),
        "gdb": _tool(bin_dir, "gdb", f'PID=$4; echo "gdb $*"; {ALIVE}; echo "#0 nanosleep ()"'
                     + (f'; echo $$ > {marker}; exec sleep 60' if gdb_sleeps else "")),
    }


def slow_gdb_left(tmp_path: Path) -> bool:
    """Is the slow fake gdb (its pid in gdb-marker) still running? It must have started: the marker exists."""
    pid = int((tmp_path / "gdb-marker").read_text())
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _which(tools: dict[str, Path]):
    return lambda name: str(tools[name]) if name in tools else None


def _run(evidence: Optional[StallEvidence], silent_s: float = 0.3):
    """A grace of 0.2 s: the stop sends SIGINT to the Python program, which exits at once, and then gives its
    `sleep` the rest of the grace (at most SETTLE_S, 0.5 s) to follow before SIGTERM; that wait is not what
    these tests are about."""
    t0 = time.monotonic()
    outcome = watch(STUCK, SilentFor(silent_s), policy=fast_stop(grace=0.2), frontend_names=(), evidence=evidence)
    return outcome, time.monotonic() - t0


def test_a_hang_leaves_nvidia_smi_and_the_stacks_of_each_stuck_process(tmp_path):
    evidence = StallEvidence(tmp_path / "runs", which=_which(fake_tools(tmp_path)))
    outcome, _ = _run(evidence)
    assert outcome.verdict.status == HANG and not outcome.warnings
    stall = tmp_path / "runs" / outcome.cookie / STALL_DIR
    doc = json.loads((stall / "processes.json").read_text())
    assert doc["cookie"] == outcome.cookie and doc["reason"] == "silent for 0.3 s"
    by_pid = {p["pid"]: p for p in doc["processes"]}
    python = next(pid for pid, p in by_pid.items() if p["name"].startswith("python"))
    native = next(pid for pid, p in by_pid.items() if p["name"] == "sleep")
    assert "Attached GPUs" in (stall / "nvidia-smi-q.txt").read_text()
    py_stack = (stall / f"stack-{python}.txt").read_text()
    gdb_stack = (stall / f"stack-{native}.txt").read_text()
    # py-spy for the Python process, gdb for the native one, both while they were still alive (before the stop).
    assert f"py-spy dump --pid {python}" in py_stack and f"target {python} alive" in py_stack
    assert f"-batch -nx -p {native} -ex thread apply all bt" in gdb_stack and f"target {native} alive" in gdb_stack
    assert all(not t["cut_short"] and t["returncode"] == 0 for t in doc["tools"])
    assert not any(psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
                   for pid in by_pid)  # and then the tree was stopped


def test_a_stack_tool_that_does_not_return_is_cut_short_and_the_stop_is_barely_delayed(tmp_path):
    tools = fake_tools(tmp_path, gdb_sleeps=True)
    _, plain_s = _run(None)
    # A half-second limit: what is checked is that the tool is cut at it (it would sleep 60 s), not its length.
    evidence = StallEvidence(tmp_path / "runs", budget_s=0.5, tool_s=0.5, which=_which(tools))
    outcome, with_s = _run(evidence)
    assert with_s - plain_s < 0.5 + 1.5, (plain_s, with_s)                 # the budget, and a margin for this CPU
    doc = json.loads((tmp_path / "runs" / outcome.cookie / STALL_DIR / "processes.json").read_text())
    gdb = [t for t in doc["tools"] if "gdb" in t["command"][0]]
    assert gdb and all(t["cut_short"] and t["seconds"] < 2.0 for t in gdb)
    assert not slow_gdb_left(tmp_path)                                     # no gdb left behind (nor attached)


def test_absent_tools_are_skipped_and_said(tmp_path):
    evidence = StallEvidence(tmp_path / "runs", which=lambda name: None)
    outcome, _ = _run(evidence)
    doc = json.loads((tmp_path / "runs" / outcome.cookie / STALL_DIR / "processes.json").read_text())
    assert doc["tools"] == [] and doc["seconds"] < 0.5
    assert "nvidia-smi -q: no nvidia-smi" in doc["skipped"]
    assert any("no py-spy, gdb or eu-stack" in s for s in doc["skipped"])


def test_no_evidence_for_a_run_that_ends_by_itself(tmp_path):
    evidence = StallEvidence(tmp_path / "runs", which=_which(fake_tools(tmp_path)))
    outcome = watch([sys.executable, "-c", "print('done')"], SilentFor(5.0), policy=fast_stop(), frontend_names=(),
                    evidence=evidence)
    assert outcome.verdict is None and outcome.returncode == 0 and OK
    assert not (tmp_path / "runs").exists()


def test_a_folder_that_cannot_be_written_is_a_warning_not_a_failure(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    outcome, _ = _run(StallEvidence(blocker / "runs", which=lambda name: None))
    assert outcome.verdict.status == HANG and outcome.stop is not None
    assert len(outcome.warnings) == 1 and "could not be written" in outcome.warnings[0]


def test_stack_command_prefers_py_spy_for_python_then_gdb_then_eu_stack():
    have = {"py-spy": "/x/py-spy", "gdb": "/x/gdb", "eu-stack": "/x/eu-stack"}
    pick = lambda avail: (lambda n: have[n] if n in avail else None)  # noqa: E731
    assert stack_command(7, True, pick(have))[:2] == ["/x/py-spy", "dump"]
    assert stack_command(7, False, pick(have))[0] == "/x/gdb"
    assert stack_command(7, True, pick({"eu-stack"})) == ["/x/eu-stack", "-p", "7"]
    assert stack_command(7, True, pick(set())) is None


def test_evidence_default_follows_the_environment(tmp_path):
    assert StallEvidence.default({"NSIGHTWRAP_EVIDENCE": "off"}) is None
    assert StallEvidence.default({"NSIGHTWRAP_EVIDENCE": str(tmp_path)}).folder == tmp_path
    assert StallEvidence.default({"XDG_CACHE_HOME": str(tmp_path)}).folder == tmp_path / "nsightwrap" / "runs"


def test_the_transcript_stamps_each_line_with_its_channel(tmp_path):
    from nsightwrap.watch.channels import RawText

    times = iter([100.0, 100.5, 101.25, 102.0, 103.0])
    t = Transcript(tmp_path / "t.log", clock=lambda: next(times))
    t.add("==PROF== Connected\n==PROF== Prof")
    t.add(RawText("hello from the program\n", b"hello from the program\n"))
    t.add("iling \"k\": 0%..\n")
    t.close()
    lines = (tmp_path / "t.log").read_text().splitlines()
    assert lines[0].endswith("+   0.500s [tool] ==PROF== Connected")
    assert lines[1].endswith("+   1.250s [out] hello from the program")
    assert lines[2].endswith('+   2.000s [tool] ==PROF== Profiling "k": 0%..')
    assert lines[0].startswith("1970-01-01T00:01:40.500Z")
    assert os.path.getsize(tmp_path / "t.log") > 0


def test_the_transcript_is_bounded_and_cheap_once_full(tmp_path):
    """The watch loop calls it for every piece of output: a flood must neither grow the file nor cost time."""
    t = Transcript(tmp_path / "t.log", limit=10_000)
    t.add("x" * 200_000)                                   # a line that never ends: cut, not held
    assert t.partial["tool"] == ""
    t0 = time.monotonic()
    for _ in range(2000):
        t.add("y\n" * 500)
    assert time.monotonic() - t0 < 1.0
    t.close()
    text = (tmp_path / "t.log").read_text()
    assert len(text) < 10_200 and text.rstrip().endswith("bytes]") and "more not kept" in text


def test_tools_are_cut_even_when_the_wait_is_interrupted(tmp_path):
    """A failure while waiting (here: the clock raises, as a KeyboardInterrupt would) still kills every tool."""
    tools = fake_tools(tmp_path, gdb_sleeps=True)
    start = time.monotonic()

    def clock() -> float:
        if time.monotonic() - start > 0.5:   # after the tools started, before any is due to be cut (2 s)
            raise KeyboardInterrupt
        return time.monotonic()

    proc = psutil.Popen(["sleep", "30"])
    try:
        evidence = StallEvidence(tmp_path / "runs", which=_which(tools), clock=clock)
        with pytest.raises(KeyboardInterrupt):             # not an Exception: take() lets it through
            evidence.take("c" * 32, [psutil.Process(proc.pid)], "x")
    finally:
        proc.kill()
        proc.wait()
    assert not slow_gdb_left(tmp_path)
