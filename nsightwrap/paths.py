"""This user's folders, resolved in one place: the cache, the runtime folder, temporary work folders.

No other module reads an XDG variable, ``~`` or $TMPDIR to place a file of
its own; each asks here (tests/base/test_paths.py checks both).

- cache: ``$XDG_CACHE_HOME/nsightwrap`` (an absolute one, as the XDG base
  directory spec says), else ``~/.cache/nsightwrap``: the hang store
  (``hangs.db``, unless $NSIGHTWRAP_STORE: nsightwrap.store.paths), ncu's
  probe answers (:func:`tools_dir`, unless $NSIGHTWRAP_CACHE_DIR) and the
  CUPTI tracer's builds (:func:`tracer_dir`), and each run's logs and
  stall evidence (:func:`runs_dir`, unless $NSIGHTWRAP_EVIDENCE). Every level nsightwrap
  creates is 0700: the store holds command lines, and nothing there is for
  other users.
- runtime: ``$NSIGHTWRAP_RUNTIME_DIR``, else ``$XDG_RUNTIME_DIR/nsightwrap``
  (an absolute, existing one), else ``$TMPDIR/nsightwrap-UID``: run records
  (watch.records). Only that last folder is created (0700), never its
  parents, and one of another user, or that others may write, is refused.
- work folders: ``$TMPDIR/nsightwrap-KIND-PID.START.MARK.XXXXXXXX`` (0700),
  named after the process that made them, so that one left by a killed
  nsightwrap (SIGKILL runs no ``finally``) is removed by the next one made,
  and by ``cleanup``, once its owner is gone. MARK (:func:`host_mark`) names
  this host and pid namespace: a PID means something only there, and
  $TMPDIR may be shared (``docker -v /tmp:/tmp``, scratch shared by nodes),
  so a folder of another host or namespace is never judged, however its PID
  looks here.

nsightwrap keeps nothing in $XDG_DATA_HOME or $XDG_STATE_HOME.
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path
from typing import Mapping, Optional

from nsightwrap.errors import NsightwrapError

__all__ = ["CACHE_FALLBACK", "ENV_CACHE_DIR", "ENV_EVIDENCE", "ENV_RUNTIME", "ENV_XDG_CACHE", "ENV_XDG_RUNTIME",
           "cache_dir", "host_mark", "make_private_dirs", "remove_stale_work_dirs", "runs_dir", "runtime_dir",
           "stale_work_dirs", "tools_dir", "tracer_dir", "work_dir"]

ENV_XDG_CACHE = "XDG_CACHE_HOME"
ENV_XDG_RUNTIME = "XDG_RUNTIME_DIR"
#: The cache's base when $XDG_CACHE_HOME is unset or relative (the XDG spec's default).
CACHE_FALLBACK = "~/.cache"
ENV_CACHE_DIR = "NSIGHTWRAP_CACHE_DIR"
ENV_RUNTIME = "NSIGHTWRAP_RUNTIME_DIR"
#: ``off``: runs keep no evidence (nsightwrap.watch.evidence); a folder: they keep it there.
ENV_EVIDENCE = "NSIGHTWRAP_EVIDENCE"
_WORK = re.compile(r"nsightwrap-[a-z]+-(\d+)\.(\d+)\.([0-9a-f]{8})\.[a-z0-9_]+")


def _xdg(env: Mapping[str, str], name: str) -> Optional[Path]:
    """$name when it is an absolute path; the XDG base directory spec says a relative one is ignored."""
    value = env.get(name)
    return Path(value) if value and os.path.isabs(value) else None


def cache_dir(env: Optional[Mapping[str, str]] = None) -> Path:
    """``$XDG_CACHE_HOME/nsightwrap`` when that is absolute, else ``~/.cache/nsightwrap`` (not created here)."""
    env = os.environ if env is None else env
    return (_xdg(env, ENV_XDG_CACHE) or Path(CACHE_FALLBACK).expanduser()) / "nsightwrap"


def tools_dir(env: Optional[Mapping[str, str]] = None) -> Path:
    """Where ncu's probe answers are cached: ``$NSIGHTWRAP_CACHE_DIR``, else the cache's ``tools``."""
    env = os.environ if env is None else env
    return Path(env[ENV_CACHE_DIR]).expanduser() if env.get(ENV_CACHE_DIR) else cache_dir(env) / "tools"


def tracer_dir(env: Optional[Mapping[str, str]] = None) -> Path:
    """Where the CUPTI tracer's builds are cached: the cache's ``tracer`` (one folder per build key)."""
    return cache_dir(env) / "tracer"


def runs_dir(env: Optional[Mapping[str, str]] = None) -> Path:
    """Where runs keep their logs and stall evidence: ``$NSIGHTWRAP_EVIDENCE`` (unless ``off``, which
    nsightwrap.watch.evidence reads), else the cache's ``runs``."""
    env = os.environ if env is None else env
    value = env.get(ENV_EVIDENCE, "")
    return Path(value).expanduser() if value and value.lower() != "off" else cache_dir(env) / "runs"


