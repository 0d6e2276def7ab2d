"""compute-sanitizer on real kernels with planted bugs (tests/gpu/triage_kernels.cu), through run_sanitizer.

Marker gpu (skipped without a GPU and ncu, tests/conftest.py); skipped too without nvcc or compute-sanitizer.
Each test names the kernel, the kind and the source line the sanitizer must report; the lines are found by
their `// <- MODE` markers in the .cu file. Set NSIGHTWRAP_SANITIZER_CAPTURE=DIR to keep each run's output
there under the names of tests/data/sanitizer/ (real captures to replace the fixtures with).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from helpers import no_leftovers

from nsightwrap.diagnose.sanitizer import SanitizerOptions, find_sanitizer, run_sanitizer
from nsightwrap.ncu.allowance import Calibration
from nsightwrap.status import ERROR, HANG, OK
from nsightwrap.watch import gpu

pytestmark = pytest.mark.gpu(tools=("nvcc", "compute-sanitizer"))
SOURCE = Path(__file__).with_name("triage_kernels.cu")


def marker_line(mode: str) -> int:
    """The line of SOURCE that carries `// <- MODE`."""
    for number, text in enumerate(SOURCE.read_text().splitlines(), 1):
        if f"// <- {mode}" in text:
            return number
    raise AssertionError(f"no `// <- {mode}` marker in {SOURCE}")


@pytest.fixture(scope="module")
def program() -> str:
    nvcc = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"  # there: the module's gpu marker asks for it
    out = Path("/tmp/nsightwrap-gpu-tests")
    out.mkdir(exist_ok=True)
    exe = out / "triage_kernels"
    subprocess.run([nvcc, "-O2", "-arch=sm_90", "-lineinfo", "-o", str(exe), str(SOURCE)], check=True)
    return str(exe)


@pytest.fixture(scope="module")
def sanitizer() -> str:
    return find_sanitizer()  # there: the module's gpu marker asks for it


def sanitize(sanitizer, program, mode_args, tool="memcheck", capture=None, **kw):
    run = run_sanitizer([program, *mode_args], tool, sanitizer=sanitizer, **kw)
    folder = os.environ.get("NSIGHTWRAP_SANITIZER_CAPTURE")
    if folder and capture:
        Path(folder).mkdir(parents=True, exist_ok=True)
        (Path(folder) / capture).write_text(run.log)
    no_leftovers()
    assert not run.survivors
    gpu_free()
    return run


def gpu_free(wait_s: float = 5.0) -> None:
    """Nothing of ours is left on the GPU (a stopped context may take a moment to go)."""
    end = time.monotonic() + wait_s
    while gpu.compute_processes() and time.monotonic() < end:
        time.sleep(0.2)
    assert gpu.compute_processes() == [], "a process is still on the GPU"


def test_clean_kernels_are_clean(sanitizer, program):
    run = sanitize(sanitizer, program, ["clean"], capture="memcheck_clean.txt")
    assert (run.status, run.summary) == (OK, "memcheck: 0 errors"), run.log


def test_out_of_bounds_write(sanitizer, program):
    run = sanitize(sanitizer, program, ["oob"], capture="memcheck_oob.txt")
    assert run.status == ERROR, run.log
    f = run.findings
    hits = f[f["kind"] == "Invalid __global__ write"]
    assert len(hits) and set(hits["kernel"].str.split("(").str[0]) == {"oob_write"}, run.log
    assert set(hits["line"]) == {marker_line("oob")} and set(hits["size"]) == {4}
    assert hits["file"].iloc[0].endswith("triage_kernels.cu") and hits["host_frames"].iloc[0]


def test_shared_memory_race(sanitizer, program):
    run = sanitize(sanitizer, program, ["race"], "racecheck", capture="racecheck.txt")
    assert run.status == ERROR and run.returncode == 0, run.log  # a race that does not crash keeps exit 0
    f = run.findings
    assert len(f) and set(f["kernel"].str.split("(").str[0]) == {"reduce_race"}, run.log
    assert marker_line("race") in set(f["line"]) | set(f["other_line"])
    hazard = sanitize(sanitizer, program, ["race"], "racecheck", capture="racecheck_hazard.txt",
                      options=SanitizerOptions(racecheck_report="hazard", print_limit=3))
    assert hazard.summary_counts.hazards_displayed == 3 and hazard.errors > 3, hazard.log
    assert sanitize(sanitizer, program, ["race"], "synccheck", capture="synccheck_race.txt").clean


def test_uninitialised_read(sanitizer, program):
    run = sanitize(sanitizer, program, ["uninit"], "initcheck", capture="initcheck.txt")
    f = run.findings
    hits = f[f["kind"] == "Uninitialized __global__ memory read"]
    assert len(hits) and set(hits["line"]) == {marker_line("uninit")}, run.log
    assert set(hits["kernel"].str.split("(").str[0]) == {"read_uninit"}


def test_flaky_write_found_in_a_bad_draw_only(sanitizer, program):
    bad = sanitize(sanitizer, program, ["flaky", "1", "7"])
    assert "flaky_write" in set(bad.findings["kernel"].dropna().str.split("(").str[0]), bad.log
    assert marker_line("flaky") in set(bad.findings["line"].dropna())
    good = sanitize(sanitizer, program, ["flaky", "0", "7"])
    assert good.clean, good.log  # one sanitizer run proves nothing about an intermittent bug (FACTS.md)


def test_a_kernel_that_hangs_by_itself_is_called_within_its_allowance(sanitizer, program):
    # calibrated as a plain run would time wait_forever's neighbours: 1 ms kernels
    cal = Calibration.from_kernels({"wait_forever": 0.001})
    run = sanitize(sanitizer, program, ["selfhang", "120"], calibration=cal)
    assert run.status == HANG and run.stalled, run.log
    assert run.elapsed_s < run.stall["allowance_s"] + 15 < 60  # the allowance and the stop; never a flat minute


def test_the_kernel_that_hangs_only_under_ncu_under_memcheck(sanitizer, program):
    # Not known yet (FACTS.md has no record): whether compute-sanitizer blocks the launch as ncu does. Either
    # way the run ends by itself or is called stalled within its allowance, and nothing is left behind.
    cal = Calibration.from_kernels({"wait_for_host": 0.001})
    run = sanitize(sanitizer, program, ["ncuhang", "30"], calibration=cal)
    print(f"ncuhang under memcheck: {run.status} after {run.elapsed_s:.1f} s: {run.summary}")
    assert run.status in (OK, HANG), run.log
    assert run.elapsed_s < 40


def test_a_callable_that_uses_the_gpu_is_triaged_clean(tmp_path, monkeypatch):
    """nsightwrap.triage(fn) on the GPU: fn runs without a profiler range around it (cuProfilerStart before fn's
    first CUDA call failed with CUDA error 3, and every run 'failed' before fn ran, 2026-11-27); a sound PyTorch
    call is clean in every run."""
    import nsightwrap

    pytest.importorskip("torch")
    (tmp_path / "gpu_subject.py").write_text(
        "def step(n):\n    import torch\n    return float(torch.ones(n, device='cuda').sum())\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import gpu_subject

    r = nsightwrap.triage(gpu_subject.step, 1024, runs=2, tools=(), store=False, blocking=False)
    assert r.failed == 0 and r.hung == 0 and len(r.runs) == 2, r.to_dict()
    no_leftovers()
    gpu_free()
