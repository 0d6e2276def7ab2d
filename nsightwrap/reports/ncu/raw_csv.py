"""Reading a report through ``ncu --import FILE --csv --page raw``: the way without ``ncu_report``.

No ``sections`` there, no ``range``/``mangled`` columns; units as ncu
prints them.
"""

from __future__ import annotations

import csv
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from nsightwrap.errors import ReportError, ToolError
from nsightwrap.ncu.names import function_core
from nsightwrap.reports.ncu.frame import Table, build_wide
from nsightwrap.reports.ncu.schema import (
    BLOCK_SIZE,
    BLOCK_X,
    BLOCK_Y,
    BLOCK_Z,
    COMPUTE_CAPABILITY,
    CONTEXT,
    DEFAULT_DOMAINS,
    DEMANGLED,
    DEVICE,
    DEVICE_NAME,
    FUNCTION,
    GRID_SIZE,
    GRID_X,
    GRID_Y,
    GRID_Z,
    HOST,
    IDENTITY_COLUMNS,
    IDENTITY_METRICS,
    INT_IDENTITY,
    NVTX,
    PROCESS,
    PROCESS_NAME,
    REGISTERS_PER_THREAD,
    RESULT,
    SHARED_MEM_DYNAMIC,
    SHARED_MEM_STATIC,
    STREAM,
    dims,
)
from nsightwrap.watch.locate import run_command

if TYPE_CHECKING:  # pragma: no cover
    import pandas

#: Timeout for ``ncu --import``; big reports take a while.
CSV_IMPORT_TIMEOUT_S = 600.0


def raw_csv_argv(ncu: str, report: str | os.PathLike) -> list[str]:
    """The command that prints a report's raw page as CSV, in base units."""
    return [ncu, "--import", os.fspath(report), "--csv", "--page", "raw", "--print-units", "base"]


def read_csv(report: Path, ncu: str, runner: Callable[..., tuple[int, str]] = run_command) -> Table:
    """Every result and metric of ``report``, from ``ncu``'s CSV export; ReportError naming the command."""
    argv = raw_csv_argv(ncu, report)
    try:
        rc, text = runner(argv, CSV_IMPORT_TIMEOUT_S)
    except ToolError as exc:
        raise ReportError(report, f"ncu could not import it: {exc}", "Check the ncu installation.") from exc
    if rc != 0:
        tail = "\n".join(text.strip().splitlines()[-10:])
        raise ReportError(report, f"`{' '.join(argv)}` exited with status {rc}:\n{tail}",
                          "Check that the file is a complete .ncu-rep written by this ncu or an older one.")
    try:
        return _parse_csv_table(text)
    except ValueError as exc:
        raise ReportError(report, f"could not understand ncu's CSV ({exc})",
                          "Install the ncu_report module (pip install ncu-report) to read reports directly.") from exc


# CSV header -> identity column; what ncu prints before the metric columns.
_CSV_IDENTITY = {
    "ID": RESULT,
    "Process ID": PROCESS,
    "Process Name": PROCESS_NAME,
    "Host Name": HOST,
    "Kernel Name": DEMANGLED,
    "Context": CONTEXT,
    "Stream": STREAM,
    "Block Size": BLOCK_SIZE,
    "Grid Size": GRID_SIZE,
    "Device": DEVICE,
    "CC": COMPUTE_CAPABILITY,
}
_NUMBER_RE = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?|[+-]?(?:inf|nan)", re.IGNORECASE)
_GROUPED_RE = re.compile(r"[+-]?\d{1,3}(?:,\d{3})+(?:\.\d*)?")
_INT_RE = re.compile(r"[+-]?\d+")
_MISSING_TEXT = frozenset({"", "n/a", "N/A", "no data"})  # "no data": a metric the module reads as None
_DIMS_RE = re.compile(r"\(\s*(\d+)\s*,\s*(\d+)\s*,\s*(\d+)\s*\)")


def parse_raw_csv(text: str) -> "pandas.DataFrame":
    """The wide frame (same schema as :func:`load_report`) from the output of
    ``ncu --import FILE --csv --page raw [--print-units base]``.

    The first CSV row names the columns (identity columns such as ``"ID"``,
    ``"Kernel Name"``, ``"Block Size"``, then metric names), the second gives
    units (empty for identity columns), then one row per result. Lines before
    the header (``==PROF==``, ``==WARNING==``) and ``==``-lines after it are
    skipped. A metric column whose values are all numbers (thousands
    separators allowed, as ncu prints them outside base units) becomes int or
    float; ``""``, ``n/a`` and ``no data`` are missing. ``range`` and ``mangled``
    are None (the CSV does not carry them); ``nvtx`` is read from the CSV's
    NVTX columns (present with ``ncu --nvtx``) in the same form; ``function`` is the demangled name
    without return type, scope, template arguments and parameters. Units go
    to ``attrs["units"]`` as printed. ValueError when there is no header.
    """
    return build_wide(_parse_csv_table(text))


