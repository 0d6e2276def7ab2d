"""nsightwrap: NVIDIA profilers under a watchdog.

    import nsightwrap
    attempt = nsightwrap.profile_command(["./my_app"], nsightwrap.ProfileOptions(set="full"))
    if attempt.status == "hang":
        print(attempt.stalled_kernel, attempt.report)   # the partial report is kept

Everything public is importable from here; other modules are internal.
"""

from .api import ChildError, NotProfilable, ProfileResult, profile, profiled
from .attempt import EXIT_CODES, STATUSES, Attempt, KernelResult
from .engine import ProfileInterrupted, RunConfig, profile_command
from .errors import AttemptFailed, AttemptHung, NsightwrapError, OptionsError, ReportError, ToolError, ToolNotFound
from .options import KernelFilter, ProfileOptions, ReplayMode
from .rules import Stall, StallRule, TotalTimeout, WatchRule
from .tools import NcuInfo, find_ncu, probe_ncu
from .ladder import Ladder, Rung, load_ladder
from .ranges import range
from .report import load_report, parse_raw_csv
from .debuglog import debug_log
from .store import Environment, HangStore, ProfileKey, Record, StoreError, normalize_kernel
from .sweep import SweepResult, sweep_sections
from .walk import LadderResult, walk_ladder
from .watchdog import StopPolicy

__version__ = "0.1.0"

__all__ = [
    "ChildError",
    "Ladder",
    "LadderResult",
    "NotProfilable",
    "ProfileResult",
    "Rung",
    "load_ladder",
    "profile",
    "profiled",
    "range",
    "walk_ladder",
    "Environment",
    "HangStore",
    "ProfileKey",
    "Record",
    "StoreError",
    "SweepResult",
    "debug_log",
    "normalize_kernel",
    "sweep_sections",
    "ReportError",
    "load_report",
    "parse_raw_csv",
    "Attempt",
    "AttemptFailed",
    "AttemptHung",
    "EXIT_CODES",
    "KernelFilter",
    "KernelResult",
    "NcuInfo",
    "NsightwrapError",
    "OptionsError",
    "ProfileInterrupted",
    "ProfileOptions",
    "ReplayMode",
    "RunConfig",
    "STATUSES",
    "Stall",
    "StallRule",
    "StopPolicy",
    "ToolError",
    "ToolNotFound",
    "TotalTimeout",
    "WatchRule",
    "find_ncu",
    "probe_ncu",
    "profile_command",
]
