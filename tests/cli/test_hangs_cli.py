"""`python -m nsightwrap hangs ...`: list, show, export, forget; --json; a reader that goes away."""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from helpers import FAKE_SMI_DIR

from nsightwrap.cli.hangs import add_hangs_parser, cmd_hangs
from nsightwrap.store import ENV_STORE, Environment, HangStore, ProfileKey
from nsightwrap.watch.writer import BROKEN_PIPE_EXIT

ROOT = Path(__file__).resolve().parents[2]
H200 = Environment("gpu-box", "NVIDIA H200", "580.159.04", "2025.3.1")
FULL, BASIC = ProfileKey("full"), ProfileKey("basic")
CMD_FULL = ("ncu", "--set", "full", "--kernel-name", "wait_for_host", "./app")
CMD_BASIC = ("ncu", "--set", "basic", "--kernel-name", "wait_for_host", "./app")


def run_cli(*argv):
    parser = argparse.ArgumentParser(prog="nsightwrap")
    add_hangs_parser(parser.add_subparsers(dest="cmd"))
    args = parser.parse_args(list(argv))
    out, err = io.StringIO(), io.StringIO()
    return cmd_hangs(args, out=out, err=err), out.getvalue(), err.getvalue()


def test_cli_hooks(tmp_path, monkeypatch):
    # "This machine" as the records' H200 (the fake nvidia-smi), its ncu not compared: no STALE column on any
    # machine (the GPU machine's own driver and ncu made one)
    monkeypatch.setenv("PATH", f"{FAKE_SMI_DIR}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("NSIGHTWRAP_NCU", str(tmp_path / "no-ncu"))
    db = str(tmp_path / "cli.db")
    rc, out, _ = run_cli("hangs", "list", "--store", db)
    assert rc == 0 and "nothing recorded" in out and not Path(db).exists()
    with HangStore(db) as s:
        s.record("wait_for_host", FULL, "hang", env=H200, stall_s=12.5, command=CMD_FULL)
        s.record("wait_for_host", BASIC, "ok", env=H200, passes=10, command=CMD_BASIC)
        s.record("vec_add", BASIC, "ok", env=H200, passes=10)
    rc, out, _ = run_cli("hangs", "list", "--store", db)
    assert rc == 0 and out.splitlines()[0].split() == ["KERNEL", "RECORDS", "HANGS", "UNCALIBRATED", "LAST"]
    # The hang was recorded without a calibrated allowance: the list says so.
    assert out.splitlines()[2].split()[:4] == ["wait_for_host", "2", "1", "1"]

    rc, out, _ = run_cli("hangs", "show", "wait_for_host", "--store", db)
    assert rc == 0 and "set full" in out and "hang (not calibrated)" in out and "ncu --set full" in out
    rc, out, _ = run_cli("hangs", "show", "wait_for_host", "--markdown", "--store", db)
    assert rc == 0 and out.startswith("# Debug log: wait_for_host") and "## What to try next" in out

    monkeypatch.setenv(ENV_STORE, db)                     # --store is optional
    rc, out, _ = run_cli("hangs", "export", "--format", "yaml", "--kernel", "vec_add")
    assert rc == 0 and [r["kernel"] for r in yaml.safe_load(out)["records"]] == ["vec_add"]
    csv_file = tmp_path / "out.csv"
    rc, _, err = run_cli("hangs", "export", "--format", "csv", "-o", str(csv_file))
    assert rc == 0 and "3 record(s)" in err and len(list(csv.DictReader(csv_file.open()))) == 3

    rc, out, _ = run_cli("hangs", "forget", "--kernel", "vec_add")
    assert rc == 0 and "deleted 1 record(s)" in out
    rc, out, _ = run_cli("hangs", "forget", "--id", "1")
    assert rc == 0 and "deleted 1" in out
    rc, out, _ = run_cli("hangs", "forget", "--all", "--store", db)
    assert rc == 0 and "deleted 1" in out
    with pytest.raises(SystemExit):                       # argparse: one of --kernel/--id/--all is required
        run_cli("hangs", "forget")

    bad = tmp_path / "bad.db"
    bad.write_bytes(b"garbage" * 1000)
    rc, out, err = run_cli("hangs", "list", "--store", str(bad))
    assert rc == 2 and str(bad) in err and "Traceback" not in err
    rc, _, err = run_cli("hangs")
    assert rc == 2 and "list" in err


@pytest.fixture
def db(tmp_path) -> str:
    """A store with two kernels: wait_for_host (full hangs, basic works) and vec_add."""
    path = str(tmp_path / "cli.db")
    with HangStore(path) as s:
        s.record("wait_for_host", FULL, "hang", env=H200, stall_s=12.5, command=CMD_FULL)
        s.record("wait_for_host", BASIC, "ok", env=H200, passes=10, command=CMD_BASIC)
        s.record("vec_add", BASIC, "ok", env=H200, passes=10)
    return path


def one_json(out: str) -> dict:
    """stdout holds exactly one JSON object, and nothing else."""
    doc, end = json.JSONDecoder().raw_decode(out)
    assert out[end:].strip() == "" and isinstance(doc, dict)
    return doc


def test_list_json(db, tmp_path):
    rc, out, _ = run_cli("hangs", "list", "--json", "--store", db)
    doc = one_json(out)
    assert rc == 0 and doc["status"] == "ok" and doc["store"] == db and doc["exists"] is True
    assert [(k["kernel"], k["n_records"], k["n_hangs"]) for k in doc["kernels"]] == [
        ("vec_add", 1, 0), ("wait_for_host", 2, 1)]
    assert all(k["last_time"].endswith("+00:00") for k in doc["kernels"])
    missing = str(tmp_path / "none.db")
    rc, out, _ = run_cli("hangs", "list", "--json", "--store", missing)
    assert rc == 0 and one_json(out) == {"status": "ok", "store": missing, "exists": False, "kernels": []}
    assert not Path(missing).exists()


def test_show_json(db):
    rc, out, _ = run_cli("hangs", "show", "wait_for_host", "--json", "--store", db)
    doc = one_json(out)
    assert rc == 0 and doc["kernel"] == doc["pattern"] == "wait_for_host" and "markdown" not in doc
    assert [(r["outcome"], r["set"], r["command"]) for r in doc["records"]] == [
        ("ok", "basic", list(CMD_BASIC)), ("hang", "full", list(CMD_FULL))]          # newest first
    rc, out, _ = run_cli("hangs", "show", "vec_add_7", "--json", "--markdown", "--store", db)
    doc = one_json(out)                                     # no such kernel: kernels like it
    assert rc == 0 and doc["pattern"] == "vec_add_#" and doc["records"] == []
    assert doc["markdown"].startswith("# Debug log: vec_add_7")


def test_json_errors_are_one_json_object_too(tmp_path):
    bad = tmp_path / "bad.db"
    bad.write_bytes(b"garbage" * 1000)
    for argv in (["list"], ["show", "k"]):
        rc, out, err = run_cli("hangs", *argv, "--json", "--store", str(bad))
        doc = one_json(out)
        assert rc == 2 and doc["status"] == "error" and "not a nsightwrap hang store" in doc["error"]
        assert doc["store"] == str(bad) and "not a nsightwrap hang store" in err and "Traceback" not in err


def _show_into_closed_pipe(db: str, *extra: str) -> subprocess.CompletedProcess:
    """Run `hangs show` with stdout a pipe whose reader has gone, as after `| head`."""
    r, w = os.pipe()
    os.close(r)
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    try:
        return subprocess.run([sys.executable, "-m", "nsightwrap", "hangs", "show", "wait_for_host", "--store", db,
                               *extra], stdout=w, stderr=subprocess.PIPE, text=True, env=env, timeout=60)
    finally:
        os.close(w)


def test_show_into_a_closed_pipe_exits_quietly(db):
    with HangStore(db) as s:  # more than one buffer of output, so that a print fails, not only the last flush
        for i in range(100):
            s.record("wait_for_host", BASIC, "ok", env=H200, passes=i, command=[*CMD_BASIC, "x" * 100])
    done = _show_into_closed_pipe(db)
    assert (done.returncode, done.stderr) == (BROKEN_PIPE_EXIT, "")
    done = _show_into_closed_pipe(db, "--json")  # the one JSON object counts as said, as for `run --json`
    assert (done.returncode, done.stderr) == (0, "")


def test_a_reader_going_away_mid_output_is_quiet(db):
    class Closing(io.StringIO):
        def write(self, text):
            raise BrokenPipeError(32, "Broken pipe")

    parser = argparse.ArgumentParser(prog="nsightwrap")
    add_hangs_parser(parser.add_subparsers(dest="cmd"))
    err = io.StringIO()
    rc = cmd_hangs(parser.parse_args(["hangs", "list", "--store", db]), out=Closing(), err=err)
    assert (rc, err.getvalue()) == (BROKEN_PIPE_EXIT, "")


def test_a_reader_going_away_is_answered_as_main_answers_it(db, monkeypatch):
    """One exit code and one silence for a reader that went away (watch.writer), not copies in hangs and main."""
    import nsightwrap.cli.hangs as hangs
    import nsightwrap.watch.writer as writer

    assert not hasattr(hangs, "_silence") and writer.BROKEN_PIPE_EXIT == 141  # one definition (watch.writer)
    assert not hasattr(hangs, "_silence")
    silenced = []
    monkeypatch.setattr(hangs, "silence", silenced.append)

    class Closing(io.StringIO):
        def write(self, text):
            raise BrokenPipeError(32, "Broken pipe")

    parser = argparse.ArgumentParser(prog="nsightwrap")
    add_hangs_parser(parser.add_subparsers(dest="cmd"))
    out = Closing()
    assert cmd_hangs(parser.parse_args(["hangs", "list", "--store", db]), out=out, err=io.StringIO()) == 141
    assert silenced == [out]
