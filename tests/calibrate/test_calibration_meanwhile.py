"""A calibration kept in the store by another run of the same program while this one ran (issue 22: a sweep's
speculative whole-program run starts before the last run's calibration is kept) is taken at the next stall,
not measured again."""

from __future__ import annotations

from helpers import FakeContext

from nsightwrap.calibrate import Calibrator
from nsightwrap.calibrate.cupti.trace import StalledKernel
from nsightwrap.ncu.allowance import Calibration
from nsightwrap.ncu.context import RunConfig
from nsightwrap.store.hangstore import HangStore
from nsightwrap.store.keys import Environment

ENV = Environment(gpu="NVIDIA H200", driver="580.1", ncu_version="2025.3.1")


def _measure(calls, kernels):
    def measure(*args, **kw):
        calls.append(kw.get("stalled"))
        return Calibration.from_kernels(kernels, program_s=None, source="cupti")
    return measure


def test_a_calibration_another_job_kept_meanwhile_is_taken_at_the_stall(tmp_path):
    with HangStore(tmp_path / "h.db") as store:
        calls = []
        late = Calibrator(["app"], store=store, env=ENV, measure=_measure(calls, {"x": 0.1}))
        assert late.apply(FakeContext(RunConfig())).config.calibration is None  # looked: nothing kept yet
        other = Calibrator(["app"], store=store, env=ENV, measure=_measure([], {"a": 0.001, "b": 0.002}))
        other.calibrate(RunConfig(), stalled=StalledKernel("a", 0))  # the other job measures and keeps it
        found = late.calibrate(RunConfig(), stalled=StalledKernel("b", 0))
        assert calls == [] and found.kernel_time("b") is not None and late.measured == 0


def test_one_that_does_not_reach_the_stalled_kernel_is_measured_again(tmp_path):
    with HangStore(tmp_path / "h.db") as store:
        calls = []
        late = Calibrator(["app"], store=store, env=ENV, measure=_measure(calls, {"a": 0.001, "c": 0.3}))
        late.known()
        Calibrator(["app"], store=store, env=ENV, measure=_measure([], {"a": 0.001})).calibrate(
            RunConfig(), stalled=StalledKernel("a", 0))
        found = late.calibrate(RunConfig(), stalled=StalledKernel("c", 0))
        assert [s.name for s in calls] == ["c"] and found.kernel_time("c") is not None
