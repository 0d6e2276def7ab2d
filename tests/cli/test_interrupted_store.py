"""An interrupted sweep, an interrupted or failed `run --profile`: their JSON names the store actually used (the
local file when the team's database is down) and carries the store's notes."""

from __future__ import annotations

import json
import socket
import sys
from types import SimpleNamespace

import pytest

import nsightwrap.cli.sweep as cli_sweep
import nsightwrap.fallback.walk as walk
from nsightwrap.cli.main import main
from nsightwrap.errors import AttemptFailed, ProfileInterrupted

ATTEMPT = SimpleNamespace(describe=lambda: "stopped", reason="interrupted by Ctrl-C", status="interrupted",
                          exit_code=130, to_dict=lambda: {"status": "interrupted"})


def _down_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"postgresql://team:s3cret@127.0.0.1:{port}/hangs"


@pytest.fixture
def local(fake_env, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return str(tmp_path / "cache" / "nsightwrap" / "hangs.db")


def _doc(capsys) -> tuple[dict, str]:
    out, err = capsys.readouterr()
    return json.loads(out), err


def _names_the_local_store(doc: dict, local: str) -> None:
    assert doc["store"] == local, doc
    assert any("cannot reach the hang store" in n and "local hang store" in n for n in doc["notes"]), doc
    assert "s3cret" not in json.dumps(doc)


def test_an_interrupted_sweep_names_the_local_store_it_used(local, monkeypatch, capsys):
    def interrupted(*_, **__):
        raise KeyboardInterrupt
    monkeypatch.setattr(cli_sweep, "sweep_sections", interrupted)
    code = main(["sweep-sections", "--json", "-q", "--no-preflight", "--store", _down_url(), "--",
                 sys.executable, "-c", "pass"])
    doc, _ = _doc(capsys)
    assert code == 130 and doc["status"] == "interrupted"
    _names_the_local_store(doc, local)
    assert local in doc["reason"]


@pytest.mark.parametrize("error", [ProfileInterrupted(ATTEMPT), AttemptFailed(ATTEMPT, "the first rung failed")])
def test_an_interrupted_or_failed_walk_names_the_local_store_it_used(local, monkeypatch, capsys, error):
    def walk_ladder(*_, **__):
        raise error
    monkeypatch.setattr(walk, "walk_ladder", walk_ladder)
    main(["run", "--json", "-q", "--no-preflight", "--profile", "quick", "--store", _down_url(), "--",
          sys.executable, "-c", "pass"])
    doc, _ = _doc(capsys)
    _names_the_local_store(doc, local)
