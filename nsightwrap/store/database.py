"""One connection to the hang store, SQLite or PostgreSQL, behind SQLAlchemy Core (2.x).

:func:`open_database` gives a :class:`Database`: ``query(statement)`` reads, ``write(statements)`` runs
statements in one transaction (all or none), and every driver error becomes a :class:`StoreError` that says
what to do, with the URL's password masked.

- SQLite (stdlib ``sqlite3``, handed to SQLAlchemy as it is): the file is checked first
  (:func:`~nsightwrap.store.check.store_problem`), created private, put in WAL mode with a busy timeout;
  a write transaction is ``BEGIN IMMEDIATE``, so several processes may write at once and a process killed
  mid-write loses at most its own uncommitted record. ``readonly`` opens it without creating anything.
- PostgreSQL (psycopg 3, the ``postgres`` extra): a write transaction is the server's; many machines
  write at once, each record once (its uid is unique). ``readonly`` never migrates or writes, so a
  role that may only SELECT can list, show and export. A server that cannot be reached raises
  :class:`StoreUnreachable` (a StoreError), which a run turns into "recording locally instead".
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import sqlite3
import time as _time
from pathlib import Path
from typing import Any, Iterator, Sequence

from sqlalchemy import create_engine, exc
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.pool import StaticPool

from nsightwrap.errors import StoreError
from nsightwrap.store.check import read_only_advice, readonly_connection, store_problem
from nsightwrap.store.location import POSTGRES_EXTRA, StoreLocation, StoreUnreachable
from nsightwrap.store.migrate import migrate, version_of
from nsightwrap.store.paths import ENV_STORE, create_private, repair_sidecars, unwritable_reason
from nsightwrap.store.schema import SCHEMA_VERSION, refuse_newer

__all__ = ["CONNECT_TIMEOUT_S", "Database", "open_database"]

#: How long a PostgreSQL server may take to answer before the store is called unreachable.
CONNECT_TIMEOUT_S = 10


class Database:
    """An open store: one SQLAlchemy connection, its engine, and where it is (``location``)."""

    def __init__(self, engine: Engine, location: StoreLocation, readonly: bool) -> None:
        self.engine, self.location, self.readonly = engine, location, readonly
        self.dialect = engine.dialect.name
        self.conn: Connection = engine.connect()

    @property
    def raw(self) -> Any:
        """The driver's own connection (sqlite3.Connection or psycopg.Connection)."""
        return self.conn.connection.driver_connection

    @contextlib.contextmanager
    def transaction(self) -> Iterator[Connection]:
        """A write transaction: committed when the block ends, rolled back when it raises."""
        conn = self.conn
        if self.dialect != "sqlite":
            with conn.begin():
                yield conn
            return
        conn.exec_driver_sql("BEGIN IMMEDIATE")  # sqlite3 in autocommit mode: the transaction is ours
        try:
            yield conn
            conn.exec_driver_sql("COMMIT")
        except BaseException:
            if self.raw.in_transaction:
                conn.exec_driver_sql("ROLLBACK")
            raise
        finally:
            conn.rollback()  # SQLAlchemy's own bookkeeping; nothing is left open on the driver

    def write(self, statements: Sequence[Any]) -> list[Any]:
        """Run the statements in one transaction; their results (rows fetched, rowcount kept)."""
        out = []
        with self.transaction() as conn:
            for stmt in statements:
                result = conn.execute(stmt)
                out.append((result.fetchall() if result.returns_rows else [], result.rowcount))
        return out

    def query(self, stmt: Any) -> list[tuple]:
        try:
            return [tuple(r) for r in self.conn.execute(stmt).fetchall()]
        finally:
            self.conn.rollback()  # no transaction left open between reads: the next one sees new records

    def close(self) -> None:
        try:
            self.conn.close()
        finally:
            self.engine.dispose()

    def error(self, e: BaseException, doing: str) -> StoreError:
        """The StoreError to raise for a driver error met while `doing` ("open", "read", "write to")."""
        if self.dialect == "sqlite" and self.location.path is not None:
            return sqlite_error(getattr(e, "orig", e), self.location.path, doing, self.readonly)
        return database_error(e, self.location, doing)


def sqlite_error(e: BaseException, path: Path, doing: str, readonly: bool) -> StoreError:
    text = str(e)
    if isinstance(e, sqlite3.DatabaseError) and ("not a database" in text or "malformed" in text
                                                 or "corrupt" in text):
        return StoreError(path, f"the hang store {path} is damaged ({text}). Move it aside (mv "
                          f"{path} {path}.bad: the next run starts a new store), or set {ENV_STORE} "
                          "to another file.")
    reason = unwritable_reason(path)
    if reason and not readonly and doing != "read":
        return StoreError(path, read_only_advice(path, f"{reason} ({text})"))
    if "readonly" in text or "unable to open" in text or "disk I/O" in text:
        return StoreError(path, f"cannot {doing} the hang store {path} ({text}). Make it and "
                          f"its folder writable, or set {ENV_STORE} to a file in a writable folder.")
    return StoreError(path, f"cannot {doing} the hang store {path}: {text}. If this "
                      f"persists, move or delete {path}, or set {ENV_STORE} to another file.")