def jobs_dir(env: Optional[Mapping[str, str]] = None) -> Path:
    """Where a Slurm sweep keeps its submitit jobs: the cache's ``jobs``, under the home folder that the
    cluster's nodes usually share (``--executor-folder`` names another where they do not)."""
    return cache_dir(env) / "jobs"


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
    xdg = _xdg(env, ENV_XDG_RUNTIME)
    if env.get(ENV_RUNTIME):
        path = Path(env[ENV_RUNTIME])
    elif xdg is not None and xdg.is_dir():
        path = xdg / "nsightwrap"
    else:
        import tempfile  # here, as in the functions below: a process that only names its folders (profile(fn)'s
        # child, a guard) loads no tempfile, shutil or hashlib

        path = Path(tempfile.gettempdir()) / f"nsightwrap-{os.getuid()}"
    try:
        path.mkdir(mode=0o700, exist_ok=True)  # this folder only: a missing parent is not ours to make
        st = path.lstat()
    except OSError as e:
        raise NsightwrapError(f"cannot use {path} for run records ({e.strerror or e}); create its parent folder, "
                              f"or set {ENV_RUNTIME} to a private folder of this user") from e
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
    import hashlib

    parts = (_read(f"{proc}/sys/kernel/random/boot_id"), os.uname().nodename, _read(f"{proc}/self/ns/pid", link=True))
    return hashlib.sha256("\0".join(parts).encode("utf-8", "replace")).hexdigest()[:8]


def work_dir(kind: str) -> Path:
    """A new private (0700) temporary folder for this process; stale ones of killed owners go first.

    The caller removes it when done (``shutil.rmtree`` in a ``finally``).
    """
    import tempfile

    remove_stale_work_dirs()
    pid = os.getpid()
    return Path(tempfile.mkdtemp(prefix=f"nsightwrap-{kind}-{pid}.{_start_ticks(pid)}.{host_mark()}."))


def _owner_gone(pid: str, start: str) -> bool:
    return _start_ticks(int(pid)) != int(start)


def stale_work_dirs(folder: Optional[Path] = None) -> list[Path]:
    """This user's work folders in `folder` ($TMPDIR) whose owner process is gone: only folders of this host
    and pid namespace (their MARK is :func:`host_mark`)."""
    import tempfile

    folder = Path(tempfile.gettempdir()) if folder is None else Path(folder)
    found = []
    try:
        names = os.listdir(folder)
    except OSError:
        return []
    mark = host_mark()
    for name in names:
        m = _WORK.fullmatch(name)
        if not (m and m[3] == mark):
            continue
        path = folder / name
        try:
            st = path.lstat()
        except OSError:
            continue
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
            continue
        if _owner_gone(*m.group(1, 2)):
            found.append(path)
    return found


def remove_stale_work_dirs(folder: Optional[Path] = None) -> list[Path]:
    """Remove what :func:`stale_work_dirs` finds; returns them."""
    import shutil

    stale = stale_work_dirs(folder)
    for path in stale:
        shutil.rmtree(path, ignore_errors=True)
    return stale
