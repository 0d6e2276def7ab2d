"""An nsys report's SQLite export, and one row per kernel launch read from it (standard library only).

    kernels = kernel_rows(nsys_export_sqlite(run.report))

`kernel_rows` returns one row per kernel launch (KERNEL_COLUMNS):
start, end, duration_ns (ns, GPU clock), gridX..Z, blockX..Z, stream
(CUDA stream id), device (device id), name (demangled), short_name,
correlationId (matches the CUDA API call that launched it). Columns a
version of the export lacks are missing values, listed in
`attrs["missing"]`.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Optional

from nsightwrap.errors import NsightwrapError, ToolError
from nsightwrap.nsys.locate import find_nsys
from nsightwrap.nsys.options import SQLITE_SUFFIX, input_report, nsys_stem
from nsightwrap.nsys.run import run_nsys_tool

if TYPE_CHECKING:  # pragma: no cover
    from pandas import DataFrame

#: Seconds one `nsys export` may take.
EXPORT_TIMEOUT_S = 600.0

#: `kernel_rows` columns, in order (see the module docstring).
KERNEL_COLUMNS = ("start", "end", "duration_ns", "gridX", "gridY", "gridZ", "blockX", "blockY", "blockZ",
                  "stream", "device", "name", "short_name", "correlationId")


def nsys_export_sqlite(
    report: str | os.PathLike,
    nsys: Optional[str] = None,
    *,
    output: Optional[str | os.PathLike] = None,
    timeout: float = EXPORT_TIMEOUT_S,
    env: Optional[Mapping[str, str]] = None,
) -> Path:
    """`nsys export --type sqlite --force-overwrite=true -o OUT REPORT`; the SQLite file's path.

    OUT defaults to the report's path with .sqlite instead of .nsys-rep.
    """
    path = input_report(report)
    env = dict(os.environ if env is None else env)
    nsys = find_nsys(nsys, env)
    out = Path(output) if output is not None else nsys_stem(path).with_name(nsys_stem(path).name + SQLITE_SUFFIX)
    argv = [nsys, "export", "--type", "sqlite", "--force-overwrite=true", "-o", str(out), str(path)]
    before = out.stat().st_mtime_ns if out.exists() else None
    outcome = run_nsys_tool(argv, timeout, env)
    for candidate in (out, out.with_name(out.name + SQLITE_SUFFIX)):
        if candidate.exists() and (candidate != out or before is None or out.stat().st_mtime_ns != before):
            if outcome.returncode:
                raise ToolError(f"`{' '.join(argv)}` exited with code {outcome.returncode}:\n{outcome.log[-4000:]}")
            return candidate
    raise ToolError(f"`{' '.join(argv)}` wrote no SQLite file (exit code {outcome.returncode}). "
                    f"nsys printed:\n{outcome.log[-4000:]}")


_KERNEL_SOURCES = {
    "start": ("start",),
    "end": ("end",),
    "gridX": ("gridX",), "gridY": ("gridY",), "gridZ": ("gridZ",),
    "blockX": ("blockX",), "blockY": ("blockY",), "blockZ": ("blockZ",),
    "stream": ("streamId", "stream"),
    "device": ("deviceId", "device"),
    "name": ("demangledName", "name", "shortName", "mangledName"),
    "short_name": ("shortName",),
    "correlationId": ("correlationId",),
}
_NAME_COLUMNS = ("name", "short_name")


def _table(con: sqlite3.Connection, wanted: str) -> Optional[str]:
    rows = con.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'view')").fetchall()
    return next((r[0] for r in rows if r[0].lower() == wanted.lower()), None)


def kernel_records(
    sqlite_path: str | os.PathLike,
) -> tuple[tuple[str, ...], list[tuple[Any, ...]], list[str], list[str]]:
    """(KERNEL_COLUMNS, rows sorted by start, missing columns, notes); stdlib only."""
    path = Path(sqlite_path)
    if not path.exists():
        raise NsightwrapError(f"no such SQLite file: {path} (make one with nsys_export_sqlite)")
    try:
        con = sqlite3.connect(f"{path.absolute().as_uri()}?mode=ro", uri=True)
    except sqlite3.Error as e:
        raise NsightwrapError(f"cannot open {path} as SQLite: {e}") from e
    try:
        try:
            table = _table(con, "CUPTI_ACTIVITY_KIND_KERNEL")
        except sqlite3.DatabaseError as e:
            raise NsightwrapError(f"{path} is not a SQLite database ({e}); export it with nsys_export_sqlite") from e
        if table is None:
            return KERNEL_COLUMNS, [], [], ["no CUPTI_ACTIVITY_KIND_KERNEL table: the report holds no CUDA kernel "
                                            "data (was cuda traced, and did the program launch kernels?)"]
        have = [r[1] for r in con.execute(f'PRAGMA table_info("{table}")')]
        lower = {c.lower(): c for c in have}
        source = {}
        for col, options in _KERNEL_SOURCES.items():
            source[col] = next((lower[o.lower()] for o in options if o.lower() in lower), None)
        missing = [c for c, s in source.items() if s is None]
        picked = sorted({s for s in source.values() if s})
        data = con.execute(
            "SELECT " + ", ".join(f'"{c}"' for c in picked) + f' FROM "{table}"'
            + (f' ORDER BY "{source["start"]}"' if source["start"] else "")).fetchall()
        strings: dict[int, str] = {}
        strings_table = _table(con, "StringIds")
        if strings_table and any(source[c] for c in _NAME_COLUMNS):
            ids = {r[picked.index(source[c])] for r in data for c in _NAME_COLUMNS if source[c]}
            ids = [i for i in ids if isinstance(i, int)]
            for k in range(0, len(ids), 900):
                chunk = ids[k:k + 900]
                strings.update(con.execute(
                    f'SELECT id, value FROM "{strings_table}" WHERE id IN ({",".join("?" * len(chunk))})', chunk))
    finally:
        con.close()
    index = {s: picked.index(s) for s in picked}
    rows = []
    for r in data:
        rec = {c: (r[index[s]] if s else None) for c, s in source.items()}
        for c in _NAME_COLUMNS:
            v = rec[c]
            if isinstance(v, int):
                rec[c] = strings.get(v, str(v))
        s, e = rec["start"], rec["end"]
        rec["duration_ns"] = e - s if isinstance(s, (int, float)) and isinstance(e, (int, float)) else None
        rows.append(tuple(rec[c] for c in KERNEL_COLUMNS))
    notes = []
    if missing:
        notes.append(f"this export has no column for: {', '.join(missing)}")
    return KERNEL_COLUMNS, rows, missing, notes


def api_calls(sqlite_path: str | os.PathLike) -> Optional[frozenset[str]]:
    """The names of the CUDA API functions the traced program called (`cudaProfilerStart_v4000`...);
    None when the export has no such table (CUDA not traced). stdlib only."""
    con = sqlite3.connect(f"{Path(sqlite_path).absolute().as_uri()}?mode=ro", uri=True)
    try:
        table, strings = _table(con, "CUPTI_ACTIVITY_KIND_RUNTIME"), _table(con, "StringIds")
        if table is None or strings is None:
            return None
        return frozenset(v for (v,) in con.execute(
            f'SELECT DISTINCT s.value FROM "{table}" r JOIN "{strings}" s ON r.nameId = s.id'))
    except sqlite3.Error:
        return None
    finally:
        con.close()


def kernel_rows(sqlite_path: str | os.PathLike) -> "DataFrame":
    """One row per kernel launch from an nsys SQLite export (KERNEL_COLUMNS; see the module docstring)."""
    import pandas as pd

    columns, rows, missing, notes = kernel_records(sqlite_path)
    df = pd.DataFrame(rows, columns=list(columns))
    for c in columns:
        if c in _NAME_COLUMNS:
            df[c] = df[c].astype("str") if df[c].notna().all() else df[c].astype("object")
        elif df[c].isna().any() or df.empty:
            df[c] = pd.array(df[c].tolist(), dtype="Int64")
    df.attrs["missing"] = list(missing)
    if notes:
        df.attrs["note"] = "; ".join(notes)
    df.attrs["source"] = str(sqlite_path)
    return df
