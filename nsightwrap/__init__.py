"""nsightwrap: NVIDIA profilers under a watchdog.

    import nsightwrap
    attempt = nsightwrap.profile_command(["./my_app"], nsightwrap.ProfileOptions(set="full"))
    if attempt.status == "hang":
        print(attempt.stalled_kernel, attempt.report)   # the partial report is kept

Everything public is importable from here; other modules are internal.
"""

from nsightwrap.ncu.attempt import EXIT_CODES, STATUSES, Attempt, KernelResult
from nsightwrap.ncu.engine import ProfileInterrupted, RunConfig, profile_command
from nsightwrap.errors import AttemptFailed, AttemptHung, NsightwrapError, OptionsError, ReportError, ToolError, ToolNotFound
from nsightwrap.ncu.options import KernelFilter, ProfileOptions, ReplayMode
from nsightwrap.ncu.progress import Stall, StallRule
from nsightwrap.watch.rules import TotalTimeout, WatchRule
from nsightwrap.ncu.catalog import NcuInfo, probe_ncu
from nsightwrap.ncu.locate import find_ncu
from nsightwrap.fallback.ladder import Ladder, Rung, load_ladder
from nsightwrap.call.ranges import range
from nsightwrap.store.hangstore import Environment, HangStore, ProfileKey, Record, StoreError, normalize_kernel
from nsightwrap.watch.process import StopPolicy

# Names whose modules import pandas (or the report reader) load on first use,
# so that `python -m nsightwrap run` and the watched run start fast.
_LAZY = {
    "ChildError": "call.api", "NotProfilable": "call.api", "ProfileResult": "call.api", "profile": "call.api",
    "profiled": "call.api", "load_report": "reports.ncu", "parse_raw_csv": "reports.ncu",
    "debug_log": "store.debuglog", "SweepResult": "fallback.sweep", "sweep_sections": "fallback.sweep",
    "LadderResult": "fallback.walk", "walk_ladder": "fallback.walk",
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
