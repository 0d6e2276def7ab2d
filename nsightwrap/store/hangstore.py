"""The hang store: which profiling settings hung on which kernels, here.

nsightwrap remembers every verdict about a kernel and the settings it was
profiled with, so that it never waits on the same hang twice. The store is
one SQLite file (stdlib ``sqlite3``):

- path: the ``path`` argument, else ``$NSIGHTWRAP_STORE``, else
  ``~/.cache/nsightwrap/hangs.db`` (read when a store is opened, never at
  import); parent folders are created.
- WAL journal and a 10 s busy timeout, one transaction per record (or per
  attempt in :meth:`HangStore.record_attempt`), taken with ``BEGIN
  IMMEDIATE``: several processes may write at once, and a process killed
  mid-write loses at most its own uncommitted record.
- ``schema_version(version)`` holds one row, the number of migrations
  applied; :data:`MIGRATIONS` lists them in order, and opening a store
  applies those it lacks. A store written by a newer nsightwrap is refused.

Schema, version 1 (table ``records``, one row a verdict; see :class:`Record`)::

    id              INTEGER PRIMARY KEY AUTOINCREMENT
    time            TEXT    ISO 8601, UTC (the attempt's start when known)
    host, gpu, driver, ncu_version   TEXT or NULL   (see Environment)
    kernel          TEXT    function name as ncu printed it ("*" = unknown)
    kernel_pattern  TEXT    normalize_kernel(kernel)
    set_name        TEXT or NULL    ncu --set
    sections        TEXT    JSON list, sorted   (--section ...)
    metrics         TEXT    JSON list, sorted   (--metrics ...)
    replay_mode     TEXT    kernel | application | range | app-range
    key             TEXT    ProfileKey.canonical()
    outcome         TEXT    one of OUTCOMES
    passes_reached  INTEGER or NULL   passes of a finished profile
    stall_s         REAL or NULL      silence before a hang verdict
    elapsed_s       REAL or NULL      the whole run
    command         TEXT    JSON list, the exact ncu command line
    trusted         INTEGER 0 when foreign processes held the GPU
    rung, ladder    TEXT or NULL      where in a ladder of settings
    note            TEXT
    run_id          TEXT or NULL      rows of one run share it (the attempt's cookie)

    index records_match (kernel_pattern, gpu, ncu_version)
    index records_kernel (kernel)

Only trusted records decide anything: a hang recorded while someone else's
kernel spun on the GPU says nothing about the settings (every run hung then).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shlex
import shutil
import socket
import sqlite3
import subprocess
import sys
import time as _time
import uuid
from dataclasses import asdict, dataclass, fields
from datetime import datetime, timezone
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Callable, Iterable, Mapping, NamedTuple, Optional, Sequence, Union

from nsightwrap.errors import NsightwrapError

if TYPE_CHECKING:  # pragma: no cover
    from nsightwrap.ncu.attempt import Attempt
    from nsightwrap.ncu.options import ProfileOptions

__all__ = [
    "COLUMNS",
    "DEFAULT_STORE",
    "ENV_STORE",
    "Environment",
    "HANG_OUTCOMES",
    "HangStore",
    "KernelSummary",
    "MIGRATIONS",
    "OUTCOMES",
    "ProfileKey",
    "Record",
    "SCHEMA_VERSION",
    "StoreError",
    "add_hangs_parser",
    "cmd_hangs",
    "default_store_path",
    "normalize_kernel",
]

ENV_STORE = "NSIGHTWRAP_STORE"
DEFAULT_STORE = "~/.cache/nsightwrap/hangs.db"
BUSY_TIMEOUT_S = 10.0

from nsightwrap.status import (  # noqa: F401 - re-exported for the layers above
    CRASHED, ERROR, HANG, HANG_OUTCOMES, INTERRUPTED, NO_KERNELS, OK, OUTCOMES, REPLAY_MODES as _REPLAY_MODES,
    SKIPPED, TIMEOUT)


class StoreError(NsightwrapError):
    """The hang store cannot be opened, read or written; says what to do."""

    def __init__(self, path: Union[str, Path, None], message: str):
        self.path = None if path is None else Path(path)
        super().__init__(message)


# ---------------------------------------------------------------------------
# Kernel names
# ---------------------------------------------------------------------------

_OPEN = {"<": ">", "(": ")", "[": "]"}
_CLOSE = {v: k for k, v in _OPEN.items()}


def normalize_kernel(name: str) -> str:
    """The pattern of a kernel name: kernels differing only in numbers or
    template arguments, or in how ncu spelled the name, get the same one.

    Steps, in order:

    1. strip blanks and a trailing ``...`` (ncu truncates long names);
    2. ``(anonymous namespace)`` becomes ``{anon}``;
    3. drop every bracketed list at top level: template arguments ``<...>``
       and parameter lists ``(...)`` (nested brackets included; a list left
       open by truncation is dropped to the end);
    4. keep the last blank-separated word and its last ``::`` component, so
       ncu's ``function``, ``demangled`` and ``mangled``-free spellings
       (``void at::native::foo<4>(int)`` and ``foo``) agree;
    5. replace each run of digits with ``#``.

    So ``nvjet_sm90_tst_256x128_64x4_1...`` and ``nvjet_sm90_tst_128x128_64x4_2...``
    both give ``nvjet_sm#_tst_#x#_#x#_#``: the same GEMM kernel family with
    other tile sizes. ``vec_add`` and ``vec_add2`` also match (``vec_add#`` is
    not ``vec_add``, though). The function is idempotent, so a pattern may be
    passed wherever a name is expected. A name that would normalize to
    nothing (``operator()``...) keeps its text, with digits replaced.
    """
    if not isinstance(name, str):
        raise TypeError(f"kernel name must be a string, not {type(name).__name__}")
    text = name.strip()
    while text.endswith("..."):
        text = text[:-3].rstrip()
    text = text.replace("(anonymous namespace)", "{anon}")
    kept: list[str] = []
    stack: list[str] = []
    for ch in text:
        if ch in _OPEN:
            stack.append(_OPEN[ch])
            continue
        if stack:
            if ch == stack[-1]:
                stack.pop()
            continue
        if ch in _CLOSE:
            continue
        kept.append(ch)
    core = "".join(kept).strip()
    words = core.split()
    core = words[-1] if words else ""
    core = core.rsplit("::", 1)[-1] if "::" in core and not core.endswith("::") else core
    if not core:
        core = " ".join(text.split())
    out: list[str] = []
    for ch in core:
        if ch.isdigit() and ch.isascii():
            if not out or out[-1] != "#":
                out.append("#")
        else:
            out.append(ch)
    return "".join(out)


# ---------------------------------------------------------------------------
# What was profiled, and where
# ---------------------------------------------------------------------------

def _str_tuple(name: str, value: Any) -> tuple[str, ...]:
    if isinstance(value, str):
        raise TypeError(f"ProfileKey.{name} must be a sequence of strings, not the string {value!r}")
    items = tuple(value or ())
    for item in items:
        if not isinstance(item, str) or not item:
            raise TypeError(f"ProfileKey.{name} holds {item!r}; every item must be a non-empty string")
    return tuple(sorted(set(items)))


@dataclass(frozen=True)
class ProfileKey:
    """The profiling settings that decide whether a kernel hangs.

    Sections and metrics are kept sorted and without duplicates, so two
    keys asking for the same thing are equal and have the same canonical().
    """

    set: Optional[str] = None
    sections: tuple[str, ...] = ()
    metrics: tuple[str, ...] = ()
    replay_mode: str = "kernel"

    def __post_init__(self) -> None:
        if self.set is not None and (not isinstance(self.set, str) or not self.set):
            raise TypeError(f"ProfileKey.set={self.set!r} must be a non-empty string or None")
        object.__setattr__(self, "sections", _str_tuple("sections", self.sections))
        object.__setattr__(self, "metrics", _str_tuple("metrics", self.metrics))
        mode = getattr(self.replay_mode, "value", self.replay_mode)
        if mode not in _REPLAY_MODES:
            raise ValueError(f"ProfileKey.replay_mode={self.replay_mode!r}; use one of {', '.join(_REPLAY_MODES)}")
        object.__setattr__(self, "replay_mode", mode)

    @classmethod
    def from_options(cls, options: "ProfileOptions") -> "ProfileKey":
        """The key of a ProfileOptions (kernel filters and launch counts are not part of it)."""
        return cls(options.set, options.sections, options.metrics, str(options.replay_mode))

    @classmethod
    def parse(cls, canonical: str) -> "ProfileKey":
        """The inverse of canonical()."""
        try:
            data = json.loads(canonical)
            return cls(data["set"], tuple(data["sections"]), tuple(data["metrics"]), data["replay_mode"])
        except (ValueError, KeyError, TypeError) as e:
            raise ValueError(f"not a canonical profile key: {canonical!r} ({e})") from None

    def canonical(self) -> str:
        """A stable string naming these settings: compact JSON, keys and lists sorted."""
        return json.dumps({"metrics": list(self.metrics), "replay_mode": self.replay_mode,
                           "sections": list(self.sections), "set": self.set},
                          sort_keys=True, separators=(",", ":"))

    def describe(self) -> str:
        """A short phrase for people: ``set full``, ``sections A+B, kernel replay``,
        ``metrics gpu__time_duration.sum, application replay``.

        The replay mode is named unless the key is a plain set (or nothing)
        in kernel replay, ncu's default.
        """
        parts = []
        if self.set:
            parts.append(f"set {self.set}")
        if self.sections:
            parts.append("sections " + "+".join(self.sections))
        if self.metrics:
            parts.append("metrics " + "+".join(self.metrics))
        text = " + ".join(parts) or "ncu's default set"
        if self.replay_mode != "kernel" or self.sections or self.metrics:
            text += f", {self.replay_mode} replay"
        return text

    def __str__(self) -> str:
        return self.describe()


def _run_nvidia_smi(exe: str, timeout: float) -> Optional[str]:
    try:
        done = subprocess.run([exe, "--query-gpu=name,driver_version", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired, ValueError):
        return None
    return done.stdout if done.returncode == 0 else None


@dataclass(frozen=True)
class Environment:
    """Where a verdict was reached: host, GPU model, driver and ncu version.

    Hangs are matched on gpu and ncu_version; the driver is reported.
    Any field may be None (unknown).
    """

    host: Optional[str] = None
    gpu: Optional[str] = None
    driver: Optional[str] = None
    ncu_version: Optional[str] = None

    @classmethod
    def detect(cls, ncu_version: Optional[str] = None, *, nvidia_smi: Optional[str] = None,
               timeout: float = 15.0) -> "Environment":
        """This machine: host name, and the first GPU's name and driver from
        nvidia-smi (None when nvidia-smi is missing or fails). Never raises."""
        try:
            host: Optional[str] = socket.gethostname() or None
        except OSError:  # pragma: no cover - gethostname does not fail in practice
            host = None
        gpu = driver = None
        exe = nvidia_smi or shutil.which("nvidia-smi")
        text = _run_nvidia_smi(exe, timeout) if exe else None
        for line in (text or "").splitlines():
            parts = [p.strip() for p in line.split(",")]
            if parts and parts[0]:
                gpu = parts[0]
                driver = parts[1] if len(parts) > 1 and parts[1] else None
                break
        return cls(host, gpu, driver, ncu_version)

    def describe(self) -> str:
        return (f"{self.gpu or 'unknown GPU'} (driver {self.driver or 'unknown'}, "
                f"ncu {self.ncu_version or 'unknown'})")


# ---------------------------------------------------------------------------
# Records
# ---------------------------------------------------------------------------

@dataclass(frozen=True)
class Record:
    """One row of the store: one verdict about one kernel with one key."""

    id: int
    time: str
    host: Optional[str]
    gpu: Optional[str]
    driver: Optional[str]
    ncu_version: Optional[str]
    kernel: str
    kernel_pattern: str
    set: Optional[str]
    sections: tuple[str, ...]
    metrics: tuple[str, ...]
    replay_mode: str
    key: str
    outcome: str
    passes_reached: Optional[int]
    stall_s: Optional[float]
    elapsed_s: Optional[float]
    command: tuple[str, ...]
    trusted: bool
    rung: Optional[str]
    ladder: Optional[str]
    note: str
    run_id: Optional[str]

    @property
    def profile_key(self) -> ProfileKey:
        return ProfileKey(self.set, self.sections, self.metrics, self.replay_mode)

    @property
    def environment(self) -> Environment:
        return Environment(self.host, self.gpu, self.driver, self.ncu_version)

    @property
    def hung(self) -> bool:
        return self.outcome in HANG_OUTCOMES

    def to_dict(self) -> dict[str, Any]:
        """Plain types only (lists, not tuples), for JSON and YAML."""
        data = asdict(self)
        for name in ("sections", "metrics", "command"):
            data[name] = list(data[name])
        return data


#: Field names of Record, in order: the columns of CSV/YAML exports.
COLUMNS = tuple(f.name for f in fields(Record))

# Record field -> SQL column, where they differ.
_SQL_NAME = {"set": "set_name"}
_SELECT = "SELECT " + ", ".join(_SQL_NAME.get(c, c) for c in COLUMNS) + " FROM records"


class KernelSummary(NamedTuple):
    """One line of :meth:`HangStore.kernels`; n_hangs counts trusted hang/timeout records."""

    kernel: str
    n_records: int
    n_hangs: int
    last_time: str


#: Migrations, in order; the store's version is how many were applied.
MIGRATIONS: tuple[str, ...] = (
    """
    CREATE TABLE records (
        id             INTEGER PRIMARY KEY AUTOINCREMENT,
        time           TEXT    NOT NULL,
        host           TEXT,
        gpu            TEXT,
        driver         TEXT,
        ncu_version    TEXT,
        kernel         TEXT    NOT NULL,
        kernel_pattern TEXT    NOT NULL,
        set_name       TEXT,
        sections       TEXT    NOT NULL DEFAULT '[]',
        metrics        TEXT    NOT NULL DEFAULT '[]',
        replay_mode    TEXT    NOT NULL,
        key            TEXT    NOT NULL,
        outcome        TEXT    NOT NULL,
        passes_reached INTEGER,
        stall_s        REAL,
        elapsed_s      REAL,
        command        TEXT    NOT NULL DEFAULT '[]',
        trusted        INTEGER NOT NULL DEFAULT 1,
        rung           TEXT,
        ladder         TEXT,
        note           TEXT    NOT NULL DEFAULT '',
        run_id         TEXT
    );
    CREATE INDEX records_match ON records (kernel_pattern, gpu, ncu_version);
    CREATE INDEX records_kernel ON records (kernel);
    """,
)
SCHEMA_VERSION = len(MIGRATIONS)


def default_store_path(env: Optional[Mapping[str, str]] = None) -> Path:
    """``$NSIGHTWRAP_STORE`` if set, else ``~/.cache/nsightwrap/hangs.db``."""
    env = os.environ if env is None else env
    return Path(env.get(ENV_STORE) or DEFAULT_STORE).expanduser()


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _as_key(key: Any) -> ProfileKey:
    if isinstance(key, ProfileKey):
        return key
    if hasattr(key, "replay_mode") and hasattr(key, "sections"):  # ProfileOptions
        return ProfileKey.from_options(key)
    raise TypeError(f"key must be a ProfileKey (or ProfileOptions), not {type(key).__name__}")


def _row_to_record(row: Sequence[Any]) -> Record:
    d = dict(zip(COLUMNS, row))
    d["sections"] = tuple(json.loads(d["sections"]))
    d["metrics"] = tuple(json.loads(d["metrics"]))
    d["command"] = tuple(json.loads(d["command"]))
    d["trusted"] = bool(d["trusted"])
    d["note"] = d["note"] or ""
    return Record(**d)


class HangStore:
    """The hang store in one SQLite file; one connection per object.

    ``with HangStore() as store: ...`` closes it at the end. ``now`` returns
    the ISO time stamped on new records (injectable for tests).
    """

    def __init__(self, path: Union[str, Path, None] = None, *, now: Callable[[], str] = _now,
                 busy_timeout: float = BUSY_TIMEOUT_S):
        self.path = Path(path).expanduser() if path is not None else default_store_path()
        self._now = now
        self._conn: Optional[sqlite3.Connection] = None
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise StoreError(self.path, f"cannot create the folder of the hang store {self.path}: {e}. "
                             f"Make {self.path.parent} writable, or set {ENV_STORE} to a file in a writable "
                             "folder.") from None
        try:
            self._conn = sqlite3.connect(str(self.path), timeout=busy_timeout, isolation_level=None)
            self._conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout * 1000)}")
            deadline = _time.monotonic() + busy_timeout
            while True:
                try:
                    self._setup()
                    break
                except sqlite3.OperationalError as e:  # switching to WAL may not wait on a busy handler
                    if ("locked" not in str(e) and "busy" not in str(e)) or _time.monotonic() > deadline:
                        raise
                    _time.sleep(0.02)
        except sqlite3.Error as e:
            self.close()
            raise self._error(e, "open") from None
        except BaseException:
            self.close()
            raise

    # --- plumbing ------------------------------------------------------------
    def _error(self, e: Exception, doing: str) -> StoreError:
        text = str(e)
        if isinstance(e, sqlite3.DatabaseError) and ("not a database" in text or "malformed" in text
                                                     or "corrupt" in text):
            return StoreError(self.path, f"the hang store {self.path} is damaged ({text}). Move or delete "
                              f"{self.path} (its records are lost), or set {ENV_STORE} to another file.")
        if "readonly" in text or "unable to open" in text or "disk I/O" in text:
            return StoreError(self.path, f"cannot {doing} the hang store {self.path} ({text}). Make it and "
                              f"its folder writable, or set {ENV_STORE} to a file in a writable folder.")
        return StoreError(self.path, f"cannot {doing} the hang store {self.path}: {text}. If this "
                          f"persists, move or delete {self.path}, or set {ENV_STORE} to another file.")

    @property
    def conn(self) -> sqlite3.Connection:
        if self._conn is None:
            raise StoreError(self.path, f"the hang store {self.path} is closed; open a new HangStore")
        return self._conn

    def _setup(self) -> None:
        conn = self.conn
        mode = conn.execute("PRAGMA journal_mode=WAL").fetchone()
        if not mode or str(mode[0]).lower() != "wal":
            raise StoreError(self.path, f"the hang store {self.path} could not use a WAL journal "
                             f"(got {mode}); put it on a local file system, or set {ENV_STORE}.")
        conn.execute("BEGIN IMMEDIATE")
        try:
            conn.execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)")
            row = conn.execute("SELECT version FROM schema_version").fetchone()
            version = 0 if row is None else int(row[0])
            if version > SCHEMA_VERSION:
                raise StoreError(self.path, f"the hang store {self.path} has schema version {version}, newer "
                                 f"than this nsightwrap knows ({SCHEMA_VERSION}). Upgrade nsightwrap, or set "
                                 f"{ENV_STORE} to another file.")
            for script in MIGRATIONS[version:]:
                for statement in script.split(";"):
                    if statement.strip():
                        conn.execute(statement)
            if row is None:
                conn.execute("INSERT INTO schema_version (version) VALUES (?)", (SCHEMA_VERSION,))
            elif version != SCHEMA_VERSION:
                conn.execute("UPDATE schema_version SET version = ?", (SCHEMA_VERSION,))
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise

    def _write(self, statements: Iterable[tuple[str, Sequence[Any]]]) -> list[sqlite3.Cursor]:
        """Run statements in one IMMEDIATE transaction: all of them or none."""
        conn = self.conn
        done = []
        try:
            conn.execute("BEGIN IMMEDIATE")
            try:
                for sql, params in statements:
                    done.append(conn.execute(sql, params))
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
        except sqlite3.Error as e:
            raise self._error(e, "write to") from None
        return done

    def _query(self, sql: str, params: Sequence[Any] = ()) -> list[tuple]:
        try:
            return self.conn.execute(sql, params).fetchall()
        except sqlite3.Error as e:
            raise self._error(e, "read") from None

    def close(self) -> None:
        if self._conn is not None:
            try:
                self._conn.close()
            finally:
                self._conn = None

    def __enter__(self) -> "HangStore":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<HangStore {str(self.path)!r}{' closed' if self._conn is None else ''}>"

    @property
    def schema_version(self) -> int:
        return int(self._query("SELECT version FROM schema_version")[0][0])

    # --- writing -------------------------------------------------------------
    def _row(self, kernel: str, key: Any, outcome: str, env: Environment, *, passes, stall_s, elapsed_s,
             command, trusted, rung, ladder, note, time, run_id=None) -> dict[str, Any]:
        if not isinstance(kernel, str) or not kernel.strip():
            raise ValueError(f"kernel={kernel!r} must be a non-empty string (use '*' for unknown)")
        if outcome not in OUTCOMES:
            raise ValueError(f"outcome={outcome!r}; use one of {', '.join(OUTCOMES)}")
        if not isinstance(env, Environment):
            raise TypeError(f"env must be an Environment (Environment.detect()), not {type(env).__name__}")
        if isinstance(command, str):
            raise TypeError(f"command must be a list of arguments, not the string {command!r}")
        key = _as_key(key)
        kernel = kernel.strip()
        return {
            "time": time or self._now(), "host": env.host, "gpu": env.gpu, "driver": env.driver,
            "ncu_version": env.ncu_version, "kernel": kernel, "kernel_pattern": normalize_kernel(kernel),
            "set": key.set, "sections": json.dumps(list(key.sections)), "metrics": json.dumps(list(key.metrics)),
            "replay_mode": key.replay_mode, "key": key.canonical(), "outcome": outcome,
            "passes_reached": None if passes is None else int(passes),
            "stall_s": None if stall_s is None else float(stall_s),
            "elapsed_s": None if elapsed_s is None else float(elapsed_s),
            "command": json.dumps([str(c) for c in command]), "trusted": 1 if trusted else 0,
            "rung": rung, "ladder": ladder, "note": note or "", "run_id": run_id,
        }

    def _insert(self, rows: Sequence[dict[str, Any]]) -> list[Record]:
        cols = [c for c in COLUMNS if c != "id"]
        sql = (f"INSERT INTO records ({', '.join(_SQL_NAME.get(c, c) for c in cols)}) "
               f"VALUES ({', '.join('?' * len(cols))})")
        ids = [c.lastrowid for c in self._write((sql, [r[c] for c in cols]) for r in rows)]
        return [_row_to_record((rid, *[r[c] for c in cols])) for rid, r in zip(ids, rows)]

    def record(self, kernel: str, key: Union[ProfileKey, "ProfileOptions"], outcome: str, *, env: Environment,
               passes: Optional[int] = None, stall_s: Optional[float] = None,
               elapsed_s: Optional[float] = None, command: Sequence[str] = (), trusted: bool = True,
               rung: Optional[str] = None, ladder: Optional[str] = None, note: str = "",
               time: Optional[str] = None, run_id: Optional[str] = None) -> Record:
        """Add one record in its own transaction and return it."""
        return self._insert([self._row(kernel, key, outcome, env, passes=passes, stall_s=stall_s,
                                       elapsed_s=elapsed_s, command=command, trusted=trusted, rung=rung,
                                       ladder=ladder, note=note, time=time, run_id=run_id)])[0]

    def record_attempt(self, attempt: "Attempt", key: Union[ProfileKey, "ProfileOptions"], env: Environment, *,
                       kernel: Optional[str] = None, rung: Optional[str] = None,
                       ladder: Optional[str] = None) -> list[Record]:
        """Record what one watched run showed, in one transaction.

        - hang: the stalled kernel as ``hang`` (stall_s = the silence), and
          every kernel that finished before it as ``ok`` with its passes;
        - ok: every profiled kernel as ``ok``;
        - any other status: one row, for the stalled kernel, else ``kernel``,
          else ``"*"``.

        In range and app-range replay ncu names the stalled thing ``range``:
        when ``kernel`` is given (the kernel this rung was tried for), the
        hang is recorded under that kernel, so that the rung is skipped for
        it next time.

        Kernels profiled several times give one row (the most passes). The
        records are untrusted when foreign processes held the GPU before the
        run (``attempt.gpu_foreign_before``).
        """
        common = dict(command=attempt.command, trusted=not attempt.gpu_foreign_before, rung=rung, ladder=ladder,
                      time=attempt.started_at or None, elapsed_s=attempt.elapsed_s,
                      run_id=attempt.cookie or uuid.uuid4().hex)
        extra = "; ".join(attempt.notes)
        stall = attempt.stall
        rows = []
        if attempt.status in (OK, HANG) and (attempt.status == OK or stall is not None):
            best: dict[str, list[int]] = {}
            for k in attempt.kernels:
                # Unfinished: application replay stopped mid-way, or the stalled launch itself.
                if stall is not None and (k.replay != "kernel" or (k.name, k.kernel_id) == (stall.kernel,
                                                                                            stall.kernel_id)):
                    continue
                passes, launches = best.get(k.name, (0, 0))
                best[k.name] = [max(passes, k.passes), launches + 1]
            for name, (passes, launches) in best.items():
                bits = [f"{launches} launches profiled"] if launches > 1 else []
                if stall is not None:
                    bits.append(f"finished before {stall.kernel} hung")
                rows.append(self._row(name, key, OK, env, passes=passes, stall_s=None, note="; ".join(bits),
                                      **common))
        if attempt.status == HANG and stall is not None:
            reached = [k.passes for k in attempt.kernels
                       if k.replay != "kernel" and (k.name, k.kernel_id) == (stall.kernel, stall.kernel_id)]
            note = f"stalled at {stall.where!r}" + (f" in application replay pass {max(reached)}" if reached else "")
            note += f": {attempt.reason}" + (f"; {extra}" if extra else "")
            subject = stall.kernel
            if kernel is not None and _as_key(key).replay_mode in ("range", "app-range"):
                subject = kernel
                note = f"the range holding it stalled ({stall.kernel!r}); " + note
            # Last, so that it is the newest row of this kernel (see hangs_for).
            rows.append(self._row(subject, key, HANG, env, passes=None, stall_s=stall.silent_s, note=note,
                                  **common))
        if not rows:
            name = attempt.stalled_kernel or kernel or "*"
            status = attempt.status if attempt.status in OUTCOMES else ERROR
            note = attempt.reason + (f"; {extra}" if extra else "")
            rows.append(self._row(name, key, status, env, passes=None,
                                  stall_s=stall.silent_s if stall else None, note=note, **common))
        return self._insert(rows)

    def forget(self, kernel: Optional[str] = None, record_id: Optional[int] = None, all: bool = False) -> int:
        """Delete the records of one kernel (exact name), one record, or all; the rows deleted.

        Give exactly one of them.
        """
        given = sum([kernel is not None, record_id is not None, bool(all)])
        if given != 1:
            raise ValueError("forget: give exactly one of kernel=, record_id= or all=True")
        if all:
            sql, params = "DELETE FROM records", ()
        elif kernel is not None:
            sql, params = "DELETE FROM records WHERE kernel = ?", (kernel,)
        else:
            sql, params = "DELETE FROM records WHERE id = ?", (int(record_id),)
        return self._write([(sql, params)])[0].rowcount

    # --- reading -------------------------------------------------------------
    def records(self, kernel: Optional[str] = None, pattern: Optional[str] = None,
                limit: Optional[int] = None) -> list[Record]:
        """Records, newest first; ``kernel`` matches the exact name, ``pattern``
        a kernel name or pattern through normalize_kernel()."""
        where, params = [], []
        if kernel is not None:
            where.append("kernel = ?")
            params.append(kernel)
        if pattern is not None:
            where.append("kernel_pattern = ?")
            params.append(normalize_kernel(pattern))
        sql = _SELECT + (" WHERE " + " AND ".join(where) if where else "") + " ORDER BY id DESC"
        if limit is not None:
            sql += " LIMIT ?"
            params.append(int(limit))
        return [_row_to_record(r) for r in self._query(sql, params)]

    def _matching(self, kernel: str, env: Environment, extra: str = "", params: Sequence[Any] = ()) -> list[Record]:
        sql = (_SELECT + " WHERE kernel_pattern = ? AND gpu IS ? AND ncu_version IS ? AND trusted = 1" + extra
               + " ORDER BY id DESC")
        rows = self._query(sql, [normalize_kernel(kernel), env.gpu, env.ncu_version, *params])
        return [_row_to_record(r) for r in rows]

    def known_hangs(self, kernel: str, env: Environment) -> list[Record]:
        """Trusted hang/timeout records of kernels like this one (same pattern)
        on the same GPU model and ncu version, newest first. The driver may
        differ; each record says which it was."""
        return self._matching(kernel, env, " AND outcome IN (?, ?)", HANG_OUTCOMES)

    def hangs_for(self, kernel: str, key: Union[ProfileKey, "ProfileOptions"], env: Environment) -> bool:
        """Is this exact key known to hang on kernels like this one, here?

        Among trusted ok/hang/timeout records with this key on the same gpu
        and ncu version: if this very kernel (exact name) has any, its newest
        decides (a later ok means the hang is gone); else any hang of a
        kernel with the same pattern counts.
        """
        canonical = _as_key(key).canonical()
        rows = self._matching(kernel, env, " AND key = ? AND outcome IN (?, ?, ?)", (canonical, OK, *HANG_OUTCOMES))
        exact = [r for r in rows if r.kernel == kernel.strip()]
        if exact:  # this very kernel's newest verdict decides
            return exact[0].hung
        return any(r.hung for r in rows)

    def kernels(self) -> list[KernelSummary]:
        """Every kernel in the store, most recently recorded first."""
        rows = self._query(
            "SELECT kernel, COUNT(*), SUM(CASE WHEN outcome IN (?, ?) AND trusted = 1 THEN 1 ELSE 0 END), "
            "MAX(time), MAX(id) AS last_id FROM records GROUP BY kernel ORDER BY last_id DESC", HANG_OUTCOMES)
        return [KernelSummary(k, int(n), int(h or 0), t) for k, n, h, t, _ in rows]

    def __len__(self) -> int:
        return int(self._query("SELECT COUNT(*) FROM records")[0][0])

    # --- export --------------------------------------------------------------
    def export_csv(self, path_or_file: Union[str, Path, IO[str]], kernel: Optional[str] = None) -> int:
        """Write the records (oldest first) as CSV with a header of COLUMNS; the rows written.

        Lists (sections, metrics, command) are JSON text, None is empty,
        trusted is ``true``/``false``.
        """
        recs = list(reversed(self.records(kernel=kernel)))

        def write(f: IO[str]) -> None:
            w = csv.writer(f)
            w.writerow(COLUMNS)
            for r in recs:
                d = r.to_dict()
                w.writerow(["" if d[c] is None else json.dumps(d[c]) if isinstance(d[c], list)
                            else ("true" if d[c] else "false") if isinstance(d[c], bool) else d[c]
                            for c in COLUMNS])

        _write_out(path_or_file, write, self.path)
        return len(recs)

    def export_yaml(self, path_or_file: Union[str, Path, IO[str]], kernel: Optional[str] = None) -> int:
        """Write ``{schema_version, records: [...]}`` (oldest first) with yaml.safe_dump; the rows written."""
        import yaml

        recs = list(reversed(self.records(kernel=kernel)))
        doc = {"schema_version": SCHEMA_VERSION, "records": [r.to_dict() for r in recs]}
        _write_out(path_or_file, lambda f: yaml.safe_dump(doc, f, sort_keys=False, allow_unicode=True), self.path)
        return len(recs)


def _write_out(path_or_file, write: Callable[[IO[str]], Any], store_path: Path) -> None:
    if isinstance(path_or_file, (str, os.PathLike)):
        try:
            with open(path_or_file, "w", newline="", encoding="utf-8") as f:
                write(f)
        except OSError as e:
            raise StoreError(store_path, f"cannot write the export to {path_or_file}: {e.strerror or e}. "
                             "Choose another file (-o FILE).") from None
    else:
        write(path_or_file)


# ---------------------------------------------------------------------------
# Command line: `python -m nsightwrap hangs ...` (wired in by cli.py)
# ---------------------------------------------------------------------------

def add_hangs_parser(subparsers) -> argparse.ArgumentParser:
    """Add ``hangs`` with sub-commands list, show, export, forget to an
    ``add_subparsers()`` object; returns the ``hangs`` parser. Run the
    result with :func:`cmd_hangs`."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--store", metavar="PATH",
                        help=f"hang store file (default: ${ENV_STORE}, else {DEFAULT_STORE})")
    hangs = subparsers.add_parser("hangs", help="what is known about kernels that hung under ncu",
                                  description="Inspect and edit the hang store: which profiling settings "
                                              "hung on which kernels.")
    sub = hangs.add_subparsers(dest="hangs_cmd", metavar="SUBCOMMAND")
    sub.add_parser("list", parents=[common], help="one line per kernel: records, hangs, last seen")
    show = sub.add_parser("show", parents=[common], help="the records of one kernel (and kernels like it)")
    show.add_argument("kernel", metavar="KERNEL")
    show.add_argument("--markdown", action="store_true", help="print the Markdown debug log of the kernel")
    export = sub.add_parser("export", parents=[common], help="write the records as CSV or YAML")
    export.add_argument("--format", choices=["csv", "yaml"], default="csv")
    export.add_argument("-o", "--output", metavar="FILE", help="file to write (default: stdout)")
    export.add_argument("--kernel", metavar="K", help="only this kernel (exact name)")
    forget = sub.add_parser("forget", parents=[common], help="delete records")
    which = forget.add_mutually_exclusive_group(required=True)
    which.add_argument("--kernel", metavar="K", help="every record of kernel K (exact name)")
    which.add_argument("--id", type=int, metavar="N", help="record number N (see `hangs show`)")
    which.add_argument("--all", action="store_true", help="every record")
    hangs.set_defaults(hangs_cmd=None, _hangs_parser=hangs)
    return hangs


