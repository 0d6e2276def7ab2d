"""The team's store from the command line (issue 22): export/import, stale records, a read-only role, a
database that is down, and the team's password nowhere nsightwrap writes."""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

import pg
import pytest
from helpers import FAKE_SMI_DIR, ROOT, STALL_S, app, cli_main, run_cli

from nsightwrap.store import Environment, HangStore, ProfileKey

FULL = ProfileKey("full")
H200 = Environment("gpu-box", "NVIDIA H200", "580.159.04", "2025.3.1")
NEWER_DRIVER = Environment("gpu-box", "NVIDIA H200", "590.10", "2025.3.1")


def hangs(*argv: str, capsys) -> tuple[int, str, str]:
    """`nsightwrap hangs ARGV` in this process (a child costs seconds on a busy machine): (code, out, err)."""
    return cli_main(["hangs", *argv], capsys)


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_export_then_import_moves_records_and_importing_twice_adds_nothing(store_setting, tmp_path, capsys):
    source = tmp_path / "mine.db"
    with HangStore(source, user="ada") as s:
        s.record("k", FULL, "hang", env=H200, stall_s=3.0, command=["ncu", "--set", "full", "./app"])
        s.record("k", ProfileKey("basic"), "ok", env=H200, passes=10)
        s.record("vec_add", FULL, "ok", env=NEWER_DRIVER, passes=38)
        mine = s.records()
    for fmt in ("jsonl", "csv", "yaml"):
        code, _, err = hangs("export", str(tmp_path / f"out.{fmt}"), "--store", str(source), capsys=capsys)
        assert code == 0 and "wrote 3 record(s)" in err, err
    # Once as a user runs it: a process of its own loads the database's libraries itself (this worker has them).
    done = run_cli(["hangs", "import", str(tmp_path / "out.jsonl"), "--store", store_setting],
                   env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert done.returncode == 0 and "imported 3 of 3 record(s)" in done.stdout, done.stderr
    for fmt in ("jsonl", "csv", "yaml"):                     # the same records, whatever the format: kept once
        code, out, err = hangs("import", str(tmp_path / f"out.{fmt}"), "--store", store_setting, capsys=capsys)
        assert code == 0 and "imported 0 of 3 record(s)" in out, err
    with HangStore(store_setting, readonly=True) as s:
        theirs = s.records()
    strip = [{k: v for k, v in r.to_dict().items() if k != "id"} for r in mine]
    assert [{k: v for k, v in r.to_dict().items() if k != "id"} for r in theirs] == strip
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"kernel": "k"}\n')
    code, _, err = hangs("import", str(bad), "--store", store_setting, capsys=capsys)
    assert code == 2 and "not a record of a hang store export" in err


def test_hangs_list_counts_and_show_marks_records_of_another_driver_as_stale(store_setting, monkeypatch, capsys):
    with HangStore(store_setting) as s:
        s.record("k", FULL, "hang", env=H200, command=["ncu", "./app"])
        s.record("k", FULL, "hang", env=NEWER_DRIVER)
    monkeypatch.setenv("PATH", f"{FAKE_SMI_DIR}{os.pathsep}{os.environ['PATH']}")  # this machine: driver 580.159.04
    monkeypatch.setenv("NSIGHTWRAP_NCU", "/nonexistent")                           # ncu unknown: not compared
    code, out, err = hangs("list", "--store", store_setting, capsys=capsys)
    assert code == 0, err
    head, row = out.splitlines()[:2]
    assert head.split() == ["KERNEL", "RECORDS", "HANGS", "UNCALIBRATED", "STALE", "LAST"] and row.split()[:5] == [
        "k", "2", "2", "2", "1"]
    doc = json.loads(hangs("list", "--json", "--store", store_setting, capsys=capsys)[1])
    assert doc["kernels"][0]["n_stale"] == 1
    shown = hangs("show", "k", "--store", store_setting, capsys=capsys)[1]
    assert shown.count("(stale)") == 1 and "stale here: recorded with driver 590.10" in shown
    records = json.loads(hangs("show", "k", "--json", "--store", store_setting, capsys=capsys)[1])["records"]
    assert [r["stale"] for r in records] == ["driver 590.10", None]
    with HangStore(store_setting, readonly=True) as s:                   # never applied here
        assert [r.driver for r in s.known_hangs("k", H200)] == ["580.159.04"]


def test_a_read_only_role_can_list_show_and_export(pg_server, tmp_path, capsys):
    db = pg_server.new_database()
    with HangStore(pg_server.url(db)) as s:
        s.record("k", FULL, "hang", env=H200)
    reader = pg_server.url(db, "reader", pg.READER_PASSWORD)
    for argv in (["list"], ["show", "k", "--json"], ["export", str(tmp_path / "x.jsonl")]):
        code, out, err = hangs(*argv, "--store", reader, capsys=capsys)
        assert code == 0, err
    assert json.loads((tmp_path / "x.jsonl").read_text())["kernel"] == "k"
    code, out, err = hangs("forget", "--all", "--store", reader, capsys=capsys)
    assert code == 2 and "may only read" in err, err
    assert pg.READER_PASSWORD not in err + out and "Traceback" not in err


