"""The command line's contract: --version, one JSON object on every exit, no traceback for a user's
mistake, interrupts at any moment, --verbose once, and the live progress on a terminal (through a pty)."""

from __future__ import annotations

import errno
import fcntl
import json
import os
import pty
import re
import select
import signal
import struct
import subprocess
import sys
import termios
import threading
import time
import uuid
from pathlib import Path

import pytest
from conftest import app
from helpers import STALL_S, cli_main, run_read_only, without_ncu_anywhere

from nsightwrap import __version__
from nsightwrap.watch.tree import COOKIE_VAR, processes_with

ROOT = Path(__file__).resolve().parents[2]
FAKE_SMI = Path(__file__).parents[1] / "fake_nvidia_smi"
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07|\r")


def cli(args, env, timeout=120, cwd=None):
    return subprocess.run([sys.executable, "-m", "nsightwrap", *args], capture_output=True, text=True,
                          env=dict(env, PYTHONPATH=str(ROOT)), timeout=timeout, cwd=cwd)


def one_json(stdout: str, why: str = "") -> dict:
    """stdout is exactly one JSON object (and nothing else); `why` (what stderr or the screen showed) is said when
    it is not (an empty stdout once, under a load of 9: the failure said nothing of the run)."""
    assert stdout.strip().startswith("{"), f"stdout {stdout!r} is no JSON; the run said: {why[-3000:]}"
    doc = json.loads(stdout)
    assert isinstance(doc, dict) and stdout.strip().count("\n") == 0, stdout
    return doc


def test_version(fake_env):
    done = cli(["--version"], fake_env)
    assert done.returncode == 0 and done.stdout.strip() == f"nsightwrap {__version__}"


@pytest.mark.parametrize("args", [
    ["run", "--json"],                                               # no command after --
    ["run", "--json", "--stall-timeout", "-1", "--", "true"],        # a bad value
    ["run", "--json", "--kernel", "a", "--kernel-name", "b", "--", "true"],
    ["run", "--json", "--replay-mode", "sideways", "--", "true"],
    ["sweep-sections", "--json"],
    ["doctor", "--json", "--no-such-flag"],
    ["hangs", "show", "--json"],                                     # KERNEL missing
])
def test_usage_errors_answer_with_one_json_object(fake_env, args, capsys):
    code, out, err = cli_main(args, capsys)  # in this process: a traceback would be an exception here
    assert code == 2, err
    doc = one_json(out)
    assert doc["status"] == "error" and doc["exit_code"] == 2 and doc["error"]
    assert "Traceback" not in err and err.strip()


def test_a_set_up_error_answers_with_one_json_object(tmp_path, monkeypatch, capsys):
    without_ncu_anywhere()
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "NSIGHTWRAP_CACHE_DIR": str(tmp_path / "c")}
    for name in list(os.environ):  # in this process (cli_main), with only this environment
        monkeypatch.delenv(name)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    code, out, err = cli_main(["run", "--json", "--", "true"], capsys)
    doc = one_json(out)
    assert code == 2 and doc["status"] == "error" and "ncu was not found" in doc["error"], err


def test_report_folder_that_cannot_be_created_is_refused_before_launching(fake_env, tmp_path, capsys):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    code, out, err = cli_main(["run", "--json", "-o", str(blocker / "sub" / "r"), "--", *app("vec_add")], capsys)
    doc = one_json(out)
    assert code == 2 and "cannot write the report" in doc["error"] and "-o/--export" in doc["error"]
    assert "==PROF==" not in err and "Traceback" not in err


def test_unwritable_report_folder_is_refused_before_launching(fake_env, tmp_path):
    folder = tmp_path / "ro"
    folder.mkdir()
    done = run_read_only(folder, [sys.executable, "-m", "nsightwrap", "run", "--json", "-o", str(folder / "r"), "--",
                                  *app("vec_add")], dict(fake_env, PYTHONPATH=str(ROOT)))
    doc = one_json(done.stdout)
    assert done.returncode == 2 and "cannot write the report" in doc["error"], done.stderr
    assert "==PROF==" not in done.stderr and "Traceback" not in done.stderr


