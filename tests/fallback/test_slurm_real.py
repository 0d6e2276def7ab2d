"""--executor slurm against a real single-node Slurm (make test-slurm: devtools/slurm_single_node.sh
starts it and sets NSIGHTWRAP_SLURM_TEST=1); skipped elsewhere. The probes use the fake ncu."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
import uuid

import pytest
from helpers import FAKE_SMI_DIR, ROOT, app, ctrl_c_sweep, run_config

from nsightwrap.fallback.session import Session
from nsightwrap.fallback.spec import ExecutorSpec
from nsightwrap.fallback.sweep import sweep_sections
from nsightwrap.store.hangstore import HangStore

pytestmark = [
    pytest.mark.slurm,
    pytest.mark.skipif(os.environ.get("NSIGHTWRAP_SLURM_TEST") != "1" or shutil.which("sbatch") is None,
                       reason="needs the single-node Slurm of make test-slurm"),
]


@pytest.fixture
def env(fake_env, monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", f"{FAKE_SMI_DIR}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_GPU_TARGET", "1")
    monkeypatch.setenv("FAKE_SMI_SCOPE", uuid.uuid4().hex)
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    return tmp_path


def test_a_sweep_on_slurm_finds_the_culprits_and_records_them(env, tmp_path):
    config = run_config(tmp_path, report_dir=str(tmp_path / "r"), env=dict(os.environ), check_gpu=True)
    program = app("a@hang-if=SourceCounters", "b@hang-if=Occupancy")
    sections = ["SourceCounters", "Occupancy", "LaunchStats"]
    spec = ExecutorSpec("slurm", partition="debug", time="5", folder=str(tmp_path / "jobs"), poll_s=0.2)
    t = time.monotonic()
    with HangStore(tmp_path / "hangs.db") as store:
        r = sweep_sections(Session.open(program, config, store=store, executor=spec), sections=sections)
    print(f"\nsweep on Slurm: {time.monotonic() - t:.1f} s\n{r.table()}")
    assert {k.kernel: k.singles for k in r.kernels} == {"a": ["SourceCounters"], "b": ["Occupancy"]}
    with HangStore(tmp_path / "hangs.db") as store:  # recorded by the jobs, in the store given
        again = sweep_sections(Session.open(program, config, store=store, executor=spec), sections=sections)
    assert all(p.from_store for k in again.kernels for p in k.probes)


def test_ctrl_c_cancels_the_slurm_jobs(env, tmp_path):
    ctrl_c_sweep(["sweep-sections", "--executor", "slurm", "--slurm-partition", "debug", "--section",
                  "SourceCounters", "--json", "--stall-timeout", "120", "--store", str(tmp_path / "hangs.db"),
                  "--executor-folder", str(tmp_path / "jobs"), "--no-preflight", "--", *app("a@hang")],
                 dict(os.environ), settle_s=2)  # the job has started on the node
    deadline = time.monotonic() + 30
    while subprocess.run(["squeue", "-h"], capture_output=True, text=True).stdout.strip():
        assert time.monotonic() < deadline, "jobs left in the queue"
        time.sleep(0.5)
