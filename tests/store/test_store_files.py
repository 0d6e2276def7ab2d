"""Where the hang store lives (XDG), that it is private, and that one this user
cannot write can still be read."""

from __future__ import annotations

import json
import os
import stat
import sys
import textwrap
from pathlib import Path

import pytest
from helpers import run_read_only

from nsightwrap.errors import StoreError
from nsightwrap.paths import ENV_XDG_CACHE
from nsightwrap.store import (
    ENV_STORE,
    SCHEMA_VERSION,
    Environment,
    HangStore,
    ProfileKey,
    default_store_path,
    store_path,
)

ROOT = Path(__file__).resolve().parents[2]
H200 = Environment("gpu-box", "NVIDIA H200", "580.159.04", "2025.3.1")
FULL = ProfileKey("full")


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


# --- where ----------------------------------------------------------------------

def test_default_path_follows_xdg_and_the_override_wins(monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_store_path({}) == tmp_path / "home" / ".cache" / "nsightwrap" / "hangs.db"
    assert default_store_path({ENV_XDG_CACHE: "/xdg/cache"}) == Path("/xdg/cache/nsightwrap/hangs.db")
    assert default_store_path({ENV_XDG_CACHE: ""}) == tmp_path / "home" / ".cache" / "nsightwrap" / "hangs.db"
    # the XDG spec: a relative path is invalid and ignored
    assert default_store_path({ENV_XDG_CACHE: "rel/cache"}) == tmp_path / "home" / ".cache/nsightwrap/hangs.db"
    assert default_store_path({ENV_XDG_CACHE: "/xdg", ENV_STORE: "~/mine.db"}) == tmp_path / "home" / "mine.db"
    monkeypatch.delenv(ENV_STORE, raising=False)
    monkeypatch.setenv(ENV_XDG_CACHE, str(tmp_path / "xdg"))
    with HangStore() as s:                           # read when a store is opened, never at import
        assert s.path == tmp_path / "xdg" / "nsightwrap" / "hangs.db" and s.path.exists()


def test_a_given_store_path_wins_else_the_default_of_env(monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    env = {ENV_STORE: str(tmp_path / "env.db")}
    assert store_path("~/given.db", env) == tmp_path / "home" / "given.db"
    assert store_path(tmp_path / "p.db", env) == tmp_path / "p.db"
    assert store_path(None, env) == store_path("", env) == tmp_path / "env.db"
    monkeypatch.setenv(ENV_STORE, str(tmp_path / "os.db"))
    assert store_path() == tmp_path / "os.db"  # env=None: os.environ


def test_path_from_environment_and_setup(tmp_path, monkeypatch):
    target = tmp_path / "deep" / "er" / "h.db"
    monkeypatch.setenv(ENV_STORE, str(target))
    assert default_store_path() == target
    with HangStore() as s:
        assert s.path == target and target.exists()
        assert s.conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert s.conn.execute("PRAGMA busy_timeout").fetchone()[0] >= 5000
        assert s.schema_version == SCHEMA_VERSION
    with HangStore(target) as again:          # reopening migrates nothing and keeps one version row
        assert again.conn.execute("SELECT COUNT(*) FROM schema_version").fetchone()[0] == 1


# --- private ----------------------------------------------------------------------

@pytest.fixture
def open_umask():
    """The most permissive common umask, so that the modes below are nsightwrap's doing."""
    old = os.umask(0o002)
    yield
    os.umask(old)


def test_store_file_is_0600_and_folders_it_creates_0700(tmp_path, open_umask):
    tmp_path.chmod(0o755)
    path = tmp_path / "cache" / "nsightwrap" / "hangs.db"
    with HangStore(path) as s:
        s.record("spin", FULL, "hang", env=H200, command=["ncu", "--set", "full", "./secret-app"])
        side = [p for p in (Path(f"{path}-wal"), Path(f"{path}-shm")) if p.exists()]
        assert side and all(mode(p) == 0o600 for p in side)    # SQLite's own files follow the store's mode
    assert mode(path) == 0o600
    assert mode(path.parent) == mode(path.parent.parent) == 0o700
    assert mode(tmp_path) == 0o755                              # an existing folder is left as it was


def test_an_existing_store_keeps_its_mode(tmp_path, open_umask):
    path = tmp_path / "shared.db"
    HangStore(path).close()
    path.chmod(0o660)                                           # shared with a group on purpose
    with HangStore(path) as s:
        s.record("spin", FULL, "ok", env=H200)
    assert mode(path) == 0o660


# --- read-only ----------------------------------------------------------------------

def test_readonly_store_reads_and_refuses_writes(tmp_path):
    path = tmp_path / "h.db"
    with HangStore(path) as s:
        s.record("spin", FULL, "hang", env=H200)
    with HangStore(path, readonly=True) as ro:
        assert ro.readonly and "read-only" in repr(ro)
        assert [r.kernel for r in ro.records()] == ["spin"] and ro.hangs_for("spin", FULL, H200)
        with pytest.raises(StoreError, match=ENV_STORE) as e:
            ro.record("spin", FULL, "ok", env=H200)
        assert "read-only" in str(e.value) and "nothing was written" in str(e.value)
        with pytest.raises(StoreError):
            ro.forget(all=True)
    assert len(HangStore(path, readonly=True)) == 1
    with pytest.raises(StoreError, match="no hang store") as e:
        HangStore(tmp_path / "missing.db", readonly=True)
    assert not (tmp_path / "missing.db").exists() and ENV_STORE in str(e.value)


# The checks run in a child that sees the file or folder read-only: through
# chmod for a normal user; for root (whom chmod does not stop) through a
# read-only bind mount in a private mount namespace.
READ_ONLY_CHECKS = textwrap.dedent("""
    import argparse, io, json, sys
    from nsightwrap.cli.hangs import add_hangs_parser, cmd_hangs
    from nsightwrap.errors import StoreError
    from nsightwrap.store import Environment, HangStore, ProfileKey

    path = sys.argv[1]

    def cli(*argv):
        parser = argparse.ArgumentParser()
        add_hangs_parser(parser.add_subparsers(dest="cmd"))
        out, err = io.StringIO(), io.StringIO()
        rc = cmd_hangs(parser.parse_args(["hangs", *argv, "--store", path]), out=out, err=err)
        return [rc, out.getvalue(), err.getvalue()]

    res = {"list": cli("list", "--json"), "show": cli("show", "spin", "--json"),
           "export": cli("export", "--format", "csv"), "forget": cli("forget", "--all")}
    try:
        HangStore(path).close()
        res["open"] = "opened for writing"
    except StoreError as e:
        res["open"] = str(e)
    with HangStore(path, readonly=True) as s:
        try:
            s.record("spin", ProfileKey("basic"), "ok", env=Environment())
            res["write"] = "written"
        except StoreError as e:
            res["write"] = str(e)
    print(json.dumps(res))
""")


def _run_read_only(target: Path, store: Path) -> dict:
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    done = run_read_only(target, [sys.executable, "-c", READ_ONLY_CHECKS, str(store)], env)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.mark.parametrize("what", ["file", "folder"])
def test_a_store_this_user_cannot_write_can_still_be_read(tmp_path, what):
    store = tmp_path / "ro" / "hangs.db"
    with HangStore(store) as s:
        s.record("spin", FULL, "hang", env=H200, stall_s=12.5, command=["ncu", "--set", "full", "./app"])
    res = _run_read_only(store if what == "file" else store.parent, store)

    rc, out, err = res["list"]
    assert rc == 0 and [k["kernel"] for k in json.loads(out)["kernels"]] == ["spin"], err
    rc, out, err = res["show"]
    assert rc == 0 and json.loads(out)["records"][0]["outcome"] == "hang", err
    rc, out, err = res["export"]
    assert rc == 0 and out.splitlines()[0].startswith("id,time,") and len(out.splitlines()) == 2, err
    rc, out, err = res["forget"]                            # writing: a message saying what to do
    assert rc == 2 and "read-only" in err and "chmod u+w" in err and ENV_STORE in err and "Traceback" not in err
    assert "read-only" in res["open"] and "hangs list|show|export" in res["open"]
    assert "nothing was written" in res["write"]
    with HangStore(store, readonly=True) as s:               # and nothing changed
        assert [(r.kernel, r.outcome) for r in s.records()] == [("spin", "hang")]
