"""`nsys stats` as tables: CSV text -> StatsTable (standard library only) -> DataFrames.

    tables = nsys_stats(run.report)        # {"cuda_gpu_kern_sum": DataFrame, ...}

`nsys_stats` returns one DataFrame per report, with nsys's own CSV column
names (STATS_COLUMNS lists those of the default reports, as nsys
2024/2025 print them); columns whose values are all numbers are numeric,
names stay text. A report without data ("SKIPPED: ... does not contain CUDA
kernel data") is an empty DataFrame with the report's known columns and
`df.attrs["note"]` holding nsys's words. Every frame has
`attrs["report"]` (the report name) and `attrs["raw"]` (nsys's output).
"""

from __future__ import annotations

import csv
import io
import os
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping, Optional, Sequence

from nsightwrap.errors import ToolError
from nsightwrap.nsys.locate import find_nsys
from nsightwrap.nsys.messages import ERROR_LINE, NO_SUCH_FILE, UNKNOWN_REPORT, lines_with
from nsightwrap.nsys.options import NSYS_SUFFIX, input_report
from nsightwrap.nsys.run import run_nsys_tool
from nsightwrap.reports.nsys.sqlite import nsys_export_sqlite

if TYPE_CHECKING:  # pragma: no cover
    from pandas import DataFrame

DEFAULT_STATS_REPORTS = ("cuda_gpu_kern_sum", "cuda_api_sum", "nvtx_sum", "cuda_gpu_mem_time_sum")

#: Seconds one `nsys stats` (one report) may take.
STATS_TIMEOUT_S = 300.0

_SUMMARY = ("Time (%)", "Total Time (ns)")
_SPREAD = ("Avg (ns)", "Med (ns)", "Min (ns)", "Max (ns)", "StdDev (ns)")
#: Columns of the default reports, as nsys 2024/2025 print them in CSV.
STATS_COLUMNS: dict[str, tuple[str, ...]] = {
    "cuda_gpu_kern_sum": _SUMMARY + ("Instances",) + _SPREAD + ("Name",),
    "cuda_api_sum": _SUMMARY + ("Num Calls",) + _SPREAD + ("Name",),
    "nvtx_sum": _SUMMARY + ("Instances",) + _SPREAD + ("Style", "Range"),
    "cuda_gpu_mem_time_sum": _SUMMARY + ("Count",) + _SPREAD + ("Operation",),
}
#: Columns that stay text even when every value looks like a number.
TEXT_COLUMNS = frozenset({"Name", "Range", "Style", "Operation", "Category", "API Name", "Kernel Name", "Domain"})

_PROCESSING = re.compile(r"^\s*Processing \[(?P<input>.*)\] with \[(?P<script>.*?)\]\.\.\.\s*$")
_BANNERS = ("Generating SQLite file", "Processing [", "NOTICE:", "WARNING:", "SKIPPED:", "** ", "Generating '",
            "Generated:", "It is assumed", "Consider using", "File is older", "Use --force-export", "usage:", "Try '")
_NUMBER = re.compile(r"^[+-]?(?:\d+|\d{1,3}(?:,\d{3})+)?(?:\.\d*)?(?:[eE][+-]?\d+)?$")


@dataclass(frozen=True)
class StatsTable:
    """One `nsys stats` report, parsed with the standard library only."""

    report: str
    columns: tuple[str, ...]
    rows: tuple[tuple[Any, ...], ...]
    note: Optional[str] = None
    raw: str = ""

    def to_dataframe(self) -> "DataFrame":
        import pandas as pd

        df = pd.DataFrame(list(self.rows), columns=list(self.columns))
        if not self.rows:
            df = df.astype({c: ("str" if c in TEXT_COLUMNS else "float64") for c in self.columns})
        df.attrs["report"] = self.report
        df.attrs["raw"] = self.raw
        if self.note:
            df.attrs["note"] = self.note
        return df

    def to_csv(self) -> str:
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(self.columns)
        w.writerows(self.rows)
        return buf.getvalue()


def _report_of(script: str) -> str:
    base = re.split(r"[\\/]", script.strip())[-1]
    return base[:-3] if base.endswith(".py") else base


def split_stats_output(text: str) -> dict[str, str]:
    """{report name: its part of the text}, cut at nsys's "Processing [...] with [.../NAME.py]..." lines.

    Text before the first such line (export notices) goes with the first
    report; without such lines the answer is {}.
    """
    parts: dict[str, list[str]] = {}
    preamble: list[str] = []
    current: Optional[list[str]] = None
    for line in text.splitlines():
        m = _PROCESSING.match(line)
        if m:
            current = parts.setdefault(_report_of(m["script"]), [])
            if preamble and len(parts) == 1:
                current.extend(preamble)
            current.append(line)
        elif current is None:
            preamble.append(line)
        else:
            current.append(line)
    return {k: "\n".join(v) + "\n" for k, v in parts.items()}


def _is_banner(s: str) -> bool:
    return s.startswith(_BANNERS) or bool(_PROCESSING.match(s))


def _cells(line: str) -> list[str]:
    return next(csv.reader([line]), [])


def _looks_like_header(cells: Sequence[str], report: str) -> bool:
    cells = [c.strip() for c in cells]
    if len(cells) < 2 or any(not c or _NUMBER.match(c) for c in cells):
        return False
    known = STATS_COLUMNS.get(report)
    if known and tuple(cells) == known:
        return True
    return cells[0].startswith("Time") or any(c in TEXT_COLUMNS for c in cells)


