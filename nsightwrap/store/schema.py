"""The store's SQL schema, its migrations, and Record, the row as Python sees it.

``schema_version(version)`` holds one row, the number of migrations applied;
:data:`MIGRATIONS` lists them in order, and opening a store applies those it
lacks. A store written by a newer nsightwrap is refused.

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

Version 2 adds to ``records`` the stall allowance behind a hang verdict
(NULL in older rows: made without calibration)::

    allowance_s     REAL or NULL      the silence allowed before the verdict
    basis           TEXT or NULL      what it was based on: "from calibration (...)",
                                      "default (not calibrated)", "given (--stall-timeout ...)"

and the table ``calibrations``: how long something ran without ncu, here, so
that it is measured once (see :class:`CalibrationRow`)::

    id              INTEGER PRIMARY KEY AUTOINCREMENT
    time            TEXT    ISO 8601, UTC
    host, gpu, driver   TEXT or NULL   (matched on gpu and driver)
    subject         TEXT    what was timed: a program's command line (JSON list),
                            or a callable of profile(fn) ("fn:MODULE:QUALNAME:ARGS-DIGEST")
    kernel          TEXT    a kernel, or "*" for the whole program or call
    seconds         REAL    its time without ncu (a kernel's longest launch)
    source          TEXT    how it was measured ("nsys", "plain run", "warm-up", ...)
    run_id          TEXT    rows of one measurement share it
    note            TEXT

    index calibrations_match (subject, gpu, driver)

Version 3 adds the job's size, so that a hang of a multi-process job (a
collective waiting for its other half) is not applied to a single-process
run of the same kernel::

    processes       INTEGER  the job's processes (ranks); 1 for older rows
    gpus            INTEGER or NULL   the GPUs its processes here could use
    ranks           TEXT     "all" (ncu wrapped every rank) or "one" (one rank alone)

Version 4 adds ``calibrations.marks_ranges``. Version 5 adds the table
``triage_runs``: one row per run that `nsightwrap triage` made (see
:mod:`nsightwrap.store.triage`, which holds its SQL)::

    id, time, triage_id (the rows of one triage share it), host, gpu, driver,
    command (JSON list, masked), kernel ("*": none named), tool ("plain", "memcheck", "racecheck",
    "synccheck", "initcheck", "ncu-walk"), settings (JSON object: the run's index, the environment
    it added, the kernel filter), outcome, exit_code, elapsed_s, error (the CUDA error or the
    findings' summary), findings (count), hypothesis, conclusion, note

Version 6 makes records shareable between machines (a team's
PostgreSQL store, ``hangs export``/``import``)::

    uid             TEXT UNIQUE   made by the writer (a UUID): a record written twice (a retry, an import
                                  of records already there) is kept once; older rows get one when migrated
    user_name       TEXT or NULL  who recorded it (Record.user; ``user`` is a reserved word in PostgreSQL)

The migrations are SQLite's SQL; :mod:`nsightwrap.store.migrate` applies the same text to PostgreSQL with
its two type names translated.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any, NamedTuple, Optional, Sequence

from nsightwrap.errors import StoreError
from nsightwrap.ncu.allowance import CALIBRATED, KNOWN_CAUSE
from nsightwrap.secrets import mask_argv, mask_text
from nsightwrap.status import ALL_RANKS, HANG_OUTCOMES
from nsightwrap.store.keys import Environment, ProfileKey
from nsightwrap.store.paths import ENV_STORE

__all__ = ["CALIBRATION_COLUMNS", "COLUMNS", "CalibrationRow", "KernelSummary", "MIGRATIONS", "Record",
           "SCHEMA_VERSION", "SELECT", "SQL_NAME",
           "command_json", "refuse_newer", "row_to_record", "stored_version"]


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
    allowance_s: Optional[float] = None
    basis: Optional[str] = None
    processes: int = 1
    gpus: Optional[int] = None
    ranks: str = ALL_RANKS
    #: Schema version 6: the record's own id, the same in every store it is copied to, and who recorded it.
    uid: Optional[str] = None
    user: Optional[str] = None

    @property
    def calibrated(self) -> bool:
        """Was the verdict judged against the kernel's calibrated allowance, or called by a known cause
        (nsightwrap.ncu.known), which needs no calibration?"""
        return bool(self.basis) and self.basis.startswith((CALIBRATED, KNOWN_CAUSE))

    @property
    def profile_key(self) -> ProfileKey:
        return ProfileKey(self.set, self.sections, self.metrics, self.replay_mode, self.ranks)

    @property
    def environment(self) -> Environment:
        return Environment(self.host, self.gpu, self.driver, self.ncu_version, self.processes, self.gpus)

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
SQL_NAME = {"set": "set_name", "user": "user_name"}
SELECT = "SELECT " + ", ".join(SQL_NAME.get(c, c) for c in COLUMNS) + " FROM records"


class KernelSummary(NamedTuple):
    """One line of :meth:`HangStore.kernels`; n_hangs counts trusted hang/timeout records."""

    kernel: str
    n_records: int
    n_hangs: int
    last_time: str


@dataclass(frozen=True)
class CalibrationRow:
    """One row of ``calibrations``: how long `subject` (or one kernel of it) took without ncu, here.

    The ladder's view of a calibration (per-kernel times, what they bound) is
    nsightwrap.ncu.allowance.Calibration; this is how one row of it is kept.
    """

    id: int
    time: str
    host: Optional[str]
    gpu: Optional[str]
    driver: Optional[str]
    subject: str
    kernel: str
    seconds: float
    source: str
    run_id: str
    note: str
    #: On the program's row (``*``): whether the program called cu(da)ProfilerStart, which range replay
    #: needs (1 or 0, as nsys saw its API calls); None when not known (schema version 4).
    marks_ranges: Optional[int] = None


#: Field names of CalibrationRow, in order (also its SQL columns).
CALIBRATION_COLUMNS = tuple(f.name for f in fields(CalibrationRow))

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
    """
    ALTER TABLE records ADD COLUMN allowance_s REAL;
    ALTER TABLE records ADD COLUMN basis TEXT;
    CREATE TABLE calibrations (
        id             INTEGER PRIMARY KEY AUTOINCREMENT,
        time           TEXT    NOT NULL,
        host           TEXT,
        gpu            TEXT,
        driver         TEXT,
        subject        TEXT    NOT NULL,
        kernel         TEXT    NOT NULL DEFAULT '*',
        seconds        REAL    NOT NULL,
        source         TEXT    NOT NULL,
        run_id         TEXT    NOT NULL DEFAULT '',
        note           TEXT    NOT NULL DEFAULT ''
    );
    CREATE INDEX calibrations_match ON calibrations (subject, gpu, driver);
    """,
    """
    ALTER TABLE records ADD COLUMN processes INTEGER NOT NULL DEFAULT 1;
    ALTER TABLE records ADD COLUMN gpus INTEGER;
    ALTER TABLE records ADD COLUMN ranks TEXT NOT NULL DEFAULT 'all';
    """,
    """
    ALTER TABLE calibrations ADD COLUMN marks_ranges INTEGER;
    """,
    # Version 5: `nsightwrap triage`'s runs (nsightwrap.store.triage reads and writes them).
    """
    CREATE TABLE triage_runs (
        id             INTEGER PRIMARY KEY AUTOINCREMENT,
        time           TEXT    NOT NULL,
        triage_id      TEXT    NOT NULL,
        host           TEXT,
        gpu            TEXT,
        driver         TEXT,
        command        TEXT    NOT NULL DEFAULT '[]',
        kernel         TEXT    NOT NULL DEFAULT '*',
        tool           TEXT    NOT NULL,
        settings       TEXT    NOT NULL DEFAULT '{}',
        outcome        TEXT    NOT NULL,
        exit_code      INTEGER,
        elapsed_s      REAL,
        error          TEXT,
        findings       INTEGER,
        hypothesis     TEXT    NOT NULL DEFAULT '',
        conclusion     TEXT    NOT NULL DEFAULT '',
        note           TEXT    NOT NULL DEFAULT ''
    );
    CREATE INDEX triage_runs_kernel ON triage_runs (kernel);
    CREATE INDEX triage_runs_triage ON triage_runs (triage_id);
    """,
    # Version 6: records shared between machines (issue 22): their own uid, and who recorded them.
    """
    ALTER TABLE records ADD COLUMN uid TEXT;
    ALTER TABLE records ADD COLUMN user_name TEXT;
    CREATE UNIQUE INDEX records_uid ON records (uid);
    """,
)
SCHEMA_VERSION = len(MIGRATIONS)


def command_json(command: Sequence[str]) -> str:
    """A command line as it is kept (``records.command``, ``calibrations.subject``): a JSON list of strings,
    secret values masked (nsightwrap.secrets.mask_argv)."""
    if isinstance(command, str):
        raise TypeError(f"command must be a list of arguments, not the string {command!r}")
    return json.dumps(mask_argv(command))


def row_to_record(row: Sequence[Any], path: Optional[Path] = None) -> Record:
    """A Record from a row selected with :data:`SELECT` (JSON lists decoded); a row that cannot be read
    raises StoreError naming its table, id and column, and what to do."""
    d = dict(zip(COLUMNS, row))
    for name in ("sections", "metrics", "command"):
        try:
            value = json.loads(d[name])
            if not isinstance(value, list):
                raise ValueError(f"a JSON list expected, not {type(value).__name__}")
        except (TypeError, ValueError) as e:
            raise StoreError(path, f"row {d['id']} of the table records in the hang store {path} cannot be read: "
                             f"its column {name} holds {str(d[name])[:60]!r}, not a JSON list ({e}). Delete the "
                             f"row (python -m nsightwrap hangs forget --id {d['id']}"
                             f"{'' if path is None else f' --store {path}'}), or set {ENV_STORE} to another "
                             "file.") from None
        d[name] = tuple(value)
    d["command"] = tuple(mask_argv(d["command"]))  # a store written before secrets were masked
    d["trusted"] = bool(d["trusted"])
    d["note"] = mask_text(d["note"] or "")
    return Record(**d)


def stored_version(conn: sqlite3.Connection) -> Optional[int]:
    """The store's schema version; None when it has no schema_version table (a new file)."""
    has = conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schema_version'").fetchone()
    if has is None:
        return None
    row = conn.execute("SELECT version FROM schema_version").fetchone()
    return 0 if row is None else int(row[0])


def refuse_newer(version: Optional[int], path: Path) -> None:
    """Refuse a store written by a newer nsightwrap: its rows may mean other things."""
    if version is not None and version > SCHEMA_VERSION:
        raise StoreError(path, f"the hang store {path} has schema version {version}, newer than this "
                         f"nsightwrap knows ({SCHEMA_VERSION}). Upgrade nsightwrap, or set {ENV_STORE} to "
                         "another file.")
