"""profile() and Profiler.profile share one signature definition (Profiler.profile's)."""

from __future__ import annotations

import inspect
import typing
from typing import Any, Callable, Optional

import pytest

import nsightwrap
from nsightwrap.call.api import _options_of, profile
from nsightwrap.call.profiler import Profiler
from nsightwrap.call.result import ProfileResult
from nsightwrap.errors import NsightwrapError

#: profile()'s own arguments: they choose the Profiler, so Profiler.profile has no use for them.
FRONT_DOOR = ("store", "config", "profiler")
#: Every call option a user may pass today (tests and examples pin them).
CALL_OPTIONS = ("kernel", "set", "sections", "metrics", "replay", "profile", "warmup", "repeat", "stall_timeout",
                "timeout", "calibrate", "on_output", "triage")


def _params(fn: Callable) -> list[inspect.Parameter]:
    return [p for p in inspect.signature(fn).parameters.values() if p.name != "self"]


def _hints(fn: Callable) -> dict[str, Any]:
    return typing.get_type_hints(fn)


def test_profile_takes_profiler_profile_signature_plus_the_front_door_arguments():
    method = _params(Profiler.profile)
    door = [p for p in _params(profile) if p.name not in FRONT_DOOR]
    assert [(p.name, p.kind, p.default) for p in door] == [(p.name, p.kind, p.default) for p in method]
    assert {p.name: _hints(profile)[p.name] for p in door} == {p.name: _hints(Profiler.profile)[p.name] for p in method}
    assert _hints(profile)["return"] is _hints(Profiler.profile)["return"] is ProfileResult


def test_the_front_door_arguments_are_keyword_only_before_fn_kwargs():
    params = _params(profile)
    own = [p for p in params if p.name in FRONT_DOOR]
    assert [p.name for p in own] == list(FRONT_DOOR)
    assert all(p.kind is inspect.Parameter.KEYWORD_ONLY and p.default is None for p in own)
    assert params[-1].kind is inspect.Parameter.VAR_KEYWORD  # fn's own keyword arguments last
    assert [p.name for p in params[:2]] == ["fn", "args"]


def test_every_call_option_is_in_the_one_definition():
    names = [p.name for p in _params(Profiler.profile)]
    assert all(name in names for name in CALL_OPTIONS)
    assert nsightwrap.profile is profile


def test_a_parameter_added_to_the_method_appears_in_the_front_door():
    """The signature stays shared: the door is built from the method, not written twice."""

    class Other:
        def profile(self, fn: Callable[..., Any], *args: Any, kernel: Optional[str] = None,
                    triage: bool = False, **kwargs: Any) -> ProfileResult:
            raise AssertionError

    @_options_of(Other.profile)
    def door(fn: Callable[..., Any], *args: Any, store: Optional[str] = None, **options: Any) -> ProfileResult:
        raise AssertionError

    assert list(inspect.signature(door).parameters) == ["fn", "args", "kernel", "triage", "store", "kwargs"]
    assert inspect.signature(door).parameters["triage"].default is False
    assert typing.get_type_hints(door)["triage"] is bool


def test_a_type_known_to_type_checkers_only_stays_as_written():
    class Other:
        def profile(self, fn: Callable[..., Any], *args: Any, triage: NotImportedHere | None = None,  # noqa: F821
                    **kwargs: Any) -> ProfileResult:
            raise AssertionError

    @_options_of(Other.profile)
    def door(fn: Callable[..., Any], *args: Any, **options: Any) -> ProfileResult:
        raise AssertionError

    assert inspect.signature(door).parameters["triage"].annotation == "NotImportedHere | None"


def test_a_method_without_kwargs_is_refused():
    def method(self, fn: Callable[..., Any], *, kernel: Optional[str] = None) -> ProfileResult:
        raise AssertionError

    with pytest.raises(TypeError, match="kwargs"):
        _options_of(method)(lambda fn, **options: None)


class _Recording:
    """A Profiler stand-in: records what profile() hands to its profile method."""

    def __init__(self) -> None:
        self.calls: list[tuple[tuple, dict]] = []

    def profile(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        self.calls.append((args, kwargs))
        return "result"


def test_every_keyword_reaches_the_profiler_with_fn_kwargs():
    shared = _Recording()
    options = dict(kernel="softmax", set="basic", sections=["A"], metrics=["m"], replay="application",
                   profile="quick", warmup=0, repeat=2, stall_timeout=3.0, timeout=9.0, calibrate=False,
                   on_output=print, triage="always")
    assert profile(len, 1, 2, profiler=shared, tag="fn's own", **options) == "result"
    assert shared.calls == [((1, 2), {**options, "tag": "fn's own"})]


def test_config_or_store_beside_profiler_is_refused():
    with pytest.raises(NsightwrapError, match="give config= and store= to the Profiler"):
        profile(len, profiler=_Recording(), store="hangs.db")
