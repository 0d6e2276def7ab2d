"""The one vocabulary: statuses, exit codes, replay modes, the `regex:` prefix.

Every layer spells these the same way by importing them from here; this
module imports nothing from the package.
"""

from __future__ import annotations

from enum import Enum

OK, HANG, TIMEOUT, ERROR, NO_KERNELS, INTERRUPTED, CRASHED = (
    "ok", "hang", "timeout", "error", "no-kernels", "interrupted", "crashed")
#: What one watched run can end as (Attempt.status).
STATUSES = (OK, HANG, TIMEOUT, ERROR, NO_KERNELS, INTERRUPTED, CRASHED)

#: A store record's outcome may also be "skipped": settings not run because
#: they were known to hang.
SKIPPED = "skipped"
OUTCOMES = STATUSES + (SKIPPED,)
#: Outcomes that count as "hung" when deciding what to skip.
HANG_OUTCOMES = (HANG, TIMEOUT)

#: Exit codes of `python -m nsightwrap run`; 2 is a usage or set-up error
#: found before anything was launched.
EXIT_CODES = {OK: 0, HANG: 3, TIMEOUT: 4, ERROR: 5, NO_KERNELS: 6, CRASHED: 7, INTERRUPTED: 130}
USAGE_EXIT_CODE = 2

#: What `nsightwrap triage` concludes (besides OK: nothing wrong found, ERROR and INTERRUPTED): the program is
#: at fault (it fails or hangs without ncu, or a sanitizer found errors), or only the profiler makes it hang.
PROGRAM_FAULT, PROFILER_INDUCED = "program-fault", "profiler-induced"
TRIAGE_STATUSES = (OK, PROGRAM_FAULT, PROFILER_INDUCED, ERROR, INTERRUPTED)
EXIT_CODES.update({PROGRAM_FAULT: 8, PROFILER_INDUCED: 9})

#: ncu's prefix for a regular expression in --kernel-name and --section.
REGEX_PREFIX = "regex:"


class ReplayMode(str, Enum):
    KERNEL = "kernel"
    APPLICATION = "application"
    RANGE = "range"
    APP_RANGE = "app-range"

    def __str__(self) -> str:
        return self.value


#: Replay modes that profile ranges the program marks, not single kernels.
RANGE_MODES = (ReplayMode.RANGE, ReplayMode.APP_RANGE)
REPLAY_MODES = tuple(m.value for m in ReplayMode)

#: Which ranks of a multi-process job ncu wraps: every one (ncu around the
#: launcher), or one alone (ncu around one rank; see nsightwrap.watch.launchers).
ALL_RANKS, ONE_RANK = "all", "one"
RANK_MODES = (ALL_RANKS, ONE_RANK)