def test_a_report_ncu_did_not_write_is_an_error(fake_env, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("FAKE_NCU_NO_REPORT", "1")
    code, out, _ = cli_main(["run", "--json", "-q", "-o", str(tmp_path / "r"), "--", *app("vec_add")], capsys)
    doc = one_json(out)
    assert doc["status"] == "error" and code == 5
    assert "did not write the report" in doc["reason"] and doc["report"] is None


def test_sweep_markdown_to_a_bad_path_is_refused_before_the_sweep(fake_env, tmp_path, capsys):
    t0 = time.monotonic()
    code, out, err = cli_main(["sweep-sections", "--json", "-q", "--markdown",
                               str(tmp_path / "no" / "such" / "dir" / "x.md"), "--section", "SourceCounters", "--",
                               *app("k@hang-if=SourceCounters")], capsys)
    doc = one_json(out)
    assert code == 2 and "--markdown" in doc["error"] and "==PROF==" not in err
    assert time.monotonic() - t0 < 30 and "Traceback" not in err


def test_sweep_json_has_a_status(fake_env, tmp_path, capsys):
    code, out, _ = cli_main(["sweep-sections", "--json", "-q", "--stall-timeout", str(STALL_S), "--store",
                             str(tmp_path / "s.db"), "--section", "SourceCounters", "--section", "LaunchStats", "--",
                             *app("vec_add", "k@hang-if=SourceCounters")], capsys)
    doc = one_json(out)
    # The sweep did its job (exit 0); its status says what it found: k hangs with SourceCounters.
    assert doc["status"] == "hang" and doc["exit_code"] == 0 == code and doc["kernels"][0]["kernel"] == "k"


@pytest.fixture
def foreign_gpu_user(fake_env, monkeypatch):
    """A fake GPU that already holds a process which is not ours: the run notes (and logs) a warning. The
    environment is this process's too (main(argv) here)."""
    scope = uuid.uuid4().hex
    monkeypatch.setenv("PATH", f"{FAKE_SMI}{os.pathsep}{fake_env['PATH']}")
    monkeypatch.setenv("FAKE_SMI_SCOPE", scope)
    env = dict(os.environ)
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], env=dict(env, FAKE_GPU_USER="1"))
    yield env
    other.kill()
    other.wait()


def test_each_message_is_printed_once(foreign_gpu_user, tmp_path, capsys):
    """Without --verbose and with it, one after the other in this process: the second run's log is not doubled by
    the first's handler."""
    for verbose in (False, True):
        code, _, err = cli_main(["run", "-q", *(["--verbose"] if verbose else []), "-o", str(tmp_path / f"r{verbose}"),
                                 "--", *app("vec_add")], capsys)
        assert code == 0, err
        assert err.count("the GPU already holds compute processes") == 1, err
        assert ("nsightwrap: warning:" in err) == verbose


# --- interrupts: at any moment, one JSON object, exit 130, nothing left behind -------------------


def _signal_when(p: subprocess.Popen, needle: bytes, sig=signal.SIGTERM, limit=60.0) -> bytes:
    """Read p's stderr until `needle` shows, send `sig`, return what was read."""
    buf = b""
    os.set_blocking(p.stderr.fileno(), False)
    deadline = time.monotonic() + limit
    while needle not in buf and time.monotonic() < deadline and p.poll() is None:
        time.sleep(0.05)
        buf += p.stderr.read() or b""
    assert needle in buf, buf.decode(errors="replace")
    p.send_signal(sig)
    return buf


def _cookies_left(text: str) -> list:
    return [c for c in re.findall(r'"cookie": "([0-9a-f]{32})"', text) if processes_with(COOKIE_VAR, c)]


