"""The CUPTI tracer on a real GPU (marker gpu; skipped elsewhere): built by build.py, calibration with it.

Programs from tests/gpu/kernels.cu: `varied LIST` (one templated kernel in a namespace, launched once per
time in LIST), `selfhang S` (a kernel that waits S s for a flag nobody sets: it hangs without ncu too),
`graph S` (a CUDA graph holding a kernel of S s, launched twice).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from nsightwrap.calibrate.cupti.build import find_tracer
from nsightwrap.calibrate.cupti.trace import StalledKernel
from nsightwrap.calibrate.measure import measure
from nsightwrap.ncu.context import RunConfig
from nsightwrap.status import TIMEOUT

pytestmark = pytest.mark.gpu(tools=("nvcc",))
ROOT = Path(__file__).parents[2]


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    """This process's environment with the tracer built into a private cache (once for the module)."""
    env = dict(os.environ, XDG_CACHE_HOME=str(tmp_path_factory.mktemp("xdg")))
    env.pop("NSIGHTWRAP_TRACER", None)
    built = find_tracer(env)
    assert built.path is not None, built.reason
    return dict(env, NSIGHTWRAP_TRACER=str(built.path))


@pytest.fixture(scope="module")
def app(tmp_path_factory):
    nvcc = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"  # there: the module's gpu marker asks for it
    exe = tmp_path_factory.mktemp("app") / "app"
    subprocess.run([nvcc, "-O2", "-arch=sm_90", "-o", str(exe), str(ROOT / "tests/gpu/kernels.cu")], check=True)
    return str(exe)


def timed(command, env, **kw):
    t = time.monotonic()
    cal = measure(command, RunConfig(env=env, check_gpu=False), limit_s=kw.pop("limit_s", 120.0), use_nsys=False,
                  **kw)
    return cal, time.monotonic() - t


def test_each_launch_timed_by_the_tracer(app, env):
    cal, _ = timed([app, "varied", "0.1,2,0.3"], env)
    assert cal.ok and cal.source == "cupti", cal.reason
    seconds, _ = cal.kernel_time("tmpl_spin")
    assert 1.9 <= seconds < 2.5  # the longest launch of the three


def test_the_run_stops_once_the_stalled_kernel_finished(app, env):
    cal, took = timed([app, "varied", "0.5,30"], env, stalled=StalledKernel("tmpl_spin", 0))
    assert cal.ok and cal.source == "cupti" and took < 15, (took, cal)
    assert cal.notes[0].startswith('stopped early after "tmpl_spin" finished')
    assert cal.unfinished and "tmpl_spin" in cal.unfinished[0][0]


def test_a_kernel_that_hangs_by_itself_is_named_within_the_kernel_limit(app, env):
    cal, took = timed([app, "selfhang", "90"], env, stalled=StalledKernel("wait_forever"), kernel_limit_s=5.0)
    assert cal.status == TIMEOUT and took < 20, (took, cal)
    assert "wait_forever" in cal.reason and "kernel limit of 5 s" in cal.reason


def test_kernels_inside_a_cuda_graph_get_their_own_time(app, env):
    cal, _ = timed([app, "graph", "1.5"], env)
    assert cal.ok and cal.source == "cupti", cal.reason
    seconds, _ = cal.kernel_time("spin_cycles")
    assert 1.4 <= seconds < 2.0
