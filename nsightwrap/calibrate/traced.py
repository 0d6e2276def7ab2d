"""Time a program without ncu with the CUPTI tracer, stopping as soon as it knows enough.

The program runs watched as a plain run does (the same watch() and total
timeout), with the tracer injected (CUDA_INJECTION64_PATH) and its trace in
a private temp folder (NSIGHTWRAP_TRACE_DIR) removed afterwards. A
TraceRule reads the trace at every turn of the watch loop: once the stalled
kernel has finished without ncu its time is known, so the tree is stopped
there; when it has run without ncu past the kernel limit, the program
hangs by itself (a failed Calibration, TIMEOUT, naming it and what else was
in flight). The live line hears the kernel running (listener.calibrating).
"""

from __future__ import annotations

import shutil
import time
from dataclasses import replace
from pathlib import Path
from typing import Callable, Mapping, Optional, Sequence

from nsightwrap.calibrate.cupti.trace import TRACE_DIR_VAR, InFlight, StalledKernel, TraceFollower
from nsightwrap.calibrate.verdict import program_verdict
from nsightwrap.ncu.allowance import Calibration
from nsightwrap.ncu.context import DEFAULT_CALIBRATION_LIMIT_S, RunConfig
from nsightwrap.ncu.listen import SILENT, CalibrationProgress, RunListener
from nsightwrap.paths import work_dir
from nsightwrap.status import ERROR, OK, TIMEOUT
from nsightwrap.watch.rules import RunState, TotalTimeout, Verdict, WatchRule
from nsightwrap.watch.run import RunOutcome, watch

__all__ = ["CUPTI", "INJECTION_VAR", "TraceRule", "measure_traced"]

CUPTI = "cupti"
INJECTION_VAR = "CUDA_INJECTION64_PATH"
#: How often the live line hears the calibration's progress (seconds).
PROGRESS_EVERY_S = 0.5
#: (calibration, "", None), or (None, why the tracer could not time the kernels, the run when it still
#: timed the whole program: its wall time bounds every kernel, as a plain run's would).
Traced = tuple[Optional[Calibration], str, Optional[RunOutcome]]


def _listing(launches: Sequence[InFlight], now: float, limit: int = 5) -> str:
    shown = [f'"{f.name}" ({f.seconds(now):.1f} s)' for f in launches[:limit]]
    more = f" and {len(launches) - limit} more" if len(launches) > limit else ""
    return ", ".join(shown) + more


class TraceRule(WatchRule):
    """Reads the trace at each turn; stops when the stalled kernel finished or ran past the kernel limit."""

    def __init__(self, follower: TraceFollower, stalled: Optional[StalledKernel], kernel_limit_s: float,
                 listener: RunListener = SILENT):
        if not kernel_limit_s > 0:
            raise ValueError("the calibration's kernel limit must be > 0 seconds")
        self.follower, self.stalled, self.kernel_limit_s = follower, stalled, kernel_limit_s
        self.listener = listener
        self.last_now: Optional[float] = None
        self.stopped_after: Optional[float] = None  # seconds into the run when the stalled kernel was seen done
        self.over_limit: Optional[InFlight] = None
        self._told_at = -float("inf")

    def __call__(self, state: RunState, now: float) -> Optional[Verdict]:
        self.follower.poll()
        self.last_now = now
        self.tell(state, now)
        stalled = self.stalled
        if stalled is None:
            return None
        if self.follower.finished(stalled):
            self.stopped_after = now - state.started_at
            return Verdict(OK, f'stopped early after "{stalled.name}" finished without ncu')
        late = [f for f in self.follower.running(stalled) if f.seconds(now) > self.kernel_limit_s]
        if late:
            self.over_limit = late[0]
            return Verdict(TIMEOUT, f'"{stalled.name}" did not finish without ncu within {self.kernel_limit_s:g} s')
        return None

    def progress(self, state: RunState, now: float) -> CalibrationProgress:
        running = tuple((f.name, f.seconds(now)) for f in self.follower.in_flight())
        return CalibrationProgress(CUPTI, now, now - state.started_at, running, self.follower.launch_count(),
                                   self.stalled.name if self.stalled else None)

    def tell(self, state: RunState, now: float) -> None:
        if now - self._told_at >= PROGRESS_EVERY_S:
            self._told_at = now
            self.listener.calibrating(self.progress(state, now))


def _untraced(follower: TraceFollower, outcome: RunOutcome) -> Traced:
    """The tracer saw nothing: why, and the run (it still bounds every kernel, unless it timed out)."""
    errors = follower.errors()
    why = ("the tracer could not set itself up: " + "; ".join(errors[:3]) if errors
           else "the tracer recorded nothing: the program made no CUDA call, or the driver did not load the tracer")
    return None, why, (None if outcome.verdict is not None else outcome)


