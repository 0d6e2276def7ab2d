"""Calibrations in the hang store: the rows of the ``calibrations`` table (schema versions 2 and 4; the
statements are built by :mod:`nsightwrap.store.queries`).

A program's calibration is kept per command (the row's subject, a JSON list), GPU model and driver, one row per
kernel (its longest launch without ncu) and one row ``*`` for the whole
program's wall time (and whether it marks profiler ranges), so that it is paid once. Only successful calibrations
are kept: a program that hangs by itself may be fixed before the next run.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Optional, Sequence

from nsightwrap.ncu.allowance import Calibration
from nsightwrap.store.keys import Environment
from nsightwrap.store.schema import CALIBRATION_COLUMNS, command_json

__all__ = ["PROGRAM", "calibration_from_rows", "calibration_rows", "insert_row"]

#: The kernel name of the row holding the program's wall time.
PROGRAM = "*"
#: The columns an INSERT fills: every one of CalibrationRow but the id, in its order.
_INSERTED = CALIBRATION_COLUMNS[1:]


def insert_row(row: dict[str, Any]) -> Any:
    """The INSERT statement of one row given by column (every column of CalibrationRow but the id)."""
    from nsightwrap.store.queries import insert_calibration  # with SQLAlchemy, once a store is open

    return insert_calibration({c: row[c] for c in _INSERTED})


def calibration_rows(calibration: Calibration, command: Sequence[str], env: Environment, time: str,
                     run_id: str) -> list[Any]:
    """INSERT statements for one calibration; none when it failed or is a bare bound (profile(fn)). One stopped
    early (once the stalled kernel had finished: no program time) keeps its kernels and no ``*`` row."""
    if not calibration.ok or (calibration.program_s is None and (calibration.bound_s is not None
                                                                 or not calibration.kernels)):
        return []
    head = (time, env.host, env.gpu, env.driver, command_json(command))
    ranges = None if calibration.marks_ranges is None else int(calibration.marks_ranges)
    rows = [(*head, name, float(seconds), calibration.source, run_id, "", None)
            for name, seconds in calibration.kernels]
    if calibration.program_s is not None:
        rows.append((*head, PROGRAM, float(calibration.program_s), calibration.source, run_id, "", ranges))
    return [insert_row(dict(zip(_INSERTED, row))) for row in rows]


def calibration_from_rows(rows: Sequence[Sequence[Any]]) -> Optional[Calibration]:
    """A Calibration from (kernel, seconds, source, time, marks_ranges) rows of one run; None without rows."""
    if not rows:
        return None
    kernels = {k: float(s) for k, s, *_ in rows if k != PROGRAM}
    program = next((r for r in rows if r[0] == PROGRAM), None)
    ranges = None if program is None or program[4] is None else bool(program[4])
    source, time = rows[0][2], rows[0][3]
    cal = Calibration.from_kernels(kernels, program_s=None if program is None else float(program[1]), source=source,
                                   marks_ranges=ranges)
    return replace(cal, measured_at=time)