def test_a_database_that_is_down_leaves_the_run_to_the_local_store(fake_env, tmp_path, capfd, monkeypatch):
    url = f"postgresql://team:{pg.TEAM_PASSWORD}@127.0.0.1:{_closed_port()}/hangs"
    monkeypatch.setenv("NSIGHTWRAP_STORE", url)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    # In this process (a child `python -m nsightwrap` costs ~0.5 s of CPU), its output read at the descriptors.
    code, stdout, stderr = cli_main(["run", "--json", "-q", "--profile", "quick", "--stall-timeout", str(STALL_S), "-o",
                                     str(tmp_path / "r"), "--", *app("vec_add", "k@hang", "vec_add")], capfd)
    doc = json.loads(stdout)
    assert doc["status"] == "hang" and code == 3, stderr
    said = [line for line in stderr.splitlines() if "cannot reach the hang store" in line]
    assert len(said) == 1 and "postgresql://team:***@127.0.0.1" in said[0] and "local hang store" in said[0]
    assert any("cannot reach the hang store" in n for n in doc["notes"])
    local = tmp_path / "cache" / "nsightwrap" / "hangs.db"
    with HangStore(local, readonly=True) as s:
        assert any(r.kernel == "k" and r.hung for r in s.records())
    assert pg.TEAM_PASSWORD not in stdout + stderr and _leaks(tmp_path, pg.TEAM_PASSWORD) == []


def _leaks(folder: Path, secret: str) -> list[str]:
    """Files under `folder` holding `secret` (reports, stores, logs, exports)."""
    found = []
    for path in folder.rglob("*"):
        if path.is_file() and not path.is_symlink():
            try:
                if secret.encode() in path.read_bytes():
                    found.append(str(path))
            except OSError:
                pass
    return found


def test_the_team_password_appears_nowhere_nsightwrap_writes(fake_env, pg_server, tmp_path, capfd, monkeypatch):
    """Goal: stdout, stderr, JSON, the verbose log, the debug log (Markdown), exports, reports, the store's
    own rows, exceptions and reprs: never the team's database password."""
    url = pg_server.url(pg_server.new_database())
    # Every command in this process (helpers.cli_main; a child `python -m nsightwrap` each cost ~0.5 s of CPU),
    # its output read at the file descriptors (capfd): what nsightwrap prints, what it writes round sys.stdout
    # and sys.stderr, and the output of ncu and of the program passing through.
    monkeypatch.setenv("NSIGHTWRAP_STORE", url)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("NSIGHTWRAP_RUNTIME_DIR", str(tmp_path / "rt"))
    monkeypatch.chdir(tmp_path)
    out = []
    runs = [["run", "--json", "--verbose", "--profile", "quick", "--stall-timeout", str(STALL_S), "-o",
             str(tmp_path / "r" / "walk"), "--", *app("vec_add", "k@hang", "vec_add")],
            ["sweep-sections", "--json", "--verbose", "--stall-timeout", str(STALL_S), "--section", "LaunchStats",
             "--kernel", "k", "--markdown", str(tmp_path / "sweep.md"), "--", *app("k@hang")]]
    commands = [["hangs", "list"], ["hangs", "list", "--json"], ["hangs", "show", "k"],
                ["hangs", "show", "k", "--json"], ["hangs", "show", "k", "--markdown"],
                ["hangs", "export", str(tmp_path / "all.jsonl")], ["hangs", "export", "--format", "yaml"],
                ["hangs", "forget", "--id", "999999"], ["doctor", "--json"],
                ["hangs", "list", "--json", "--store", url.replace("127.0.0.1", "127.0.0.1:1")],     # a bad URL
                ["hangs", "list", "--store", url.replace(pg_server.url("x").rsplit(":", 1)[1].split("/")[0],
                                                         str(_closed_port()))]]                  # a server down
    for argv in runs + commands:
        _, stdout, stderr = cli_main(argv, capfd)
        assert "Traceback" not in stderr, (argv, stderr)
        out += [stdout, stderr]
    with HangStore(url, readonly=True) as s:
        assert any(r.kernel == "k" and r.hung for r in s.records())
        out += [repr(s), str(s.path), repr(s.location), json.dumps([r.to_dict() for r in s.records()])]
    with pytest.raises(Exception) as e:
        HangStore(url.replace(pg.TEAM_PASSWORD, pg.TEAM_PASSWORD + "x"))       # a wrong password
    out += [str(e.value), repr(e.value)]
    assert [o for o in out if pg.TEAM_PASSWORD in o] == []
    assert _leaks(tmp_path, pg.TEAM_PASSWORD) == []
