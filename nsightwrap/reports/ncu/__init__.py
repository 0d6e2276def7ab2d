"""Nsight Compute reports (``.ncu-rep``) as pandas DataFrames.

    from nsightwrap.reports.ncu import load_report
    df = load_report("run.ncu-rep")                          # wide: one row per result
    df = load_report(attempt, metrics="gpu__time_duration.sum")  # an Attempt's report, with its run's ncu
    df = load_report(path, metrics=["dram__*", "regex:^sm__throughput"], tidy=True)
    df = load_report(path, sections="SpeedOfLight")
    df.attrs["units"]["gpu__time_duration.sum"]              # 'ns'

The frames' columns are documented in :mod:`~nsightwrap.reports.ncu.schema`;
choosing metrics and sections in :mod:`~nsightwrap.reports.ncu.select`;
which ``ncu_report`` reads a report (the extras module of the ncu that made
it, else the wheel, else ``ncu --import --csv``) in
:mod:`~nsightwrap.reports.ncu.module`. The modules, in the order a report
goes through them:

- ``select``: ``metrics=`` / ``sections=`` parsed and matched;
- ``scan``: the file's blocks walked (a foreign or cut file fails early; the
  process of each result);
- ``module``: which ``ncu_report`` reads it, found and imported;
- ``api`` (through ``ncu_report``) or ``raw_csv`` (ncu's CSV export): the
  columns, as a ``frame.Table``;
- ``frame``: the Table as the wide or tidy DataFrame;
- ``load``: :func:`load_report` and :func:`attempt_dataframe`, which run the above.

Partial reports (ncu stopped during a hang) load like any other: they hold
the results that were complete.
"""

from nsightwrap.reports.ncu.load import attempt_dataframe, load_report
from nsightwrap.reports.ncu.module import find_report_module
from nsightwrap.reports.ncu.raw_csv import CSV_IMPORT_TIMEOUT_S, parse_raw_csv, raw_csv_argv
from nsightwrap.reports.ncu.schema import IDENTITY_COLUMNS, IDENTITY_UNITS, TIDY_COLUMNS, TIDY_IDENTITY_COLUMNS

__all__ = [
    "CSV_IMPORT_TIMEOUT_S",
    "IDENTITY_COLUMNS",
    "IDENTITY_UNITS",
    "TIDY_COLUMNS",
    "TIDY_IDENTITY_COLUMNS",
    "attempt_dataframe",
    "find_report_module",
    "load_report",
    "parse_raw_csv",
    "raw_csv_argv",
]
