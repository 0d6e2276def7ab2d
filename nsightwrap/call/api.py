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
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

import pandas as pd

from nsightwrap.ncu.attempt import Attempt
from nsightwrap.call.child import CallResult, CallSpec
from nsightwrap.ncu.engine import RunConfig
from nsightwrap.errors import AttemptFailed, NsightwrapError
from nsightwrap.ncu.options import KernelFilter, ProfileOptions, ReplayMode
from nsightwrap.ncu.progress import DEFAULT_STALL_TIMEOUT
from nsightwrap.fallback.walk import LadderResult, walk_ladder


class ChildError(NsightwrapError):
    """fn raised in the child process; `.child_traceback` holds its traceback."""

    def __init__(self, message: str, child_traceback: str, attempts: Sequence[Attempt] = ()):
        super().__init__(f"{message}\n--- traceback in the child process ---\n{child_traceback}")
        self.child_traceback = child_traceback
        self.attempts = list(attempts)


class NotProfilable(NsightwrapError):
    """fn or its arguments cannot travel to a child process."""


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
    from nsightwrap.watch.rules import TotalTimeout
    from nsightwrap.watch.process import watch

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
    fn: Callable,
    *args: Any,
    kernel: Optional[str] = None,
    set: Optional[str] = None,  # noqa: A002 - ncu's own word
    sections: Optional[Sequence[str]] = None,
    metrics: Optional[Sequence[str]] = None,
    replay: str = "kernel",
    profile: str = "default",
    warmup: int = 1,
    repeat: int = 1,
    stall_timeout: Optional[float] = None,
    timeout: Optional[float] = None,
    store: Any = None,
    config: Optional[RunConfig] = None,
    calibrate: bool = True,
    on_output: Optional[Callable[[str], None]] = None,
    **kwargs: Any,
) -> ProfileResult:
    """Profile fn(*args, **kwargs)'s kernels under ncu, in a child process.

    kernel: a regex on the kernel's function name (`regex:` prefix optional;
    `exact:NAME` for an exact name). profile: a ladder name (default, quick,
    deep) or a YAML path. store: a HangStore, a path, or None. Warm-up calls
    run outside the profiled range; the `repeat` measured calls inside one.
    """
    if warmup < 0 or repeat < 1:
        raise NsightwrapError("warmup must be >= 0 and repeat >= 1")
    config = config or RunConfig()
    env = dict(os.environ if config.env is None else config.env)
    work = Path(tempfile.mkdtemp(prefix="nsightwrap-call-"))
    result_path = work / "result.pkl"
    spec = _spec(fn, args, kwargs, warmup, repeat, str(result_path))
    spec_path = work / "spec.pkl"
    spec_path.write_bytes(pickle.dumps(spec))

    calibration = None
    if calibrate:
        calibration = _calibrate(spec_path, result_path, env, timeout)
    call_s = max(calibration.call_s) if calibration and calibration.call_s else None
    explicit = stall_timeout
    floor = None
    if stall_timeout is None:
        base = config.stall_timeout
        # A single replay pass replays at most a whole call: allow three of them, plus start-up.
        stall_timeout = max(base, 3 * call_s + 2.0) if call_s is not None else base
        floor = 3 * call_s + 2.0 if call_s is not None else None

    kfilter = None
    if kernel:
        if kernel.startswith("exact:"):
            kfilter = KernelFilter(kernel[6:], False)
        else:
            kfilter = KernelFilter(kernel[6:] if kernel.startswith("regex:") else kernel, True)
    options = ProfileOptions(set=set, sections=tuple(sections or ()), metrics=tuple(metrics or ()),
                             replay_mode=ReplayMode(replay), kernel=kfilter, profile_from_start=False)
    cfg = config.replace(stall_timeout=stall_timeout, timeout=timeout, env=env)
    if isinstance(store, (str, Path)):
        from nsightwrap.store.hangstore import HangStore

        store = HangStore(store)
    walk_result = work / "walk-result.pkl"
    command = [sys.executable, "-m", "nsightwrap.call.child", str(spec_path), str(walk_result)]
    try:
        walk = walk_ladder(command, options, profile, cfg, store=store, on_output=on_output, stall_timeout_floor=floor,
                           stall_timeout=explicit)
    except AttemptFailed as e:
        child = _read_result(walk_result)
        if child is not None and not child.ok:
            raise ChildError("fn raised in the child process under ncu", child.error or "", [e.attempt]) from None
        raise
    child = _read_result(walk_result)
    if walk.stopped and child is not None and not child.ok:
        raise ChildError(f"fn raised in the child process under ncu ({walk.stopped})", child.error or "",
                         walk.attempts)
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
