"""pytest fixtures `nsight_profile` and `nsight_profiler`: profile a callable inside a test;
`nsightwrap_triage`: triage one (nsightwrap.triage: is it ncu or my kernel?).

Registered through the `pytest11` entry point, so any project with
nsightwrap installed can write

    def test_softmax_profile(nsight_profile):
        result = nsight_profile(softmax_step, 4096, kernel="softmax", set="basic")
        assert not result.hung

Every test of the session shares one Profiler (`nsight_profiler`): ncu is
located and probed once, and each callable's call time is measured once.
The fixtures skip the test cleanly where there is no ncu or no GPU
(nvidia-smi lists none), whatever NSIGHTWRAP_NCU says. pandas loads only
when a fixture is used.
"""

from __future__ import annotations

from typing import Any, Callable, Iterator

import pytest

from nsightwrap.errors import ToolNotFound
from nsightwrap.ncu.locate import ENV_NCU, find_ncu
from nsightwrap.watch import gpu


def _skip_unless_profilable() -> None:
    try:
        find_ncu()
    except ToolNotFound as e:
        pytest.skip("nsightwrap: " + str(e).splitlines()[0] + f" (set {ENV_NCU} or install Nsight Compute)")
    if not gpu.gpu_count():
        # Even with NSIGHTWRAP_NCU set: an ncu without a GPU can profile nothing.
        pytest.skip("nsightwrap: no NVIDIA GPU here (nvidia-smi not found or lists none)")


@pytest.fixture(scope="session")
def nsight_profiler() -> Iterator[Any]:
    """One nsightwrap.Profiler for the test session, or a skip when nothing could be profiled here."""
    _skip_unless_profilable()
    # Lazy on purpose: call.profiler imports pandas, and the plugin loads in every pytest session.
    from nsightwrap.call.profiler import Profiler

    with Profiler() as profiler:
        yield profiler


@pytest.fixture
def nsight_profile(request: pytest.FixtureRequest) -> Callable:
    """nsightwrap.profile through the session's Profiler (config= or store= given: a Profiler of their own)."""
    _skip_unless_profilable()
    from nsightwrap.call.api import profile

    def call(fn: Callable, *args: Any, **kwargs: Any) -> Any:
        if kwargs.get("config") is not None or kwargs.get("store") is not None:
            return profile(fn, *args, **kwargs)
        # Asked for on first use, so that fixtures set up before this one (an environment) apply to it.
        return profile(fn, *args, profiler=request.getfixturevalue("nsight_profiler"), **kwargs)

    return call


@pytest.fixture
def nsightwrap_triage() -> Callable:
    """nsightwrap.triage (is it ncu or my kernel?) inside a test; skips where there is no NVIDIA GPU (ncu is
    needed only for walk=True).

        def test_softmax_is_sound(nsightwrap_triage):
            result = nsightwrap_triage(softmax_step, 4096, runs=10, tools=["memcheck", "racecheck"])
            assert result.status == "ok", result.verdict
    """
    if not gpu.gpu_count():
        pytest.skip("nsightwrap: no NVIDIA GPU here (nvidia-smi not found or lists none)")
    from nsightwrap.call.triage import triage

    def call(fn_or_command: Any, *args: Any, **kwargs: Any) -> Any:
        if kwargs.get("walk"):
            _skip_unless_profilable()
        return triage(fn_or_command, *args, **kwargs)

    return call
