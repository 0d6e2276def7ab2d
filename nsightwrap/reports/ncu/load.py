"""The entry points: a report file, or an attempt's report read with the ncu of its run."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence, Union

from nsightwrap.errors import ReportError
from nsightwrap.ncu.attempt import Attempt
from nsightwrap.reports.ncu.api import read_api
from nsightwrap.reports.ncu.frame import build_tidy, build_wide
from nsightwrap.reports.ncu.module import choose_reader
from nsightwrap.reports.ncu.raw_csv import read_csv
from nsightwrap.reports.ncu.scan import check_report_file
from nsightwrap.reports.ncu.select import metric_specs, resolve, section_ids

if TYPE_CHECKING:  # pragma: no cover
    import pandas

#: ``metrics=`` / ``sections=``: one name, or several.
Names = Union[str, Sequence[str], None]


def load_report(path: str | os.PathLike | Attempt, metrics: Names = None, sections: Names = None, tidy: bool = False,
                *, ncu: str | os.PathLike | None = None) -> "pandas.DataFrame":
    """Read an Nsight Compute report into a DataFrame (see :mod:`nsightwrap.reports.ncu`).

    ``path``: the ``.ncu-rep`` file, or an :class:`~nsightwrap.ncu.attempt.Attempt`
    (its ``report`` is read, with the ncu its run used: :func:`attempt_dataframe`).
    ``metrics``: name(s), globs or ``regex:EXPR``. ``sections``: section
    identifier(s). ``tidy``: one row per (result, metric) instead of one per
    result. ``ncu``: the ncu (binary or install folder) whose ``ncu_report``
    module should read the report.

    Raises :class:`ReportError` for a missing, foreign or truncated file, an
    exact metric name or a section the report lacks, and when nothing can
    read reports here.
    """
    if isinstance(path, Attempt):
        return attempt_dataframe(path, metrics, sections, tidy, ncu=ncu)
    return _read(_report_path(path), metrics, sections, tidy, ncu)


def attempt_dataframe(attempt: Attempt, metrics: Names = None, sections: Names = None, tidy: bool = False,
                      *, ncu: str | os.PathLike | None = None) -> "pandas.DataFrame":
    """The report of ``attempt`` (partial or complete) as a DataFrame, like :func:`load_report`.

    Read with the ``ncu_report`` of the ncu that made it (``attempt.ncu``,
    else the first element of the attempt's argv), unless ``ncu=`` names
    another; the usual search only when that ncu is gone.
    """
    return _read(_report_path(attempt), metrics, sections, tidy, ncu if ncu is not None else run_ncu(attempt))


def run_ncu(attempt: Attempt) -> str | None:
    """The ncu an attempt ran, or None when it no longer exists.

    ``attempt.ncu`` when set: a one-rank attempt's argv starts with its launcher
    (torchrun, mpirun), not with ncu. Else the first element of its argv.
    """
    ncu = attempt.ncu or (attempt.command[0] if attempt.command else None)
    return ncu if ncu and os.path.exists(ncu) else None


def _read(report: Path, metrics: Names, sections: Names, tidy: bool,
          ncu: str | os.PathLike | None) -> "pandas.DataFrame":
    specs = metric_specs(metrics)
    wanted_sections = section_ids(sections)
    scan = check_report_file(report)

    reader = choose_reader(ncu)
    if reader.kind == "csv":
        if wanted_sections is not None:
            raise ReportError(
                report,
                "sections= needs the ncu_report Python module, and none could be imported here",
                "Install it (pip install ncu-report), or pass ncu= an Nsight Compute install that has "
                "extras/python/ncu_report.py; or choose metrics= instead.",
            )
        table = read_csv(report, reader.origin)
    else:
        table = read_api(report, reader.module, specs, wanted_sections, scan)

    if reader.kind == "csv" and specs is not None:
        table = table.select(resolve(specs, table.names), report)
    frame = build_tidy(table) if tidy else build_wide(table)
    frame.attrs["report"] = str(report)
    frame.attrs["reader"] = reader.kind
    frame.attrs["reader_origin"] = reader.origin
    if reader.note:
        frame.attrs["reader_note"] = reader.note
    return frame


_MISSING = object()


def _report_path(path: Any) -> Path:
    """A path from a str/PathLike, or from an Attempt-like object's ``report``."""
    if not isinstance(path, (str, os.PathLike)):
        report = getattr(path, "report", _MISSING)
        if report is _MISSING:
            raise TypeError(f"load_report() needs a path or an Attempt, not {type(path).__name__}")
        if report is None:
            status = getattr(path, "status", "?")
            reason = getattr(path, "reason", "")
            raise ReportError(
                None,
                f"the attempt kept no report ({status}: {reason})",
                "Profile with an export path (ProfileOptions(export=...)) and check attempt.status.",
            )
        path = report
    return Path(os.fspath(path)).expanduser()
