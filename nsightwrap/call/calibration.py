"""How long one call of fn takes, found once, where it is cheapest: a calibration of its kernels.

The time bounds each kernel of the call (Calibration.from_call), and each
kernel's stall allowance follows from it by the one rule of
nsightwrap.ncu.allowance, scaled for the passes of the collection.

In order:
1. an earlier call of the same Profiler measured it (memory);
2. the hang store holds a calibration for this callable and arguments on
   this GPU model and driver;
3. the child's warm-up calls under ncu, timed outside the profiled range
   and reported to the watchdog before the range starts
   (nsightwrap.ncu.calltime): costs nothing, the calls are made anyway;
4. a plain run of the child without ncu, only where there is no warm-up
   call to time: a whole extra process that imports the user's framework
   again (4.4 s for PyTorch on the GPU machine, issue 15).
What is measured (3, 4) is remembered in memory and in the store.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

from nsightwrap.call.child import CallResult
from nsightwrap.call.spec import CallFiles, read_result
from nsightwrap.errors import ChildError, NsightwrapError
from nsightwrap.store.hangstore import HangStore
from nsightwrap.store.keys import Environment
from nsightwrap.watch.rules import TotalTimeout
from nsightwrap.watch.run import watch

__all__ = ["EARLIER", "PLAIN", "STORED", "WARMUP", "CallTime", "CallTimes", "plain_run"]

#: Where a call time came from (ProfileResult.calibration_source, the store's `source`).
WARMUP, PLAIN, STORED, EARLIER = "warm-up", "plain run", "hang store", "earlier call"


@dataclass(frozen=True)
class CallTime:
    """One call's wall time without profiling, and where it came from."""

    seconds: float
    source: str


class CallTimes:
    """The call times known to one Profiler: in memory, and in its hang store when it has one."""

    def __init__(self, store: Optional[HangStore], environment: Callable[[], Environment]) -> None:
        self._store = store
        self._environment = environment  # asked only when the store is used
        self._known: dict[str, CallTime] = {}

    def __len__(self) -> int:
        return len(self._known)

    def known(self, subject: str) -> Optional[CallTime]:
        """The time of one call of `subject` measured before, or None."""
        if subject in self._known:
            return CallTime(self._known[subject].seconds, EARLIER)
        if self._store is None:
            return None
        found = self._store.call_time(subject, self._environment())
        if found is None:
            return None
        self._known[subject] = CallTime(found.seconds, STORED)
        return self._known[subject]

    def remember(self, subject: str, time: CallTime) -> None:
        """Keep a measured time for later calls, and in the store."""
        self._known[subject] = time
        if self._store is not None:
            self._store.record_call_time(subject, time.seconds, self._environment(), source=time.source)


def plain_run(files: CallFiles, env, timeout: Optional[float]) -> CallResult:
    """One run of the child without ncu: fn's time, value and errors."""
    command = files.command(files.plain_result)
    outcome = watch(command, TotalTimeout(timeout or 600.0), env=env, frontend_names=())
    result = read_result(files.plain_result)
    if result is None:
        raise NsightwrapError(f"the calibration run of fn (without ncu) ended without a result "
                              f"(exit {outcome.returncode}{', timed out' if outcome.verdict else ''}). Its output:\n"
                              + outcome.log[-4000:])
    if not result.ok:
        raise ChildError("fn raised in its plain (calibration) run, before any profiling", result.error or "")
    return result
