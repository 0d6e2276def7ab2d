"""nsightwrap: NVIDIA profilers under a watchdog.

    import nsightwrap
    attempt = nsightwrap.profile_command(["./my_app"], nsightwrap.ProfileOptions(set="full"))
    if attempt.status == "hang":
        print(attempt.stalled_kernel, attempt.report)   # the partial report is kept

Everything public is importable from here; other modules are internal.
"""

from .attempt import EXIT_CODES, STATUSES, Attempt, KernelResult
from .engine import ProfileInterrupted, RunConfig, profile_command
from .errors import AttemptFailed, AttemptHung, NsightwrapError, OptionsError, ReportError, ToolError, ToolNotFound
from .options import KernelFilter, ProfileOptions, ReplayMode
from .rules import Stall, StallRule, TotalTimeout, WatchRule
from .tools import NcuInfo, find_ncu, probe_ncu
from .ladder import Ladder, Rung, load_ladder
from .ranges import range
from .store import Environment, HangStore, ProfileKey, Record, StoreError, normalize_kernel
from .watchdog import StopPolicy

# Names whose modules import pandas (or the report reader) load on first use,
# so that `python -m nsightwrap run` and the watched run start fast.
_LAZY = {
    "ChildError": "api", "NotProfilable": "api", "ProfileResult": "api", "profile": "api", "profiled": "api",
    "load_report": "report", "parse_raw_csv": "report", "debug_log": "debuglog",
    "SweepResult": "sweep", "sweep_sections": "sweep", "LadderResult": "walk", "walk_ladder": "walk",
}


def __getattr__(name):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'nsightwrap' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_LAZY))


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
