"""The program's output passed through byte for byte (issue 23, item 10's pass-through).

The README says the program's stdout and stderr are passed through
untouched: bytes that are no UTF-8 (a Latin-1 file name, binary noise) and a
character cut in two between two writes come out as they went in. ncu's
own channel is still parsed as text.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from nsightwrap.watch.records import RUNTIME_VAR
from nsightwrap.watch.run import watch

WRITES = [b"\xff\xfe\x80 caf\xc3\xa9 \xe2\x82", b"\xac euro\n", b"latin-1: \xe9t\xe9\n"]
ERR = b"err \xc0\xc1\n"


@pytest.fixture
def program(tmp_path):
    """A program that writes WRITES to stdout in separate writes (a character cut in two) and ERR to stderr."""
    script = tmp_path / "noise.py"
    script.write_text(textwrap.dedent(f"""
        import os, time
        for piece in {WRITES!r}:
            os.write(1, piece)
            time.sleep(0.05)
        os.write(2, {ERR!r})
    """))
    return [sys.executable, str(script)]


def test_the_watch_hands_out_the_exact_bytes(program):
    pieces = []
    out = watch(program, None, on_output=pieces.append, guard=False)
    assert out.returncode == 0
    assert b"".join(p.raw for p in pieces) == b"".join(WRITES) + ERR
    assert "café €" in "".join(pieces) and "\ufffd" in out.log  # the text is decoded as before


def test_the_command_line_passes_the_program_s_bytes_through(fake_env, tmp_path, monkeypatch, program):
    monkeypatch.setenv(RUNTIME_VAR, str(tmp_path / "runtime"))
    done = subprocess.run([sys.executable, "-m", "nsightwrap", "run", "-o", str(tmp_path / "r"), "--", *program],
                          capture_output=True, env=dict(os.environ), timeout=120)
    assert b"".join(WRITES) in done.stderr and ERR in done.stderr, done.stderr[-2000:]
