"""The walk on the engine learns the calibration measured on the node (FIX2): without an explicit stall timeout
the first stall is calibrated in a job, and the walk's later decisions (a range-replay rung skipped when the
program marks no range) must see that calibration as the serial walk does. The engine's jobs run on
helpers.ThreadGpus (run_probe in threads, the task and reply pickled as submitit does): the calibration still
comes back only in the job's reply."""

from __future__ import annotations

import os

import pytest
from helpers import FAKE_NSYS, ThreadGpus, app, attempt_rows, beside, run_config
from helpers import store_records as records
from helpers import walk_steps as steps

from nsightwrap.fallback import walk as walk_module
from nsightwrap.fallback.executor import ProbeEngine
from nsightwrap.fallback.session import Session
from nsightwrap.fallback.spec import ExecutorSpec
from nsightwrap.fallback.walk import NO_RANGES, walk_ladder
from nsightwrap.ncu.options import ProfileOptions
from nsightwrap.store.hangstore import HangStore

# h hangs whenever ncu measures it; the program calls no cudaProfilerStart.
HANGS_NO_RANGES = app("vec_add", "h@hang", "block_reduce")


@pytest.fixture
def smi(fake_gpus, monkeypatch):
    monkeypatch.setenv("NSIGHTWRAP_NSYS", str(FAKE_NSYS))  # calibrated by nsys: a whole run, its API calls seen
    return fake_gpus


def walk(tmp_path, name, executor=None):
    config = run_config(tmp_path, report_dir=str(tmp_path / "r"), env=dict(os.environ), check_gpu=True)
    with HangStore(tmp_path / f"{name}.db") as store:
        session = Session.open(HANGS_NO_RANGES, config, store=store, executor=executor)
        return walk_ladder(session, ProfileOptions(set="full"), "default", reader=attempt_rows)


def test_the_engines_walk_learns_the_nodes_calibration_and_skips_range_replay_as_the_serial_walk(smi, tmp_path,
                                                                                                 monkeypatch):
    monkeypatch.setattr(walk_module, "open_engine", lambda spec, jobs, on_counts=None: ProbeEngine(
        spec, ThreadGpus(), tmp_path, owned=False, on_counts=on_counts))  # (the serial walk opens no engine)
    with beside(walk, tmp_path, "serial") as serial_walk:  # the serial walk at the same time, in a thread of its own
        engine = walk(tmp_path, "engine", ExecutorSpec("local", jobs=2, poll_s=0.01))
        serial = serial_walk.result()
    skipped = [s for s in serial.steps if s.skipped and s.rung.name == "range-replay"]
    assert [(s.job, s.skipped) for s in skipped] == [("h", NO_RANGES)]
    assert steps(engine) == steps(serial)
    assert len(engine.attempts) == len(serial.attempts)
    assert (engine.status, engine.unprofiled, engine.stopped) == (serial.status, serial.unprofiled, serial.stopped)
    assert records(tmp_path / "engine.db") == records(tmp_path / "serial.db")
