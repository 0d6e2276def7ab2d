"""Is this a hang store nsightwrap can use? The one check that every command and `doctor` run.

:func:`store_problem` answers with a message saying what to do (None: usable):
not a regular file (a folder, a FIFO, a dangling symbolic link), read-only for
a command that records, not a nsightwrap store at all (a report, /etc/passwd,
another program's database: never suggested for deletion), written by a newer
nsightwrap, or lacking tables or columns its schema version says it has.

:func:`readonly_connection` opens a store for reading without creating
anything beside it: SQLite's ``-wal``/``-shm`` files are used where they
exist (a writer is at work), else the file is opened as immutable, so that a
read-only open never leaves files (0400 ones, for a 0400 store) that later
stop every write.
"""

from __future__ import annotations

import functools
import os
import sqlite3
import stat
from pathlib import Path
from typing import Optional

from nsightwrap.store.paths import ENV_STORE, sidecars, unwritable_reason
from nsightwrap.store.schema import MIGRATIONS, SCHEMA_VERSION, stored_version

__all__ = ["SQLITE_HEADER", "read_only_advice", "readonly_connection", "store_problem"]

#: The first 16 bytes of every SQLite database file.
SQLITE_HEADER = b"SQLite format 3\x00"


def read_only_advice(path: Path, reason: str) -> str:
    return (f"cannot record in the hang store {path}: {reason}. Make it writable (chmod u+w {path} "
            f"{path.parent}), or set {ENV_STORE} to a file in a writable folder; `python -m nsightwrap "
            "hangs list|show|export` can still read it.")


def _elsewhere(path: Path) -> str:
    return (f"give --store (or {ENV_STORE}) the path of a hang store, or of a file that does not exist yet "
            f"for a new one (e.g. {path.parent / 'hangs.db'})")


def readonly_connection(path: Path, busy_timeout: float) -> sqlite3.Connection:
    """A read-only connection that creates no file: through the -wal/-shm files where both exist, else
    (or where they cannot be used) as an immutable file (no writer is at work: its -wal would exist)."""
    uri = path.absolute().as_uri()
    if all(side.exists() for side in sidecars(path)):
        try:
            conn = sqlite3.connect(f"{uri}?mode=ro", uri=True, timeout=busy_timeout, isolation_level=None)
            try:
                stored_version(conn)
                return conn
            except BaseException:
                conn.close()
                raise
        except sqlite3.OperationalError:  # e.g. a -shm this user cannot read: read the file alone
            pass
    return sqlite3.connect(f"{uri}?mode=ro&immutable=1", uri=True, timeout=busy_timeout, isolation_level=None)


def _not_a_file(path: Path) -> Optional[str]:
    """Why ``path`` is not a file nsightwrap can open as its store (it may be missing: that is fine)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    if stat.S_ISLNK(st.st_mode):
        try:
            st = os.stat(path)
        except FileNotFoundError:
            return (f"the hang store {path} is a symbolic link to {os.readlink(path)}, which does not exist: "
                    f"nsightwrap does not create files through a dangling link. Remove the link (rm {path}) "
                    f"or point it at a hang store, or {_elsewhere(path)}.")
    if stat.S_ISREG(st.st_mode):
        return None
    kinds = ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"),
             (stat.S_ISCHR, "a device"), (stat.S_ISBLK, "a device"))
    kind = next((name for test, name in kinds if test(st.st_mode)), "not a regular file")
    return f"{path} is {kind}, not a hang store file: {_elsewhere(path)}."


@functools.cache  # the migrations are constant: built once per version, read only
def _expected_tables(version: int) -> dict[str, frozenset[str]]:
    """The tables and their columns that a store of schema `version` has (the migrations, applied in memory)."""
    conn = sqlite3.connect(":memory:")
    try:
        for script in MIGRATIONS[:version]:
            conn.executescript(script)
        names = [n for (n,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
                 if not n.startswith("sqlite_")]
        return {n: frozenset(row[1] for row in conn.execute(f"PRAGMA table_info({n})")) for n in names}
    finally:
        conn.close()


def _schema_problem(conn: sqlite3.Connection, path: Path) -> Optional[str]:
    tables = {n for (n,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
              if not n.startswith("sqlite_")}
    if not tables:
        return None  # an empty database: a new store
    if "schema_version" not in tables:
        return (f"{path} is an SQLite database but not a nsightwrap hang store (its tables: "
                f"{', '.join(sorted(tables))}); nsightwrap leaves it alone: {_elsewhere(path)}.")
    version = stored_version(conn) or 0
    if version > SCHEMA_VERSION:
        return (f"the hang store {path} has schema version {version}, newer than this nsightwrap knows "
                f"({SCHEMA_VERSION}). Upgrade nsightwrap, or set {ENV_STORE} to another file.")
    lacks = []
    for table, columns in _expected_tables(version).items():
        have = {row[1] for row in conn.execute(f"PRAGMA table_info({table})")}
        if not have:
            lacks.append(f"the table {table}")
        elif columns - have:
            lacks.append(f"the column(s) {', '.join(sorted(columns - have))} of the table {table}")
    if lacks:
        return (f"the hang store {path} (schema version {version}) lacks {'; '.join(lacks)}: it was changed "
                f"outside nsightwrap. Move it aside (mv {path} {path}.bad: the next run starts a new store), or "
                f"set {ENV_STORE} to another file.")
    return None


def _content_problem(path: Path) -> Optional[str]:
    """What is wrong with the file's content, read through SQLite only.

    Never with open(): closing any other descriptor of the file drops every POSIX lock this process
    holds on it (its open connections' too), so another process would take this one's -wal for unused
    and delete it under the connection: a damaged store. SQLite's own opens keep those locks.
    """
    try:
        empty = path.stat().st_size == 0
    except OSError as e:
        return f"cannot read the hang store {path}: {e.strerror or e}. Make it readable, or {_elsewhere(path)}."
    if empty:
        return None  # a new store
    if not os.access(path, os.R_OK):
        return f"cannot read the hang store {path}: permission denied. Make it readable, or {_elsewhere(path)}."
    try:
        conn = readonly_connection(path, 1.0)
        try:
            return _schema_problem(conn, path)
        finally:
            conn.close()
    except sqlite3.DatabaseError as e:
        if "not a database" in str(e):
            return f"{path} is not a nsightwrap hang store (not an SQLite database); nsightwrap leaves it alone: " \
                   f"{_elsewhere(path)}."
        return (f"the hang store {path} is damaged ({e}). Move it aside (mv {path} {path}.bad: the next run "
                f"starts a new store), or set {ENV_STORE} to another file.")


def store_problem(path: Path, *, writing: bool) -> Optional[str]:
    """Why the commands cannot use the store at `path` (to record, when `writing`); None when they can.

    A missing file is no problem here (a command that records creates it).
    """
    problem = _not_a_file(path)
    if problem or not path.exists():
        return problem
    if writing:
        reason = unwritable_reason(path)
        if reason:
            return read_only_advice(path, reason)
    return _content_problem(path)
