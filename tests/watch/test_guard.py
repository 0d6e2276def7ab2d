"""The guard (nsightwrap.watch.guard): a shell that holds its owner's pipe, and Python only once the owner died."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid

import psutil
from helpers import ROOT, wait_until

from nsightwrap.watch.guard import Guard
from nsightwrap.watch.tree import StopPolicy

NOT_UTF8 = os.fsdecode(b"\xff")  # a byte a path may hold that is not UTF-8

#: An owner that starts a guard, names what its run left on disk, and dies without a word more.
OWNER = """
import os, sys
from nsightwrap.watch.guard import Guard
from nsightwrap.watch.tree import StopPolicy
guard = Guard(sys.argv[1], StopPolicy(grace=0.1), ("ncu",), tool_log=sys.argv[2])
guard.record(sys.argv[3])
print(guard.proc.pid, flush=True)
os._exit(0)
"""


def test_what_a_dead_owner_said_reaches_python_intact_and_its_files_go(tmp_path):
    """Through the shell's `read -r` and its here-document: backslashes, %, quotes, $, spaces, a non-ASCII
    letter and a byte that is not UTF-8 in a path stay as they are, whatever the locale's encoding (ASCII
    here), and the guard removes the tool's log and the run record the owner named."""
    odd = tmp_path / ("a \\b %s $HOME 'q' `x` \u00e9 " + NOT_UTF8)
    odd.mkdir()
    log, record = odd / "ncu.log", odd / "run.json"
    log.write_text("ncu's log")
    record.write_text("{}")
    owner = subprocess.run([sys.executable, "-c", OWNER, uuid.uuid4().hex, str(log), str(record)],
                           capture_output=True, text=True, timeout=30, cwd=ROOT,
                           env={**os.environ, "PYTHONIOENCODING": "ascii", "LC_ALL": "C"})
    assert owner.returncode == 0, owner.stderr
    guard = psutil.Process(int(owner.stdout))
    end = time.monotonic() + 20
    while log.exists() or record.exists() or odd.exists():
        assert time.monotonic() < end, "the guard did not remove what the owner named"
        time.sleep(0.02)
    guard.wait(10)  # and it ends


def test_a_released_guard_is_a_shell_that_ends_with_0():
    guard = Guard(uuid.uuid4().hex, StopPolicy(), ("ncu",))
    shell = psutil.Process(guard.proc.pid)
    # Popen returns once exec closed its pipe: the new command line comes a moment later
    wait_until(shell.cmdline, "the guard's command line", limit_s=10)
    assert shell.cmdline()[:2] == ["/bin/sh", "-c"]
    guard.release(wait=5)
    assert guard.proc.returncode == 0
