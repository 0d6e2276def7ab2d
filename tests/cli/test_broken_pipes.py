"""A reader that goes away costs nothing but its output (issue 23, item 4).

`... 2>&1 | head` closes the pipe of stderr and stdout early: the profile
goes on, what cannot be written is dropped, and the exit code is the run's.
`doctor | true`, `cleanup --dry-run | true`, `run --json ... | true` print no
traceback (Python's idiom: stdout pointed at /dev/null, a quiet exit) and
go on to their end (`cleanup | true` still stops the orphan it announced):
the command's code once it said everything (the JSON object) or when it
failed, 141 (128 + SIGPIPE) when it succeeded but the reader went away in the
middle of its output.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import psutil
import pytest
from helpers import app, cli_main

from nsightwrap.paths import runtime_dir
from nsightwrap.watch.records import RUNTIME_VAR, RunRecord, write_record
from nsightwrap.watch.tree import COOKIE_VAR
from nsightwrap.watch.writer import BROKEN_PIPE_EXIT


@pytest.fixture
def env(fake_env, tmp_path, monkeypatch):
    monkeypatch.setenv(RUNTIME_VAR, str(tmp_path / "runtime"))
    monkeypatch.setenv("NSIGHTWRAP_STORE", str(tmp_path / "hangs.db"))
    return dict(os.environ)


def test_head_closing_stderr_and_stdout_does_not_abort_a_healthy_profile(env, tmp_path):
    """`run ... 2>&1 | head -c 100`: the program floods 2 MB after head went away."""
    report = tmp_path / "r.ncu-rep"
    p = subprocess.Popen([sys.executable, "-m", "nsightwrap", "run", "-o", str(report), "--",
                          *app("print:hello", "flood:2000000", "vec_add")],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env)
    try:
        head = p.stdout.read(100)
        p.stdout.close()  # head is done
        rc = p.wait(timeout=60)
    finally:
        p.kill()
    assert len(head) == 100
    assert rc == 0 and report.exists()


def piped_to_true(args, env) -> subprocess.CompletedProcess:
    """`python -m nsightwrap ARGS | true`: stdout's reader is gone before anything is written."""
    p = subprocess.Popen([sys.executable, "-m", "nsightwrap", *args], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, env=env, text=True)
    p.stdout.close()
    try:
        err = p.stderr.read()
        rc = p.wait(timeout=120)
    finally:
        p.kill()
    return subprocess.CompletedProcess(args, rc, "", err)


def quiet(done: subprocess.CompletedProcess) -> bool:
    return not any(w in done.stderr for w in ("Traceback", "BrokenPipeError", "Exception ignored"))


@pytest.mark.parametrize("args", [["doctor"], ["cleanup", "--dry-run"]])
@pytest.mark.parametrize("unbuffered", [True, False])
def test_a_command_piped_to_true_exits_quietly(env, args, unbuffered, capsys):
    """Unbuffered (PYTHONUNBUFFERED), the first line fails: 141 (128 + SIGPIPE, as `hangs` and C tools exit)
    unless the command failed anyway (doctor without a GPU: its own code says more); buffered, only the flush at
    the end fails, after the command said everything: its own exit code."""
    env = {k: v for k, v in env.items() if k != "PYTHONUNBUFFERED"}
    if unbuffered:
        env["PYTHONUNBUFFERED"] = "1"
    expected = cli_main(args, capsys)[0]  # the command's own code, read by a reader that stays (this process)
    done = piped_to_true(args, env)
    assert quiet(done), done.stderr
    assert done.returncode == (BROKEN_PIPE_EXIT if unbuffered and expected == 0 else expected)


def test_doctor_json_piped_to_true_keeps_its_exit_code(env, capsys):
    expected = cli_main(["doctor", "--json"], capsys)[0]  # the command's own code (this process)
    done = piped_to_true(["doctor", "--json"], env)
    assert quiet(done), done.stderr
    assert done.returncode == expected


def test_run_json_piped_to_true_keeps_the_run_s_exit_code(env, tmp_path):
    done = piped_to_true(["run", "--json", "-q", "-o", str(tmp_path / "r"), "--", *app("vec_add")], env)
    assert quiet(done), done.stderr
    assert done.returncode == 0


def forged_orphan(env) -> tuple[subprocess.Popen, str]:
    """A tree whose nsightwrap owner is gone and whose guard did not stop it: a run record of a dead owner."""
    cookie = "0rphan" * 6
    root = subprocess.Popen(["sleep", "60"], env={**env, COOKIE_VAR: cookie}, start_new_session=True)
    owner = subprocess.Popen(["true"])
    owner.wait()
    record = RunRecord(cookie, owner.pid, time.time() - 5, root.pid, psutil.Process(root.pid).create_time(),
                       ["ncu", "sleep", "60"], ["ncu"], time.time(), None)
    write_record(runtime_dir(env), record)
    return root, cookie


@pytest.mark.parametrize("unbuffered", [True, False])
def test_cleanup_piped_to_true_still_stops_the_orphan_it_announced(env, unbuffered):
    """`cleanup | true`: it prints "stopping run ..." before it stops the tree; the broken pipe must not stop
    it there. It finishes, quietly; 141 (the reader lost output) only because nothing else went wrong."""
    env = {k: v for k, v in env.items() if k != "PYTHONUNBUFFERED"}
    if unbuffered:
        env["PYTHONUNBUFFERED"] = "1"
    root, cookie = forged_orphan(env)
    try:
        done = piped_to_true(["cleanup", "--grace", "0.5"], env)
        assert quiet(done), done.stderr
        assert root.wait(timeout=10) is not None  # stopped by cleanup, not left running
        assert list(runtime_dir(env).glob(f"{cookie}*")) == []  # its record went with it
        assert done.returncode == (BROKEN_PIPE_EXIT if unbuffered else 0)
    finally:
        root.kill()
        root.wait()


def test_hangs_json_is_written_as_every_command_s(tmp_path, monkeypatch):
    """`hangs list --json` printed its object itself: no settle (a later signal could still change the exit
    code) and no word of the output that stderr's writer dropped."""
    import argparse
    import io

    from nsightwrap.cli.hangs import add_hangs_parser, cmd_hangs
    from nsightwrap.watch.signals import Interrupts
    from nsightwrap.watch.writer import OutputWriter, TextOut

    parser = argparse.ArgumentParser(prog="nsightwrap")
    add_hangs_parser(parser.add_subparsers(dest="cmd"))
    args = parser.parse_args(["hangs", "list", "--json", "--store", str(tmp_path / "none.db")])
    fd = os.open(os.devnull, os.O_WRONLY)
    try:
        writer = OutputWriter(fd)
        writer.count_dropped(123)  # what stderr could not write
        monkeypatch.setattr(sys, "stderr", TextOut(writer))
        out = io.StringIO()
        with Interrupts(raise_first=True) as scope:
            assert cmd_hangs(args, out=out) == 0
            assert scope.delivered  # settled: a signal from now on is only counted
    finally:
        os.close(fd)
    doc = json.loads(out.getvalue())
    assert doc["status"] == "ok" and any("123 bytes of output" in w for w in doc["warnings"])
