"""profile(fn): the child is a real Python process; only ncu is faked."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from helpers import FAKE_DIR, STALL_S, inline_pytest, no_driver_path, no_leftovers, run_config

import nsightwrap
from nsightwrap.call.api import profile
from nsightwrap.errors import ChildError, NotProfilable
from nsightwrap.ncu.context import RunConfig

FAKE = str(FAKE_DIR)
if FAKE not in sys.path:
    sys.path.insert(0, FAKE)
from callees import matmul_softmax, raises, returns_unpicklable, step_with_hang, touches  # noqa: E402

# --- functions the child imports by name: tests/callees.py (light), and a decorated one (test_decorator) ---


pytestmark = pytest.mark.usefixtures("fake_rows")


@pytest.fixture
def cfg(tmp_path, fake_env, monkeypatch) -> RunConfig:
    monkeypatch.setenv("NSIGHTWRAP_PROFILER_API", "fakecuda:profiler_start:profiler_stop")
    return run_config(tmp_path, report_dir=str(tmp_path), stall_timeout=0.8)


def test_profile_returns_dataframe_value_and_summary(cfg):
    r = profile(matmul_softmax, 64, tag="y", set="basic", config=cfg)
    assert list(r.df["function"]) == ["gemm_kernel", "softmax_kernel"]
    assert set(r.df["rung"]) == {"requested"}
    assert r.value == {"n": 64, "tag": "y"}
    assert not r.hung and r.hangs == []
    assert len(r.report_paths) == 1 and "gemm_kernel" in r.summary()
    assert "ProfileResult" in repr(r)
    # warm-up calls are outside the profiled range: only one call's kernels.
    cmd = r.attempts[0].command
    assert cmd[cmd.index("--profile-from-start") + 1] == "off"
    # The calibration sets the stall allowance (the same run served test_calibration_sets_the_stall_allowance).
    assert r.calibration_s is not None and r.calibration_s < 5
    assert r.stall_timeout >= cfg.stall_timeout
    no_leftovers()


def test_kernel_filter_and_repeat(cfg):
    r = profile(matmul_softmax, 8, kernel="soft.*", repeat=3, warmup=2, set="basic", config=cfg)
    assert list(r.df["function"]) == ["softmax_kernel"] * 3


def test_hanging_callable_returns_a_hung_result(cfg, ncu_lookups):
    r = profile(step_with_hang, 1, set="basic", profile="quick", stall_timeout=STALL_S, config=cfg)
    assert r.hung
    assert len(r.attempts) > 2 and ncu_lookups == {"find_ncu": 1, "probe_ncu": 1}  # once per call
    assert ("wait_for_host", "requested") in r.hangs
    assert "wait_for_host" in r.walk.unprofiled
    assert list(r.df["function"]) == ["vec_add", "vec_add"]
    assert r.value == 1  # from the resumed run under ncu, which finished without the hung kernel
    no_leftovers()


def test_what_cannot_travel_is_refused_clearly(cfg):
    with pytest.raises(NotProfilable, match="lambda"):
        profile(lambda: 1, config=cfg)

    def local():
        pass

    with pytest.raises(NotProfilable, match="module level"):
        profile(local, config=cfg)
    with pytest.raises(NotProfilable, match="pickled"):
        profile(matmul_softmax, lambda: 2, config=cfg)


def test_unpicklable_value_is_reported_not_fatal(cfg):
    r = profile(returns_unpicklable, set="basic", config=cfg)
    assert list(r.df["function"]) == ["k"]
    with pytest.raises(nsightwrap.NsightwrapError, match="could not be pickled"):
        r.value  # noqa: B018 - reading the property raises


#: A user's module whose function is decorated (not this test module, which imports pytest and pandas: the child
#: imports the function's module). Its value says what the child had loaded.
DECORATED = f"""import sys
sys.path.insert(0, {FAKE!r})
import fakecuda
import nsightwrap

@nsightwrap.profiled(kernel="softmax", set="basic")
def decorated(n):
    fakecuda.launch("gemm_kernel")
    fakecuda.launch("softmax_kernel")
    return n * 2, sorted(m for m in ("pandas", "numpy") if m in sys.modules)
