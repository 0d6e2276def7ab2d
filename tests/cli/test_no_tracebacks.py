"""No traceback and one JSON object, whatever comes (issue 23, item 5).

A mistyped set in a sweep, a signal at any moment after the interpreter
started (while Python still imports, or just after the answer was printed),
a ladder file nested too deeply or with a stall_timeout of .nan: each is a
clear message, an exit code that matches the JSON, and no traceback.
"""

from __future__ import annotations

import inspect
import json
import math
import os
import select
import signal
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import pytest
from helpers import app, cli_main, run_config

from nsightwrap.errors import LadderError, OptionsError
from nsightwrap.fallback.ladder import Ladder, Rung, ladder_from_dict, load_ladder
from nsightwrap.fallback.session import Session
from nsightwrap.fallback.sweep import sweep_sections
from nsightwrap.watch.records import RUNTIME_VAR


@pytest.fixture
def env(fake_env, tmp_path, monkeypatch):
    monkeypatch.setenv(RUNTIME_VAR, str(tmp_path / "runtime"))
    monkeypatch.setenv("NSIGHTWRAP_STORE", str(tmp_path / "hangs.db"))
    return dict(os.environ)


def one_json(stdout: str) -> dict:
    """stdout is exactly one JSON object."""
    doc = json.loads(stdout)
    assert isinstance(doc, dict)
    return doc


# -- a mistyped set ------------------------------------------------------------------


def test_sweep_sections_with_an_unknown_set_raises_options_error(env, tmp_path):
    with pytest.raises(OptionsError, match=r"unknown section set 'fulll' \(did you mean 'full'\?\)"):
        sweep_sections(Session.open(app("vec_add"), run_config(tmp_path)), sections="fulll")


def test_sweep_sections_cli_with_an_unknown_set_exits_2_with_one_json_object(env, tmp_path, capsys):
    # In this process (helpers.cli_main): a traceback would be an exception here.
    code, out, err = cli_main(["sweep-sections", "--json", "-q", "--no-preflight", "--set", "fulll", "--",
                               *app("vec_add")], capsys)
    assert code == 2, err
    doc = one_json(out)
    assert doc["status"] == "error" and "did you mean 'full'" in doc["error"]
    assert "Traceback" not in err
    assert not (tmp_path / "hangs.db").exists()  # refused before the store was made


# -- signals -------------------------------------------------------------------------


