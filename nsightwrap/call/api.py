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
import inspect
import os
import typing
from typing import Any, Callable, Concatenate, Optional, ParamSpec

from nsightwrap.call.profiler import Profiler
from nsightwrap.call.result import ProfileResult
from nsightwrap.errors import NsightwrapError
from nsightwrap.ncu.context import RunConfig
from nsightwrap.store.hangstore import HangStore

__all__ = ["profile", "profiled"]

P = ParamSpec("P")


def _hints(fn: Callable[..., Any]) -> dict[str, Any]:
    """fn's annotations resolved; as written where one names a type imported for type checkers only."""
    try:
        return typing.get_type_hints(fn)
    except NameError:
        return dict(fn.__annotations__)


def _options_of(method: Callable[Concatenate[Any, P], ProfileResult]) -> Callable[
        [Callable[..., ProfileResult]], Callable[P, ProfileResult]]:
    """The front door's signature made from `method`'s (Profiler.profile: the one definition of a call's
    options, their defaults and types), with the door's own keyword-only arguments (the ones that choose the
    Profiler) put before **kwargs. help(), inspect.signature and typing.get_type_hints read the result; type
    checkers and IDEs read `method`'s parameters through P."""

    def build(door: Callable[..., ProfileResult]) -> Callable[P, ProfileResult]:
        hints = {**_hints(method), **_hints(door)}
        *options, rest = list(inspect.signature(method).parameters.values())[1:]  # without self
        if rest.kind is not inspect.Parameter.VAR_KEYWORD:
            raise TypeError(f"{method.__qualname__} must end with **kwargs (fn's keyword arguments)")
        own = [p for p in inspect.signature(door).parameters.values() if p.kind is inspect.Parameter.KEYWORD_ONLY]
        params = [p.replace(annotation=hints.get(p.name, p.annotation)) for p in (*options, *own, rest)]
        door.__signature__ = inspect.Signature(params, return_annotation=hints["return"])  # type: ignore[attr-defined]
        door.__annotations__ = {p.name: p.annotation for p in params} | {"return": hints["return"]}
        return door  # type: ignore[return-value]

    return build


@_options_of(Profiler.profile)
def profile(
    fn: Callable[..., Any],
    *args: Any,
    store: "HangStore | str | os.PathLike[str] | None" = None,
    config: Optional[RunConfig] = None,
    profiler: Optional[Profiler] = None,
    **options: Any,
) -> ProfileResult:
    """Profile fn(*args, **kwargs)'s kernels under ncu, in a child process.

    Takes every call option of Profiler.profile (their one definition; the
    signature above is built from it), fn's own keyword arguments, and three
    arguments of its own that choose the Profiler: store, config, profiler.

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
    if profiler is not None:
        if config is not None or store is not None:
            raise NsightwrapError("give config= and store= to the Profiler (Profiler(config, store=...)), "
                                  "not beside profiler=")
        return profiler.profile(fn, *args, **options)
    with Profiler(config, store=store) as own:
        return own.profile(fn, *args, **options)


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
