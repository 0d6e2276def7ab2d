"""On a real GPU with the real ncu (marker gpu; skipped elsewhere).

The programs are tests/gpu/kernels.cu: `ok` (8 short kernels), `hang` (a
kernel that spins on a host-mapped flag: fine alone, hangs under ncu),
`mixed` (3 kernels, then the hanging one), `slow` (one kernel of MS ms).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from nsightwrap import ProfileOptions, RunConfig, profile_command
from nsightwrap.fallback.session import Session
from nsightwrap.watch import gpu
from nsightwrap.watch.tree import COOKIE_VAR, processes_with

pytestmark = pytest.mark.gpu(tools=("nvcc",))  # a GPU, ncu, and nvcc to build kernels.cu
ROOT = Path(__file__).parents[2]


@pytest.fixture(scope="session")
def cuda_app(tmp_path_factory):
    nvcc = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"  # there: the module's gpu marker asks for it
    # A neutral folder, so no personal path ends up in reports.
    out = Path("/tmp/nsightwrap-gpu-tests")
    out.mkdir(exist_ok=True)
    exe = out / "app"
    subprocess.run([nvcc, "-O2", "-arch=sm_90", "-lineinfo", "-o", str(exe), str(ROOT / "tests/gpu/kernels.cu")],
                   check=True)
    return str(exe)


@pytest.fixture
def cfg(tmp_path):
    return RunConfig(report_dir=str(tmp_path), cache_dir=str(tmp_path / "cache"), env=dict(os.environ))


def load_report_names(path):
    from nsightwrap.reports.ncu import load_report

    return list(load_report(path)["function"])


def no_gpu_process_of(attempt):
    held = gpu.compute_processes() or []
    assert not attempt.gpu_left_after
    return held


def assert_clean(attempt):
    assert processes_with(COOKIE_VAR, attempt.cookie) == []
    assert not attempt.stop or attempt.stop.survivors == []
    assert gpu.compute_processes() == [], "a process is still on the GPU"


def test_real_ok_run(cuda_app, cfg):
    a = profile_command([cuda_app, "ok"], ProfileOptions(set="basic"), cfg)
    print(a.describe())
    assert a.status == "ok"
    assert [k.name for k in a.kernels] == ["vec_add"] * 3 + ["block_reduce", "vec_add", "block_reduce", "vec_add",
                                                             "block_reduce"]
    assert all(k.passes == 10 for k in a.kernels)
    assert a.report_complete and len(load_report_names(a.report)) == 8
    assert_clean(a)


def test_real_hang_is_caught_within_15_s(cuda_app, cfg):
    t0 = time.monotonic()
    a = profile_command([cuda_app, "hang", "60"], ProfileOptions(set="basic"), cfg)
    took = time.monotonic() - t0
    print(a.describe())
    print(f"total {took:.1f} s, detection {a.detection_s:.1f} s after the last progress mark, "
          f"stopped in {a.stop_s:.2f} s")
    assert a.status == "hang" and a.stalled_kernel == "wait_for_host"
    assert a.stall.where.startswith("0%")
    assert a.detection_s < 15
    assert a.stop.graceful  # SIGINT to the inner ncu ended the whole tree
    assert_clean(a)


def test_real_hang_after_three_kernels_keeps_partial_report(cuda_app, cfg):
    a = profile_command([cuda_app, "mixed", "60"], ProfileOptions(set="basic"), cfg)
    print(a.describe())
    assert a.status == "hang" and a.stall.kernel_id == 3
    assert [k.name for k in a.kernels] == ["vec_add"] * 3
    assert a.report is not None and not a.report_complete
    assert load_report_names(a.report) == ["vec_add"] * 3
    assert_clean(a)


def test_real_slow_kernel_is_not_called_hung(cuda_app, cfg):
    a = profile_command([cuda_app, "slow", "1500"], ProfileOptions(set="basic"), cfg.replace(stall_timeout=4.0))
    print(a.describe())
    assert a.status == "ok", a.describe()
    assert [k.name for k in a.kernels] == ["slow_kernel"]
    assert_clean(a)


def test_real_hang_in_application_replay(cuda_app, cfg):
    a = profile_command([cuda_app, "hang", "60"], ProfileOptions(set="basic", replay_mode="application"),
                        cfg.replace(stall_timeout=6.0))
    print(a.describe())
    assert a.status == "hang"
    assert_clean(a)


def _cli(args, timeout=300):
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-m", "nsightwrap", *args], capture_output=True, text=True, env=env,
                          timeout=timeout, cwd="/tmp")


def test_cli_on_cupy_hang_example(tmp_path):
    pytest.importorskip("cupy")
    r = _cli(["run", "--json", "--stall-timeout", "5", "-o", str(tmp_path / "cupy_hang"), "--",
              sys.executable, str(ROOT / "examples/cupy_hang_under_ncu.py")])
    print(r.stderr[-3000:])
    print(r.stdout)
    d = json.loads(r.stdout)
    assert r.returncode == 3 and d["status"] == "hang" and d["stalled_kernel"] == "wait_for_host"
    assert processes_with(COOKIE_VAR, d["cookie"]) == []


def test_cli_on_torch_example(tmp_path):
    pytest.importorskip("torch")
    r = _cli(["run", "--json", "--set", "basic", "-o", str(tmp_path / "torch"), "--",
              sys.executable, str(ROOT / "examples/torch_matmul_softmax.py")])
    print(r.stderr[-3000:])
    d = json.loads(r.stdout)
    assert r.returncode == 0 and d["status"] == "ok"
    names = [k["name"] for k in d["kernels"]]
    assert any("oftmax" in n for n in names), names


# --- the ladder and the hang store (issue 4) ------------------------------------------------


def test_real_walk_third_kernel_hangs_then_store_skips(cuda_app, cfg, tmp_path):
    from nsightwrap import HangStore, walk_ladder
    from nsightwrap.fallback.ladder import ladder_from_dict

    ladder = ladder_from_dict({"name": "gpu-test", "rungs": [
        {"name": "requested", "requested": True},
        {"name": "speed-of-light", "sections": ["SpeedOfLight"]},
        {"name": "range-replay", "sections": ["SpeedOfLight"], "replay_mode": "range"}]})
    store = HangStore(tmp_path / "hangs.db")
    cfg = cfg.replace(stall_timeout=5.0, timeout=90.0)
    runs = []
    for i in range(2):
        t = time.monotonic()
        r = walk_ladder(Session.open([cuda_app, "third", "60"], cfg, store=store), ProfileOptions(set="basic"), ladder)
        runs.append((r, time.monotonic() - t))
        print(f"\n--- walk {i + 1}: {runs[-1][1]:.1f} s\n{r.summary()}")
        print(r.df[["function", "rung"]].to_string() if len(r.df) else "(no rows)")
    first, second = runs[0][0], runs[1][0]
    rows = list(zip(first.df["function"], first.df["rung"]))
    assert ("vec_add", "requested") in rows and ("block_reduce", "requested") in rows
    assert sum(1 for f, rg in rows if rg == "requested") == 4  # every other kernel at the requested set
    assert ("wait_for_host", "requested") in first.hangs
    skipped = [(s.job, s.rung.name) for s in second.steps if s.skipped]
    assert ("wait_for_host", "requested") in skipped
    assert len(second.attempts) < len(first.attempts)
    assert runs[1][1] < runs[0][1]


def test_real_walk_kernel_that_hangs_only_under_kernel_replay(cuda_app, cfg, tmp_path):
    """`app passes 1`: wait_for_count hangs once ncu replays it a second time in one process (SpeedOfLight,
    basic, detailed: 10+ passes) and works under application replay (one execution per process).
    The default ladder must end with it profiled at the application-replay rung, the others at the
    requested set; the second walk starts that kernel where it worked."""
    from nsightwrap import HangStore, walk_ladder

    store = HangStore(tmp_path / "hangs.db")
    cfg = cfg.replace(stall_timeout=5.0, timeout=90.0)
    runs = []
    for i in range(2):
        t = time.monotonic()
        r = walk_ladder(Session.open([cuda_app, "passes", "1", "30"], cfg, store=store),
                        ProfileOptions(set="basic"), "default")
        runs.append((r, time.monotonic() - t))
        print(f"\n--- walk {i + 1}: {runs[-1][1]:.1f} s\n{r.summary()}")
        print(r.df[["function", "rung", "gpu__time_duration.sum"]].to_string() if len(r.df) else "(no rows)")
        rows = sorted(zip(r.df["function"], r.df["rung"]))
        assert rows == [("block_reduce", "requested"), ("vec_add", "requested"),
                        ("wait_for_count", "application-replay")]
        assert gpu.compute_processes() == []
    first, second = runs[0][0], runs[1][0]
    assert ("wait_for_count", "requested") in first.hangs and ("wait_for_count", "speed-of-light") in first.hangs
    assert all(a.status != "hang" for a in second.attempts)  # the known hangs were skipped, not met
    assert len(second.attempts) < len(first.attempts) and runs[1][1] < runs[0][1]


# --- profile(fn) (issue 5) -------------------------------------------------------------------


def _workloads():
    path = str(ROOT / "tests" / "gpu")
    if path not in sys.path:
        sys.path.insert(0, path)
    import workloads

    return workloads


def test_real_profile_fn_matches_raw_ncu(cfg, tmp_path):
    pytest.importorskip("torch")
    from nsightwrap import find_ncu, profile
    from nsightwrap.reports.ncu import load_report

    w = _workloads()
    t = time.monotonic()
    r = profile(w.matmul_softmax, 2048, kernel="softmax", set="basic", timeout=120.0, config=cfg)
    took = time.monotonic() - t
    print(f"\nprofile(fn) took {took:.1f} s; calibration {r.calibration_s:.3f} s; "
          f"stall timeout {r.stall_timeout:.1f} s")
    print(r.summary())
    df = r.df
    print(df[["function", "rung", "gpu__time_duration.sum"]].to_string())
    assert r.value == (2048, 2048) and not r.hung
    raw_out = tmp_path / "raw.ncu-rep"
    subprocess.run([find_ncu(), "--set", "basic", "--profile-from-start", "off", "--kernel-name", "regex:softmax",
                    "-o", str(raw_out), sys.executable, str(ROOT / "tests/gpu/workloads.py"), "2048"], check=True,
                   cwd="/tmp")
    raw = load_report(raw_out)
    print(raw[["function", "gpu__time_duration.sum"]].to_string())
    assert list(df["function"]) == list(raw["function"])
    for mine, theirs in zip(df["gpu__time_duration.sum"], raw["gpu__time_duration.sum"]):
        assert 0.5 < mine / theirs < 2.0


def test_real_profile_fn_without_warmup_profiles_fns_first_kernels(cfg):
    """warmup=0: the profiled child opens its range before fn's first CUDA call (torch is imported inside fn).
    cuProfilerStart then answered CUDA error 3 and the run failed (2026-11-27); the range now makes device 0's
    primary context current first, the one PyTorch then uses, and fn's kernels are profiled."""
    pytest.importorskip("torch")
    from nsightwrap import profile

    w = _workloads()
    r = profile(w.matmul_softmax, 2048, kernel="softmax", set="basic", warmup=0, timeout=120.0, config=cfg)
    print(f"\n{r.summary()}\nrange: {r.range_api}")
    assert r.value == (2048, 2048) and not r.hung
    assert r.range_api.startswith("cuProfilerStart/Stop")
    assert not r.df.empty and all("softmax" in name.lower() for name in r.df["function"])


