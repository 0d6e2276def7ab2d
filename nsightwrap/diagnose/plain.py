"""One run of the program without ncu, watched: finished, failed or hung by itself, and which kernel.

The run goes through the same watch() as every other (tree stop, guard,
nothing left behind), with the CUPTI tracer injected when there is one
(nsightwrap.calibrate.cupti): its trace names the kernels, times them (the
next run's allowances), and says which launch was in flight when the
program failed or stopped moving. A run is *hung* when no kernel has
finished and none has been launched for longer than the allowance of the
kernels in flight (calibrated: `allowance(name)`; a kernel not timed yet
gets the calibration limit), or when it outlasts its total limit. A failed
run's CUDA error is parsed from its output (diagnose.cudaerrors).
"""

from __future__ import annotations

import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Optional, Sequence

from nsightwrap.calibrate.cupti.trace import TRACE_DIR_VAR, InFlight, TraceFollower
from nsightwrap.calibrate.traced import INJECTION_VAR
from nsightwrap.diagnose.cudaerrors import CudaError, find_cuda_error
from nsightwrap.errors import ProgramNotRunnable
from nsightwrap.paths import work_dir
from nsightwrap.status import HANG, TIMEOUT
from nsightwrap.watch.rules import RunState, TotalTimeout, Verdict, WatchRule
from nsightwrap.watch.run import watch
from nsightwrap.watch.tree import StopPolicy

__all__ = ["FAILED", "FINISHED", "HUNG", "PlainRun", "StillRule", "run_plain"]

#: What one run without ncu did (PlainRun.outcome).
FINISHED, FAILED, HUNG = "finished", "failed", "hung"
#: Output kept per run for the error and the record (its last characters).
OUTPUT_KEPT = 8000


@dataclass(frozen=True)
class PlainRun:
    """One run without ncu (or under CUDA_LAUNCH_BLOCKING=1: `env` says what was added)."""

    index: int
    outcome: str
    exit_code: Optional[int]
    elapsed_s: float
    reason: str
    error: Optional[CudaError] = None
    kernel: Optional[str] = None  # the launch in flight when it failed or hung (the tracer's); under
    # CUDA_LAUNCH_BLOCKING=1 a failed run's last launch (each launch waits for its kernel: the last one failed)
    in_flight: tuple[tuple[str, float], ...] = ()
    kernel_times: tuple[tuple[str, float], ...] = ()
    traced: bool = False
    env: tuple[tuple[str, str], ...] = ()
    output_tail: str = ""
    wall_s: float = 0.0  # the whole run as the caller saw it: start, watch, stop, trace read
    last_launch: Optional[str] = None  # the kernel launched last: where an asynchronous fault most likely was

    def to_dict(self) -> dict[str, Any]:
        return {"index": self.index, "outcome": self.outcome, "exit_code": self.exit_code,
                "elapsed_s": round(self.elapsed_s, 3), "reason": self.reason,
                "error": self.error.to_dict() if self.error else None, "kernel": self.kernel,
                "last_launch": self.last_launch,
                "in_flight": [list(f) for f in self.in_flight], "traced": self.traced, "env": dict(self.env),
                "output_tail": self.output_tail[-2000:]}


class StillRule(WatchRule):
    """Hung when the trace has not moved (no launch, no finished kernel) for longer than the largest
    allowance of the launches in flight. A finished kernel's record may be held back while the next one
    runs (FACTS.md), so the trace's stillness, not one launch's age, is judged."""

    def __init__(self, follower: TraceFollower, allowance: Callable[[str], float]):
        self.follower, self.allowance = follower, allowance
        self._seen: Optional[tuple[int, int]] = None
        self._since = 0.0
        self.stuck: tuple[InFlight, ...] = ()

    def __call__(self, state: RunState, now: float) -> Optional[Verdict]:
        self.follower.poll()
        flying = self.follower.in_flight()
        seen = (self.follower.launch_count(), len(flying) + sum(f.corr for f in flying))
        if seen != self._seen:
            self._seen, self._since = seen, now
            return None
        if not flying:
            return None
        limit = max(self.allowance(f.name) for f in flying)
        if now - self._since > limit:
            self.stuck = tuple(flying)
            names = ", ".join(sorted({f'"{f.name}"' for f in flying})[:3])
            return Verdict(HANG, f"without ncu, {names} in flight and nothing finished for "
                                 f"{now - self._since:.1f} s (allowance {limit:.1f} s): the program hangs by itself")
        return None


