"""Where the hang store lives, and its file made private.

The store holds command lines and host names, so a file nsightwrap creates
is mode 0600 and each folder it creates 0700 (SQLite gives its ``-wal`` and
``-shm`` files the mode of the database). An existing file or folder keeps
its mode: a store shared on purpose stays shared.
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path
from typing import Mapping, Optional, Union

from nsightwrap.errors import StoreError
from nsightwrap.paths import CACHE_FALLBACK, cache_dir, make_private_dirs

__all__ = [
    "DEFAULT_STORE",
    "ENV_STORE",
    "create_private",
    "default_store_path",
    "repair_sidecars",
    "sidecars",
    "store_path",
    "unwritable_reason",
]

ENV_STORE = "NSIGHTWRAP_STORE"
_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")  # as store.location.is_url, which imports this module
#: The store when neither $NSIGHTWRAP_STORE nor $XDG_CACHE_HOME is set.
STORE_NAME = "hangs.db"
DEFAULT_STORE = f"{CACHE_FALLBACK}/nsightwrap/{STORE_NAME}"


def default_store_path(env: Optional[Mapping[str, str]] = None) -> Path:
    """``$NSIGHTWRAP_STORE`` if set, else ``$XDG_CACHE_HOME/nsightwrap/hangs.db``,
    else ``~/.cache/nsightwrap/hangs.db``.

    As the XDG base directory spec says, a relative ``$XDG_CACHE_HOME`` is
    ignored.
    """
    env = os.environ if env is None else env
    if env.get(ENV_STORE):
        return _file(env[ENV_STORE], ENV_STORE)
    return cache_dir(env) / STORE_NAME


def store_path(path: Union[str, os.PathLike, None] = None, env: Optional[Mapping[str, str]] = None) -> Path:
    """The store file at ``path`` (``~`` expanded) when one is given (not None or empty), else
    :func:`default_store_path` of ``env``. Files only: the commands, ``HangStore(path)`` and doctor resolve the
    setting, a file or a database URL, with :func:`nsightwrap.store.location.resolve_store`."""
    return _file(path, "the store setting") if path else default_store_path(env)


def _file(value: Union[str, os.PathLike], source: str) -> Path:
    """`value` as a file path; a database URL (``scheme://``) is refused: it is no file."""
    text = os.fspath(value)
    if isinstance(text, str) and _URL.match(text.strip()):
        raise StoreError(None, f"{source} is a database URL, not a file: open it with "
                         "nsightwrap.store.opening.open_store (or HangStore(setting)), which take a file or a "
                         "URL; give a file path here")
    return Path(text).expanduser()


def create_private(path: Path) -> None:
    """Create the store's folders (0700) and an empty file (0600) if missing."""
    try:
        make_private_dirs(path.parent)
    except OSError as e:
        raise StoreError(path, f"cannot create the folder of the hang store {path}: {e.strerror or e}. "
                         f"Make {path.parent} writable, or set {ENV_STORE} to a file in a writable "
                         "folder.") from None
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return
    except OSError as e:
        raise StoreError(path, f"cannot create the hang store {path}: {e.strerror or e}. Make {path.parent} "
                         f"writable, or set {ENV_STORE} to a file in a writable folder.") from None
    os.close(fd)


def sidecars(path: Path) -> list[Path]:
    """SQLite's ``-wal`` and ``-shm`` files beside the store (whether they exist or not)."""
    return [path.with_name(path.name + suffix) for suffix in ("-wal", "-shm")]


def _stuck_sidecars(path: Path) -> list[Path]:
    """The -wal/-shm files beside the store that exist and that this user cannot write."""
    return [s for s in sidecars(path) if s.exists() and not os.access(s, os.W_OK)]


def repair_sidecars(path: Path) -> list[Path]:
    """Make this user's read-only -wal/-shm files beside a store it may write writable again; those repaired.

    An older nsightwrap's read-only open (``hangs list``) of a 0400 store left them 0400, and SQLite then
    refuses every write even once the store is writable. Only files of this user are changed (chmod to the
    store's own mode, so nothing is lost: the WAL keeps its pages); others are left for
    :func:`unwritable_reason` to explain.
    """
    if not path.is_file() or not os.access(path, os.W_OK):
        return []
    mode = stat.S_IMODE(path.stat().st_mode) | stat.S_IRUSR | stat.S_IWUSR
    repaired = []
    for side in _stuck_sidecars(path):
        try:
            if side.stat().st_uid == os.geteuid():
                side.chmod(mode)
                repaired.append(side)
        except OSError:  # gone meanwhile, or not ours after all: unwritable_reason says what to do
            pass
    return repaired


def unwritable_reason(path: Path) -> Optional[str]:
    """Why this user cannot record in the store at ``path`` (None: it can).

    SQLite writes the file and creates ``-wal``/``-shm`` files beside it, so
    the file, its folder and those two files where they exist must be writable.
    """
    if path.exists() and not os.access(path, os.W_OK):
        return f"the file {path} is read-only for this user"
    folder = path.parent
    if folder.exists() and not os.access(folder, os.W_OK | os.X_OK):
        return f"its folder {folder} is read-only for this user"
    stuck = _stuck_sidecars(path)
    if stuck:
        names = " ".join(str(s) for s in stuck)
        return (f"SQLite's file(s) {names} beside it are read-only for this user (left by a read-only open, "
                f"e.g. an older nsightwrap's `hangs list`): remove them (rm {names}, or ask their owner "
                "to) while no nsightwrap uses the store, if the -wal file is empty "
                "(else it holds the newest records)")
    return None
