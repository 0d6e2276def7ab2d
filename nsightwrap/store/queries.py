"""Every statement the hang store runs, as SQLAlchemy Core: one text for SQLite and PostgreSQL.

The tables here name the columns that queries use (the DDL that makes them is the migrations of
:mod:`nsightwrap.store.schema`, applied by :mod:`nsightwrap.store.migrate`). Core compiles each statement
for the backend: ``gpu IS NOT DISTINCT FROM :gpu`` is ``gpu IS ?`` on SQLite, an insert that meets a record
it already has (the same ``uid``) does nothing on both (``ON CONFLICT DO NOTHING``).

Which records decide anything here (:func:`applies`): trusted ones (no foreign process held the GPU) of the
same GPU model, driver, ncu version and job size (processes; the key holds the ranks), and, from another
host, only calibrated hang verdicts (or verdicts that are not hangs): an uncalibrated hang may be a slow
kernel on that machine, and is never applied elsewhere.
"""

from __future__ import annotations

from typing import Any, Mapping, Optional, Sequence

from sqlalchemy import (
    Column,
    Float,
    Integer,
    MetaData,
    String,
    Table,
    and_,
    case,
    delete,
    func,
    insert,
    not_,
    or_,
    select,
)
from sqlalchemy.sql import ColumnElement, Executable

from nsightwrap.ncu.allowance import CALIBRATED, KNOWN_CAUSE
from nsightwrap.status import HANG_OUTCOMES
from nsightwrap.store.keys import Environment
from nsightwrap.store.schema import CALIBRATION_COLUMNS, COLUMNS, SQL_NAME

__all__ = ["all_calibrations", "applies", "calibration_run", "calibrations", "count_records", "delete_records",
           "insert_calibration", "insert_record", "kernel_summary", "newest_calibration", "records", "schema_version",
           "select_records", "stale", "stale_counts", "uid_of", "uncalibrated_hangs", "version", "where_kernel"]

_META = MetaData()
_INTS = {"id", "passes_reached", "trusted", "processes", "gpus", "marks_ranges"}
_FLOATS = {"stall_s", "elapsed_s", "allowance_s", "seconds"}


def _column(name: str) -> Column:
    kind = Integer if name in _INTS else Float if name in _FLOATS else String
    return Column(name, kind, primary_key=name == "id")


records = Table("records", _META, *(_column(SQL_NAME.get(c, c)) for c in COLUMNS))
calibrations = Table("calibrations", _META, *(_column(c) for c in CALIBRATION_COLUMNS))
schema_version = Table("schema_version", _META, Column("version", Integer))
#: The records' columns in Record's order.
_RECORD = [records.c[SQL_NAME.get(c, c)] for c in COLUMNS]


def version() -> Executable:
    return select(schema_version.c.version)


def select_records(*where: Any, limit: Optional[int] = None) -> Executable:
    """Records (all columns, in COLUMNS order) matching every condition, newest first."""
    stmt = select(*_RECORD).where(*where).order_by(records.c.id.desc())
    return stmt if limit is None else stmt.limit(int(limit))


def _calibrated() -> ColumnElement:
    return or_(records.c.basis.like(CALIBRATED + "%"), records.c.basis.like(KNOWN_CAUSE + "%"))


def applies(env: Environment) -> ColumnElement:
    """Records that decide something on `env`: trusted, same GPU, driver, ncu version and job size; from
    another host only if not an uncalibrated hang."""
    c = records.c
    return and_(c.gpu.is_not_distinct_from(env.gpu), c.driver.is_not_distinct_from(env.driver),
                c.ncu_version.is_not_distinct_from(env.ncu_version), c.processes == int(env.processes),
                c.trusted == 1,
                or_(c.host.is_not_distinct_from(env.host), c.outcome.not_in(HANG_OUTCOMES), _calibrated()))


def stale(env: Environment) -> ColumnElement:
    """Records made with another GPU model, driver or ncu version than `env`'s (a None field of env: not
    compared): shown, never applied."""
    c = records.c
    known = [(col, value) for col, value in ((c.gpu, env.gpu), (c.driver, env.driver),
                                             (c.ncu_version, env.ncu_version)) if value is not None]
    if not known:  # nothing known about this machine: nothing is stale
        return c.id < 0
    return or_(*[col.is_distinct_from(value) for col, value in known])


