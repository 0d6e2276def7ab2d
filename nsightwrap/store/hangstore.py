"""The hang store: which profiling settings hung on which kernels, on which GPU.

nsightwrap remembers every verdict about a kernel and the settings it was
profiled with, so that it never waits on the same hang twice. The store is
one SQLite file (the embedded default), or a team's PostgreSQL database that
many machines share; the same schema (:mod:`nsightwrap.store.schema`) and the
same statements (:mod:`nsightwrap.store.queries`, SQLAlchemy Core) serve both.

- where: the ``path`` argument (a file, or a ``postgresql://`` URL), else
  ``$NSIGHTWRAP_STORE``, else the default file (:func:`~nsightwrap.store.location.resolve_store`,
  read when a store is opened, never at import). A file created here is private (0600,
  in folders created 0700): it holds command lines and host names.
- one transaction per record (or per attempt in :meth:`HangStore.record_attempt`):
  several processes, on several machines, may write at once; a process killed mid-write
  loses at most its own uncommitted record; each record's ``uid`` is unique, so a write
  retried, or records imported twice, are kept once (:mod:`nsightwrap.store.database`).
- ``readonly=True`` opens a store this user cannot write (a read-only file
  or folder, a database role that may only SELECT) for reading, leaving nothing
  beside it; writing to it raises :class:`StoreError`.
- Every open of a file first runs :func:`~nsightwrap.store.check.store_problem`, the check doctor runs too.

Only trusted records of this very GPU model, driver, ncu version and job size decide anything
(:func:`~nsightwrap.store.queries.applies`): a hang recorded while someone else's kernel spun on the GPU
says nothing about the settings, and an uncalibrated hang seen on another host may be a slow kernel there.
"""

from __future__ import annotations

import uuid
from datetime import datetime, timezone
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Callable, Iterable, Optional, Sequence, Union

from nsightwrap.errors import StoreError
from nsightwrap.ncu.allowance import Calibration
from nsightwrap.ncu.names import normalize_kernel
from nsightwrap.secrets import mask_argv, mask_text
from nsightwrap.status import HANG_OUTCOMES, NO_KERNELS, OK
from nsightwrap.store.calibration_sql import calibration_from_rows, calibration_rows, insert_row
from nsightwrap.store.export import write_csv, write_jsonl, write_yaml
from nsightwrap.store.keys import Environment, ProfileKey, as_key
from nsightwrap.store.location import StoreArg, StoreLocation, resolve_store
from nsightwrap.store.paths import ENV_STORE
from nsightwrap.store.rows import attempt_rows, copied_row, record_row, this_user
from nsightwrap.store.schema import COLUMNS, CalibrationRow, KernelSummary, Record, command_json, row_to_record

if TYPE_CHECKING:  # pragma: no cover
    from types import ModuleType

    from nsightwrap.ncu.attempt import Attempt
    from nsightwrap.ncu.options import ProfileOptions
    from nsightwrap.store.database import Database

__all__ = ["BUSY_TIMEOUT_S", "HangStore"]

BUSY_TIMEOUT_S = 10.0


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