def _convert(values: list[str]) -> list[Any]:
    """Numbers when every non-empty value is one (ints stay ints), else the text."""
    cleaned = [v.strip() for v in values]
    present = [v for v in cleaned if v]
    if not present or not all(_NUMBER.match(v) and any(ch.isdigit() for ch in v) for v in present):
        return values
    plain = [v.replace(",", "") for v in cleaned]
    if all(re.fullmatch(r"[+-]?\d+", v) for v in plain if v):
        return [int(v) if v else None for v in plain]
    return [float(v) if v else None for v in plain]


def parse_stats_table(text: str, report_name: str) -> StatsTable:
    """The CSV table of `report_name` in `nsys stats --format csv` output; pure.

    Versions print banners before the header ("Generating SQLite file ...",
    "Processing [...] with [...]...", notices, " ** Title (name):", blank
    lines); when the text holds several reports the part of `report_name` is
    used. The header is the first line that reads as CSV of column names
    (starts with "Time" or has a Name/Range/Operation-like column); rows
    end at a blank line. "SKIPPED: ..." gives an empty table with the note.
    Raises ValueError when there is neither a table nor a SKIPPED line.
    """
    sections = split_stats_output(text)
    if sections:
        if report_name in sections:
            text = sections[report_name]
        elif len(sections) > 1:
            raise ValueError(f"no output for report {report_name!r}; the text holds {', '.join(sections)}")
    lines = text.splitlines()
    note: Optional[str] = None
    header_at = None
    for i, line in enumerate(lines):
        s = line.strip()
        if not s:
            continue
        if s.startswith("SKIPPED:") and note is None:
            note = s
        if _is_banner(s):
            continue
        if _looks_like_header(_cells(s), report_name):
            header_at = i
            break
    if header_at is None:
        if note:
            return StatsTable(report_name, STATS_COLUMNS.get(report_name, ()), (), note, text)
        problems = [s.strip() for s in lines
                    if ERROR_LINE.match(s) or "could not be found" in s or "not found" in s.lower()]
        raise ValueError(f"no CSV table for report {report_name!r}"
                         + (f": {problems[0]}" if problems else "") + f". nsys printed:\n{text.strip()[:2000]}")
    header = [c.strip() for c in _cells(lines[header_at].strip())]
    rows: list[list[str]] = []
    for line in lines[header_at + 1:]:
        s = line.rstrip("\r\n")
        if not s.strip():
            if rows:
                break
            continue
        if _PROCESSING.match(s):
            break
        if _is_banner(s.strip()):
            continue
        cells = _cells(s)
        if len(cells) > len(header):  # an unquoted comma in the last (name) column
            cells = cells[: len(header) - 1] + [",".join(cells[len(header) - 1:])]
        rows.append(cells + [""] * (len(header) - len(cells)))
    columns = [_convert([r[j] for r in rows]) if header[j] not in TEXT_COLUMNS else [r[j] for r in rows]
               for j in range(len(header))]
    converted = tuple(tuple(col[i] for col in columns) for i in range(len(rows)))
    return StatsTable(report_name, tuple(header), converted, note, text)


def parse_stats_csv(text: str, report_name: str) -> "DataFrame":
    """`parse_stats_table` as a DataFrame (see the module docstring for the schema)."""
    return parse_stats_table(text, report_name).to_dataframe()


def stats_argv(nsys: str, report: str | os.PathLike, name: str) -> list[str]:
    """One `nsys stats` call for one report of a SQLite export, CSV to stdout; pure."""
    return [nsys, "stats", "--report", name, "--format", "csv", "--output", "-", os.fspath(report)]


def stats_tables(
    report: str | os.PathLike,
    reports: Sequence[str] = DEFAULT_STATS_REPORTS,
    nsys: Optional[str] = None,
    *,
    timeout: float = STATS_TIMEOUT_S,
    env: Optional[Mapping[str, str]] = None,
) -> dict[str, StatsTable]:
    """`nsys stats` of each report (one call each); stdlib only.

    A .nsys-rep is first exported to SQLite (``nsys export``, beside it) and
    the stats read from that file. Asking `nsys stats` to export (the first
    call with ``--force-export=true``) is not enough: on the GPU machine nsys
    2025.3.1 then called its own fresh export "older than input file" in the
    next call and printed only its usage (exit 1).
    """
    if isinstance(reports, str):
        reports = (reports,)
    path = input_report(report)
    env = dict(os.environ if env is None else env)
    nsys = find_nsys(nsys, env)
    if path.name.endswith(NSYS_SUFFIX):
        path = nsys_export_sqlite(path, nsys, timeout=timeout, env=env)
    tables = {}
    for name in reports:
        argv = stats_argv(nsys, path, name)
        out = run_nsys_tool(argv, timeout, env).log
        unknown = lines_with(out, UNKNOWN_REPORT)
        if unknown:
            raise ToolError(f"nsys does not know the report {name!r} ({unknown[0]}); run `{nsys} stats "
                            "--help-reports` for the names this version offers")
        if not split_stats_output(out) and lines_with(out, [NO_SUCH_FILE]):
            raise ToolError(f"`{' '.join(argv)}` failed: {lines_with(out, [NO_SUCH_FILE])[0]}")
        try:
            tables[name] = parse_stats_table(out, name)
        except ValueError as e:
            raise ToolError(f"could not read the output of `{' '.join(argv)}`: {e}") from e
    return tables


def nsys_stats(
    report: str | os.PathLike,
    reports: Sequence[str] = DEFAULT_STATS_REPORTS,
    nsys: Optional[str] = None,
    *,
    timeout: float = STATS_TIMEOUT_S,
    env: Optional[Mapping[str, str]] = None,
) -> dict[str, "DataFrame"]:
    """{report name: DataFrame} from `nsys stats --report NAME --format csv --output - REPORT`."""
    return {k: t.to_dataframe() for k, t in stats_tables(report, reports, nsys, timeout=timeout, env=env).items()}