def kernel_summary() -> Executable:
    """Per kernel: records, trusted hangs, last time, newest id; the most recently recorded first."""
    c = records.c
    hangs = func.sum(case((and_(c.outcome.in_(HANG_OUTCOMES), c.trusted == 1), 1), else_=0))
    last = func.max(c.id).label("last_id")
    return select(c.kernel, func.count(), hangs, func.max(c.time), last).group_by(c.kernel).order_by(last.desc())


def uncalibrated_hangs() -> Executable:
    c = records.c
    uncal = or_(c.basis.is_(None), not_(_calibrated()))
    return select(c.kernel, func.count()).where(c.outcome.in_(HANG_OUTCOMES), c.trusted == 1, uncal) \
        .group_by(c.kernel)


def stale_counts(env: Environment) -> Executable:
    return select(records.c.kernel, func.count()).where(stale(env)).group_by(records.c.kernel)


def count_records() -> Executable:
    return select(func.count()).select_from(records)


def uid_of(uid: str) -> Executable:
    return select(*_RECORD).where(records.c.uid == uid)


def _insert(dialect: str, table: Table) -> Any:
    # The dialect's module when it is used: PostgreSQL's takes 0.03 s to import, which a run on an SQLite store
    # (each command line, each probe's job) need not pay.
    if dialect == "postgresql":
        from sqlalchemy.dialects import postgresql

        return postgresql.insert(table)
    from sqlalchemy.dialects import sqlite

    return sqlite.insert(table)


def insert_record(row: Mapping[str, Any], dialect: str) -> Executable:
    """Insert one record (a dict by Record field, no id) unless its uid is there already; returns its id."""
    values = {SQL_NAME.get(k, k): v for k, v in row.items() if k != "id"}
    return _insert(dialect, records).values(**values).on_conflict_do_nothing(index_elements=["uid"]) \
        .returning(records.c.id)


def delete_records(kernel: Optional[str] = None, record_id: Optional[int] = None) -> Executable:
    stmt = delete(records)
    if kernel is not None:
        return stmt.where(records.c.kernel == kernel)
    return stmt if record_id is None else stmt.where(records.c.id == int(record_id))


def insert_calibration(row: Mapping[str, Any]) -> Executable:
    return insert(calibrations).values(**{k: v for k, v in row.items() if k != "id"}).returning(calibrations.c.id)


def _same_machine(subject: str, env: Environment) -> list[ColumnElement]:
    c = calibrations.c
    return [c.subject == subject, c.gpu.is_not_distinct_from(env.gpu), c.driver.is_not_distinct_from(env.driver)]


def newest_calibration(subject: str, kernel: str, env: Environment) -> Executable:
    """All columns of the newest calibration row of `subject`'s `kernel` on this GPU model and driver."""
    c = calibrations.c
    return select(*[c[n] for n in CALIBRATION_COLUMNS]).where(*_same_machine(subject, env), c.kernel == kernel) \
        .order_by(c.id.desc()).limit(1)


def all_calibrations() -> Executable:
    c = calibrations.c
    return select(*[c[n] for n in CALIBRATION_COLUMNS]).order_by(c.id)


def calibration_run(subject: str, env: Environment) -> Executable:
    """(kernel, seconds, source, time, marks_ranges) of the newest calibration run of `subject` here."""
    c = calibrations.c
    newest = select(c.run_id).where(*_same_machine(subject, env)).order_by(c.id.desc()).limit(1).scalar_subquery()
    return select(c.kernel, c.seconds, c.source, c.time, c.marks_ranges).where(*_same_machine(subject, env),
                                                                                c.run_id == newest)


def where_kernel(kernel: Optional[str] = None, pattern: Optional[str] = None) -> Sequence[ColumnElement]:
    out = []
    if kernel is not None:
        out.append(records.c.kernel == kernel)
    if pattern is not None:
        out.append(records.c.kernel_pattern == pattern)
    return out
