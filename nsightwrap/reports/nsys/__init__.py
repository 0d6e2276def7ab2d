"""Nsight Systems reports as tables: `nsys stats` (stats.py) and the SQLite export's kernel rows (sqlite.py)."""

from nsightwrap.reports.nsys.sqlite import (
    EXPORT_TIMEOUT_S,
    KERNEL_COLUMNS,
    kernel_records,
    kernel_rows,
    nsys_export_sqlite,
)
from nsightwrap.reports.nsys.stats import (
    DEFAULT_STATS_REPORTS,
    STATS_COLUMNS,
    STATS_TIMEOUT_S,
    StatsTable,
    nsys_stats,
    parse_stats_csv,
    parse_stats_table,
    split_stats_output,
    stats_tables,
)

__all__ = [
    "DEFAULT_STATS_REPORTS",
    "EXPORT_TIMEOUT_S",
    "KERNEL_COLUMNS",
    "STATS_COLUMNS",
    "STATS_TIMEOUT_S",
    "StatsTable",
    "kernel_records",
    "kernel_rows",
    "nsys_export_sqlite",
    "nsys_stats",
    "parse_stats_csv",
    "parse_stats_table",
    "split_stats_output",
    "stats_tables",
]
