"""`nsightwrap triage`: is it ncu or my kernel?

triage_command runs, each under the watchdog (tree stop, nothing left behind):
the program without ncu `runs` times (diagnose.plain: finished, failed, hung,
each failure's CUDA error and the kernel in flight, allowances calibrated by
the earlier runs' traced kernel times, else the store's calibration, else
the calibration limit); one run with CUDA_LAUNCH_BLOCKING=1 when a failure
was asynchronous; compute-sanitizer's tools (diagnose.sanitizer); optionally
the ncu walk (diagnose.walk); and ends with a one-line verdict
(diagnose.verdict). Every run is recorded in the hang store (store.triage)
with its hypothesis and conclusion, as it ends.
"""

from __future__ import annotations

import os
import time
import uuid
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Optional, Sequence

from nsightwrap.calibrate.cupti.build import find_tracer
from nsightwrap.diagnose import records
from nsightwrap.diagnose.plain import FAILED, FINISHED, PlainRun, run_plain
from nsightwrap.diagnose.result import TriageResult
from nsightwrap.diagnose.sanitizer import TOOLS, filter_name, find_sanitizer
from nsightwrap.diagnose.verdict import SanitizerView, WalkView, judge, sanitizer_outcome, short
from nsightwrap.errors import OptionsError, StoreError
from nsightwrap.ncu.allowance import Calibration
from nsightwrap.ncu.context import RunConfig
from nsightwrap.ncu.options import KernelFilter
from nsightwrap.status import INTERRUPTED, REGEX_PREFIX
from nsightwrap.store.hangstore import HangStore
from nsightwrap.store.keys import Environment
from nsightwrap.watch.locate import check_program

__all__ = ["TriageOptions", "triage_command"]

#: A sanitizer run's total limit without --timeout: this x a run's limit without a tool (run_limit). The
#: stall rule, scaled by each tool's slowdown, is the main guard; this bounds a run that keeps moving for ever.
SANITIZER_RUNS_OF_LIMIT = 20.0
#: A kernel's allowance without ncu: this floor plus ALLOWANCE_FACTOR x its calibrated time.
ALLOWANCE_FLOOR_S, ALLOWANCE_FACTOR = 5.0, 4.0
#: A run's total limit without --timeout: the calibration limit x this (a host-side hang has no kernel in
#: flight to judge), or, calibrated, RUN_FLOOR_S + RUN_FACTOR x the longest run seen.
UNCALIBRATED_RUNS_OF_LIMIT, RUN_FLOOR_S, RUN_FACTOR = 4.0, 30.0, 5.0
BLOCKING = {"CUDA_LAUNCH_BLOCKING": "1"}
#: Runs with CUDA_LAUNCH_BLOCKING=1 at most, until one fails (a failure seen in some runs only needs draws).
BLOCKING_TRIES = 3


@dataclass(frozen=True)
class TriageOptions:
    """What triage runs. runs: plain runs without ncu; tools: compute-sanitizer tools; kernel: the kernel
    filter (sanitizers, walk); walk: the ncu ladder walk too, with `set` as its requested settings;
    blocking: one run with CUDA_LAUNCH_BLOCKING=1 after an asynchronous failure; timeout: each run's total
    limit (default: from the calibration; a sanitizer run's, SANITIZER_RUNS_OF_LIMIT x that); sanitizer:
    compute-sanitizer's path."""

    runs: int = 5
    tools: tuple[str, ...] = TOOLS
    kernel: Optional[str] = None
    walk: bool = False
    set: str = "full"  # noqa: A003 - ncu's own word
    ladder: str = "default"
    blocking: bool = True
    timeout: Optional[float] = None
    sanitizer: Optional[str] = None

    def __post_init__(self) -> None:
        if not isinstance(self.runs, int) or self.runs < 1:
            raise OptionsError(f"runs={self.runs!r}: give how many runs without ncu to make (1 or more)")
        unknown = [t for t in self.tools if t not in TOOLS]
        if unknown:
            raise OptionsError(f"tools={','.join(unknown)}: not a compute-sanitizer tool; give some of "
                               f"{','.join(TOOLS)} (or none)")
        if self.kernel == "":
            raise OptionsError("kernel='' would filter nothing: give a kernel name, or leave it out")
        if self.timeout is not None and not self.timeout > 0:
            raise OptionsError(f"timeout={self.timeout!r}: give the seconds a run may take (> 0)")


