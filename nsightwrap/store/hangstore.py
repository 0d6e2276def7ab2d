"""The hang store: which profiling settings hung on which kernels, here.

nsightwrap remembers every verdict about a kernel and the settings it was
profiled with, so that it never waits on the same hang twice. The store is
one SQLite file (stdlib ``sqlite3``; its schema in :mod:`nsightwrap.store.schema`):

- path: the ``path`` argument, else :func:`~nsightwrap.store.paths.default_store_path` (read when a
  store is opened, never at import). A file created here is private (0600,
  in folders created 0700): it holds command lines and host names.
- WAL journal and a 10 s busy timeout, one transaction per record (or per
  attempt in :meth:`HangStore.record_attempt`), taken with ``BEGIN
  IMMEDIATE``: several processes may write at once, and a process killed
  mid-write loses at most its own uncommitted record.
- ``readonly=True`` opens a store this user cannot write (a read-only file
  or folder) for reading, leaving no file beside it
  (:func:`~nsightwrap.store.check.readonly_connection`); writing to it raises :class:`StoreError`.
- Every open first runs :func:`~nsightwrap.store.check.store_problem`, the check doctor runs too.

Only trusted records decide anything: a hang recorded while someone else's
kernel spun on the GPU says nothing about the settings (every run hung then).
"""

from __future__ import annotations

import json
import os
import sqlite3
import time as _time
import uuid
from datetime import datetime, timezone
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Callable, Iterable, Optional, Sequence, Union

from nsightwrap.errors import StoreError
from nsightwrap.ncu.allowance import CALIBRATED, KNOWN_CAUSE, Calibration
from nsightwrap.ncu.names import normalize_kernel
from nsightwrap.secrets import mask_argv, mask_text
from nsightwrap.status import ERROR, HANG, HANG_OUTCOMES, INTERRUPTED, NO_KERNELS, OK, OUTCOMES, RANGE_MODES, ReplayMode
from nsightwrap.store.calibration_sql import (
    calibration_from_rows,
    calibration_rows,
    insert_row,
    match_sql,
    newest_row_sql,
)
from nsightwrap.store.check import read_only_advice, readonly_connection, store_problem
from nsightwrap.store.export import write_csv, write_yaml
from nsightwrap.store.keys import Environment, ProfileKey, as_key
from nsightwrap.store.paths import ENV_STORE, create_private, repair_sidecars, store_path, unwritable_reason
from nsightwrap.store.schema import (
    COLUMNS,
    SCHEMA_VERSION,
    SELECT,
    SQL_NAME,
    CalibrationRow,
    KernelSummary,
    Record,
    command_json,
    migrate,
    row_to_record,
    stored_version,
)

if TYPE_CHECKING:  # pragma: no cover
    from nsightwrap.ncu.attempt import Attempt
    from nsightwrap.ncu.options import ProfileOptions

__all__ = ["BUSY_TIMEOUT_S", "HangStore"]

BUSY_TIMEOUT_S = 10.0


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _connect_writable(path: Path, busy_timeout: float) -> sqlite3.Connection:
    """Open (creating it private if missing) and migrate the store for writing, once :func:`store_problem`
    (the check doctor runs too) finds nothing wrong with it."""
    if os.path.lexists(path):  # a dangling link too: the check says what is wrong
        repair_sidecars(path)
        problem = store_problem(path, writing=True)
        if problem:
            raise StoreError(path, problem)
    else:
        create_private(path)
    conn = sqlite3.connect(str(path), timeout=busy_timeout, isolation_level=None)
    try:
        conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout * 1000)}")
        deadline = _time.monotonic() + busy_timeout
        while True:
            try:
                _setup(conn, path)
                return conn
            except sqlite3.OperationalError as e:  # switching to WAL may not wait on a busy handler
                if ("locked" not in str(e) and "busy" not in str(e)) or _time.monotonic() > deadline:
                    raise
                _time.sleep(0.02)
    except BaseException:
        conn.close()
        raise


def _setup(conn: sqlite3.Connection, path: Path) -> None:
    mode = conn.execute("PRAGMA journal_mode=WAL").fetchone()
    if not mode or str(mode[0]).lower() != "wal":
        raise StoreError(path, f"the hang store {path} could not use a WAL journal "
                         f"(got {mode}); put it on a local file system, or set {ENV_STORE}.")
    migrate(conn, path)


