"""This user's folders, resolved in one place: the cache, the runtime folder, temporary work folders.

- cache: ``$XDG_CACHE_HOME/nsightwrap`` (an absolute one, as the XDG base
  directory spec says), else ``~/.cache/nsightwrap``: the hang store and the
  ncu catalog. Every level nsightwrap creates is 0700: the store holds
  command lines, and nothing there is for other users.
- runtime: ``$NSIGHTWRAP_RUNTIME_DIR``, else ``$XDG_RUNTIME_DIR/nsightwrap``,
  else ``$TMPDIR/nsightwrap-UID``: run records (watch.records).
- work folders: ``$TMPDIR/nsightwrap-KIND-PID.START.XXXXXXXX`` (0700), named
  after the process that made them, so that one left by a killed nsightwrap
  (SIGKILL runs no ``finally``) is removed by the next one made, and by
  ``cleanup``, once its owner is gone.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import tempfile
from pathlib import Path
from typing import Mapping, Optional

from nsightwrap.errors import NsightwrapError

__all__ = ["ENV_RUNTIME", "ENV_XDG_CACHE", "cache_dir", "make_private_dirs", "remove_stale_work_dirs",
           "runtime_dir", "stale_work_dirs", "work_dir"]

ENV_XDG_CACHE = "XDG_CACHE_HOME"
ENV_RUNTIME = "NSIGHTWRAP_RUNTIME_DIR"
_WORK = re.compile(r"nsightwrap-[a-z]+-(\d+)\.(\d+)\.[a-z0-9_]+")


def cache_dir(env: Optional[Mapping[str, str]] = None) -> Path:
    """``$XDG_CACHE_HOME/nsightwrap`` when that is absolute, else ``~/.cache/nsightwrap`` (not created here)."""
    env = os.environ if env is None else env
    xdg = env.get(ENV_XDG_CACHE)
    home = Path(xdg) if xdg and os.path.isabs(xdg) else Path("~/.cache").expanduser()
    return home / "nsightwrap"


def make_private_dirs(folder: Path) -> None:
    """``mkdir -p`` with mode 0700 for every level created (``Path.mkdir(parents=True)``
    gives the missing parents the default mode); existing levels keep theirs."""
    folder = Path(folder)
    missing = []
    while not folder.exists() and folder != folder.parent:
        missing.append(folder)
        folder = folder.parent
    for level in reversed(missing):
        try:
            level.mkdir(mode=0o700)
        except FileExistsError:  # another process made it meanwhile
            pass


def runtime_dir(env: Optional[Mapping[str, str]] = None) -> Path:
    """This user's private folder for run records, created 0700 if missing.

    A folder that another user owns or may write is refused: its records
    could name anyone's processes.
    """
    env = os.environ if env is None else env
    if env.get(ENV_RUNTIME):
        path = Path(env[ENV_RUNTIME])
    elif env.get("XDG_RUNTIME_DIR") and os.path.isdir(env["XDG_RUNTIME_DIR"]):
        path = Path(env["XDG_RUNTIME_DIR"]) / "nsightwrap"
    else:
        path = Path(tempfile.gettempdir()) / f"nsightwrap-{os.getuid()}"
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        st = path.lstat()
    except OSError as e:
        raise NsightwrapError(f"cannot use {path} for run records ({e}); set {ENV_RUNTIME} to a private folder") from e
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o022:
        raise NsightwrapError(f"{path} is not a private folder of this user (owner uid {st.st_uid}, mode "
                              f"{oct(st.st_mode & 0o777)}); remove it, or set {ENV_RUNTIME} to a private folder")
    return path


def _start_ticks(pid: int) -> Optional[int]:
    """When `pid` started, in clock ticks since boot (/proc/PID/stat field 22), or None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return int(f.read().rsplit(b")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None


def work_dir(kind: str) -> Path:
    """A new private (0700) temporary folder for this process; stale ones of killed owners go first.

    The caller removes it when done (``shutil.rmtree`` in a ``finally``).
    """
    remove_stale_work_dirs()
    pid = os.getpid()
    return Path(tempfile.mkdtemp(prefix=f"nsightwrap-{kind}-{pid}.{_start_ticks(pid)}."))


def stale_work_dirs(folder: Optional[Path] = None) -> list[Path]:
    """This user's work folders in `folder` ($TMPDIR) whose owner process is gone."""
    folder = Path(tempfile.gettempdir()) if folder is None else Path(folder)
    found = []
    try:
        names = os.listdir(folder)
    except OSError:
        return []
    for name in names:
        m = _WORK.fullmatch(name)
        if not m:
            continue
        path = folder / name
        try:
            st = path.lstat()
        except OSError:
            continue
        if stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid() and _start_ticks(int(m[1])) != int(m[2]):
            found.append(path)
    return found


def remove_stale_work_dirs(folder: Optional[Path] = None) -> list[Path]:
    """Remove what :func:`stale_work_dirs` finds; returns them."""
    stale = stale_work_dirs(folder)
    for path in stale:
        shutil.rmtree(path, ignore_errors=True)
    return stale