@dataclass
class _Calibrated:
    """The kernel times known so far (store, then every traced run), and the longest run."""

    limit_s: float
    base: Optional[Calibration] = None
    times: dict[str, float] = field(default_factory=dict)
    longest_run_s: float = 0.0

    def allowance(self, name: str) -> float:
        t = self.calibration().kernel_time(name) if (self.times or self.base) else None
        return self.limit_s if t is None else ALLOWANCE_FLOOR_S + ALLOWANCE_FACTOR * t[0]

    def calibration(self) -> Optional[Calibration]:
        if not self.times:
            return self.base
        return Calibration.from_kernels(self.times, program_s=self.longest_run_s or None, source="cupti (triage)")

    def learn(self, run: PlainRun) -> None:
        for name, t in run.kernel_times:
            self.times[name] = max(t, self.times.get(name, 0.0))
        if run.outcome != "hung":
            self.longest_run_s = max(self.longest_run_s, run.elapsed_s)

    def run_limit(self, timeout: Optional[float]) -> float:
        if timeout is not None:
            return timeout
        known = self.longest_run_s or (self.base.program_s if self.base and self.base.program_s else 0.0)
        return RUN_FLOOR_S + RUN_FACTOR * known if known else UNCALIBRATED_RUNS_OF_LIMIT * self.limit_s


def _default_sanitize(*args: Any, **kwargs: Any) -> Any:
    from nsightwrap.diagnose.sanitizer import run_sanitizer

    return run_sanitizer(*args, **kwargs)


@dataclass
class _Triage:
    """One triage's state: what ran so far, and where it is recorded."""

    command: list[str]
    options: TriageOptions
    config: RunConfig
    store: Optional[HangStore]
    environment: Environment
    say: Callable[[str], None]
    on_output: Optional[Callable[[str], None]]
    clock: Callable[[], float]
    triage_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    runs: list[PlainRun] = field(default_factory=list)
    blocking: Optional[PlainRun] = None
    blocking_tries: list[PlainRun] = field(default_factory=list)
    sanitizers: list[tuple[SanitizerView, Any]] = field(default_factory=list)
    walk: Optional[tuple[WalkView, Any]] = None
    walk_s: float = 0.0
    notes: list[str] = field(default_factory=list)

    def record(self, rows: Sequence[Any]) -> None:
        records.save(self.store, rows, self.environment, self.notes)

    def plain(self, cal: _Calibrated, env: dict, tracer: Any, index: int, extra: dict) -> PlainRun:
        return run_plain(self.command, index, env=env, tracer=tracer, allowance=cal.allowance,
                         limit_s=cal.run_limit(self.options.timeout), stop=self.config.stop, cwd=self.config.cwd,
                         extra_env=extra, on_output=self.on_output, clock=self.clock)


def _plain_runs(t: _Triage, cal: _Calibrated, env: dict, tracer: Any) -> None:
    n = t.options.runs
    for i in range(1, n + 1):
        t.say(f"run {i}/{n} without ncu")
        run = t.plain(cal, env, tracer, i, {})
        cal.learn(run)
        t.runs.append(run)
        t.say(f"run {i}/{n}: {run.reason}")
        t.record([records.plain_record(t.triage_id, t.command, run, n)])
    _keep_calibration(t, cal)
    asynchronous = [r for r in t.runs if r.outcome == FAILED and r.error is not None and r.error.asynchronous]
    if t.options.blocking and asynchronous and env.get("CUDA_LAUNCH_BLOCKING") != "1":
        t.say(f"runs with CUDA_LAUNCH_BLOCKING=1 ({asynchronous[0].error} is reported asynchronously)")
        for i in range(BLOCKING_TRIES):  # an intermittent failure may need more than one draw to show
            t.blocking = t.plain(cal, env, tracer, n + 1 + i, BLOCKING)
            t.blocking_tries.append(t.blocking)
            t.say(f"CUDA_LAUNCH_BLOCKING=1: {t.blocking.reason}")
            t.record([records.blocking_record(t.triage_id, t.command, t.blocking, asynchronous[0])])
            if t.blocking.outcome == FAILED or len(asynchronous) == len(t.runs):
                break


def _keep_calibration(t: _Triage, cal: _Calibrated) -> None:
    """The kernel times the traced runs measured go to the store, as a calibration of this command: the
    walk (--walk, or a later `run --profile`) is calibrated from its first attempt."""
    calibration = cal.calibration()
    if t.store is None or not cal.times or calibration is None or not any(r.outcome == FINISHED for r in t.runs):
        return
    try:
        t.store.record_calibration(calibration, t.command, t.environment)
    except StoreError as e:
        t.notes.append(f"the runs' kernel times were not kept in the hang store: {str(e).splitlines()[0]}")


def _kernel_in_question(t: _Triage) -> Optional[str]:
    if t.options.kernel:
        return t.options.kernel
    if t.blocking is not None and t.blocking.kernel:
        return short(t.blocking.kernel)
    named = next((short(r.kernel) for r in t.runs if r.kernel), None)
    if named is None:  # no run named one: the first sanitizer findings' kernel
        named = next((short(v.kernel) for v, _ in t.sanitizers if v.kernel and v.kernel != "None"), None)
    return named


def _kernel_filter(kernel: str) -> KernelFilter:
    """--kernel as run_sanitizer reads it: exact, unless a regular expression ("regex:...")."""
    return KernelFilter.from_user(kernel, exact=not kernel.startswith(REGEX_PREFIX))