def _connect_readonly(path: Path, busy_timeout: float) -> sqlite3.Connection:
    """Open an existing store for reading only; never creates, migrates or leaves anything."""
    if not path.exists() and not path.is_symlink():
        raise StoreError(path, f"no hang store at {path}: nothing recorded yet (the first run that records "
                         f"creates it; {ENV_STORE} or --store names another file).")
    problem = store_problem(path, writing=False)
    if problem:
        raise StoreError(path, problem)
    conn = readonly_connection(path, busy_timeout)
    try:
        version = stored_version(conn)
        if version != SCHEMA_VERSION:
            raise StoreError(path, f"the hang store {path} has schema version {version or 0}, older than this "
                             f"nsightwrap's ({SCHEMA_VERSION}), and a read-only store cannot be upgraded: open "
                             "it once where this user may write it (any command that records upgrades it).")
    except BaseException:
        conn.close()
        raise
    return conn


class HangStore:
    """The hang store in one SQLite file; one connection per object.

    ``with HangStore() as store: ...`` closes it at the end. ``now`` returns
    the ISO time stamped on new records (injectable for tests). With
    ``readonly=True`` an existing store is only read (nothing is created,
    migrated or written), so one this user cannot write can still be listed.
    """

    def __init__(self, path: Union[str, Path, None] = None, *, now: Callable[[], str] = _now,
                 busy_timeout: float = BUSY_TIMEOUT_S, readonly: bool = False):
        self.path = store_path(path)
        self.readonly = readonly
        self._now = now
        self._conn: Optional[sqlite3.Connection] = None
        connect = _connect_readonly if readonly else _connect_writable
        try:
            self._conn = connect(self.path, busy_timeout)
        except sqlite3.Error as e:
            raise self._error(e, "open") from None

    # --- plumbing ------------------------------------------------------------
    def _error(self, e: Exception, doing: str) -> StoreError:
        text = str(e)
        if isinstance(e, sqlite3.DatabaseError) and ("not a database" in text or "malformed" in text
                                                     or "corrupt" in text):
            return StoreError(self.path, f"the hang store {self.path} is damaged ({text}). Move it aside (mv "
                              f"{self.path} {self.path}.bad: the next run starts a new store), or set {ENV_STORE} "
                              "to another file.")
        reason = unwritable_reason(self.path)
        if reason and not self.readonly and doing != "read":
            return StoreError(self.path, read_only_advice(self.path, f"{reason} ({text})"))
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

    def _write(self, statements: Iterable[tuple[str, Sequence[Any]]]) -> list[sqlite3.Cursor]:
        """Run statements in one IMMEDIATE transaction: all of them or none."""
        if self.readonly:
            raise StoreError(self.path, f"the hang store {self.path} was opened read-only: nothing was written. "
                             "Open it with HangStore(path) to record (this user must be able to write the file "
                             f"and its folder), or set {ENV_STORE} to a file in a writable folder.")
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

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = " closed" if self._conn is None else " read-only" if self.readonly else ""
        return f"<HangStore {str(self.path)!r}{state}>"

    @property
    def schema_version(self) -> int:
        return int(self._query("SELECT version FROM schema_version")[0][0])

    # --- writing -------------------------------------------------------------
    def _row(self, kernel: str, key: Any, outcome: str, env: Environment, *, passes, stall_s, elapsed_s,
             command, trusted, rung, ladder, note, time, run_id=None, allowance_s=None,
             basis=None) -> dict[str, Any]:
        if not isinstance(kernel, str) or not kernel.strip():
            raise ValueError(f"kernel={kernel!r} must be a non-empty string (use '*' for unknown)")
        if outcome not in OUTCOMES:
            raise ValueError(f"outcome={outcome!r}; use one of {', '.join(OUTCOMES)}")
        if not isinstance(env, Environment):
            raise TypeError(f"env must be an Environment (Environment.detect()), not {type(env).__name__}")
        command = command_json(command)  # refuses a string command (TypeError)
        key = as_key(key)
        kernel = kernel.strip()
        return {
            "time": time or self._now(), "host": env.host, "gpu": env.gpu, "driver": env.driver,
            "ncu_version": env.ncu_version, "kernel": kernel, "kernel_pattern": normalize_kernel(kernel),
            "set": key.set, "sections": json.dumps(list(key.sections)), "metrics": json.dumps(list(key.metrics)),
            "replay_mode": key.replay_mode, "key": key.canonical(), "outcome": outcome,
            "passes_reached": None if passes is None else int(passes),
            "stall_s": None if stall_s is None else float(stall_s),
            "elapsed_s": None if elapsed_s is None else float(elapsed_s),
            "command": command, "trusted": 1 if trusted else 0,
            "rung": rung, "ladder": ladder, "note": mask_text(note or ""), "run_id": run_id,
            "allowance_s": None if allowance_s is None else float(allowance_s), "basis": basis,
            "processes": int(env.processes), "gpus": env.gpus, "ranks": key.ranks,
        }

    def _insert(self, rows: Sequence[dict[str, Any]]) -> list[Record]:
        cols = [c for c in COLUMNS if c != "id"]
        sql = (f"INSERT INTO records ({', '.join(SQL_NAME.get(c, c) for c in cols)}) "
               f"VALUES ({', '.join('?' * len(cols))})")
        ids = [c.lastrowid for c in self._write((sql, [r[c] for c in cols]) for r in rows)]
        return [row_to_record((rid, *[r[c] for c in cols]), self.path) for rid, r in zip(ids, rows)]

    def record(self, kernel: str, key: Union[ProfileKey, "ProfileOptions"], outcome: str, *, env: Environment,
               passes: Optional[int] = None, stall_s: Optional[float] = None,
               elapsed_s: Optional[float] = None, command: Sequence[str] = (), trusted: bool = True,
               rung: Optional[str] = None, ladder: Optional[str] = None, note: str = "",
               time: Optional[str] = None, run_id: Optional[str] = None, allowance_s: Optional[float] = None,
               basis: Optional[str] = None) -> Record:
        """Add one record in its own transaction and return it."""
        return self._insert([self._row(kernel, key, outcome, env, passes=passes, stall_s=stall_s,
                                       elapsed_s=elapsed_s, command=command, trusted=trusted, rung=rung,
                                       ladder=ladder, note=note, time=time, run_id=run_id,
                                       allowance_s=allowance_s, basis=basis)])[0]

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
        if attempt.program_fault or attempt.status == INTERRUPTED:
            return []
        common = dict(command=attempt.command, trusted=not attempt.gpu_foreign_before,
                      rung=rung, ladder=ladder, time=attempt.started_at or None, elapsed_s=attempt.elapsed_s,
                      run_id=attempt.cookie or uuid.uuid4().hex)
        stall = attempt.stall
        rows = self._finished_rows(attempt, key, env, common)
        if attempt.status == HANG and stall is not None:
            rows.append(self._hang_row(attempt, key, env, common, kernel))
        if not rows:
            extra = "; ".join(attempt.notes)
            name = attempt.stalled_kernel or kernel or "*"
            status = attempt.status if attempt.status in OUTCOMES else ERROR
            note = attempt.reason + (f"; {extra}" if extra else "")
            rows.append(self._row(name, key, status, env, passes=None, stall_s=stall.silent_s if stall else None,
                                  note=note, allowance_s=stall.allowance_s if stall else None,
                                  basis=stall.basis if stall else None, **common))
        return self._insert(rows)

    def _finished_rows(self, attempt: "Attempt", key: Any, env: Environment, common: dict) -> list[dict[str, Any]]:
        """``ok`` rows for the kernels the attempt finished (Attempt.finished_kernels), one per name."""
        stall = attempt.stall
        if attempt.status not in (OK, HANG) or (attempt.status == HANG and stall is None):
            return []
        best: dict[str, list[int]] = {}
        for k in attempt.finished_kernels:
            passes, launches = best.get(k.name, (0, 0))
            best[k.name] = [max(passes, k.passes), launches + 1]
        rows = []
        for name, (passes, launches) in best.items():
            bits = [f"{launches} launches profiled"] if launches > 1 else []
            if stall is not None:
                bits.append(f"finished before {stall.kernel} hung")
            rows.append(self._row(name, key, OK, env, passes=passes, stall_s=None, note="; ".join(bits), **common))
        return rows

    def _hang_row(self, attempt: "Attempt", key: Any, env: Environment, common: dict,
                  kernel: Optional[str]) -> dict[str, Any]:
        stall = attempt.stall
        extra = "; ".join(attempt.notes)
        reached = [k.passes for k in attempt.kernels
                   if k.replay != ReplayMode.KERNEL and (k.name, k.kernel_id) == (stall.kernel, stall.kernel_id)]
        note = f"stalled at {stall.where!r}" + (f" in application replay pass {max(reached)}" if reached else "")
        note += f": {attempt.reason}" + (f"; {extra}" if extra else "")
        subject = stall.kernel
        if kernel is not None and as_key(key).replay_mode in RANGE_MODES:
            subject = kernel
            note = f"the range holding it stalled ({stall.kernel!r}); " + note
        # Last, so that it is the newest row of this kernel (see hangs_for).
        return self._row(subject, key, HANG, env, passes=None, stall_s=stall.silent_s, note=note,
                         allowance_s=stall.allowance_s, basis=stall.basis, **common)

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
        sql = SELECT + (" WHERE " + " AND ".join(where) if where else "") + " ORDER BY id DESC"
        if limit is not None:
            sql += " LIMIT ?"
            params.append(int(limit))
        return [row_to_record(r, self.path) for r in self._query(sql, params)]

    def _matching(self, kernel: str, env: Environment, extra: str = "", params: Sequence[Any] = ()) -> list[Record]:
        sql = (SELECT + " WHERE kernel_pattern = ? AND gpu IS ? AND ncu_version IS ? AND processes = ? AND trusted = 1"
               + extra + " ORDER BY id DESC")
        rows = self._query(sql, [normalize_kernel(kernel), env.gpu, env.ncu_version, int(env.processes), *params])
        return [row_to_record(r, self.path) for r in rows]

    def known_hangs(self, kernel: str, env: Environment) -> list[Record]:
        """Trusted hang/timeout records of kernels like this one (same pattern)
        on the same GPU model and ncu version, in a job of as many processes,
        newest first. The driver may differ; each record says which it was."""
        return self._matching(kernel, env, " AND outcome IN (?, ?)", HANG_OUTCOMES)

    def hangs_for(self, kernel: str, key: Union[ProfileKey, "ProfileOptions"], env: Environment) -> bool:
        """Is this exact key known to hang on kernels like this one, here?

        Among trusted ok/hang/timeout records with this key on the same gpu
        and ncu version, in a job of as many processes: if this very kernel (exact name) has any, its newest
        decides (a later ok means the hang is gone); else any hang of a
        kernel with the same pattern counts.
        """
        canonical = as_key(key).canonical()
        rows = self._matching(kernel, env, " AND key = ? AND outcome IN (?, ?, ?)", (canonical, OK, *HANG_OUTCOMES))
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
        canonical = as_key(key).canonical()
        rows = self._matching(kernel, env, " AND key = ? AND outcome IN (?, ?, ?, ?)",
                              (canonical, OK, NO_KERNELS, *HANG_OUTCOMES))
        program = mask_argv(program)  # as it is kept
        mine = [r for r in rows if r.kernel == kernel.strip() and list(r.command[-len(program):]) == program]
        return bool(mine) and mine[0].outcome == NO_KERNELS

    def kernels(self) -> list[KernelSummary]:
        """Every kernel in the store, most recently recorded first."""
        rows = self._query(
            "SELECT kernel, COUNT(*), SUM(CASE WHEN outcome IN (?, ?) AND trusted = 1 THEN 1 ELSE 0 END), "
            "MAX(time), MAX(id) AS last_id FROM records GROUP BY kernel ORDER BY last_id DESC", HANG_OUTCOMES)
        return [KernelSummary(k, int(n), int(h or 0), t) for k, n, h, t, _ in rows]

    def uncalibrated_hangs(self) -> dict[str, int]:
        """Per kernel, its trusted hang records judged without a calibrated allowance (older ones included),
        and not called by a known cause."""
        rows = self._query("SELECT kernel, COUNT(*) FROM records WHERE outcome IN (?, ?) AND trusted = 1 "
                           "AND (basis IS NULL OR (basis NOT LIKE ? AND basis NOT LIKE ?)) GROUP BY kernel",
                           (*HANG_OUTCOMES, CALIBRATED + "%", KNOWN_CAUSE + "%"))
        return {k: int(n) for k, n in rows}

    def __len__(self) -> int:
        return int(self._query("SELECT COUNT(*) FROM records")[0][0])

    # --- calibrations ---------------------------------------------------------
    def record_call_time(self, subject: str, seconds: float, env: Environment, *, source: str,
                         kernel: str = "*", note: str = "", time: Optional[str] = None) -> CalibrationRow:
        """Remember that `subject` (or `kernel` of it) took `seconds` without ncu on env's GPU (profile(fn))."""
        if not subject or not isinstance(seconds, (int, float)) or not seconds >= 0:
            raise ValueError(f"a calibration needs a subject and seconds >= 0, not {subject!r}, {seconds!r}")
        row = {"time": time or self._now(), "host": env.host, "gpu": env.gpu, "driver": env.driver,
               "subject": subject, "kernel": kernel, "seconds": float(seconds), "source": source,
               "run_id": uuid.uuid4().hex, "note": mask_text(note), "marks_ranges": None}
        rid = self._write([insert_row(row)])[0].lastrowid
        return CalibrationRow(id=rid, **row)

    def call_time(self, subject: str, env: Environment, kernel: str = "*") -> Optional[CalibrationRow]:
        """The newest calibration of `subject` (or `kernel` of it) on this GPU model and driver, if any."""
        rows = self._query(*newest_row_sql(subject, kernel, env))
        return CalibrationRow(*rows[0]) if rows else None

    def record_calibration(self, calibration: Calibration, command: Sequence[str], env: Environment) -> int:
        """Keep a successful calibration of `command` here (per kernel, GPU, driver); the rows written."""
        rows = calibration_rows(calibration, command, env, self._now(), uuid.uuid4().hex)
        if rows:
            self._write(rows)
        return len(rows)

    def calibration_for(self, command: Sequence[str], env: Environment) -> Optional[Calibration]:
        """The newest calibration of this very command on this GPU model and driver, or None."""
        sql, params = match_sql(command, env)
        rows = self._query(sql, params)
        try:
            return calibration_from_rows(rows)
        except (TypeError, ValueError) as e:  # a row changed by hand: name it and the way out
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

    def export_yaml(self, path_or_file: Union[str, Path, IO[str]], kernel: Optional[str] = None) -> int:
        """Write ``{schema_version, records: [...]}`` (oldest first) with yaml.safe_dump; the rows written."""
        return write_yaml(reversed(self.records(kernel=kernel)), path_or_file, self.path)

    # --- what walks and sweeps ask before they run ------------------------------
    def _here(self, where: str, key: Union[ProfileKey, "ProfileOptions"], env: Environment,
              params: Sequence[Any] = ()) -> list[Record]:
        """Trusted records with this exact key on env's GPU and ncu version, in a job of as many processes,
        that also match `where`; newest first."""
        sql = (SELECT + " WHERE key = ? AND gpu IS ? AND ncu_version IS ? AND processes = ? AND trusted = 1 AND "
               + where + " ORDER BY id DESC")
        rows = self._query(sql, [as_key(key).canonical(), env.gpu, env.ncu_version, int(env.processes), *params])
        return [row_to_record(r, self.path) for r in rows]

    def hanging_kernels(self, key: Union[ProfileKey, "ProfileOptions"], env: Environment,
                        command: Sequence[str]) -> list[str]:
        """Kernels (exact names, each once, newest first) recorded as hanging with this exact key here, in
        this same program (a command line ending with `command`)."""
        program = mask_argv(command)  # as it is kept
        names: list[str] = []
        for r in self._here("outcome IN (?, ?) AND kernel != '*'", key, env, HANG_OUTCOMES):
            if list(r.command[-len(program):]) == program and r.kernel not in names:
                names.append(r.kernel)
        return names

    def newest_verdict(self, kernel: str, key: Union[ProfileKey, "ProfileOptions"],
                       env: Environment) -> Optional[Record]:
        """The newest record of this very kernel (exact name) with this exact key here, whatever its outcome."""
        rows = self._here("kernel = ?", key, env, (kernel,))
        return rows[0] if rows else None