def database_error(e: BaseException, location: StoreLocation, doing: str) -> StoreError:
    """A one-line StoreError for a database's error, its password masked; StoreUnreachable for a connection
    that failed."""
    orig = getattr(e, "orig", None) or e
    first = (str(orig).strip().splitlines() or [type(orig).__name__])[0]
    detail = location.mask(first)
    if isinstance(e, exc.OperationalError) and doing == "open":
        return StoreUnreachable(None, f"cannot reach the hang store {location.shown} ({detail}): start the "
                                "database or check the URL's host, port, user and password (--store or "
                                f"{ENV_STORE}).")
    if "permission denied" in first.lower():
        return StoreError(None, f"cannot {doing} the hang store {location.shown}: {detail}. This database user "
                          "may only read (hangs list|show|export); ask for write access (GRANT INSERT, UPDATE, "
                          f"DELETE), or set {ENV_STORE} to a store you may write.")
    return StoreError(None, f"cannot {doing} the hang store {location.shown}: {detail}.")


# --- opening ---------------------------------------------------------------------------------------------
def open_database(location: StoreLocation, *, readonly: bool, busy_timeout: float) -> Database:
    """Open (and, unless `readonly`, create and migrate) the store at `location`."""
    if location.path is not None:
        raw = (_sqlite_readonly if readonly else _sqlite_writable)(location.path, busy_timeout)
        engine = create_engine("sqlite://", creator=lambda: raw, poolclass=StaticPool)
    else:
        engine = _postgres_engine(location)
    db = None
    try:
        db = Database(engine, location, readonly)
        _settle(db, busy_timeout)
        return db
    except StoreError:
        _close(db, engine)
        raise
    except (exc.SQLAlchemyError, sqlite3.Error) as e:
        _close(db, engine)
        if location.path is not None:
            raise sqlite_error(getattr(e, "orig", e), location.path, "open", readonly) from None
        raise database_error(e, location, "open") from None
    except BaseException:
        _close(db, engine)
        raise


def _close(db: "Database | None", engine: Engine) -> None:
    if db is not None:
        db.close()
    else:
        engine.dispose()


def _postgres_engine(location: StoreLocation) -> Engine:
    if importlib.util.find_spec("psycopg") is None:  # the driver SQLAlchemy loads: said here, with what to install
        raise StoreError(None, f"the hang store {location.shown} is a PostgreSQL database, and the driver psycopg "
                         f"is not installed: {POSTGRES_EXTRA}")
    try:
        return create_engine(location.sqlalchemy_url(), poolclass=StaticPool, hide_parameters=True,
                             connect_args={"connect_timeout": CONNECT_TIMEOUT_S, "application_name": "nsightwrap"})
    except exc.ArgumentError as e:
        raise StoreError(None, f"the hang store URL {location.shown} cannot be used: {location.mask(str(e))}. "
                         "Give postgresql://user@host/db or postgresql://user:password@host:port/db.") from None


def _settle(db: Database, busy_timeout: float) -> None:
    """Migrate a writable store; check a read-only one's version (it cannot be upgraded)."""
    where = db.location.shown
    if db.readonly:
        version = version_of(db.conn)
        db.conn.rollback()
        if version != SCHEMA_VERSION:
            refuse_newer(version, where)
            raise StoreError(None if db.location.path is None else db.location.path,
                             f"the hang store {where} has schema version {version or 0}, older than this "
                             f"nsightwrap's ({SCHEMA_VERSION}), and a read-only store cannot be upgraded: open "
                             "it once where this user may write it (any command that records upgrades it).")
        return
    deadline = _time.monotonic() + busy_timeout
    while True:
        try:
            with db.transaction() as conn:
                migrate(conn, lambda version: refuse_newer(version, where))
            return
        except exc.OperationalError as e:  # SQLite: a lock the busy handler did not wait on
            text = str(getattr(e, "orig", e))
            if db.dialect != "sqlite" or ("locked" not in text and "busy" not in text) \
                    or _time.monotonic() > deadline:
                raise
            _time.sleep(0.02)


def _sqlite_writable(path: Path, busy_timeout: float) -> sqlite3.Connection:
    """Open (creating it private if missing) the store for writing, in WAL mode, once :func:`store_problem`
    (the check doctor runs too) finds nothing wrong with it."""
    if os.path.lexists(path):  # a dangling link too: the check says what is wrong
        repair_sidecars(path)
        problem = store_problem(path, writing=True)
        if problem:
            raise StoreError(path, problem)
    else:
        create_private(path)
    conn = sqlite3.connect(str(path), timeout=busy_timeout, isolation_level=None, check_same_thread=False)
    try:
        conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout * 1000)}")
        deadline = _time.monotonic() + busy_timeout
        while True:
            try:
                mode = conn.execute("PRAGMA journal_mode=WAL").fetchone()
                break
            except sqlite3.OperationalError as e:  # switching to WAL may not wait on a busy handler
                if ("locked" not in str(e) and "busy" not in str(e)) or _time.monotonic() > deadline:
                    raise
                _time.sleep(0.02)
        if not mode or str(mode[0]).lower() != "wal":
            raise StoreError(path, f"the hang store {path} could not use a WAL journal "
                             f"(got {mode}); put it on a local file system, or set {ENV_STORE}.")
        return conn
    except BaseException:
        conn.close()
        raise


def _sqlite_readonly(path: Path, busy_timeout: float) -> sqlite3.Connection:
    """Open an existing store for reading only; never creates, migrates or leaves anything."""
    if not path.exists() and not path.is_symlink():
        raise StoreError(path, f"no hang store at {path}: nothing recorded yet (the first run that records "
                         f"creates it; {ENV_STORE} or --store names another file).")
    problem = store_problem(path, writing=False)
    if problem:
        raise StoreError(path, problem)
    return readonly_connection(path, busy_timeout)