def _check_tools(options: TriageOptions, env: dict, sanitize: Callable[..., Any]) -> None:
    """Before any run, when tools are asked: a kernel filter compute-sanitizer cannot express
    (OptionsError) and a missing compute-sanitizer (ToolNotFound, only for the default `sanitize`: one
    given brings its own) are said now, not after every run without ncu."""
    if not options.tools:
        return
    if options.kernel:
        filter_name(_kernel_filter(options.kernel))
    if sanitize is _default_sanitize:
        find_sanitizer(options.sanitizer, env)


def _sanitize(t: _Triage, cal: _Calibrated, sanitize: Callable[..., Any]) -> None:
    version = None  # compute-sanitizer's, asked by the first run only
    limit_s = t.options.timeout or SANITIZER_RUNS_OF_LIMIT * cal.run_limit(None)
    for tool in t.options.tools:
        t.say(f"compute-sanitizer --tool {tool}")
        run = sanitize(t.command, tool, kernel_filter=t.options.kernel, calibration=cal.calibration(),
                       limit_s=limit_s, sanitizer=t.options.sanitizer, env=t.config.env,
                       cwd=t.config.cwd, stop=t.config.stop, on_output=t.on_output, clock=t.clock, version=version)
        if getattr(run, "status", None) == INTERRUPTED:  # Ctrl-C reached it: triage stops, recording nothing more
            raise KeyboardInterrupt(f"compute-sanitizer --tool {tool} interrupted; its process tree was stopped")
        version = getattr(run, "version", None) or version
        view = sanitizer_outcome(run)
        t.sanitizers.append((view, run))
        t.say(f"{tool}: {view.outcome}" + (f", {view.count} finding(s)" if view.count else ""))
        t.record([records.sanitizer_record(t.triage_id, t.command, view, run, t.options.kernel)])


def _walk(t: _Triage, walker: Callable[..., Any]) -> None:
    kernel = _kernel_in_question(t)
    t.say("ncu walk (the fallback ladder)" + (f" for {kernel}" if kernel else ""))
    started = t.clock()
    view, result = walker(t.command, kernel, set_name=t.options.set, ladder=t.options.ladder,
                          config=t.config, store=t.store, on_output=t.on_output)
    t.walk = (view, result)
    t.walk_s = t.clock() - started  # the walk is one run of triage's: its own set-up (ncu's probe) included
    t.record([records.walk_record(t.triage_id, t.command, view, result, t.options)])


def _default_walker(*args: Any, **kwargs: Any) -> Any:
    from nsightwrap.diagnose.walk import run_walk  # pandas and the report readers: only for --walk

    return run_walk(*args, **kwargs)


def triage_command(command: Sequence[str], options: Optional[TriageOptions] = None,
                   config: Optional[RunConfig] = None, *, store: Optional[HangStore] = None,
                   environment: Optional[Environment] = None, say: Callable[[str], None] = lambda _: None,
                   on_output: Optional[Callable[[str], None]] = None,
                   sanitize: Callable[..., Any] = _default_sanitize, walker: Callable[..., Any] = _default_walker,
                   clock: Callable[[], float] = time.monotonic) -> TriageResult:
    """Triage `command` (see the module); an interrupt ends it with status interrupted, its tree stopped."""
    options, config = options or TriageOptions(), config or RunConfig()
    env = dict(os.environ if config.env is None else config.env)
    check_program(command, env, config.cwd)
    _check_tools(options, env, sanitize)
    started = clock()
    if environment is None:
        environment = Environment.detect() if store is not None else Environment()
    t = _Triage(list(command), options, config, store, environment, say, on_output, clock)
    cal = _Calibrated(config.calibration_limit, store.calibration_for(command, environment) if store else None)
    tracer = find_tracer(env)
    if tracer.path is None:
        t.notes.append(f"no CUPTI tracer ({tracer.reason}): runs without ncu name no kernel, and a hang is "
                       "called only at a run's total limit")
    status = None
    try:
        _plain_runs(t, cal, env, tracer.path)
        _sanitize(t, cal, sanitize)
        if options.walk:
            _walk(t, walker)
    except KeyboardInterrupt:
        status = INTERRUPTED
    return _result(t, started, status)


def _result(t: _Triage, started: float, interrupted: Optional[str]) -> TriageResult:
    views = [v for v, _ in t.sanitizers]
    status, line = judge(t.runs, views, t.walk[0] if t.walk else None, t.blocking)
    if interrupted:
        status, line = interrupted, f"interrupted after {len(t.runs)} run(s) without ncu; so far: {line}"
    result = TriageResult(t.command, status, line, _kernel_in_question(t), tuple(t.runs), t.blocking,
                          tuple(t.sanitizers), t.walk, t.clock() - started, t.triage_id, tuple(t.notes), t.walk_s,
                          tuple(t.blocking_tries))
    if t.store is not None and not interrupted:
        t.record([records.verdict_record(t.triage_id, t.command, result)])
    return replace(result, notes=tuple(t.notes))
