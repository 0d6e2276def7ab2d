"""Output never blocks the watch loop (issue 23, item 1): stderr that nobody reads.

nsightwrap writes its stderr (the pass-through of the program's and ncu's
output, the per-rung lines, the live line) through a writer of its own
with a bounded buffer: what cannot be written is dropped and counted,
never waited for. These runs flood a pipe that the test never reads and
check that the verdicts still come on time.
"""

from __future__ import annotations

import array
import fcntl
import io
import json
import os
import pty
import signal
import subprocess
import sys
import termios
import threading
import time

import pytest
from helpers import app, cli_main, wait_until

from nsightwrap.watch.records import RUNTIME_VAR
from nsightwrap.watch.writer import OutputWriter, TextOut

F_GETPIPE_SZ = 1032  # Linux's fcntl: a pipe's capacity


@pytest.fixture
def env(fake_env, tmp_path, monkeypatch):
    monkeypatch.setenv(RUNTIME_VAR, str(tmp_path / "runtime"))
    return dict(os.environ)


class Unread:
    """`python -m nsightwrap ARGS` with stderr a pipe this test never reads; stdout read in a thread."""

    def __init__(self, args, env, stderr=subprocess.PIPE):
        self.t0 = time.monotonic()
        self.p = subprocess.Popen([sys.executable, "-m", "nsightwrap", *args], stdout=subprocess.PIPE,
                                  stderr=stderr, env=env)
        self.out = b""
        self.ended_at = None
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        self.out = self.p.stdout.read()

    def finish(self, limit: float = 20.0):
        """(exit code, the JSON object, seconds it took); killed after `limit` seconds (the old code froze)."""
        try:
            rc = self.p.wait(timeout=limit)
            took = time.monotonic() - self.t0
        except subprocess.TimeoutExpired:
            self.p.kill()  # its guard stops the tree
            rc, took = self.p.wait(), float("inf")
        self.reader.join(10)
        if self.p.stderr:
            self.p.stderr.close()
        self.p.stdout.close()
        return rc, (json.loads(self.out) if self.out.strip() else None), took


#: 3 MB of flood, then the program waits: past the writer's buffer (1 MiB) and the pipe (64 KiB), so that a
#: write that blocked would still freeze the run, without a second of flood at ~0.6-1.4 s of CPU (issue 20).
FLOOD_THEN_WAIT = ("vec_add", "flood:3000000", "sleep:30")


def test_the_timeout_is_met_with_stderr_unread(env, tmp_path):
    run = Unread(["run", "--json", "--timeout", "1", "-o", str(tmp_path / "r"), "--", *app(*FLOOD_THEN_WAIT)], env)
    rc, doc, took = run.finish()
    assert rc == 4 and doc["status"] == "timeout", (rc, doc)
    assert took < 8, f"the 1 s timeout fired after {took:.1f} s"
    assert any("could not be written" in w for w in doc["warnings"]), doc["warnings"]


def test_a_hang_is_called_with_stderr_unread(env, tmp_path):
    run = Unread(["run", "--json", "--stall-timeout", "0.5", "-o", str(tmp_path / "r"), "--",
                  *app("vec_add", "flood:400000", "k@hang")], env)
    rc, doc, took = run.finish()
    assert rc == 3 and doc["status"] == "hang" and doc["stalled_kernel"] == "k", (rc, doc)
    assert took < 10


def flooding(stream) -> bool:
    """Whether the pipe whose read end is `stream` is half full: the flood is under way and fills the rest
    within milliseconds (a page-granular count of a full pipe may fall short of its size: half is sure)."""
    waiting = array.array("i", [0])
    fcntl.ioctl(stream.fileno(), termios.FIONREAD, waiting)
    return waiting[0] >= fcntl.fcntl(stream.fileno(), F_GETPIPE_SZ) // 2


def test_sigterm_is_honoured_with_stderr_unread(env, tmp_path):
    run = Unread(["run", "--json", "-o", str(tmp_path / "r"), "--", *app(*FLOOD_THEN_WAIT)], env)
    # Once the flood fills the pipe: a fixed second was not enough on the loaded machine (the command line took
    # ~2.4 s to start, and the signal came before any flood), and each second of flood is ~0.6 s of CPU.
    wait_until(lambda: flooding(run.p.stderr) or run.p.poll() is not None, "stderr's pipe never filled", 30)
    run.p.send_signal(signal.SIGTERM)
    sent = time.monotonic()
    rc, doc, _ = run.finish()
    assert rc == 130 and doc["status"] == "interrupted", (rc, doc)
    assert time.monotonic() - sent < 8


def test_the_timeout_is_met_on_a_terminal_that_nobody_reads(env, tmp_path):
    """A terminal stopped by Ctrl-S (a pty whose other end is not read): the live screen, rich, and a flood."""
    master, slave = pty.openpty()
    try:
        run = Unread(["run", "--json", "--timeout", "1", "-o", str(tmp_path / "r"), "--", *app(*FLOOD_THEN_WAIT)],
                     {**env, "TERM": "xterm"}, stderr=slave)
        os.close(slave)
        slave = None
        rc, doc, took = run.finish()
    finally:
        os.close(master)
        if slave is not None:
            os.close(slave)
    assert rc == 4 and doc["status"] == "timeout", (rc, doc)
    assert took < 8, f"the 1 s timeout fired after {took:.1f} s"