"""


def test_decorator(cfg, tmp_path, monkeypatch):
    (tmp_path / "decorated_step.py").write_text(DECORATED)
    monkeypatch.syspath_prepend(str(tmp_path))
    from decorated_step import decorated

    r = decorated(21, config=cfg)
    assert list(r.df["function"]) == ["softmax_kernel"]
    # A module of @profiled functions costs the child no pandas (0.5 s a child): profile(fn)'s import loads none.
    assert r.value == (42, [])


def test_function_of_a_script_run_as_main(cfg, tmp_path, monkeypatch, capfd):
    script = tmp_path / "bench_script.py"
    script.write_text(
        "import sys\n"
        f"sys.path.insert(0, {FAKE!r})\n"
        "import fakecuda\n"
        "import nsightwrap\n"
        "from nsightwrap.ncu.context import RunConfig\n"
        "def work(n):\n"
        "    fakecuda.launch('script_kernel')\n"
        "    return n + 1\n"
        "if __name__ == '__main__':\n"
        "    print('MAIN BLOCK RAN', flush=True)\n"
        "    r = nsightwrap.profile(work, 1, set='basic', config=RunConfig(check_gpu=False, report_dir=sys.argv[1]))\n"
        "    print('kernels', [k.name for a in r.attempts for k in a.kernels], 'value', r.value)\n")
    # `python bench_script.py DIR` in this process (the interpreter's start and pandas saved): runpy makes the
    # script __main__, with its file, as the interpreter does; fd 1 is captured, where the child's lines would go.
    import runpy

    monkeypatch.setattr(sys, "argv", [str(script), str(tmp_path)])
    monkeypatch.setattr(sys, "path", list(sys.path))  # the script's sys.path.insert stays with this test
    capfd.readouterr()
    runpy.run_path(str(script), run_name="__main__")
    out = capfd.readouterr().out
    assert out.count("MAIN BLOCK RAN") == 1  # the child loaded the file without its main block
    assert "kernels ['script_kernel'] value 2" in out


def test_range_fixture(tmp_path):
    calls = []

    class API:
        start = staticmethod(lambda: calls.append("start"))
        stop = staticmethod(lambda: calls.append("stop"))
        push = staticmethod(lambda name: calls.append(f"push {name}"))
        pop = staticmethod(lambda: calls.append("pop"))

    with nsightwrap.range("step", api=API):
        calls.append("body")
    assert calls == ["push step", "start", "body", "stop", "pop"]


@pytest.fixture
def fake_gpu(monkeypatch):
    """A GPU as nvidia-smi tells it (the fake one): the fixture below then does not skip."""
    monkeypatch.setenv("PATH", f"{Path(__file__).parents[1] / 'fake_nvidia_smi'}{os.pathsep}{os.environ['PATH']}")


def test_pytest_fixture(cfg, fake_gpu, nsight_profile):
    r = nsight_profile(matmul_softmax, 2, set="basic", config=cfg)
    assert len(r.df) == 2


def test_pytest_fixture_skips_without_a_gpu_even_with_ncu_set(tmp_path, fake_env, monkeypatch):
    """NSIGHTWRAP_NCU names an ncu, but no nvidia-smi answers: nothing could be profiled, so skip."""
    (tmp_path / "test_uses_fixture.py").write_text("def test_it(nsight_profile):\n    raise AssertionError('ran')\n")
    monkeypatch.setenv("PATH", no_driver_path(tmp_path))
    inner = inline_pytest(tmp_path, monkeypatch)
    assert inner.count("skipped") == 1 and "no NVIDIA GPU" in inner.text(), inner.text()


@pytest.mark.parametrize("ncu", ["missing", "broken"])
def test_profile_checks_ncu_before_running_fn(cfg, tmp_path, monkeypatch, ncu):
    from nsightwrap.errors import ToolError, ToolNotFound

    path = tmp_path / "ncu"
    if ncu == "broken":
        path.write_text("#!/bin/sh\necho 'ncu: cannot open shared object' >&2\nexit 127\n")
        path.chmod(0o755)
    monkeypatch.setenv("NSIGHTWRAP_NCU", str(path))
    marker = tmp_path / "marker"
    with pytest.raises(ToolNotFound if ncu == "missing" else ToolError):
        profile(touches, str(marker), set="basic", config=cfg)
    assert not marker.exists()  # fn never ran, not even its plain calibration call


def test_profile_removes_its_temp_folder(cfg, tmp_path, monkeypatch):
    import tempfile

    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    # The per-user folder of run records (nsightwrap.watch.records) is meant to stay: keep it elsewhere.
    monkeypatch.setenv("NSIGHTWRAP_RUNTIME_DIR", str(tmp_path / "runtime"))
    profile(matmul_softmax, 2, set="basic", config=cfg)
    with pytest.raises(ChildError) as info:
        profile(raises, 1, set="basic", config=cfg)
    assert list(scratch.iterdir()) == []
    # The child's exception comes back with its traceback (the same run served
    # test_child_exception_comes_back_with_traceback).
    assert "ValueError: bad n=1" in info.value.child_traceback
    assert isinstance(info.value, nsightwrap.NsightwrapError)


def test_nothing_profiled_says_how_the_range_was_marked(cfg):
    r = profile(matmul_softmax, 1, kernel="no_such_kernel", set="basic", config=cfg)
    assert len(r.df) == 0
    assert "no kernel was profiled" in r.summary() and "fakecuda" in r.summary()


def test_range_api_prefers_the_framework_in_use(monkeypatch):
    import types

    from nsightwrap.call.ranges import find_range_api

    calls = []
    fake_torch = types.SimpleNamespace(cuda=types.SimpleNamespace(
        is_available=lambda: True, is_initialized=lambda: True, synchronize=lambda: calls.append("sync"),
        profiler=types.SimpleNamespace(start=lambda: calls.append("start"), stop=lambda: calls.append("stop")),
        nvtx=None))
    monkeypatch.setitem(sys.modules, "torch", fake_torch)
    monkeypatch.delenv("NSIGHTWRAP_PROFILER_API", raising=False)
    api = find_range_api()
    assert "torch.cuda.profiler" in api.describe
    api.start()
    api.stop()
    assert calls == ["start", "sync", "stop"]


class _FakeDriver:
    """libcuda as ranges._driver_calls calls it: cuProfilerStart answers `first` until a context is current (then
    `after`); `fails` names a call of the context's making and the error it returns."""

    def __init__(self, first: int, after: int = 0, fails: tuple[str, int] = ("", 0)) -> None:
        self.calls: list[str] = []
        self.answer, self.after, self.fails = first, after, fails
        for name in ("cuInit", "cuDeviceGet", "cuDevicePrimaryCtxRetain", "cuCtxSetCurrent"):
            setattr(self, name, self._step(name))

    def _step(self, name: str):
        def step(*_args) -> int:
            self.calls.append(name)
            if name == self.fails[0]:
                return self.fails[1]
            if name == "cuCtxSetCurrent":
                self.answer = self.after
            return 0
        return step

    def cuProfilerStart(self) -> int:
        self.calls.append("cuProfilerStart")
        return self.answer

    def cuProfilerStop(self) -> int:
        return 0

    def cuCtxSynchronize(self) -> int:
        return 0


