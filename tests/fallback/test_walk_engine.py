"""The walk's independent jobs on the cluster engine (issue 22, item 2): `Session(executor=...)`, submitit's
LocalExecutor with the fakes (two fake GPUs), against the serial walk."""

from __future__ import annotations

import os
import uuid

import pytest
from helpers import FAKE_SMI_DIR, app, attempt_rows, run_config

from nsightwrap.fallback.session import Session
from nsightwrap.fallback.spec import ExecutorSpec
from nsightwrap.fallback.walk import walk_ladder
from nsightwrap.ncu.options import ProfileOptions
from nsightwrap.store.hangstore import HangStore

# a hangs whenever SourceCounters is collected, b whenever Occupancy is: they step down to different rungs.
TWO_HANGS = app("vec_add", "a@hang-if=SourceCounters", "vec_add", "b@hang-if=Occupancy", "block_reduce")


@pytest.fixture
def smi(fake_env, monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", f"{FAKE_SMI_DIR}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_GPU_TARGET", "1")
    monkeypatch.setenv("FAKE_SMI_SCOPE", uuid.uuid4().hex)
    monkeypatch.setenv("FAKE_SMI_GPUS", "2")
    return tmp_path


def cfg(tmp_path):
    return run_config(tmp_path, report_dir=str(tmp_path / "r"), env=dict(os.environ), check_gpu=True,
                      stall_timeout_given=True)


def steps(result):
    return [(s.job, s.rung.name, s.skipped, s.attempt.status if s.attempt else None,
             s.attempt.stalled_kernel if s.attempt else None) for s in result.steps]


def records(path):
    with HangStore(path) as store:
        return sorted((r.kernel, r.rung or "", r.ladder or "", r.outcome, r.key) for r in store.records())


def walk(tmp_path, name, executor=None):
    with HangStore(tmp_path / f"{name}.db") as store:
        session = Session.open(TWO_HANGS, cfg(tmp_path), store=store, executor=executor)
        return walk_ladder(session, ProfileOptions(set="full"), "default", reader=attempt_rows)


def test_the_walk_on_two_gpus_gives_the_serial_walks_result_and_its_jobs_overlap(smi, tmp_path):
    serial = walk(tmp_path, "serial")
    engine = walk(tmp_path, "engine", ExecutorSpec("local", jobs=2, folder=str(tmp_path / "jobs")))
    assert steps(engine) == steps(serial)
    assert {s.attempt.stalled_kernel for s in serial.steps if s.attempt} >= {"a", "b"}
    assert (engine.status, engine.unprofiled, engine.stopped) == (serial.status, serial.unprofiled, serial.stopped)
    assert engine.df.sort_values(list(engine.df.columns)).reset_index(drop=True).equals(
        serial.df.sort_values(list(serial.df.columns)).reset_index(drop=True))
    assert records(tmp_path / "engine.db") == records(tmp_path / "serial.db")
    assert serial.jobs == [] and len(engine.jobs) == len(engine.attempts)
    assert {j.where for j in engine.jobs} == {"0", "1"}
    # a's and b's lines ran at once, each on its own GPU (the engine's timeline: the attempts' times on the node).
    span = [(j.chain, j.node["attempt_start"], j.node["attempt_end"], j.where) for j in engine.jobs]
    assert any(s1 < e2 and s2 < e1 and w1 != w2 for c1, s1, e1, w1 in span for c2, s2, e2, w2 in span if c1 != c2)
