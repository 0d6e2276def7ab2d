"""Bounded reading and keeping (nsightwrap.watch.channels), and run records: no processes."""

from __future__ import annotations

import os

import pytest

from nsightwrap.errors import NsightwrapError
from nsightwrap.ncu.events import KernelDone, Output, Progress
from nsightwrap.ncu.progress import NcuObserver
from nsightwrap.paths import runtime_dir
from nsightwrap.watch.channels import BoundedText, EventLog, FollowedFile, PipeReader
from nsightwrap.watch.records import RUNTIME_VAR, RunRecord, read_records, write_record


def test_bounded_text_keeps_head_and_tail():
    log = BoundedText(head=10, tail=100)
    for i in range(1000):
        log.append(f"{i:04d}\n")
    text = log.text()
    assert text.startswith("0000\n0001\n")
    assert text.endswith("0998\n0999\n")
    assert "characters not kept" in text
    assert len(text) < 10 + 100 + 5 + 100
    assert log.dropped == 5000 - 10 - log.tail_len > 0
    small = BoundedText()
    small.append("abc")
    assert small.text() == "abc"


def test_event_log_keeps_what_the_observer_wants_up_to_a_cap():
    log = EventLog(NcuObserver.keep, limit=2)
    for i in range(10):
        log.add(i, [Progress(0, ".", 0, i), Output("x")])
    log.add(10, [KernelDone("k", i, 10) for i in range(5)])
    assert log.events == [(10, KernelDone("k", i, 10)) for i in (0, 1, 3, 4)]  # the first and last 2
    assert log.dropped == 1
    assert log.counts == {"Progress": 10, "Output": 10, "KernelDone": 5}


def test_followed_file_waits_for_the_file_and_reads_as_it_grows(tmp_path):
    path = tmp_path / "ncu.log"
    f = FollowedFile(str(path))
    assert not f.opened and f.read(100) == ""
    path.write_bytes(b"==PROF== Profiling \"k\" - 0: ")
    assert f.opened
    assert f.read(5) == "==PRO"  # at most the budget
    assert f.read(100) == 'F== Profiling "k" - 0: '
    with open(path, "ab") as w:
        w.write("0%..é".encode()[:-1])  # half a character
    assert f.read(100) == "0%.."
    with open(path, "ab") as w:
        w.write("é".encode()[-1:])
    assert f.read(100) == "é"
    path.write_bytes(b"new")  # truncated and rewritten: read from the start again
    assert f.read(100) == "new"
    assert f.read_all(2) == ""
    f.close()


def test_pipe_reader_takes_a_bounded_amount_per_call():
    r, w = os.pipe()
    try:
        reader = PipeReader(r)
        os.write(w, b"y\n" * 30000)
        first = reader.read(1000)
        assert len(first) == 1000
        rest = reader.read(1 << 20)
        assert len(first) + len(rest) == 60000 and not reader.eof
        assert reader.read() == "" and not reader.eof  # nothing there now
        os.close(w)
        w = None
        assert reader.read(100) == "" and reader.eof
    finally:
        os.close(r)
        if w is not None:
            os.close(w)


def test_records_live_in_a_private_folder(tmp_path):
    folder = runtime_dir({RUNTIME_VAR: str(tmp_path / "rt")})
    assert folder.stat().st_mode & 0o777 == 0o700
    rec = RunRecord("c00k1e", os.getpid(), None, 1, None, ["ncu", "app"], ["ncu"], 0.0, None)
    path = write_record(folder, rec)
    assert path.stat().st_mode & 0o777 == 0o600
    assert read_records(folder) == [(path, rec)]
    (folder / "junk.run.json").write_text("{not json")
    assert read_records(folder) == [(path, rec)]


def test_a_folder_others_may_write_is_refused(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    with pytest.raises(NsightwrapError, match="not a private folder"):
        runtime_dir({RUNTIME_VAR: str(shared)})
