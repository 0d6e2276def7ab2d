"""profile(fn, ...): profile a Python callable without risking the caller.

    df = nsightwrap.profile(fn, x, kernel="v22.*").df

fn runs in a child Python process launched under ncu (nsightwrap.call.child),
through the watched run and the fallback ladder; the caller only waits on
a pipe that the watchdog always closes.
"""

from __future__ import annotations

import functools
import os
import pickle
import shutil
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

import pandas as pd

from nsightwrap.call.child import CallResult, CallSpec
from nsightwrap.errors import AttemptFailed, ChildError, NotProfilable, NsightwrapError
from nsightwrap.fallback.ladder import Ladder
from nsightwrap.fallback.walk import LadderResult, walk_ladder
from nsightwrap.ncu.attempt import Attempt
from nsightwrap.ncu.context import RunConfig, RunContext
from nsightwrap.ncu.options import KernelFilter, ProfileOptions
from nsightwrap.ncu.progress import DEFAULT_STALL_TIMEOUT
from nsightwrap.store.hangstore import HangStore
from nsightwrap.watch.process import watch
from nsightwrap.watch.rules import TotalTimeout

__all__ = ["ChildError", "NotProfilable", "ProfileResult", "profile", "profiled"]

_NO_VALUE = object()


@dataclass
class ProfileResult:
    """What profile(fn) gives back."""

    walk: LadderResult
    calibration_s: Optional[float] = None
    stall_timeout: float = DEFAULT_STALL_TIMEOUT
    _value: Any = field(default=_NO_VALUE, repr=False)
    value_error: Optional[str] = None
    range_api: str = ""  # how the child marked the profiled range (for "nothing profiled" messages)

    @property
    def df(self) -> pd.DataFrame:
        """One row per profiled launch, with the rung that produced it (column `rung`)."""
        return self.walk.df

    @property
    def attempts(self) -> list[Attempt]:
        return self.walk.attempts

    @property
    def report_paths(self) -> list[str]:
        return self.walk.report_paths

    @property
    def hangs(self) -> list[tuple[str, str]]:
        """(kernel, rung) of every hang met or skipped as known."""
        return self.walk.hangs

    @property
    def hung(self) -> bool:
        return bool(self.hangs)

    @property
    def value(self) -> Any:
        """fn's return value (from the plain calibration call), when it pickles."""
        if self._value is _NO_VALUE:
            raise NsightwrapError(self.value_error or "no value: fn was not run to completion outside ncu "
                                                       "(calibrate=False?)")
        return self._value

    def summary(self) -> str:
        df = self.df
        if not len(df) and not self.hangs:
            return (f"no kernel was profiled in {len(self.attempts)} attempt(s): check kernel= (a regex on the "
                    f"function name); the measured calls were marked with {self.range_api or 'an unknown API'}")
        lines = [f"{len(df)} profiled launch(es) in {len(self.attempts)} attempt(s); "
                 f"stall timeout {self.stall_timeout:.1f} s"
                 + (f" (one plain call took {self.calibration_s:.3f} s)" if self.calibration_s is not None else "")]
        if len(df) and "function" in df:
            for (fn, rung), n in df.groupby(["function", "rung"], sort=False).size().items():
                lines.append(f"  {fn:<40} {rung:<20} x{n}")
        for k, rung in self.hangs:
            lines.append(f"  HUNG: {k} at rung {rung}")
        if self.walk.unprofiled:
            lines.append("  not profiled at any rung: " + ", ".join(self.walk.unprofiled))
        if self.walk.stopped:
            lines.append("  stopped early: " + self.walk.stopped)
        return "\n".join(lines)

    def __repr__(self) -> str:
        return (f"<ProfileResult rows={len(self.df)} attempts={len(self.attempts)} "
                f"hangs={self.hangs!r} reports={len(self.report_paths)}>")


def _reference(fn: Callable) -> tuple[str, str, Optional[str]]:
    """Module, qualified name and file by which the child can import fn."""
    target = fn
    while hasattr(target, "__nsightwrap_wrapped__"):
        target = target.__nsightwrap_wrapped__
    name = getattr(target, "__qualname__", None)
    module = getattr(target, "__module__", None)
    if not callable(fn) or name is None or module is None:
        raise NotProfilable(f"{fn!r} is not a function that a child process can import; "
                            "pass a function defined at module level")
    if name == "<lambda>" or "<locals>" in name:
        raise NotProfilable(f"{name} is a lambda or a function defined inside another function; the child "
                            "process imports fn by name, so define it at module level (a top-level def)")
    file = None
    if module == "__main__":
        main = sys.modules.get("__main__")
        file = getattr(main, "__file__", None)
        if not file:
            raise NotProfilable(f"{name} was defined in an interactive session; put it in a file "
                                "(a module or a script) so the child process can import it")
        file = os.path.abspath(file)
    return module, name, file


def _spec(fn, args, kwargs, warmup, repeat, result_path, mark_range=True) -> CallSpec:
    module, qualname, file = _reference(fn)
    try:
        payload = pickle.dumps((args, kwargs))
    except Exception as e:  # noqa: BLE001
        raise NotProfilable(f"the arguments of {qualname} cannot be pickled ({e}); pass plain data (arrays, "
                            "numbers, paths) and build GPU objects inside fn, or make them picklable") from None
    return CallSpec(module, qualname, file, payload, warmup, repeat, [p for p in sys.path if p], result_path,
                    mark_range)


def _read_result(path: Path) -> Optional[CallResult]:
    try:
        with open(path, "rb") as f:
            return pickle.load(f)
    except (OSError, EOFError, pickle.UnpicklingError):
        return None


