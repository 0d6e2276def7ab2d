"""Stall evidence cuts its stack tools together: every group killed first, then one shared wait to reap them."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

from nsightwrap.watch import evidence
from nsightwrap.watch.evidence import _REAP_S, _cut, _Tool


class _Unreaped:
    """A tool process that is not reaped in time (a gdb in uninterruptible sleep): wait() times out."""

    def __init__(self, pid: int, calls: list):
        self.pid, self.calls, self.returncode = pid, calls, None

    def wait(self, timeout: float) -> None:
        self.calls.append(("wait", self.pid))
        time.sleep(timeout)
        raise subprocess.TimeoutExpired("gdb", timeout)


def test_every_tool_is_killed_first_and_all_are_reaped_within_one_shared_wait(monkeypatch):
    calls: list = []
    monkeypatch.setattr(evidence.os, "killpg", lambda pid, sig: calls.append(("kill", pid)))
    tools = [_Tool(f"t{i}", ["gdb"], Path(f"t{i}.txt"), proc=_Unreaped(100 + i, calls)) for i in range(3)]
    started = time.monotonic()
    _cut(tools)
    took = time.monotonic() - started
    assert [c[0] for c in calls[:3]] == ["kill"] * 3 and {c[1] for c in calls[:3]} == {100, 101, 102}
    assert all(t.cut for t in tools)
    assert took < _REAP_S + 0.5  # once, not once per tool (3 s before)