def _judge(follower: TraceFollower, rule: TraceRule, outcome: RunOutcome, limit_s: float) -> Calibration:
    """The traced run's Calibration (follower read to its end)."""
    now = rule.last_now if rule.last_now is not None else outcome.state.started_at + outcome.elapsed_s
    flying = follower.in_flight()
    unfinished = tuple((f.name, round(f.seconds(now), 3)) for f in flying)
    also = f"; in flight: {_listing(flying, now)}" if flying else "; no kernel was in flight"
    if rule.over_limit is not None:
        k = rule.over_limit
        others = [f for f in flying if f is not k and (f.pid, f.corr) != (k.pid, k.corr)]
        also = f"; also in flight: {_listing(others, now)}" if others else "; nothing else was in flight"
        reason = (f'without ncu, kernel "{k.name}" did not finish within the calibration\'s kernel limit of '
                  f"{rule.kernel_limit_s:g} s (it ran {k.seconds(now):.1f} s){also}: the program hangs by itself "
                  "(or the kernel is slower than that); not an ncu hang")
        return replace(Calibration.failed(TIMEOUT, reason, CUPTI), unfinished=unfinished)
    if outcome.verdict is not None and rule.stopped_after is None:  # the total timeout
        cal = program_verdict(timed_out=True, returncode=None, elapsed_s=outcome.elapsed_s, limit_s=limit_s,
                              source=CUPTI)
        return replace(cal, reason=cal.reason + also, unfinished=unfinished)
    if rule.stopped_after is not None:
        note = f'stopped early after "{rule.stalled.name}" finished ({rule.stopped_after:.1f} s into the run)'
        cal = Calibration.from_kernels(follower.kernel_times(), source=CUPTI, marks_ranges=follower.ranges or None)
        return replace(cal, notes=(note,), unfinished=unfinished)
    if outcome.returncode:
        cal = program_verdict(timed_out=False, returncode=outcome.returncode, elapsed_s=outcome.elapsed_s,
                              limit_s=limit_s, source=CUPTI, log_tail=outcome.log[-2000:])
        return replace(cal, reason=cal.reason + also, unfinished=unfinished)
    cal = Calibration.from_kernels(follower.kernel_times(), program_s=outcome.elapsed_s, source=CUPTI,
                                   marks_ranges=follower.ranges)
    died = follower.died()
    notes = (f"process(es) {', '.join(map(str, died))} ended without the tracer's exit line",) if died else ()
    return replace(cal, notes=notes, unfinished=unfinished)


def _with_troubles(cal: Calibration, follower: TraceFollower) -> Calibration:
    """The tracer's own trouble once it traced (CUPTI dropped records: some kernels have no time) as notes."""
    troubles = tuple(f"the tracer: {t}" for t in follower.troubles())
    return replace(cal, notes=cal.notes + troubles) if troubles else cal


def measure_traced(command: Sequence[str], config: RunConfig, tracer: Path, limit_s: float,
                   on_output: Optional[Callable[[str], None]] = None, *, env: Mapping[str, str],
                   stalled: Optional[StalledKernel] = None, kernel_limit_s: float = DEFAULT_CALIBRATION_LIMIT_S,
                   listener: RunListener = SILENT, clock: Callable[[], float] = time.monotonic) -> Traced:
    """(calibration, "", None) from a traced run; (None, why, the run or None) when the tracer recorded
    nothing (a run that ended by itself still timed the program, so no plain run is needed)."""
    work = work_dir("trace")  # 0700, and removed by the next run or `cleanup` if this process is killed
    try:
        follower = TraceFollower(work, clock=clock)
        rule = TraceRule(follower, stalled, kernel_limit_s, listener)
        run_env = dict(env, **{INJECTION_VAR: str(tracer), TRACE_DIR_VAR: str(work)})
        started = clock()
        try:
            outcome = watch(list(command), config.stoppable(TotalTimeout(limit_s) | rule), policy=config.stop,
                            env=run_env, cwd=config.cwd, clock=clock, on_output=on_output, frontend_names=())
        finally:  # the live line drops the calibration whatever happened
            now = clock()
            listener.calibrating(CalibrationProgress(CUPTI, now, now - started, done=True))
        if outcome.stopped_by_interrupt:
            raise KeyboardInterrupt("calibration run interrupted; its process tree was stopped")
        if isinstance(outcome.exception, OSError):
            why = f"the program could not be started without ncu: {outcome.exception}"
            return Calibration.failed(ERROR, why, CUPTI), "", None
        if outcome.exception is not None:
            raise outcome.exception
        follower.drain()  # to its end: a long trace is more than one poll's read budget
        if not follower.traced:
            return _untraced(follower, outcome)
        return _with_troubles(_judge(follower, rule, outcome, limit_s), follower), "", None
    finally:
        shutil.rmtree(work, ignore_errors=True)