class Started:
    """`python -X importtime -m nsightwrap ARGS`: Python says on stderr when each import is done, so the
    test knows when the interpreter has started and loaded the nsightwrap package, the moment its entry
    point (nsightwrap/__main__.py) begins. stderr is read all along by a thread."""

    def __init__(self, args, env):
        self.p = subprocess.Popen([sys.executable, "-X", "importtime", "-m", "nsightwrap", *args],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
        self.err = b""
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        for chunk in iter(lambda: os.read(self.p.stderr.fileno(), 65536), b""):
            self.err += chunk

    def wait_for_entry_point(self):
        end = time.monotonic() + 30
        while b"| nsightwrap\n" not in self.err:  # the package is imported: __main__ runs next
            assert time.monotonic() < end and self.p.poll() is None, self.err[-2000:]
            time.sleep(0.001)

    def finish(self):
        try:
            out = self.p.stdout.read()
            self.p.wait(timeout=60)
        finally:
            self.p.kill()
        self.reader.join(10)
        lines = [line for line in self.err.decode(errors="replace").splitlines()
                 if not line.startswith("import time:")]
        return self.p.returncode, out.decode(), "\n".join(lines)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
@pytest.mark.parametrize("delay", [0.01, 0.05, 0.15, 0.3])
def test_a_signal_while_python_imports_is_interrupted_with_one_json_object(env, tmp_path, sig, delay):
    run = Started(["run", "--json", "-q", "-o", str(tmp_path / "r"), "--", *app("vec_add", "sleep:20")],
                  env)  # -q: a traceback of the fake ncu, interrupted while it starts, is not passed through
    try:
        run.wait_for_entry_point()
        time.sleep(delay)  # the commands' imports take 0.3-1 s
        run.p.send_signal(sig)
    finally:
        rc, out, err = run.finish()
    assert rc == 130, (rc, err[-2000:])
    doc = one_json(out)
    assert doc["status"] == "interrupted" and doc["exit_code"] == 130
    assert "Traceback" not in err


#: A program: `python -m nsightwrap ARGS` with a SIGTERM that Python drops as the command imports a module.
DROPPED_SIGNAL = Path(__file__).with_name("dropped_signal.py")


@pytest.mark.parametrize("module", ["nsightwrap.cli.run",  # while the command loads
                                    "nsightwrap.fallback.session"])  # after: the last one before the run
def test_a_signal_that_python_drops_while_importing_is_still_interrupted(env, tmp_path, module):
    started = time.monotonic()
    p = subprocess.run([sys.executable, str(DROPPED_SIGNAL), module, "run", "--json", "-q", "-o",
                        str(tmp_path / "r"), "--", *app("vec_add", "sleep:20")],
                       capture_output=True, text=True, env=env, timeout=60)
    assert p.returncode == 130, (p.returncode, p.stderr[-2000:])
    doc = one_json(p.stdout)
    assert doc["status"] == "interrupted" and doc["exit_code"] == 130
    assert "Traceback" not in p.stderr and "Exception ignored" not in p.stderr, p.stderr
    assert time.monotonic() - started < 15  # the program (20 s) was not run
    assert not list(tmp_path.glob("r*"))  # nor ncu started


def _until_json(p: subprocess.Popen, timeout: float = 60) -> bytes:
    """stdout of p until its first newline (the JSON object), read as soon as it comes."""
    fd, buf, end = p.stdout.fileno(), b"", time.monotonic() + timeout
    while b"\n" not in buf:
        assert time.monotonic() < end
        ready, _, _ = select.select([fd], [], [], 0.5)
        if ready:
            data = os.read(fd, 65536)
            assert data, "stdout closed before the JSON object"
            buf += data
    return buf


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_just_after_the_json_object_keeps_its_exit_code(env, tmp_path, sig):
    p = subprocess.Popen([sys.executable, "-m", "nsightwrap", "run", "--json", "-q", "--stall-timeout", "0.5",
                          "-o", str(tmp_path / "r"), "--", *app("vec_add", "k@hang")],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    try:
        head = _until_json(p)
        p.send_signal(sig)
        rest, err = p.communicate(timeout=60)
    finally:
        p.kill()
    doc = one_json((head + rest).decode())
    assert doc["status"] == "hang" and p.returncode == doc["exit_code"] == 3, (p.returncode, err[-2000:])
    assert b"Traceback" not in err


# -- ladder files --------------------------------------------------------------------


@contextmanager
def recursion_limit(frames: int) -> Iterator[int]:
    """The recursion limit `frames` above the caller's depth for the block (the file nested beyond it is parsed
    in a fraction of the time that one nested beyond the default limit of 1000 takes); the limit returned."""
    before = sys.getrecursionlimit()
    depth = len(inspect.stack(0))
    sys.setrecursionlimit(depth + frames)
    try:
        yield depth + frames
    finally:
        sys.setrecursionlimit(before)


def test_a_ladder_nested_too_deeply_is_a_ladder_error(tmp_path):
    deep = tmp_path / "deep.yaml"
    # As many levels as the recursion limit: the YAML composer takes two frames a level, so this surely
    # overflows; 5000 levels did too, in 2-3 times the time (PyYAML's scanner is worse than linear here).
    with recursion_limit(300) as depth:
        deep.write_text("name: deep\nrungs: " + "[" * depth + "]" * depth + "\n")
        with pytest.raises(LadderError, match="nested too deeply"):
            load_ladder(str(deep))


def test_the_cli_says_so_in_one_json_object(env, tmp_path, capsys):
    deep = tmp_path / "deep.yaml"
    # In this process (helpers.cli_main): a traceback would be an exception here.
    with recursion_limit(300) as depth:
        deep.write_text("rungs:\n" + "".join("  " * i + "- \n" for i in range(1, depth)))
        code, out, err = cli_main(["sweep-sections", "--json", "-q", "--profile", str(deep), "--", *app("vec_add")],
                                  capsys)
    assert code == 2 and "Traceback" not in err, err[-2000:]
    assert "nested too deeply" in one_json(out)["error"]


@pytest.mark.parametrize("value", [".nan", ".inf", "-.inf", ".NaN"])
def test_a_stall_timeout_that_is_no_finite_number_is_refused(tmp_path, value):
    f = tmp_path / "nan.yaml"
    f.write_text(f"name: nan\nrungs:\n  - name: first\n    set: basic\n    stall_timeout: {value}\n")
    with pytest.raises(LadderError, match="stall_timeout must be a number of seconds > 0 and finite"):
        load_ladder(str(f))
    with pytest.raises(LadderError):
        ladder_from_dict({"rungs": [{"name": "a", "stall_timeout": math.nan}]})


def test_the_duplicate_name_check_is_linear():
    rungs = tuple(Rung(name=f"r{i}") for i in range(50_000))
    t0 = time.monotonic()
    Ladder("many", rungs)
    assert time.monotonic() - t0 < 1.0  # the old check counted each name in the whole list: 2.5e9 steps
    with pytest.raises(LadderError, match="repeated: r7"):
        Ladder("twice", rungs + (Rung(name="r7"),))


SIGNAL_WHILE_STDERR_DRAINS = """
import os, signal, sys
import nsightwrap.cli.main as main

flush, sent = main.OutputWriter.flush, []
def late_signal(self, timeout):
    if timeout == main.CLOSE_S and not sent:  # the command answered; stderr gets its last second
        sent.append(1)
        os.kill(os.getpid(), signal.SIGTERM)
    return flush(self, timeout)
main.OutputWriter.flush = late_signal
err = sys.stderr
code = main.main(sys.argv[1:])
print(code, sys.stderr is err, bool(sent))
"""


def test_a_signal_while_stderr_drains_after_a_plain_answer_keeps_its_exit_code(env):
    """Without --json nothing settles the signals in print_json: after the command's answer, stderr's writer
    gets CLOSE_S to drain; a SIGTERM then changed exit 0 into 130 and left sys.stderr the writer's."""
    r = subprocess.run([sys.executable, "-c", SIGNAL_WHILE_STDERR_DRAINS, "cleanup", "--dry-run"],
                       capture_output=True, text=True, env=env, timeout=60)
    assert r.stdout.splitlines()[-1] == "0 True True", (r.stdout, r.stderr)
    assert "interrupted" not in r.stderr and "Traceback" not in r.stderr