def _parse_csv_table(text: str) -> Table:
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID"')), None)
    if start is None:
        raise ValueError('no header row (a line starting with "ID")')
    body = [line for line in lines[start:] if line.strip() and not line.startswith("==")]
    rows = list(csv.reader(body))
    header, rows = rows[0], rows[1:]
    units_row: list[str] = []
    if rows and not (rows[0] and _INT_RE.fullmatch(rows[0][0].strip())):
        units_row, rows = rows[0], rows[1:]
    width = len(header)
    rows = [row + [""] * (width - len(row)) if len(row) < width else row[:width] for row in rows]
    n = len(rows)
    cells = list(zip(*rows)) if rows else [()] * width

    identity: dict[str, list] = {col: [None] * n for col in IDENTITY_COLUMNS}
    metrics: dict[str, list] = {}
    units: dict[str, str] = {}
    nvtx_cells: dict[str, list[str]] = {}
    for index, name in enumerate(header):
        values = [v.strip() for v in cells[index]] if n else []
        if name.startswith((_CSV_PUSH_POP, _CSV_START_END)):
            nvtx_cells[_CSV_PUSH_POP if name.startswith(_CSV_PUSH_POP) else _CSV_START_END] = values
            continue
        target = _CSV_IDENTITY.get(name)
        if target is not None:
            identity[target] = _csv_identity(target, values)
            continue
        metrics[name] = _csv_metric(values)
        units[name] = units_row[index].strip() if index < len(units_row) else ""

    # What ncu's function name base shows: the demangled name's core (void ns::kern<int>(float *) -> kern).
    identity[FUNCTION] = [(function_core(d) or d) if d else None for d in identity[DEMANGLED]]
    if nvtx_cells:
        identity[NVTX] = [_nvtx_from_csv(p, q) for p, q in zip(nvtx_cells.get(_CSV_PUSH_POP, [None] * n),
                                                               nvtx_cells.get(_CSV_START_END, [None] * n))]
    for size, (cx, cy, cz) in ((GRID_SIZE, (GRID_X, GRID_Y, GRID_Z)), (BLOCK_SIZE, (BLOCK_X, BLOCK_Y, BLOCK_Z))):
        parsed = [_DIMS_RE.fullmatch(s or "") for s in identity[size]]
        for k, col in enumerate((cx, cy, cz)):
            identity[col] = [int(m.group(k + 1)) if m else None for m in parsed]
        identity[size] = [dims(*(int(g) for g in m.groups())) if m else s for m, s in zip(parsed, identity[size])]
    for col in (REGISTERS_PER_THREAD, SHARED_MEM_STATIC, SHARED_MEM_DYNAMIC, DEVICE_NAME):
        metric = IDENTITY_METRICS[col]
        if metric in metrics:
            identity[col] = list(metrics[metric])
    return Table(n, identity, metrics, units)


def _csv_identity(column: str, values: list[str]) -> list:
    if column in INT_IDENTITY:
        return [int(v.replace(",", "")) if _INT_RE.fullmatch(v.replace(",", "")) else None for v in values]
    return [v if v not in _MISSING_TEXT else None for v in values]


def _csv_metric(values: list[str]) -> list:
    present = [v for v in values if v not in _MISSING_TEXT]
    if present and all(_NUMBER_RE.fullmatch(v) or _GROUPED_RE.fullmatch(v) for v in present):
        plain = [v.replace(",", "") if _GROUPED_RE.fullmatch(v) else v for v in values]
        if all(_INT_RE.fullmatch(v) for v in plain if v not in _MISSING_TEXT):
            return [None if v in _MISSING_TEXT else int(v) for v in plain]
        return [None if v in _MISSING_TEXT else float(v) for v in plain]
    return [None if v in _MISSING_TEXT else v for v in values]


# The CSV export's NVTX columns: `TID  "domain:name:..."  "domain:name:..."` per launch.
_CSV_PUSH_POP = "thread Domain:Push/Pop_Range"
_CSV_START_END = "Id:Domain:Start/Stop_Range"
_CSV_QUOTED = re.compile(r'"([^"]*)"')


def _nvtx_from_csv(push_pop: str | None, start_end: str | None) -> str | None:
    """The ``nvtx`` text (as ``api.nvtx_text`` writes it) from the CSV export's two NVTX cells."""
    stacks: dict[str, list[str]] = {}
    ranges: list[tuple[str, str]] = []
    for cell, into_stack in ((push_pop, True), (start_end, False)):
        for item in _CSV_QUOTED.findall(cell or ""):
            domain, _, rest = item.partition(":")
            name = rest.split(":", 1)[0]
            if not name or name == "none":
                continue
            if into_stack:
                stacks.setdefault(domain, []).append(name)
            else:
                ranges.append((domain, name))
    parts = [("" if d in DEFAULT_DOMAINS else f"{d}@") + "/".join(names) for d, names in stacks.items()]
    parts += [("" if d in DEFAULT_DOMAINS else f"{d}@") + name for d, name in ranges]
    return "; ".join(parts) or None