def _calibrate(spec_path: Path, result_path: Path, env, timeout: Optional[float]) -> CallResult:
    """One plain run of the child, without ncu: fn's time, value and errors."""
    outcome = watch([sys.executable, "-m", "nsightwrap.call.child", str(spec_path)], TotalTimeout(timeout or 600.0),
                    env=env, frontend_names=())
    result = _read_result(result_path)
    if result is None:
        raise NsightwrapError(f"the calibration run of fn (without ncu) ended without a result "
                              f"(exit {outcome.returncode}{', timed out' if outcome.verdict else ''}). Its output:\n"
                              + outcome.log[-4000:])
    if not result.ok:
        raise ChildError("fn raised in its plain (calibration) run, before any profiling", result.error or "")
    return result


def profile(
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
    store: "HangStore | str | os.PathLike[str] | None" = None,
    config: Optional[RunConfig] = None,
    calibrate: bool = True,
    on_output: Optional[Callable[[str], None]] = None,
    **kwargs: Any,
) -> ProfileResult:
    """Profile fn(*args, **kwargs)'s kernels under ncu, in a child process.

    kernel: a regex on the kernel's function name (`regex:` prefix optional;
    `exact:NAME` for an exact name). profile: a ladder name (default, quick,
    deep), a YAML path or a Ladder. store: a HangStore, a path, or None.
    Warm-up calls run outside the profiled range; the `repeat` measured
    calls inside one. ncu is located and probed once for the whole call.
    """
    if warmup < 0 or repeat < 1:
        raise NsightwrapError("warmup must be >= 0 and repeat >= 1")
    config = config or RunConfig()
    options = ProfileOptions(set=set, sections=tuple(sections or ()), metrics=tuple(metrics or ()),
                             replay_mode=replay, kernel=KernelFilter.from_user(kernel) if kernel else None,
                             profile_from_start=False)
    env = dict(os.environ if config.env is None else config.env)
    context = RunContext.create(config.replace(timeout=timeout, env=env))
    context.info  # ncu found and answering before fn runs at all (ToolNotFound / ToolError otherwise)
    work = Path(tempfile.mkdtemp(prefix="nsightwrap-call-"))
    try:
        spec_path, result_path = _write_spec(fn, args, kwargs, warmup, repeat, work)
        calibration = _calibrate(spec_path, result_path, env, timeout) if calibrate else None
        call_s = max(calibration.call_s) if calibration and calibration.call_s else None
        allowance, floor = _stall_allowance(config.stall_timeout, call_s, stall_timeout)
        walk_result = work / "walk-result.pkl"
        command = [sys.executable, "-m", "nsightwrap.call.child", str(spec_path), str(walk_result)]
        walk = _walk(walk_result, lambda: walk_ladder(
            command, options, profile, context=context.replace(stall_timeout=allowance), store=_open_store(store),
            on_output=on_output, stall_timeout_floor=floor, stall_timeout=stall_timeout))
        return _result(walk, _read_result(walk_result), calibration, call_s, allowance)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _write_spec(fn: Callable[..., Any], args: tuple, kwargs: dict, warmup: int, repeat: int,
                work: Path) -> tuple[Path, Path]:
    """The child's instructions, written to `work`; (spec path, calibration result path)."""
    result_path = work / "result.pkl"
    spec_path = work / "spec.pkl"
    spec_path.write_bytes(pickle.dumps(_spec(fn, args, kwargs, warmup, repeat, str(result_path))))
    return spec_path, result_path


def _stall_allowance(base: float, call_s: Optional[float], explicit: Optional[float]
                     ) -> tuple[float, Optional[float]]:
    """(stall timeout, least stall timeout any rung may use) from one timed plain call."""
    if explicit is not None:
        return explicit, None
    if call_s is None:
        return base, None
    # A single replay pass replays at most a whole call: allow three of them, plus start-up.
    floor = 3 * call_s + 2.0
    return max(base, floor), floor


def _open_store(store: "HangStore | str | os.PathLike[str] | None") -> Optional[HangStore]:
    return HangStore(store) if isinstance(store, (str, os.PathLike)) else store


def _walk(walk_result: Path, run: Callable[[], LadderResult]) -> LadderResult:
    """The walk, with fn's own exception raised as a ChildError when the child reports one."""
    try:
        walk = run()
    except AttemptFailed as e:
        child = _read_result(walk_result)
        if child is not None and not child.ok:
            raise ChildError("fn raised in the child process under ncu", child.error or "", [e.attempt]) from None
        raise
    child = _read_result(walk_result)
    if walk.stopped and child is not None and not child.ok:
        raise ChildError(f"fn raised in the child process under ncu ({walk.stopped})", child.error or "",
                         walk.attempts)
    return walk


def _result(walk: LadderResult, child: Optional[CallResult], calibration: Optional[CallResult],
            call_s: Optional[float], stall_timeout: float) -> ProfileResult:
    result = ProfileResult(walk, call_s, stall_timeout)
    result.range_api = child.range_api if child is not None else (calibration.range_api if calibration else "")
    if calibration is not None:
        if calibration.value_pickle is not None:
            result._value = pickle.loads(calibration.value_pickle)
        else:
            result.value_error = calibration.value_error
    return result


def profiled(**options: Any) -> Callable[[Callable], Callable[..., ProfileResult]]:
    """Decorator form: calling the decorated function profiles it.

        @nsightwrap.profiled(kernel="softmax", set="basic")
        def step(n): ...

        result = step(4096)          # a ProfileResult
    """

    def wrap(fn: Callable) -> Callable[..., ProfileResult]:
        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> ProfileResult:
            return profile(fn, *args, **options, **kwargs)

        wrapper.__nsightwrap_wrapped__ = fn  # the child calls fn itself
        return wrapper

    return wrap
