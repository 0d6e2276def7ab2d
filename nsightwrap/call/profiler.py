"""Profiler: what many profile(fn) calls share, held by the caller.

A harness that profiles fifty functions, or a test session, makes one
Profiler and calls its `profile` method: ncu is located and probed once,
the hang store opened once, the GPU identified once, and every call time
measured is reused (in memory, and through the store by later processes).
`nsightwrap.profile(...)` makes a Profiler for its one call.

    with nsightwrap.Profiler(store="hangs.db") as p:
        for step in steps:
            print(p.profile(step, 4096, kernel="softmax", set="basic").summary())
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from typing import Any, Callable, Optional, Sequence

from nsightwrap.call.calibration import PLAIN, WARMUP, CallTime, CallTimes, plain_run
from nsightwrap.call.child import CallResult, CallSpec
from nsightwrap.call.result import ProfileResult
from nsightwrap.call.spec import CallFiles, make_spec, read_result, subject
from nsightwrap.call.triage import after_profile
from nsightwrap.diagnose.run import TriageOptions
from nsightwrap.errors import AttemptFailed, ChildError, NsightwrapError
from nsightwrap.fallback.ladder import Ladder
from nsightwrap.fallback.result import LadderResult
from nsightwrap.fallback.session import Session
from nsightwrap.fallback.walk import walk_ladder
from nsightwrap.ncu.allowance import Calibration, KernelAllowances
from nsightwrap.ncu.calltime import read_call_time
from nsightwrap.ncu.context import RunConfig, RunContext
from nsightwrap.ncu.options import KernelFilter, ProfileOptions
from nsightwrap.store.hangstore import HangStore
from nsightwrap.store.keys import Environment
from nsightwrap.store.opening import open_store

__all__ = ["Profiler"]

StoreArg = "HangStore | str | os.PathLike[str] | None"
#: How ProfileResult's allowance names the kernels it is for: a call's time bounds each of them alike.
EACH_KERNEL = "each kernel of fn"


@dataclass(frozen=True)
class _Plan:
    """How one call is calibrated: what was known before the walk, and what the walk runs with."""

    subject: str
    context: RunContext
    known: Optional[CallTime]  # before the walk (earlier call, store, or plain run)
    plain: Optional[CallResult]  # the plain run, when one was needed
    timed: bool  # the allowance follows fn's time (no explicit stall_timeout, calibrate=True)


def _call_calibration(time: CallTime) -> Calibration:
    """A call time as the calibration it is: one call bounds each of its kernels."""
    return Calibration.from_call(time.seconds, f"profile(fn) {time.source}")


class Profiler:
    """ncu (found and probed once), a hang store, this GPU, and the call times measured so far.

    run: how to run ncu, a RunConfig (its environment, or os.environ now, is
    what every child gets), or a RunContext already made (ncu found, maybe
    probed). store: a HangStore or a path (opened once, closed by close()),
    or None: no hang records and no stored calibrations.
    """

    def __init__(self, run: "RunConfig | RunContext | None" = None, *, store: StoreArg = None) -> None:
        context = run if isinstance(run, RunContext) else None
        if context is None:
            config = run or RunConfig()
            context = RunContext.create(config.replace(env=dict(os.environ if config.env is None else config.env)))
        self.context = context  # ncu located now: ToolNotFound before anything runs
        self._owns_store = isinstance(store, (str, os.PathLike))
        # A team's database that is down: the local file instead (self.store.notes says so).
        self.store: Optional[HangStore] = open_store(store) if self._owns_store else store  # type: ignore[arg-type]
        self._environment: Optional[Environment] = None
        self.call_times = CallTimes(self.store, lambda: self.environment)

    @property
    def environment(self) -> Environment:
        """This machine's GPU, driver and ncu version, asked once (nvidia-smi and the probe)."""
        if self._environment is None:
            self._environment = Environment.detect(ncu_version=self.context.info.version)
        return self._environment

    def close(self) -> None:
        """Close the hang store if this Profiler opened it."""
        if self._owns_store and self.store is not None:
            self.store.close()

    def __enter__(self) -> "Profiler":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<Profiler ncu={self.context.ncu!r} store={self.store!r} calls timed={len(self.call_times)}>"

    # The one definition of a call's options: nsightwrap.profile() takes this signature (call/api.py), so a
    # parameter added here is profile()'s too.
    def profile(
        self,
        fn: Callable[..., Any],
        *args: Any,
        kernel: Optional[str] = None,
        set: Optional[str] = None,  # noqa: A002 - ncu's own word
        sections: Optional[Sequence[str]] = None,
        metrics: Optional[Sequence[str]] = None,
        replay: str = "kernel",
        profile: "str | Ladder" = "default",
        warmup: int = 1,
        repeat: int = 1,
        stall_timeout: Optional[float] = None,
        timeout: Optional[float] = None,
        calibrate: bool = True,
        on_output: Optional[Callable[[str], None]] = None,
        triage: "bool | str | TriageOptions | None" = None,
        **kwargs: Any,
    ) -> ProfileResult:
        """Profile fn(*args, **kwargs)'s kernels under ncu, in a child process (see nsightwrap.profile)."""
        if warmup < 0 or repeat < 1:
            raise NsightwrapError("warmup must be >= 0 and repeat >= 1")
        chosen = KernelFilter.from_user(kernel) if kernel is not None else None  # '' is refused, not "every kernel"
        options = ProfileOptions(set=set, sections=tuple(sections or ()), metrics=tuple(metrics or ()),
                                 replay_mode=replay, kernel=chosen, profile_from_start=False)
        spec = make_spec(fn, args, kwargs, warmup, repeat)
        files = CallFiles.create()
        try:
            plan = self._plan(spec, files, calibrate and stall_timeout is None, timeout)
            session = Session.open(files.command(files.walk_result), plan.context, stall_timeout=stall_timeout,
                                   store=self.store, on_output=on_output,
                                   environment=self.environment if self.store is not None else None)
            walk, child = _walk(files, lambda: walk_ladder(session, options, profile))
            result = self._result(walk, plan, child, read_call_time(files.call_time), stall_timeout, options)
        finally:
            files.remove()
        return after_profile(result, fn, args, kwargs, triage, self.context.config, self.store)

    def _plan(self, spec: CallSpec, files: CallFiles, timed: bool, timeout: Optional[float]) -> _Plan:
        """Write the child's spec; find fn's call time, with a plain run only where nothing else can."""
        name = subject(spec)
        # The child reports its warm-up times, and the stall rule reads them (nsightwrap.ncu.calltime).
        spec.call_time_path = str(files.call_time) if timed and spec.warmup else None
        known = self.call_times.known(name) if timed else None
        plain = None
        if timed and known is None and not spec.warmup:
            # Without ncu and without a range (CallSpec.ranged): nothing profiles this run, and with no warm-up the
            # range would start CUDA on device 0 before fn's first CUDA call.
            files.write_spec(replace(spec, ranged=False))
            plain = plain_run(files, self.context.env, timeout)
            known = CallTime(max(plain.call_s), PLAIN)
            self.call_times.remember(name, known)
        files.write_spec(spec)
        # A known time calibrates the walk from its first attempt; the child's reported one raises it (calltime).
        calibration = _call_calibration(known) if known else self.context.config.calibration
        context = self.context.replace(timeout=timeout, call_time_file=spec.call_time_path, calibration=calibration)
        return _Plan(name, context, known, plain, timed)

    def _allowance(self, options: ProfileOptions, known: Optional[CallTime], measured: Optional[CallTime]) -> float:
        """Each kernel's stall allowance under the requested options, as the walk's stall rule gave it: the
        known time's calibrated one (else the stall timeout), raised by the warm-up's where that is larger."""
        config = self.context.config

        def of(time: CallTime) -> float:
            found = KernelAllowances.for_options(_call_calibration(time), options, config.allowance).kernel(EACH_KERNEL)
            return found.seconds if found is not None else config.stall_timeout  # a call bounds every kernel

        least = of(known) if known else config.stall_timeout
        return max(least, of(measured)) if measured else least

    def _result(self, walk: LadderResult, plan: _Plan, child: Optional[CallResult], warmup_s: Optional[float],
                stall_timeout: Optional[float], options: ProfileOptions) -> ProfileResult:
        """The result; a call time measured by the warm-up calls is remembered for the next calls."""
        measured = CallTime(warmup_s, WARMUP) if plan.timed and warmup_s is not None else None
        if measured is not None and plan.known is None:
            self.call_times.remember(plan.subject, measured)
        used = measured or plan.known
        allowance = stall_timeout if stall_timeout is not None else self._allowance(options, plan.known, measured)
        result = ProfileResult(walk, used.seconds if used else None, allowance,
                               calibration_source=used.source if used else "")
        result.range_api = child.range_api if child else ""  # the plain run marks no range
        valued = plan.plain or child  # the plain run ran fn to completion without ncu
        if valued is not None and valued.value_pickle is not None:
            result.value_pickle = valued.value_pickle
        else:
            result.value_error = (valued.value_error if valued is not None else None) or (
                "no value: no run of fn finished (every attempt under ncu was stopped or failed)")
        return result


def _walk(files: CallFiles, run: Callable[[], LadderResult]) -> tuple[LadderResult, Optional[CallResult]]:
    """The walk and what its child wrote (read once), with fn's own exception raised as a ChildError when
    the child reports one."""
    try:
        walk = run()
    except AttemptFailed as e:
        child = read_result(files.walk_result)
        if child is not None and not child.ok:
            raise ChildError("fn raised in the child process under ncu", child.error or "", [e.attempt]) from None
        raise
    child = read_result(files.walk_result)
    if walk.stopped and child is not None and not child.ok:
        raise ChildError(f"fn raised in the child process under ncu ({walk.stopped})", child.error or "",
                         walk.attempts)
    return walk, child