@dataclass
class _Output:
    parts: list[str] = field(default_factory=list)
    size: int = 0

    def __call__(self, text: str) -> None:
        self.parts.append(str(text))
        self.size += len(text)
        while self.size > 4 * OUTPUT_KEPT and len(self.parts) > 1:
            self.size -= len(self.parts.pop(0))

    def text(self) -> str:
        return "".join(self.parts)[-OUTPUT_KEPT:]


def _culprit(flying: Sequence[InFlight]) -> Optional[str]:
    """The launch in flight that stopped the program: the oldest (later ones wait behind it)."""
    return flying[0].name if flying else None


def _outcome(timed_out: bool, hung: bool, returncode: Optional[int]) -> str:
    if hung or timed_out:
        return HUNG
    return FAILED if returncode else FINISHED


def _reason(outcome: str, verdict: Optional[Verdict], returncode: Optional[int], error: Optional[CudaError],
            kernel: Optional[str]) -> str:
    if outcome == HUNG:
        return verdict.reason if verdict else "hung"
    if outcome == FINISHED:
        return "finished without ncu"
    where = f' in "{kernel}"' if kernel else ""
    what = f"{error}" if error else "no CUDA error in its output"
    return f"failed without ncu (exit code {returncode}): {what}{where}"


def _not_runnable(command: Sequence[str], e: OSError) -> ProgramNotRunnable:
    """The system refused to start the program (Exec format error, say): said with what to do."""
    program = str(command[0]) if command else ""
    return ProgramNotRunnable(program, f"the system could not execute it ({e.strerror or e})",
                              "A script needs a #! line or its interpreter (e.g. `-- python3 "
                              f"{program}`); a binary must be built for this machine (check it with `file {program}`)")


def run_plain(command: Sequence[str], index: int, *, env: Mapping[str, str], tracer: Optional[Path],
              allowance: Callable[[str], float], limit_s: float, stop: StopPolicy = StopPolicy(),
              cwd: Optional[str] = None, extra_env: Mapping[str, str] = {},  # noqa: B006 - read only
              on_output: Optional[Callable[[str], None]] = None,
              clock: Callable[[], float] = time.monotonic) -> PlainRun:
    """One watched run of `command` without ncu; KeyboardInterrupt once its tree is stopped when interrupted."""
    started = clock()
    work = work_dir("triage") if tracer is not None else None
    try:
        run_env = dict(env, **extra_env)
        rules: WatchRule = TotalTimeout(limit_s)
        follower = rule = None
        if work is not None:
            run_env.update({INJECTION_VAR: str(tracer), TRACE_DIR_VAR: str(work)})
            follower = TraceFollower(work, clock=clock)
            rule = StillRule(follower, allowance)
            rules = rules | rule
        out = _Output()

        def both(text: str) -> None:
            out(text)
            if on_output is not None:
                on_output(text)

        outcome = watch(list(command), rules, policy=stop, env=run_env, cwd=cwd, clock=clock, on_output=both,
                        frontend_names=())
        if outcome.interrupted:
            raise KeyboardInterrupt("triage run interrupted; its process tree was stopped")
        if isinstance(outcome.exception, OSError):
            raise _not_runnable(command, outcome.exception) from outcome.exception
        if outcome.exception is not None:
            raise outcome.exception
        flying: Sequence[InFlight] = ()
        times: tuple[tuple[str, float], ...] = ()
        if follower is not None:
            follower.drain()
            flying = rule.stuck or follower.in_flight()
            times = tuple(sorted(follower.kernel_times().items()))
        verdict = outcome.verdict
        kind = _outcome(verdict is not None and verdict.status == TIMEOUT,
                        verdict is not None and verdict.status == HANG, outcome.returncode)
        text = out.text()
        error = find_cuda_error(text) if kind == FAILED else None
        kernel = _culprit(flying) if kind != FINISHED else None
        last = follower.last_launch if follower is not None and kind == FAILED else None
        if kernel is None and last is not None and run_env.get("CUDA_LAUNCH_BLOCKING") == "1":
            kernel = last  # a faulting kernel's record still comes (2x H200): nothing is left in flight
        now = clock()
        return PlainRun(index, kind, outcome.returncode, outcome.elapsed_s,
                        _reason(kind, verdict, outcome.returncode, error, kernel), error, kernel,
                        tuple((f.name, round(f.seconds(now), 3)) for f in flying) if kind != FINISHED else (),
                        times, bool(follower is not None and follower.traced), tuple(sorted(extra_env.items())),
                        text, now - started, last)
    finally:
        if work is not None:
            shutil.rmtree(work, ignore_errors=True)