def test_nothing_is_said_lost_when_stderr_is_read(env, tmp_path, capfd):
    """main(argv) in this process, its stderr a file descriptor (capfd) read by pytest: the writer of its own."""
    code, out, err = cli_main(["run", "--json", "-o", str(tmp_path / "r"), "--", *app("print:hello", "vec_add")],
                              capfd)
    doc = json.loads(out)
    assert code == 0 and "hello" in err
    assert "could not be written" not in err + json.dumps(doc["warnings"])


# -- the writer itself -----------------------------------------------------------------


def test_a_write_to_a_full_pipe_returns_at_once_and_is_counted():
    r, w = os.pipe()
    writer = OutputWriter(w, limit=1 << 16)
    try:
        t0 = time.monotonic()
        for _ in range(2):
            for _ in range(100):
                writer.write(b"x" * 8192)  # 1.6 MB into a 64 KB pipe and a 64 KB buffer
            time.sleep(0.1)  # the writer's thread fills the pipe meanwhile
        assert time.monotonic() - t0 < 0.5
        assert not writer.flush(timeout=0.2)
        assert writer.written <= 1 << 16 and writer.dropped > 1_400_000
    finally:
        writer.close(timeout=0.1)
        os.close(r)
        os.close(w)
    assert writer.dropped + writer.written + writer.pending == 1600 * 1024  # pending: the write in flight


def test_what_fits_is_written_in_order_and_bytes_stay_bytes():
    r, w = os.pipe()
    writer = OutputWriter(w)
    out = TextOut(writer)
    out.write("a é\n")
    writer.write(b"\xff\xfe raw\n")
    out.write("b\n")
    assert writer.flush(timeout=5)
    writer.close(timeout=1)
    os.close(w)
    with os.fdopen(r, "rb") as f:
        assert f.read() == "a é\n".encode() + b"\xff\xfe raw\n" + b"b\n"
    assert writer.dropped == 0


def test_a_closed_reader_is_not_an_error():
    r, w = os.pipe()
    os.close(r)
    writer = OutputWriter(w)
    writer.write(b"nobody\n")
    writer.flush(timeout=2)
    writer.write(b"still nobody\n")
    writer.close(timeout=1)
    os.close(w)
    assert writer.broken and writer.dropped == len(b"nobody\n") + len(b"still nobody\n")


def test_a_full_non_blocking_descriptor_is_waited_for_not_taken_for_broken():
    """stderr shared in O_NONBLOCK mode (a parent's, a multiplexer's): a full pipe answers EAGAIN. That is
    no broken reader: the writer's thread waits and goes on, and the final summary still comes. It was taken
    for EPIPE: everything after it, the summary included, was dropped."""
    r, w = os.pipe()
    os.set_blocking(w, False)
    writer = OutputWriter(w)
    got = bytearray()

    def late_reader():
        time.sleep(0.3)  # the writer's thread meets a full pipe first
        while True:
            chunk = os.read(r, 65536)
            if not chunk:
                return
            got.extend(chunk)

    reader = threading.Thread(target=late_reader, daemon=True)
    reader.start()
    try:
        t0 = time.monotonic()
        for _ in range(40):
            writer.write(b"y" * 8192)  # 320 KB into a 64 KB pipe: never waited for here
        assert time.monotonic() - t0 < 0.2
        time.sleep(0.1)
        writer.write(b"summary\n")
        assert writer.flush(timeout=10)
    finally:
        writer.close(timeout=1)
        os.close(w)
        reader.join(10)
        os.close(r)
    assert not writer.broken and writer.dropped == 0
    assert bytes(got) == b"y" * 8192 * 40 + b"summary\n"


class CountedScreen(io.StringIO):
    """A terminal for the live screen that counts what it drops, as stderr's TextOut does (`.writer`)."""

    def __init__(self):
        super().__init__()
        self.writer = OutputWriter(os.open(os.devnull, os.O_WRONLY))


def live_screen():
    from rich.console import Console

    from nsightwrap.cli.screen import LiveScreen

    term = CountedScreen()
    return LiveScreen(Console(file=term, force_terminal=True, width=200)), term


def test_the_live_screen_counts_a_long_line_it_cuts():
    """One line longer than the screen shows: its start was cut without a count (lines were counted from
    newlines only), so the lost-output warning said nothing."""
    from nsightwrap.cli.screen import LIVE_CHARS

    screen, term = live_screen()
    try:
        screen.output("z" * (LIVE_CHARS * 6) + "\n")
        assert term.writer.dropped == LIVE_CHARS * 5
        assert "1 line(s) of output not shown or cut short" in term.getvalue()
    finally:
        os.close(term.writer.fd)


def test_the_live_screen_counts_the_start_of_an_open_line_it_drops():
    from nsightwrap.cli.screen import LIVE_CHARS

    screen, term = live_screen()
    try:
        screen.output("p" * (LIVE_CHARS * 3))  # an open line, no newline yet: only its last LIVE_CHARS are kept
        assert term.writer.dropped == LIVE_CHARS * 2
        screen.output("\n")
        assert term.writer.dropped == LIVE_CHARS * 2  # the kept end is shown whole, not counted twice
    finally:
        os.close(term.writer.fd)


def test_the_live_screen_counts_lines_over_its_limit_in_bytes():
    from nsightwrap.cli.screen import LIVE_LINES

    screen, term = live_screen()
    try:
        screen.output("é\n" * (LIVE_LINES + 10))
        assert term.writer.dropped == 10 * len("é\n".encode())
        assert "10 line(s) of output not shown (30 bytes)" in term.getvalue()
    finally:
        os.close(term.writer.fd)
