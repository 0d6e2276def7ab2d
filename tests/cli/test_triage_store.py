"""Triage opens the store as run and sweep-sections do (a database URL is a database, a database that is down
gives the local file with its note), and a URL is no file path (store_path refuses it)."""

from __future__ import annotations

import json
import socket
import sys

import pytest

import nsightwrap.call.triage as call_triage
import nsightwrap.cli.triage as cli_triage
from nsightwrap.cli.main import main
from nsightwrap.diagnose.result import TriageResult
from nsightwrap.errors import StoreError
from nsightwrap.store.paths import default_store_path, store_path


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _down_url() -> str:
    return f"postgresql://team:s3cret@127.0.0.1:{_closed_port()}/hangs"


def _fake_triage(seen: list):
    def triage_command(command, options, config, store=None, **more):
        seen.append(store)
        return TriageResult(list(command), "ok", "no fault", None, (), None, (), None, 0.0, "t1")
    return triage_command


def test_the_library_triage_records_in_the_local_file_when_the_database_is_down(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    seen: list = []
    monkeypatch.setattr(call_triage, "triage_command", _fake_triage(seen))
    result = call_triage.triage(["prog"], store=_down_url())
    assert seen[0].location.path == tmp_path / "cache" / "nsightwrap" / "hangs.db"
    assert any("local hang store" in n and "s3cret" not in n for n in result.notes)
    assert not (tmp_path / "postgresql:").exists()


def test_the_triage_command_records_in_the_local_file_when_the_database_is_down(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    seen: list = []
    monkeypatch.setattr(cli_triage, "triage_command", _fake_triage(seen))
    code = main(["triage", "--json", "-q", "--store", _down_url(), "--", sys.executable, "-c", "pass"])
    out, err = capsys.readouterr()
    assert code == 0 and seen[0].location.path == tmp_path / "cache" / "nsightwrap" / "hangs.db"
    assert any("local hang store" in n for n in json.loads(out)["notes"]) and "local hang store" in err
    assert "s3cret" not in out + err and not (tmp_path / "postgresql:").exists()


def test_the_triage_command_interrupted_names_the_store_used_and_its_notes(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))

    def interrupted(*_, **__):
        raise KeyboardInterrupt
    monkeypatch.setattr(cli_triage, "triage_command", interrupted)
    main(["triage", "--json", "-q", "--store", _down_url(), "--", sys.executable, "-c", "pass"])
    doc = json.loads(capsys.readouterr().out)
    assert doc["store"] == str(tmp_path / "cache" / "nsightwrap" / "hangs.db")
    assert any("local hang store" in n for n in doc["notes"])


@pytest.mark.parametrize("url", ["postgresql://u:pw@h/db", "postgresql+psycopg://h/db"])
def test_store_path_refuses_a_database_url(url):
    with pytest.raises(StoreError, match="database URL, not a file.*open_store") as e:
        store_path(url)
    assert "pw" not in str(e.value)
    with pytest.raises(StoreError, match="NSIGHTWRAP_STORE is a database URL"):
        default_store_path({"NSIGHTWRAP_STORE": url})
