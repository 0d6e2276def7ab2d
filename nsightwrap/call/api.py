"""profile(fn, ...): profile a Python callable without risking the caller.

    df = nsightwrap.profile(fn, x, kernel="v22.*").df

fn runs in a child Python process launched under ncu (nsightwrap.call.child),
through the watched run and the fallback ladder; the caller only waits on
a pipe that the watchdog always closes. Calls that should share ncu's
probe, the hang store and the call times go through one Profiler
(nsightwrap.call.profiler); profile() makes one for its call.
"""

from __future__ import annotations

import functools
import os
from typing import Any, Callable, Optional, Sequence

from nsightwrap.call.profiler import Profiler
from nsightwrap.call.result import ProfileResult
from nsightwrap.call.triage import after_profile
from nsightwrap.errors import NsightwrapError
from nsightwrap.fallback.ladder import Ladder
from nsightwrap.ncu.context import RunConfig
from nsightwrap.store.hangstore import HangStore
from nsightwrap.triage.run import TriageOptions

__all__ = ["profile", "profiled"]


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
    profiler: Optional[Profiler] = None,
    triage: "bool | str | TriageOptions | None" = None,
    **kwargs: Any,
) -> ProfileResult:
    """Profile fn(*args, **kwargs)'s kernels under ncu, in a child process.

    kernel: a regex on the kernel's function name (`regex:` prefix optional;
    `exact:NAME` for an exact name). profile: a ladder name (default, quick,
    deep), a YAML path or a Ladder. store: a HangStore, a path, or None.
    Warm-up calls run outside the profiled range, timed: their time
    calibrates the kernels of the `repeat` measured calls inside the range
    (Calibration.from_call; each kernel's allowance then grows with the
    call's time and the passes of the collection).
    With warmup=0 one plain call without ncu is timed instead, unless the
    time is known (an earlier call of the profiler, or the store);
    calibrate=False skips both. profiler: a Profiler shared with other
    calls (ncu probed once, the store and the call times reused); by
    default one is made from config and store for this call. triage: True triages fn
    (nsightwrap.triage: runs without ncu, compute-sanitizer) when its profile hung or failed, "always"
    after every profile, or a TriageOptions (when it hung or failed); the result's .triage holds it.
    """
    call = dict(kernel=kernel, set=set, sections=sections, metrics=metrics, replay=replay, profile=profile,
                warmup=warmup, repeat=repeat, stall_timeout=stall_timeout, timeout=timeout, calibrate=calibrate,
                on_output=on_output)
    if profiler is not None:
        if config is not None or store is not None:
            raise NsightwrapError("give config= and store= to the Profiler (Profiler(config, store=...)), "
                                  "not beside profiler=")
        result = profiler.profile(fn, *args, **call, **kwargs)
        return after_profile(result, fn, args, kwargs, triage, profiler.context.config, profiler.store)
    with Profiler(config, store=store) as own:
        result = own.profile(fn, *args, **call, **kwargs)
        return after_profile(result, fn, args, kwargs, triage, own.context.config, own.store)


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
