"""The GPU checks around a watched run, with a fake nvidia-smi (no GPU here)."""

from __future__ import annotations

import functools
import os
import subprocess
import sys
import threading
import uuid

import pytest
from helpers import FAKE_SMI_DIR, STALL_S, app, run_config, scaled_ladder

import nsightwrap.ncu.engine as engine
from nsightwrap.fallback.session import Session
from nsightwrap.ncu.context import RunConfig
from nsightwrap.ncu.engine import profile_command
from nsightwrap.ncu.options import ProfileOptions


@pytest.fixture
def smi(fake_env, monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", f"{FAKE_SMI_DIR}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_GPU_TARGET", "1")
    monkeypatch.setenv("FAKE_SMI_SCOPE", uuid.uuid4().hex)  # this test's processes only
    return tmp_path


def cfg(tmp_path, **kw) -> RunConfig:
    return run_config(tmp_path, report_dir=str(tmp_path / "r"), env=dict(os.environ), check_gpu=True, **kw)


def test_clean_run_checks_the_gpu_before_and_after(smi):
    a = profile_command(app("vec_add"), ProfileOptions(set="basic"), cfg(smi))
    assert a.status == "ok" and a.gpu_foreign_before == () and a.gpu_left_after == ()


def test_foreign_gpu_process_is_reported_and_marks_records_untrusted(smi, store):
    foreign = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                               env=dict(os.environ, FAKE_GPU_USER="1", FAKE_GPU_TARGET="0"))
    try:
        a = profile_command(app("vec_add", "k@hang"), ProfileOptions(set="basic"), cfg(smi))
    finally:
        foreign.kill()
    assert a.status == "hang"
    assert any(str(foreign.pid) in f for f in a.gpu_foreign_before)
    assert any("not this run's" in n for n in a.notes)
    from nsightwrap.store.keys import Environment, ProfileKey

    env = Environment("h", "NVIDIA H200", "580", "2025.3.1.0")
    store.record_attempt(a, ProfileKey("basic"), env)
    assert not store.hangs_for("k", ProfileKey("basic"), env)  # untrusted: never used to skip


def test_a_process_left_on_the_gpu_stops_the_walk(smi, tmp_path, monkeypatch):
    from nsightwrap.fallback.walk import walk_ladder

    sticky = tmp_path / "sticky"
    monkeypatch.setenv("FAKE_SMI_STICKY", str(sticky))
    sticky.write_text("")

    def stick(text):
        # The hanging target stays listed after it is killed (a kernel still spinning).
        if "0%.." in text and not sticky.read_text():
            from nsightwrap.watch.tree import COOKIE_VAR, OWNER_VAR, processes_with

            pids = [p.pid for p, env in processes_with(COOKIE_VAR)
                    if env.get(OWNER_VAR) == str(os.getpid()) and "app.py" in " ".join(p.cmdline())]
            sticky.write_text(" ".join(map(str, pids)))

    import pandas as pd

    # The pids stay listed whatever the wait (the sticky file is written before the stall is seen): the check after
    # the run lists them once and does not wait for them to leave (10 s by default).
    monkeypatch.setattr(engine, "_left_on_gpu", functools.partial(engine._left_on_gpu, settle_s=0.0))
    r = walk_ladder(Session.open(app("vec_add", "k@hang", "vec_add"), cfg(tmp_path).replace(env=dict(os.environ)),
                                 on_output=stick),
                    ProfileOptions(set="basic"), scaled_ladder("quick", scale=STALL_S / 8),  # first rung: STALL_S
                    reader=lambda a: pd.DataFrame({"function": [k.name for k in a.kernels]}))
    assert len(r.attempts) == 1
    assert r.attempts[0].gpu_left_after
    assert "false hangs" in r.stopped


def test_sweep_jobs_use_one_gpu_each(smi, tmp_path, monkeypatch):
    from nsightwrap.fallback.sweep import sweep_sections

    monkeypatch.setenv("FAKE_SMI_GPUS", "2")
    seen, lock, active = [], threading.Lock(), {}

    import nsightwrap.fallback.session as session_mod

    real = session_mod.profile_command

    def spy(command, opts, context, **kw):
        gpu = context.env.get("CUDA_VISIBLE_DEVICES")
        with lock:
            assert gpu not in active, "two probes on one GPU"
            active[gpu] = True
            seen.append(gpu)
        try:
            return real(command, opts, context, **kw)
        finally:
            with lock:
                del active[gpu]

    monkeypatch.setattr(session_mod, "profile_command", spy)
    r = sweep_sections(Session.open(app("a@hang-if=SourceCounters", "b@hang-if=Occupancy"), cfg(tmp_path),
                                    stall_timeout=STALL_S),
                       sections=["SourceCounters", "Occupancy"], jobs=2)  # a third section adds only probes
    assert sorted(k.kernel for k in r.kernels) == ["a", "b"]
    assert {k.kernel: k.singles for k in r.kernels} == {"a": ["SourceCounters"], "b": ["Occupancy"]}
    assert set(seen) == {"0", "1"}
    assert {p.gpu for k in r.kernels for p in k.probes} <= {"0", "1"} and "GPU " in r.table()


def test_jobs_beyond_the_gpus_is_refused(smi, tmp_path, monkeypatch):
    from nsightwrap.errors import NsightwrapError
    from nsightwrap.fallback.sweep import sweep_sections

    with pytest.raises(NsightwrapError, match="needs 3 GPUs"):
        sweep_sections(Session.open(app("a"), cfg(tmp_path)), sections=["SourceCounters"], jobs=3)


@pytest.mark.parametrize("scope", ["another-test", None])
def test_processes_outside_the_test_are_not_on_its_gpu(smi, scope):
    """Another test's foreign process, or any process on the machine with FAKE_GPU_USER=1, is not this test's."""
    env = {k: v for k, v in os.environ.items() if k != "FAKE_SMI_SCOPE"}
    env.update(FAKE_GPU_USER="1", FAKE_GPU_TARGET="0", **({"FAKE_SMI_SCOPE": scope} if scope else {}))
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], env=env)
    try:
        a = profile_command(app("vec_add"), ProfileOptions(set="basic"), cfg(smi))
    finally:
        other.kill()
        other.wait()
    assert a.status == "ok" and a.gpu_foreign_before == ()