class HangStore:
    """The hang store, an SQLite file or a PostgreSQL database; one connection per object.

    ``with HangStore() as store: ...`` closes it at the end. ``now`` returns
    the ISO time stamped on new records (injectable for tests), ``user`` the
    name kept on them (default: this login). With ``readonly=True`` an existing
    store is only read (nothing is created, migrated or written), so one this
    user cannot write can still be listed.

    ``path`` is the file (a Path), or for a database the :class:`StoreLocation`, whose ``str`` is the URL with
    its password masked: what messages print, and what ``HangStore(store.path)`` opens again.
    """

    def __init__(self, path: StoreArg = None, *, now: Callable[[], str] = _now,
                 busy_timeout: float = BUSY_TIMEOUT_S, readonly: bool = False, user: Optional[str] = None):
        self.location: StoreLocation = resolve_store(path)
        self.path: Union[Path, StoreLocation] = self.location.path or self.location
        self.readonly = readonly
        self.user = user if user is not None else this_user()
        self.busy_timeout = busy_timeout
        self._now = now
        #: What a caller should say about this store (open_store: "the database is down, recording here").
        self.notes: list[str] = []
        self._db: Optional["Database"] = None
        from nsightwrap.store.database import open_database  # SQLAlchemy loads with the first store opened

        self._db = open_database(self.location, readonly=readonly, busy_timeout=busy_timeout)

    # --- plumbing ------------------------------------------------------------
    @property
    def _q(self) -> "ModuleType":
        """nsightwrap.store.queries, every statement (loaded with SQLAlchemy when a store is opened, so that
        importing this module, as every command does, costs nothing)."""
        from nsightwrap.store import queries

        return queries

    @property
    def _open(self) -> "Database":
        if self._db is None:
            raise StoreError(self.location.path, f"the hang store {self.path} is closed; open a new HangStore")
        return self._db

    @property
    def conn(self) -> Any:
        """The driver's connection (sqlite3.Connection for a file, psycopg.Connection for a database)."""
        return self._open.raw

    @property
    def is_database(self) -> bool:
        """Is this store a (shared) database rather than a file of this machine?"""
        return self.location.is_database

    def _write(self, statements: Sequence[Any]) -> list[tuple[list, int]]:
        """Run statements in one transaction: all of them or none; per statement (rows returned, rowcount)."""
        if self.readonly:
            raise StoreError(self.location.path, f"the hang store {self.path} was opened read-only: nothing was "
                             "written. Open it with HangStore(path) to record (this user must be able to write "
                             f"it), or set {ENV_STORE} to a store this user may write.")
        from sqlalchemy.exc import SQLAlchemyError

        db = self._open
        try:
            return db.write(statements)
        except SQLAlchemyError as e:
            raise db.error(e, "write to") from None

    def _query(self, stmt: Any) -> list[tuple]:
        from sqlalchemy.exc import SQLAlchemyError

        db = self._open
        try:
            return db.query(stmt)
        except SQLAlchemyError as e:
            raise db.error(e, "read") from None

    def _records(self, *where: Any, limit: Optional[int] = None) -> list[Record]:
        return [row_to_record(r, self.path) for r in self._query(self._q.select_records(*where, limit=limit))]

    def another(self) -> "HangStore":
        """A second connection to this same store, opened with this one's settings (busy_timeout, readonly,
        user, clock): for another thread (an SQLite connection stays in its thread). The caller closes it."""
        return HangStore(self.location, now=self._now, busy_timeout=self.busy_timeout, readonly=self.readonly,
                         user=self.user)

    def close(self) -> None:
        if self._db is not None:
            try:
                self._db.close()
            finally:
                self._db = None

    def __enter__(self) -> "HangStore":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = " closed" if self._db is None else " read-only" if self.readonly else ""
        return f"<HangStore {str(self.path)!r}{state}>"

    @property
    def schema_version(self) -> int:
        return int(self._query(self._q.version())[0][0])

    # --- writing -------------------------------------------------------------
    def _insert(self, rows: Sequence[dict[str, Any]]) -> list[Record]:
        """Insert the rows in one transaction; each as stored (a uid already there: the record kept then)."""
        results = self._write([self._q.insert_record(r, self._open.dialect) for r in rows])
        out = []
        for row, (ids, _) in zip(rows, results):
            if ids:
                out.append(row_to_record((ids[0][0], *[row[c] for c in COLUMNS[1:]]), self.path))
            else:  # written before (a retry, an import): the record as it is there
                out.append(row_to_record(self._query(self._q.uid_of(row["uid"]))[0], self.path))
        return out

    def record(self, kernel: str, key: Union[ProfileKey, "ProfileOptions"], outcome: str, *, env: Environment,
               passes: Optional[int] = None, stall_s: Optional[float] = None,
               elapsed_s: Optional[float] = None, command: Sequence[str] = (), trusted: bool = True,
               rung: Optional[str] = None, ladder: Optional[str] = None, note: str = "",
               time: Optional[str] = None, run_id: Optional[str] = None, allowance_s: Optional[float] = None,
               basis: Optional[str] = None, uid: Optional[str] = None) -> Record:
        """Add one record in its own transaction and return it.

        ``uid`` names the record in every store (default: a new UUID); recording a uid the store already has
        adds nothing and returns the record kept, so a write retried after a lost connection is kept once.
        """
        return self._insert([record_row(kernel, key, outcome, env, passes=passes, stall_s=stall_s,
                                        elapsed_s=elapsed_s, command=command, trusted=trusted, rung=rung,
                                        ladder=ladder, note=note, time=time or self._now(), user=self.user,
                                        run_id=run_id, allowance_s=allowance_s, basis=basis, uid=uid)])[0]

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
        run (``attempt.gpu_foreign_before``). A program that hangs or fails by
        itself, without ncu (``attempt.program_fault``), says nothing about
        ncu's settings: nothing is recorded (an empty list), and no rung is
        ever taken to hang from it; nor for an interrupted run. A hang row keeps the allowance and its
        basis (calibrated or not).
        """
        rows = attempt_rows(attempt, key, env, time=self._now(), user=self.user, kernel=kernel, rung=rung,
                            ladder=ladder)
        return self._insert(rows) if rows else []

    def import_records(self, recs: Iterable[Record]) -> int:
        """Copy records (from another store: ``hangs import``) into this one, in one transaction; the records
        added. A record this store has already (the same uid) is skipped, so importing twice adds nothing."""
        rows = [copied_row(r) for r in recs]
        if not rows:
            return 0
        return sum(len(ids) for ids, _ in self._write([self._q.insert_record(r, self._open.dialect) for r in rows]))

    def forget(self, kernel: Optional[str] = None, record_id: Optional[int] = None, all: bool = False) -> int:
        """Delete the records of one kernel (exact name), one record, or all; the rows deleted.

        Give exactly one of them.
        """
        given = sum([kernel is not None, record_id is not None, bool(all)])
        if given != 1:
            raise ValueError("forget: give exactly one of kernel=, record_id= or all=True")
        return self._write([self._q.delete_records(kernel, record_id)])[0][1]

    # --- reading -------------------------------------------------------------
    def records(self, kernel: Optional[str] = None, pattern: Optional[str] = None,
                limit: Optional[int] = None) -> list[Record]:
        """Records, newest first; ``kernel`` matches the exact name, ``pattern``
        a kernel name or pattern through normalize_kernel()."""
        return self._records(*self._q.where_kernel(kernel, None if pattern is None else normalize_kernel(pattern)),
                             limit=limit)

    def _matching(self, kernel: str, env: Environment, *where: Any) -> list[Record]:
        return self._records(self._q.records.c.kernel_pattern == normalize_kernel(kernel), self._q.applies(env), *where)

    def known_hangs(self, kernel: str, env: Environment) -> list[Record]:
        """Trusted hang/timeout records of kernels like this one (same pattern)
        on the same GPU model, driver and ncu version, in a job of as many processes,
        newest first (from another host: calibrated ones only)."""
        return self._matching(kernel, env, self._q.records.c.outcome.in_(HANG_OUTCOMES))

    def hangs_for(self, kernel: str, key: Union[ProfileKey, "ProfileOptions"], env: Environment) -> bool:
        """Is this exact key known to hang on kernels like this one, here?

        Among trusted ok/hang/timeout records with this key on the same gpu, driver
        and ncu version, in a job of as many processes: if this very kernel (exact name) has any, its newest
        decides (a later ok means the hang is gone); else any hang of a
        kernel with the same pattern counts.
        """
        c = self._q.records.c
        rows = self._matching(kernel, env, c.key == as_key(key).canonical(), c.outcome.in_((OK, *HANG_OUTCOMES)))
        exact = [r for r in rows if r.kernel == kernel.strip()]
        if exact:  # this very kernel's newest verdict decides
            return exact[0].hung
        return any(r.hung for r in rows)

    def profiled_nothing(self, kernel: str, key: Union[ProfileKey, "ProfileOptions"], env: Environment,
                         program: Sequence[str]) -> bool:
        """Did this key profile nothing of `kernel` in this very program, here, last time it ran?

        A rung that profiles nothing (range replay of a program that marks no
        range) does so again for the same program: a second walk skips it.
        """
        c = self._q.records.c
        rows = self._matching(kernel, env, c.key == as_key(key).canonical(),
                              c.outcome.in_((OK, NO_KERNELS, *HANG_OUTCOMES)))
        program = mask_argv(program)  # as it is kept
        mine = [r for r in rows if r.kernel == kernel.strip() and list(r.command[-len(program):]) == program]
        return bool(mine) and mine[0].outcome == NO_KERNELS

    def kernels(self) -> list[KernelSummary]:
        """Every kernel in the store, most recently recorded first."""
        return [KernelSummary(k, int(n), int(h or 0), t) for k, n, h, t, _ in self._query(self._q.kernel_summary())]

    def uncalibrated_hangs(self) -> dict[str, int]:
        """Per kernel, its trusted hang records judged without a calibrated allowance (older ones included),
        and not called by a known cause."""
        return {k: int(n) for k, n in self._query(self._q.uncalibrated_hangs())}

    def stale_records(self, env: Environment) -> dict[str, int]:
        """Per kernel, its records made with another GPU model, driver or ncu version than `env`'s (fields of
        env that are None are not compared): shown by ``hangs list``, never applied here."""
        return {k: int(n) for k, n in self._query(self._q.stale_counts(env))}

    def __len__(self) -> int:
        return int(self._query(self._q.count_records())[0][0])

    # --- calibrations ---------------------------------------------------------
    def record_call_time(self, subject: str, seconds: float, env: Environment, *, source: str,
                         kernel: str = "*", note: str = "", time: Optional[str] = None) -> CalibrationRow:
        """Remember that `subject` (or `kernel` of it) took `seconds` without ncu on env's GPU (profile(fn))."""
        if not subject or not isinstance(seconds, (int, float)) or not seconds >= 0:
            raise ValueError(f"a calibration needs a subject and seconds >= 0, not {subject!r}, {seconds!r}")
        row = {"time": time or self._now(), "host": env.host, "gpu": env.gpu, "driver": env.driver,
               "subject": subject, "kernel": kernel, "seconds": float(seconds), "source": source,
               "run_id": uuid.uuid4().hex, "note": mask_text(note), "marks_ranges": None}
        (ids, _), = self._write([insert_row(row)])
        return CalibrationRow(id=ids[0][0], **row)

    def call_time(self, subject: str, env: Environment, kernel: str = "*") -> Optional[CalibrationRow]:
        """The newest calibration of `subject` (or `kernel` of it) on this GPU model and driver, if any."""
        rows = self._query(self._q.newest_calibration(subject, kernel, env))
        return CalibrationRow(*rows[0]) if rows else None

    def record_calibration(self, calibration: Calibration, command: Sequence[str], env: Environment) -> int:
        """Keep a successful calibration of `command` here (per kernel, GPU, driver); the rows written."""
        rows = calibration_rows(calibration, command, env, self._now(), uuid.uuid4().hex)
        if rows:
            self._write(rows)
        return len(rows)

    def calibration_table(self) -> list[tuple]:
        """Every row of the table calibrations (CALIBRATION_COLUMNS), oldest first, as stored."""
        return self._query(self._q.all_calibrations())

    def calibration_for(self, command: Sequence[str], env: Environment) -> Optional[Calibration]:
        """The newest calibration of this very command on this GPU model and driver, or None."""
        rows = self._query(self._q.calibration_run(command_json(command), env))
        try:
            return calibration_from_rows(rows)
        except (TypeError, ValueError) as e:  # a row changed by hand (SQLite's loose types): name it and the way out
            raise StoreError(self.path, f"a row of the table calibrations in the hang store {self.path} cannot be "
                             f"read ({e}): its seconds are not a number. Delete the bad rows (sqlite3 {self.path} "
                             "\"DELETE FROM calibrations WHERE typeof(seconds) NOT IN ('real', 'integer')\"), or "
                             f"set {ENV_STORE} to another file.") from None

    # --- export --------------------------------------------------------------
    def export_csv(self, path_or_file: Union[str, Path, IO[str]], kernel: Optional[str] = None) -> int:
        """Write the records (oldest first) as CSV with a header of COLUMNS; the rows written.

        Lists (sections, metrics, command) are JSON text, None is empty,
        trusted is ``true``/``false``.
        """
        return write_csv(reversed(self.records(kernel=kernel)), path_or_file, self.path)

    def export_jsonl(self, path_or_file: Union[str, Path, IO[str]], kernel: Optional[str] = None) -> int:
        """Write one JSON object a line (oldest first), what ``hangs import`` reads; the rows written."""
        return write_jsonl(reversed(self.records(kernel=kernel)), path_or_file, self.path)

    def export_yaml(self, path_or_file: Union[str, Path, IO[str]], kernel: Optional[str] = None) -> int:
        """Write ``{schema_version, records: [...]}`` (oldest first) with yaml.safe_dump; the rows written."""
        return write_yaml(reversed(self.records(kernel=kernel)), path_or_file, self.path)

    # --- what walks and sweeps ask before they run ------------------------------
    def _here(self, key: Union[ProfileKey, "ProfileOptions"], env: Environment, *where: Any) -> list[Record]:
        """Records that apply on env (queries.applies) with this exact key that also match `where`; newest
        first."""
        return self._records(self._q.records.c.key == as_key(key).canonical(), self._q.applies(env), *where)

    def hanging_kernels(self, key: Union[ProfileKey, "ProfileOptions"], env: Environment,
                        command: Sequence[str]) -> list[str]:
        """Kernels (exact names, each once, newest first) recorded as hanging with this exact key here, in
        this same program (a command line ending with `command`)."""
        program = mask_argv(command)  # as it is kept
        names: list[str] = []
        c = self._q.records.c
        for r in self._here(key, env, c.outcome.in_(HANG_OUTCOMES), c.kernel != "*"):
            if list(r.command[-len(program):]) == program and r.kernel not in names:
                names.append(r.kernel)
        return names

    def newest_verdict(self, kernel: str, key: Union[ProfileKey, "ProfileOptions"],
                       env: Environment) -> Optional[Record]:
        """The newest record of this very kernel (exact name) with this exact key here, whatever its outcome."""
        rows = self._here(key, env, self._q.records.c.kernel == kernel)
        return rows[0] if rows else None
