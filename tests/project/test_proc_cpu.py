"""devtools/proc_cpu.py, how the suite's CPU is counted per process (issue 20): what it makes of the kernel's events.
Recording needs root and the kernel's netlink families; what is recorded is read here from events written out."""

from __future__ import annotations

import importlib.util

import pytest
from helpers import ROOT

_spec = importlib.util.spec_from_file_location("proc_cpu", ROOT / "devtools" / "proc_cpu.py")
proc_cpu = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(proc_cpu)


def test_a_process_is_named_by_what_it_ran():
    label = proc_cpu.label
    assert label(["/v/bin/python", "-m", "nsightwrap", "run"]) == "py -m nsightwrap"
    assert label(["/v/bin/python", "-S", "/w/tests/fake_ncu/app.py", "vec_add"]) == "py fake_ncu/app.py"
    assert label(["python3", "-c", "import sys\nprint(1)"]) == "py -c import sys print(1)"
    assert label(["/bin/sh", "/w/tests/fake_ncu/ncu", "--version"]) == "sh fake_ncu/ncu"
    assert label(["/usr/lib/postgresql/15/bin/postgres", "-D", "x"]) == "postgres"
    assert label(None) == "?"


def test_threads_count_with_their_process_and_a_fork_without_exec_with_its_parent():
    ms = 1_000_000
    doc = {"pid": 10, "command": ["cmd"], "wall_s": 1.0, "events": [
        ["e", 10, ["/v/bin/python", "-m", "pytest"], 0],
        ["f", 11, 11, 10, 0], ["e", 11, ["/v/bin/python", "-S", "/t/fake_ncu/app.py"], 0],
        ["f", 12, 11, 11, 0],  # a thread of 11
        ["f", 13, 13, 11, 0],  # a fork of 11 that never calls exec
        ["f", 99, 99, 1, 0], ["e", 99, ["sshd"], 0],  # not started by the command
        ["x", 12, 10, "app", 5 * ms, 0], ["x", 13, 11, "python", 2 * ms, 0], ["x", 11, 10, "python", 20 * ms, 0],
        ["x", 99, 1, "sshd", 1000 * ms, 0], ["x", 10, 1, "python", 100 * ms, 0],
    ]}
    table, total = proc_cpu.tally(doc)
    assert table == {"py -m pytest": [1, pytest.approx(0.1)], "py fake_ncu/app.py": [1, pytest.approx(0.025)],
                     "fork of py fake_ncu/app.py": [1, pytest.approx(0.002)]}
    assert total == pytest.approx(0.127)
