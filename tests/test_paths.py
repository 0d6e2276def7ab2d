"""Per-user folders are resolved in one module (nsightwrap.paths), and every one follows XDG."""

from __future__ import annotations

import os
import re
import stat
import tempfile
from pathlib import Path

import pytest

import nsightwrap
from nsightwrap.errors import NsightwrapError
from nsightwrap.paths import (
    ENV_CACHE_DIR,
    ENV_EVIDENCE,
    ENV_RUNTIME,
    cache_dir,
    runs_dir,
    runtime_dir,
    tools_dir,
    tracer_dir,
    work_dir,
)
from nsightwrap.store.paths import ENV_STORE, default_store_path, store_path

PACKAGE = Path(nsightwrap.__file__).parent  # wherever the tests folder puts this file
#: What places a file in a per-user folder by itself; only nsightwrap/paths.py may do it.
PER_USER = re.compile(r"""["']XDG_[A-Z_]+["']|Path\.home\(|gettempdir\(|Path\(["']~|expanduser\(["']~""")


@pytest.fixture
def home(tmp_path, monkeypatch):
    """A user with no nsightwrap variables set: HOME, TMPDIR of its own (tempfile asked afresh)."""
    for name in (ENV_STORE, ENV_CACHE_DIR, ENV_RUNTIME, ENV_EVIDENCE, "XDG_CACHE_HOME", "XDG_RUNTIME_DIR",
                 "XDG_DATA_HOME", "XDG_STATE_HOME"):
        monkeypatch.delenv(name, raising=False)
    for name in ("home", "tmp"):
        (tmp_path / name).mkdir()
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))
    monkeypatch.setattr(tempfile, "tempdir", None)  # gettempdir() caches $TMPDIR: read it again
    return tmp_path


def _folders() -> dict[str, Path]:
    """Every per-user folder, as the process's environment places it."""
    work = work_dir("test")
    work.rmdir()
    return {"store": default_store_path(), "given store": store_path(None), "tools": tools_dir(),
            "tracer": tracer_dir(), "runs": runs_dir(), "runtime": runtime_dir(), "work": work.parent}


def test_every_folder_follows_xdg(home, monkeypatch):
    (home / "run").mkdir(mode=0o700)
    monkeypatch.setenv("XDG_CACHE_HOME", str(home / "cache"))
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(home / "run"))
    monkeypatch.setenv("XDG_DATA_HOME", str(home / "data"))
    monkeypatch.setenv("XDG_STATE_HOME", str(home / "state"))
    cache = home / "cache" / "nsightwrap"
    assert _folders() == {"store": cache / "hangs.db", "given store": cache / "hangs.db", "tools": cache / "tools",
                          "tracer": cache / "tracer", "runs": cache / "runs", "runtime": home / "run" / "nsightwrap",
                          "work": home / "tmp"}
    assert stat.S_IMODE((home / "run" / "nsightwrap").stat().st_mode) == 0o700
    assert not (home / "home").exists() or not any((home / "home").iterdir())  # nothing under ~


def test_without_xdg_every_folder_is_under_home_and_tmpdir(home):
    cache = home / "home" / ".cache" / "nsightwrap"
    assert _folders() == {"store": cache / "hangs.db", "given store": cache / "hangs.db", "tools": cache / "tools",
                          "tracer": cache / "tracer", "runs": cache / "runs",
                          "runtime": home / "tmp" / f"nsightwrap-{os.getuid()}",
                          "work": home / "tmp"}


def test_a_relative_or_missing_xdg_folder_is_ignored(home, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/cache")
    monkeypatch.setenv("XDG_RUNTIME_DIR", "relative/run")
    assert cache_dir() == home / "home" / ".cache" / "nsightwrap"
    assert runtime_dir() == home / "tmp" / f"nsightwrap-{os.getuid()}"
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(home / "no-such-folder"))  # the session has none: not made here
    assert runtime_dir() == home / "tmp" / f"nsightwrap-{os.getuid()}"
    assert not (home / "no-such-folder").exists()


def test_the_explicit_variables_win(home, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(home / "cache"))
    monkeypatch.setenv(ENV_STORE, str(home / "mine.db"))
    monkeypatch.setenv(ENV_CACHE_DIR, str(home / "tools"))
    monkeypatch.setenv(ENV_RUNTIME, str(home / "records"))
    monkeypatch.setenv(ENV_EVIDENCE, str(home / "evidence"))
    assert (default_store_path(), tools_dir(), runtime_dir(), runs_dir()) == (
        home / "mine.db", home / "tools", home / "records", home / "evidence")
    assert tracer_dir() == home / "cache" / "nsightwrap" / "tracer"


def test_the_runtime_folder_is_made_alone_never_its_parents(home):
    wanted = home / "missing" / "records"
    with pytest.raises(NsightwrapError, match="create its parent folder"):
        runtime_dir({ENV_RUNTIME: str(wanted)})
    assert not (home / "missing").exists()


def test_a_runtime_folder_that_is_a_link_is_refused(home):
    real = home / "real"
    real.mkdir(mode=0o700)
    (home / "link").symlink_to(real)
    with pytest.raises(NsightwrapError, match="not a private folder"):
        runtime_dir({ENV_RUNTIME: str(home / "link")})


@pytest.mark.skipif(os.getuid() != 0, reason="needs root, to make a folder of another user")
def test_a_runtime_folder_of_another_user_is_refused(home):
    theirs = home / "theirs"
    theirs.mkdir(mode=0o700)
    os.chown(theirs, 65534, 65534)
    with pytest.raises(NsightwrapError, match="owner uid 65534"):
        runtime_dir({ENV_RUNTIME: str(theirs)})


def test_only_paths_py_places_per_user_folders():
    offenders = [f"{p.relative_to(PACKAGE.parent)}:{n}: {line.strip()}"
                 for p in sorted(PACKAGE.rglob("*.py")) if p != PACKAGE / "paths.py"
                 for n, line in enumerate(p.read_text().splitlines(), 1) if PER_USER.search(line)]
    assert offenders == [], "resolve these through nsightwrap.paths"