def test_real_profile_fn_that_hangs(cfg):
    pytest.importorskip("cupy")
    from nsightwrap import profile

    w = _workloads()
    t = time.monotonic()
    r = profile(w.cupy_spin, 60.0, profile="quick", stall_timeout=5.0, timeout=60.0, config=cfg)
    took = time.monotonic() - t
    print(f"\nhanging callable: {took:.1f} s\n{r.summary()}")
    assert r.hung and "wait_for_host" in [k for k, _ in r.hangs]
    assert took < 60
    for a in r.attempts:
        assert processes_with(COOKIE_VAR, a.cookie) == []
    assert gpu.compute_processes() == []


# --- sweep-sections (issue 6) ----------------------------------------------------------------


def test_real_sweep_on_hanging_kernel(cuda_app, cfg, tmp_path):
    from nsightwrap import HangStore, sweep_sections

    store = HangStore(tmp_path / "sweep.db")
    t = time.monotonic()
    r = sweep_sections(Session.open([cuda_app, "mixed", "60"], cfg.replace(stall_timeout=4.0, timeout=60.0),
                                    store=store),
                       sections="basic")
    took = time.monotonic() - t
    print(f"\nsweep took {took:.1f} s\n{r.table()}")
    assert [k.kernel for k in r.kernels] == ["wait_for_host"]
    k = r.kernels[0]
    # The spin on a host flag hangs whenever the launch is profiled: sections that need a counter pass hang alone.
    assert "SpeedOfLight" in k.singles and "SpeedOfLight" not in k.largest_working
    assert gpu.compute_processes() == []