def test_sigterm_during_the_back_off_between_two_attempts(fake_env, tmp_path):
    counter = tmp_path / "runs"
    env = dict(fake_env, FAKE_NCU_FAIL_FIRST=f"3:{counter}", PYTHONPATH=str(ROOT))
    p = subprocess.Popen([sys.executable, "-m", "nsightwrap", "run", "--json", "--profile", "quick", "--store",
                          str(tmp_path / "s.db"), "-o", str(tmp_path / "r"), "--", *app("vec_add")],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    try:
        _signal_when(p, b"looks transient: retrying")
        out, err = p.communicate(timeout=60)
    finally:
        p.kill()
    doc = one_json(out.decode())
    assert p.returncode == 130 and doc["status"] == "interrupted" and doc["exit_code"] == 130
    assert b"Traceback" not in err


@pytest.mark.parametrize("when", [b"[nsightwrap] whole program", b"[nsightwrap] probe k"])
def test_sigterm_during_a_sweep(fake_env, tmp_path, when):
    """In the first whole-program run (main thread) and in a probe of the search (a worker thread)."""
    env = dict(fake_env, PYTHONPATH=str(ROOT))
    p = subprocess.Popen([sys.executable, "-m", "nsightwrap", "sweep-sections", "--json", "--stall-timeout",
                          str(STALL_S), "--store", str(tmp_path / "s.db"), "--section", "SourceCounters",
                          "--section", "LaunchStats", "--section", "Occupancy", "--",
                          *app("vec_add", "sleep:0.4", "k@hang-if=SourceCounters")],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    try:
        buf = _signal_when(p, when)
        out, err = p.communicate(timeout=60)
    finally:
        p.kill()
    doc = one_json(out.decode())
    assert p.returncode == 130 and doc["status"] == "interrupted", (buf + err).decode(errors="replace")
    assert b"Traceback" not in err
    left = [q for q, e in processes_with(COOKIE_VAR) if e.get("NSIGHTWRAP_OWNER") == str(p.pid)]
    assert left == [], [q.cmdline() for q in left]


# --- live progress, through a pseudo terminal -----------------------------------------------------


#: What a terminal of 120x40 says of itself.
TERMINAL_ENV = {"TERM": "xterm-256color", "COLUMNS": "120"}


def terminal() -> tuple[int, int]:
    """A pseudo terminal of 120x40: (master, slave)."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    return master, slave


def run_on_a_terminal(args, env, timeout=90) -> tuple[int, str, str]:
    """Run the CLI with stderr on a pty (120x40) and stdout on a pipe: (rc, the screen, stdout)."""
    master, slave = terminal()
    p = subprocess.Popen([sys.executable, "-m", "nsightwrap", *args], stdout=subprocess.PIPE, stderr=slave,
                         stdin=subprocess.DEVNULL, env=dict(env, PYTHONPATH=str(ROOT), **TERMINAL_ENV))
    os.close(slave)
    screen = b""
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.2)
            if not ready:
                if p.poll() is not None:
                    break
                continue
            try:
                chunk = os.read(master, 65536)
            except OSError as e:
                if e.errno == errno.EIO:
                    break
                raise
            if not chunk:
                break
            screen += chunk
        out = p.stdout.read().decode()
        p.wait(timeout=30)
    finally:
        p.kill()
        os.close(master)
    return p.returncode, ANSI.sub("", screen.decode(errors="replace")), out


def test_live_progress_shows_the_kernel_its_passes_and_the_silence(fake_env, tmp_path):
    rc, screen, out = run_on_a_terminal(["run", "--json", "--set", "basic", "--stall-timeout", "2", "-o",
                                         str(tmp_path / "r"), "--", *app("vec_add", "wait_for_host@hang")], fake_env)
    assert rc == 3 and one_json(out, f"rc {rc}, screen: {screen}")["status"] == "hang"  # the JSON is alone on stdout
    assert re.search(r'kernel "wait_for_host" #1: 0%\.+ +silent [12] s of 2  ', screen), screen
    assert "==PROF== Profiling" in screen  # ncu's own lines still scroll above
    assert "nsightwrap: 1 attempt(s), 1 kernel(s) profiled, 1 report(s) written, 1 hang(s): wait_for_host" in screen


def run_on_a_terminal_here(args, monkeypatch, capsys) -> tuple[int, str, str]:
    """`nsightwrap ARGS` through main(argv) in this process (a child `python -m nsightwrap` costs ~0.5 s of CPU
    more) with sys.stderr on a pty (120x40), read all along by a thread: (rc, the screen, stdout). For what the
    live screen says; run_on_a_terminal is the command line's process on a terminal."""
    master, slave = terminal()
    for name, value in TERMINAL_ENV.items():
        monkeypatch.setenv(name, value)
    chunks: list[bytes] = []

    def read() -> None:
        while True:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: the terminal's last writer closed it
                return
            if not chunk:
                return
            chunks.append(chunk)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    err = sys.stderr
    try:
        with open(slave, "w", encoding="utf-8", errors="replace") as tty:
            sys.stderr = tty
            try:
                code, out, _ = cli_main(args, capsys)
            finally:
                sys.stderr = err
    finally:
        reader.join(10)
        os.close(master)
    return code, ANSI.sub("", b"".join(chunks).decode(errors="replace")), out


def test_live_progress_names_the_rung_of_a_walk(fake_env, tmp_path, monkeypatch, capsys):
    """Also: a ladder walk answers with a top-level status (its JSON alone on stdout)."""
    rc, screen, out = run_on_a_terminal_here(["run", "--json", "--profile", "quick", "--stall-timeout", "1",
                                              "--store", str(tmp_path / "s.db"), "-o", str(tmp_path / "r" / "walk"),
                                              "--", *app("vec_add", "k@hang", "vec_add")], monkeypatch, capsys)
    doc = one_json(out, f"rc {rc}, screen: {screen}")
    assert doc["status"] == "hang" and doc["exit_code"] == 3 == rc, screen
    assert doc["unprofiled"] == ["k"] and doc["steps"]
    assert "[nsightwrap] rung 1/" in screen and "for main" in screen and "for k" in screen
    assert re.search(r'\[rung 1/\d+ .requested. for main\]  kernel "k" #1', screen), screen
    assert "hang(s): k (rung 1/" in screen


def test_no_live_progress_with_quiet_or_without_a_terminal(fake_env, tmp_path, capsys):
    rc, screen, _ = run_on_a_terminal(["run", "-q", "--stall-timeout", str(STALL_S), "-o", str(tmp_path / "q"), "--",
                                       *app("vec_add", "k@hang")], fake_env)
    live = re.compile(r"silent \d+ s of")  # the live line; the verdict's "silent 1.0 s; allowance" is not it
    assert rc == 3 and not live.search(screen) and "==PROF==" not in screen
    code, _, err = cli_main(["run", "--stall-timeout", str(STALL_S), "-o", str(tmp_path / "p"), "--",
                             *app("vec_add", "k@hang")], capsys)  # stderr is pytest's capture here, no terminal
    assert code == 3 and not live.search(err) and "==PROF== Profiling" in err
