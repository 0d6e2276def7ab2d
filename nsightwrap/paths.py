"""This user's folders, resolved in one place: the cache, the runtime folder, temporary work folders.

- cache: ``$XDG_CACHE_HOME/nsightwrap`` (an absolute one, as the XDG base
  directory spec says), else ``~/.cache/nsightwrap``: the hang store and the
  ncu catalog. Every level nsightwrap creates is 0700: the store holds
  command lines, and nothing there is for other users.
- runtime: ``$NSIGHTWRAP_RUNTIME_DIR``, else ``$XDG_RUNTIME_DIR/nsightwrap``,
  else ``$TMPDIR/nsightwrap-UID``: run records (watch.records).
- work folders: ``$TMPDIR/nsightwrap-KIND-PID.START.MARK.XXXXXXXX`` (0700),
  named after the process that made them, so that one left by a killed
  nsightwrap (SIGKILL runs no ``finally``) is removed by the next one made,
  and by ``cleanup``, once its owner is gone. MARK (:func:`host_mark`) names
  this host and pid namespace: a PID means something only there, and
  $TMPDIR may be shared (``docker -v /tmp:/tmp``, scratch shared by nodes),
  so a folder of another host or namespace is never judged, however its PID
  looks here. A folder of the old form (no MARK) is judged only once it is a
  day old.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import stat
import tempfile
import time
from pathlib import Path
from typing import Mapping, Optional

from nsightwrap.errors import NsightwrapError

__all__ = ["ENV_RUNTIME", "ENV_XDG_CACHE", "cache_dir", "host_mark", "make_private_dirs", "remove_stale_work_dirs",
           "runtime_dir", "stale_work_dirs", "work_dir"]

ENV_XDG_CACHE = "XDG_CACHE_HOME"
ENV_RUNTIME = "NSIGHTWRAP_RUNTIME_DIR"
_WORK = re.compile(r"nsightwrap-[a-z]+-(\d+)\.(\d+)\.([0-9a-f]{8})\.[a-z0-9_]+")
#: The form before MARK: whose host and namespace is unknown, so judged only when this old (seconds).
_OLD_WORK = re.compile(r"nsightwrap-[a-z]+-(\d+)\.(\d+)\.[a-z0-9_]+")
OLD_FORM_AGE_S = 24 * 3600


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


def _read(path: str, link: bool = False) -> str:
    try:
        if link:
            return os.readlink(path)
        with open(path, encoding="ascii", errors="replace") as f:
            return f.read().strip()
    except OSError:
        return ""


def host_mark(proc: str = "/proc") -> str:
    """8 hex digits that name this host and pid namespace: sha256 of the boot id, the host name and the pid
    namespace (``pid:[INODE]``); a part that cannot be read counts as empty (the host name then tells
    hosts apart, and a missing /proc gives names no owner can be judged by anyway)."""
    parts = (_read(f"{proc}/sys/kernel/random/boot_id"), os.uname().nodename, _read(f"{proc}/self/ns/pid", link=True))
    return hashlib.sha256("\0".join(parts).encode("utf-8", "replace")).hexdigest()[:8]


def work_dir(kind: str) -> Path:
    """A new private (0700) temporary folder for this process; stale ones of killed owners go first.

    The caller removes it when done (``shutil.rmtree`` in a ``finally``).
    """
    remove_stale_work_dirs()
    pid = os.getpid()
    return Path(tempfile.mkdtemp(prefix=f"nsightwrap-{kind}-{pid}.{_start_ticks(pid)}.{host_mark()}."))


def _owner_gone(pid: str, start: str) -> bool:
    return _start_ticks(int(pid)) != int(start)


def stale_work_dirs(folder: Optional[Path] = None) -> list[Path]:
    """This user's work folders in `folder` ($TMPDIR) whose owner process is gone: only folders of this host
    and pid namespace (their MARK is :func:`host_mark`), and folders of the old form (no MARK) a day old."""
    folder = Path(tempfile.gettempdir()) if folder is None else Path(folder)
    found = []
    try:
        names = os.listdir(folder)
    except OSError:
        return []
    mark = host_mark()
    for name in names:
        m, old = _WORK.fullmatch(name), _OLD_WORK.fullmatch(name)
        if not (m and m[3] == mark) and not old:
            continue
        path = folder / name
        try:
            st = path.lstat()
        except OSError:
            continue
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
            continue
        if old and time.time() - st.st_mtime < OLD_FORM_AGE_S:
            continue  # whose it is cannot be told: maybe a live nsightwrap of another host or namespace
        if _owner_gone(*(m or old).group(1, 2)):
            found.append(path)
    return found


def remove_stale_work_dirs(folder: Optional[Path] = None) -> list[Path]:
    """Remove what :func:`stale_work_dirs` finds; returns them."""
    stale = stale_work_dirs(folder)
    for path in stale:
        shutil.rmtree(path, ignore_errors=True)
    return stale
