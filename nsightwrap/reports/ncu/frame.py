"""Columns read from a report (a :class:`Table`) into the documented DataFrames (see ``schema``).

Lists become typed arrays in one go (float64, int64, Int64, or left to
pandas for strings and mixed). numpy and pandas are imported on first use,
so that importing the reader stays light.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from nsightwrap.reports.ncu.schema import (
    IDENTITY_COLUMNS,
    IDENTITY_UNITS,
    INT_IDENTITY,
    METRIC,
    RANGE,
    TEXT,
    TIDY_COLUMNS,
    TIDY_IDENTITY_COLUMNS,
    UNIT,
    VALUE,
    SharedAttr,
)
from nsightwrap.reports.ncu.select import BREAKDOWN, unknown_metrics_error

if TYPE_CHECKING:  # pragma: no cover
    import pandas


@dataclass
class Table:
    """Columns before they become a frame: identity lists, metric lists, units."""

    n: int
    identity: dict[str, list]
    metrics: dict[str, list]
    units: dict[str, str]

    def names(self) -> list[str]:
        return list(self.metrics)

    def select(self, names: Sequence[str], report: Path) -> "Table":
        """Only the metrics ``names``, in that order; ReportError for one that no result has."""
        missing = [n for n in names if n not in self.metrics]
        if missing and self.n:
            raise unknown_metrics_error(report, missing, list(self.metrics))
        for name in missing:
            self.metrics[name] = []
        return Table(self.n, self.identity, {n: self.metrics[n] for n in names},
                     {n: self.units.get(n, "") for n in names})


_INT64_MAX = 2**63 - 1


def _column_kind(values: Sequence[Any]) -> str:
    """'float', 'int', 'nullable-int' or 'other' for a list of metric values."""
    seen_float = seen_int = seen_none = False
    for v in values:
        t = type(v)
        if t is float:
            seen_float = True
        elif t is int:
            if v > _INT64_MAX or v < -_INT64_MAX:
                return "other"
            seen_int = True
        elif v is None:
            seen_none = True
        else:
            return "other"
    if seen_float:
        return "float"
    if seen_int:
        return "nullable-int" if seen_none else "int"
    return "other"


#: Above this many columns, numeric columns are stacked into one 2-D block
#: each (float, int) rather than handed to pandas one by one.
_BLOCK_THRESHOLD = 64


def build_wide(table: Table) -> "pandas.DataFrame":
    """One frame in one go: lists become typed arrays (float64, int64, Int64,
    or left to pandas for strings and mixed), identity columns first."""
    import numpy as np
    import pandas as pd

    columns: dict[str, list] = {c: table.identity[c] for c in IDENTITY_COLUMNS}
    for name, values in table.metrics.items():
        columns.setdefault(name, values)
    kinds = {}
    for name, values in columns.items():
        kind = _column_kind(values)
        if kind == "other" and name in INT_IDENTITY and all(v is None for v in values):
            kind = "nullable-int"
        kinds[name] = kind

    n = table.n
    if len(columns) <= _BLOCK_THRESHOLD:
        data = {name: _typed(values, kinds[name]) for name, values in columns.items()}
        frame = pd.DataFrame(data, index=pd.RangeIndex(n))
    else:
        parts = []
        for kind, dtype in (("float", np.float64), ("int", np.int64)):
            names = [c for c, k in kinds.items() if k == kind]
            if names:
                block = np.array([columns[c] for c in names], dtype=dtype).reshape(len(names), n).T
                parts.append(pd.DataFrame(block, columns=names))
        rest = {c: _typed(v, kinds[c]) for c, v in columns.items() if kinds[c] not in ("float", "int")}
        if rest:
            parts.append(pd.DataFrame(rest, index=pd.RangeIndex(n)))
        frame = pd.concat(parts, axis=1)[list(columns)]
    frame.attrs["units"] = SharedAttr({**IDENTITY_UNITS, **table.units})
    return frame


def _typed(values: list, kind: str) -> Any:
    import numpy as np
    import pandas as pd

    if kind == "float":
        return np.array(values, dtype=np.float64)
    if kind == "int":
        return np.array(values, dtype=np.int64)
    if kind == "nullable-int":
        return pd.array(values, dtype="Int64")
    return values if values else np.array([], dtype=object)


def build_tidy(table: Table) -> "pandas.DataFrame":
    """One row per (result, metric) with a value: ``value`` float64, ``text`` for string values.

    ``breakdown:*`` items are not metrics but lists of metric names (the
    throughput breakdowns of SpeedOfLight): they go to
    ``attrs["breakdowns"]`` (name -> the metrics listed), not into rows.
    """
    import numpy as np
    import pandas as pd

    out: dict[str, list] = {c: [] for c in TIDY_COLUMNS}
    rows: list[int] = []
    breakdowns: dict[str, tuple[str, ...]] = {}
    items = [(name, column) for name, column in table.metrics.items()]
    for i in range(table.n):
        for name, column in items:
            value = column[i]
            if value is None:
                continue
            if name.startswith(BREAKDOWN):
                breakdowns.setdefault(name, tuple(x.strip() for x in str(value).split(",") if x.strip()))
                continue
            rows.append(i)
            out[METRIC].append(name)
            numeric = isinstance(value, (int, float)) and not isinstance(value, bool)
            out[VALUE].append(float(value) if numeric else np.nan)
            out[TEXT].append(None if numeric else str(value))
            out[UNIT].append(table.units.get(name, ""))
    for col in TIDY_IDENTITY_COLUMNS:
        source = table.identity[col]
        out[col] = [source[i] for i in rows]
    frame = pd.DataFrame(out, columns=list(TIDY_COLUMNS))
    frame[VALUE] = frame[VALUE].astype("float64")
    frame[TEXT] = frame[TEXT].astype(object)
    if table.n and all(v is None for v in table.identity[RANGE]):
        frame[RANGE] = frame[RANGE].astype("Int64")
    frame.attrs["units"] = SharedAttr({name: table.units.get(name, "") for name, _ in items
                                       if not name.startswith(BREAKDOWN)})
    frame.attrs["breakdowns"] = SharedAttr(breakdowns)
    return frame