@pytest.mark.gpu(gpus=2)
def test_real_sweep_jobs_2_on_two_gpus(cuda_app, cfg, tmp_path):
    """Two hanging kernels investigated at once, one per GPU; the same sweep with --jobs 1 beside it."""
    from nsightwrap import HangStore, sweep_sections

    timings = {}
    for jobs in (2, 1):
        store = HangStore(tmp_path / f"jobs{jobs}.db")  # apart: the second sweep must not answer from the first
        t = time.monotonic()
        r = sweep_sections(Session.open([cuda_app, "twohang", "60"], cfg.replace(stall_timeout=4.0, timeout=60.0),
                                        store=store),
                           sections="basic", jobs=jobs)
        timings[jobs] = time.monotonic() - t
        print(f"\n--jobs {jobs}: sweep took {timings[jobs]:.1f} s\n{r.table()}")
        assert sorted(k.kernel for k in r.kernels) == ["wait_for_host", "wait_for_host_b"]
        used = {p.gpu for k in r.kernels for p in k.probes if not p.from_store}
        assert used == ({"0", "1"} if jobs == 2 else {None})
        assert gpu.compute_processes() == []
    print(f"\n--jobs 2: {timings[2]:.1f} s, --jobs 1: {timings[1]:.1f} s, ratio {timings[1] / timings[2]:.2f}")


def test_real_sweep_finds_the_multi_pass_section(cuda_app, cfg, tmp_path):
    """On wait_for_count (`app passes 1`), only SpeedOfLight of the basic set needs more than one pass."""
    from nsightwrap import HangStore, sweep_sections

    t = time.monotonic()
    r = sweep_sections(Session.open([cuda_app, "passes", "1", "30"], cfg.replace(stall_timeout=4.0, timeout=60.0),
                                    store=HangStore(tmp_path / "sweep.db")),
                       sections="basic")
    took = time.monotonic() - t
    print(f"\nsweep took {took:.1f} s\n{r.table()}")
    [k] = r.kernels
    assert k.kernel == "wait_for_count" and k.singles == ["SpeedOfLight"] and not k.combinations
    assert sorted(k.largest_working) == ["LaunchStats", "Occupancy", "WorkloadDistribution"]
    assert k.probes_run <= k.budget()
    assert gpu.compute_processes() == []
