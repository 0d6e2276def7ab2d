"""Sweeps on a cluster engine (nsightwrap.fallback.executor): submitit's LocalExecutor with the fakes."""

from __future__ import annotations

import os
import stat
import uuid

import pytest
from helpers import FAKE_SMI_DIR, app, run_config

from nsightwrap.errors import NsightwrapError
from nsightwrap.fallback.executor import ExecutorSpec, StoreSetting
from nsightwrap.fallback.sweep import sweep_sections
from nsightwrap.store.hangstore import HangStore

pytest.importorskip("submitit")

SECTIONS = ["SourceCounters", "Occupancy", "LaunchStats"]
PROGRAM = app("a@hang-if=SourceCounters", "b@hang-if=Occupancy")


@pytest.fixture
def smi(fake_env, monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", f"{FAKE_SMI_DIR}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_GPU_TARGET", "1")
    monkeypatch.setenv("FAKE_SMI_SCOPE", uuid.uuid4().hex)
    monkeypatch.setenv("FAKE_SMI_GPUS", "2")
    return tmp_path


def cfg(tmp_path, **kw):
    return run_config(tmp_path, report_dir=str(tmp_path / "r"), env=dict(os.environ), check_gpu=True, **kw)


def test_local_executor_runs_each_probe_as_a_job_on_its_own_gpu(smi, tmp_path):
    """Same culprits as the thread pool; every probe a job pinned to GPU 0 or 1; all in the user's store."""
    folder = tmp_path / "jobs"
    with HangStore(tmp_path / "hangs.db") as store:
        r = sweep_sections(PROGRAM, sections=SECTIONS, config=cfg(tmp_path), store=store,
                           executor=ExecutorSpec("local", folder=str(folder)))
        assert {k.kernel: k.singles for k in r.kernels} == {"a": ["SourceCounters"], "b": ["Occupancy"]}
        probes = [p for k in r.kernels for p in k.probes if not p.from_store]
        assert probes and {p.gpu for p in probes} <= {"0", "1"}
        assert len({p.gpu for p in probes}) == 2  # both GPUs used
        assert len(list(folder.rglob("*_result.pkl"))) >= len(probes)  # each probe was a submitit job
    # The probes were recorded on the "node" (run_probe), in the store given: a second sweep asks nothing.
    with HangStore(tmp_path / "hangs.db") as store:
        again = sweep_sections(PROGRAM, sections=SECTIONS, config=cfg(tmp_path), store=store,
                               executor=ExecutorSpec("local"))
    assert all(p.from_store for k in again.kernels for p in k.probes)


def test_local_executor_refuses_more_jobs_than_gpus(smi, tmp_path):
    with pytest.raises(NsightwrapError, match="needs 3 GPU"):
        sweep_sections(app("a"), sections=["SourceCounters"], config=cfg(tmp_path), jobs=3,
                       executor=ExecutorSpec("local"))


def test_a_store_password_travels_in_a_0600_file_never_in_the_task(tmp_path):
    s = StoreSetting.keep("postgresql://team:s3cret@db.example/hangs", tmp_path)
    assert "s3cret" not in s.public and s.public == "postgresql://team@db.example/hangs"
    assert stat.S_IMODE(os.stat(s.secret_file).st_mode) == 0o600
    assert s.setting() == "postgresql://team:s3cret@db.example/hangs"
    assert StoreSetting.keep("/home/u/hangs.db", tmp_path) == StoreSetting("/home/u/hangs.db")