@pytest.mark.parametrize("rc", [3, 201])
def test_a_range_before_the_first_cuda_call_makes_the_primary_context_current_then_starts(rc):
    """profile(fn, warmup=0) opens its range before fn's first kernel: cuProfilerStart returned 3 on the GPU machine
    (2026-11-27). The range makes CUDA ready as the runtime would (device 0's primary context, current) and
    starts."""
    from nsightwrap.call.ranges import _driver_calls

    lib = _FakeDriver(first=rc)
    start, _ = _driver_calls(lib)
    start()
    assert lib.calls == ["cuProfilerStart", "cuInit", "cuDeviceGet", "cuDevicePrimaryCtxRetain", "cuCtxSetCurrent",
                         "cuProfilerStart"]


def test_a_context_that_cannot_be_made_says_the_drivers_error():
    """No GPU for the context (CUDA_ERROR_NO_DEVICE, 100): the range's error, the call that failed and its error."""
    from nsightwrap.call.ranges import _driver_calls

    lib = _FakeDriver(first=3, fails=("cuInit", 100))
    start, _ = _driver_calls(lib)
    with pytest.raises(RuntimeError, match=r"CUDA error 3\), and making device 0's context current failed "
                                           r"\(cuInit: CUDA error 100\).*warmup >= 1"):
        start()
    assert lib.calls == ["cuProfilerStart", "cuInit"]


def test_a_range_that_cannot_start_closes_its_nvtx_range():
    """The NVTX range opens first; a profiler range that cannot start closes it again before the error goes on."""
    from nsightwrap.call.ranges import RangeAPI
    from nsightwrap.call.ranges import range as marked

    calls = []

    def start():
        raise RuntimeError("cuProfilerStart: no")

    api = RangeAPI(start, lambda: calls.append("stop"), lambda name: calls.append(f"push {name}"),
                   lambda: calls.append("pop"), "fake")
    with pytest.raises(RuntimeError, match="no"):
        with marked("r", api=api):
            calls.append("body")
    assert calls == ["push r", "pop"]


@pytest.mark.parametrize("rc, why", [(3, "CUDA is not initialized in this process"),
                                     (201, "no current CUDA context on this thread")])
def test_a_range_the_driver_cannot_start_says_why_and_what_to_do(rc, why):
    """cuProfilerStart still answers 3 (CUDA not initialized) or 201 (no context on the thread) once the primary
    context is current: both say so, and how to mark the range."""
    from nsightwrap.call.ranges import _driver_calls

    start, _ = _driver_calls(_FakeDriver(first=rc, after=rc))
    with pytest.raises(RuntimeError, match=f"{why} \\(CUDA error {rc}\\).*warmup >= 1"):
        start()