def _table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    cells = [[str(h) for h in header]] + [["-" if v is None else str(v) for v in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    return "\n".join("  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip() for r in cells)


def _fmt_s(value: Optional[float]) -> Optional[str]:
    return None if value is None else f"{value:.1f}"


def _store_path(args) -> Path:
    return Path(args.store).expanduser() if getattr(args, "store", None) else default_store_path()


def cmd_hangs(args, out: Optional[IO[str]] = None, err: Optional[IO[str]] = None) -> int:
    """Run ``hangs SUBCOMMAND``: 0 on success, 2 with a message on an expected error."""
    out = out or sys.stdout
    err = err or sys.stderr
    cmd = getattr(args, "hangs_cmd", None)
    if cmd is None:
        parser = getattr(args, "_hangs_parser", None)
        (parser.print_help(err) if parser else print("nsightwrap hangs: give a sub-command: list, show, "
                                                     "export or forget", file=err))
        return 2
    path = _store_path(args)
    if cmd in ("list", "show", "export") and not path.exists():
        if cmd == "export":
            print(f"nsightwrap hangs: no hang store at {path} yet: nothing to export", file=err)
            return 2
        print(f"no hang store at {path} yet: nothing recorded", file=out)
        return 0
    try:
        with HangStore(path) as store:
            if cmd == "list":
                rows = store.kernels()
                if not rows:
                    print(f"no records in {path}", file=out)
                    return 0
                print(_table(["KERNEL", "RECORDS", "HANGS", "LAST"], rows), file=out)
            elif cmd == "show":
                if args.markdown:
                    from nsightwrap.store.debuglog import debug_log

                    print(debug_log(store, args.kernel), file=out)
                    return 0
                recs = store.records(kernel=args.kernel) or store.records(pattern=args.kernel)
                if not recs:
                    print(f"no records of {args.kernel} (nor of kernels like it, {normalize_kernel(args.kernel)})",
                          file=out)
                    return 0
                rows = [(r.id, r.time, r.kernel, r.outcome + ("" if r.trusted else " (untrusted)"),
                         r.profile_key.describe(), r.passes_reached, _fmt_s(r.stall_s), _fmt_s(r.elapsed_s),
                         r.gpu, r.driver, r.ncu_version) for r in recs]
                print(_table(["ID", "TIME", "KERNEL", "OUTCOME", "SETTINGS", "PASSES", "STALL_S", "ELAPSED_S",
                              "GPU", "DRIVER", "NCU"], rows), file=out)
                for r in recs:
                    if r.command or r.note:
                        print(f"\n#{r.id}: {shlex.join(r.command) if r.command else '(no command)'}"
                              + (f"\n    {r.note}" if r.note else ""), file=out)
            elif cmd == "export":
                target = args.output or out
                n = (store.export_csv if args.format == "csv" else store.export_yaml)(target, kernel=args.kernel)
                if args.output:
                    print(f"wrote {n} record(s) to {args.output}", file=err)
            elif cmd == "forget":
                n = store.forget(kernel=args.kernel, record_id=args.id, all=args.all)
                print(f"deleted {n} record(s) from {path}", file=out)
            else:  # pragma: no cover - argparse refuses other names
                print(f"nsightwrap hangs: unknown sub-command {cmd!r}", file=err)
                return 2
    except NsightwrapError as e:
        print(f"nsightwrap hangs: {e}", file=err)
        return 2
    except ValueError as e:
        print(f"nsightwrap hangs: {e}", file=err)
        return 2
    return 0
