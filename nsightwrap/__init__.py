"""nsightwrap: NVIDIA profilers under a watchdog.

    import nsightwrap
    attempt = nsightwrap.profile_command(["./my_app"], nsightwrap.ProfileOptions(set="full"))
    if attempt.status == "hang":
        print(attempt.stalled_kernel, attempt.report)   # the partial report is kept

Everything public is importable from here; other modules are internal.
"""

from __future__ import annotations

import importlib
import logging
from typing import TYPE_CHECKING, Any

from nsightwrap.errors import (
    AttemptFailed,
    AttemptHung,
    ChildError,
    LadderError,
    NotProfilable,
    NsightwrapError,
    OptionsError,
    ProfileInterrupted,
    ProgramNotRunnable,
    ReportError,
    StoreError,
    ToolError,
    ToolNotFound,
)
from nsightwrap.status import EXIT_CODES, STATUSES, ReplayMode
from nsightwrap.version import __version__ as __version__  # re-exported: nsightwrap.__version__

if TYPE_CHECKING:  # the names below load on first use (PEP 562), see _LAZY
    from nsightwrap.calibrate.confirm import Calibrator
    from nsightwrap.call.api import profile, profiled
    from nsightwrap.call.profiler import Profiler
    from nsightwrap.call.ranges import range
    from nsightwrap.call.result import ProfileResult
    from nsightwrap.call.triage import triage
    from nsightwrap.cli.bundle import Bundle, hang_bundle
    from nsightwrap.diagnose.result import TriageResult
    from nsightwrap.diagnose.run import TriageOptions
    from nsightwrap.fallback.ladder import Ladder, Rung, load_ladder
    from nsightwrap.fallback.result import LadderResult
    from nsightwrap.fallback.session import Session
    from nsightwrap.fallback.sweep import sweep_sections
    from nsightwrap.fallback.sweepresult import SweepResult
    from nsightwrap.fallback.walk import walk_ladder
    from nsightwrap.ncu.allowance import AllowancePolicy, Calibration
    from nsightwrap.ncu.attempt import Attempt, KernelResult
    from nsightwrap.ncu.catalog import NcuInfo, probe_ncu
    from nsightwrap.ncu.context import RunConfig, RunContext
    from nsightwrap.ncu.engine import profile_command
    from nsightwrap.ncu.locate import find_ncu
    from nsightwrap.ncu.names import normalize_kernel
    from nsightwrap.ncu.options import KernelFilter, ProfileOptions
    from nsightwrap.ncu.progress import Stall, StallRule
    from nsightwrap.nsys.options import NsysOptions
    from nsightwrap.nsys.run import profile_nsys
    from nsightwrap.reports.ncu import load_report, parse_raw_csv
    from nsightwrap.reports.nsys.sqlite import kernel_rows
    from nsightwrap.reports.nsys.stats import nsys_stats
    from nsightwrap.store import Environment, HangStore, ProfileKey, Record
    from nsightwrap.store.debuglog import debug_log
    from nsightwrap.watch.evidence import StallEvidence
    from nsightwrap.watch.rules import TotalTimeout, WatchRule
    from nsightwrap.watch.tree import StopPolicy

# Every public name but the exceptions and the vocabulary loads on first use,
# so that `import nsightwrap` (the CLI, and profile(fn)'s child under ncu)
# pays only for what it touches.
_LAZY = {
    "AllowancePolicy": "ncu.allowance",
    "Calibration": "ncu.allowance",
    "Calibrator": "calibrate.confirm",
    "Attempt": "ncu.attempt",
    "Environment": "store",
    "HangStore": "store",
    "KernelFilter": "ncu.options",
    "KernelResult": "ncu.attempt",
    "Ladder": "fallback.ladder",
    "NcuInfo": "ncu.catalog",
    "ProfileKey": "store",
    "ProfileOptions": "ncu.options",
    "Record": "store",
    "RunConfig": "ncu.context",
    "RunContext": "ncu.context",
    "Rung": "fallback.ladder",
    "Stall": "ncu.progress",
    "StallRule": "ncu.progress",
    "StopPolicy": "watch.tree",
    "SweepResult": "fallback.sweepresult",
    "TotalTimeout": "watch.rules",
    "WatchRule": "watch.rules",
    "find_ncu": "ncu.locate",
    "load_ladder": "fallback.ladder",
    "normalize_kernel": "ncu.names",
    "probe_ncu": "ncu.catalog",
    "profile_command": "ncu.engine",
    "range": "call.ranges",
    "sweep_sections": "fallback.sweep",
    "ProfileResult": "call.result", "Profiler": "call.profiler", "profile": "call.api", "profiled": "call.api",
    "load_report": "reports.ncu", "parse_raw_csv": "reports.ncu",
    "debug_log": "store.debuglog",
    "LadderResult": "fallback.result", "walk_ladder": "fallback.walk", "Session": "fallback.session",
    "NsysOptions": "nsys.options", "profile_nsys": "nsys.run", "kernel_rows": "reports.nsys.sqlite",
    "nsys_stats": "reports.nsys.stats",
    "Bundle": "cli.bundle", "hang_bundle": "cli.bundle", "StallEvidence": "watch.evidence",
    "triage": "call.triage", "TriageOptions": "diagnose.run", "TriageResult": "diagnose.result",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'nsightwrap' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


# A library logs; the application decides where it goes (the CLI: --verbose). Without this,
# logging's last-resort handler printed every warning a second time, beside the attempt's note.
logging.getLogger(__name__).addHandler(logging.NullHandler())

__all__ = [
    "AllowancePolicy",
    "Attempt",
    "AttemptFailed",
    "AttemptHung",
    "Bundle",
    "Calibration",
    "Calibrator",
    "ChildError",
    "EXIT_CODES",
    "Environment",
    "HangStore",
    "KernelFilter",
    "KernelResult",
    "Ladder",
    "LadderError",
    "LadderResult",
    "NcuInfo",
    "NotProfilable",
    "NsightwrapError",
    "NsysOptions",
    "OptionsError",
    "ProfileInterrupted",
    "ProfileKey",
    "ProfileOptions",
    "ProfileResult",
    "Profiler",
    "ProgramNotRunnable",
    "Record",
    "ReplayMode",
    "ReportError",
    "RunConfig",
    "RunContext",
    "Rung",
    "STATUSES",
    "Session",
    "Stall",
    "StallEvidence",
    "StallRule",
    "StopPolicy",
    "StoreError",
    "SweepResult",
    "ToolError",
    "ToolNotFound",
    "TotalTimeout",
    "TriageOptions",
    "TriageResult",
    "WatchRule",
    "debug_log",
    "find_ncu",
    "hang_bundle",
    "kernel_rows",
    "load_ladder",
    "load_report",
    "normalize_kernel",
    "nsys_stats",
    "parse_raw_csv",
    "probe_ncu",
    "profile",
    "profile_command",
    "profile_nsys",
    "profiled",
    "range",
    "sweep_sections",
    "triage",
    "walk_ladder",
]
