"""What a probe's job costs beyond its attempt on the local executor (issue 22): the node asks nvidia-smi only
for the GPU checks (the machine is the sweep's own: its environment travels with the task), the engine looks at
local jobs often (a poll of a process), and each job's timeline says where the time went."""

from __future__ import annotations

import time

import pytest
from helpers import app, run_config

from nsightwrap.fallback.spec import LOCAL_POLL_S, POLL_S, ExecutorSpec

# The nodes ask nvidia-smi only for the GPU checks (the sweep's environment travels with the task): asserted in
# test_executor.py's test_cli_sweep_on_the_local_executor_runs_each_probe_as_a_job_on_its_own_gpu (the same run
# of submitit jobs).


def test_local_jobs_are_looked_at_often_slurm_jobs_as_before():
    assert ExecutorSpec("local").poll == LOCAL_POLL_S < 0.05 and ExecutorSpec("slurm").poll == POLL_S
    assert ExecutorSpec("local", poll_s=0.3).poll == 0.3


def test_the_store_opens_beside_the_attempt_not_before_it(tmp_path, fake_env, monkeypatch):
    """Opening the store (importing the database library: tenths of a second a job) delays no attempt; the
    probe is recorded once both are done."""
    from nsightwrap.fallback import probejob as probejob_module
    from nsightwrap.fallback.collectives import JobShape
    from nsightwrap.fallback.probejob import ProbeTask, StoreSetting, run_probe
    from nsightwrap.ncu.options import ProfileOptions

    real = probejob_module.HangStore

    def slow_store(setting):
        time.sleep(1.0)
        return real(setting)

    monkeypatch.setattr(probejob_module, "HangStore", slow_store)
    command = app("vec_add")
    task = ProbeTask(tuple(command), ProfileOptions(set="basic"), run_config(tmp_path, env=fake_env),
                     StoreSetting(str(tmp_path / "h.db")), JobShape.of(command))
    reply = run_probe(task)
    times = reply["node_s"]
    assert reply["status"] == "ok" and reply["recorded"]
    assert times["attempt_start"] - times["began"] < 0.9 <= times["ended"] - times["began"]
    with real(tmp_path / "h.db", readonly=True) as store:
        assert [r.kernel for r in store.records()] == ["vec_add"]


def test_a_local_job_is_done_once_its_result_is_written_not_once_its_process_exits(tmp_path):
    """The job's process may take a while to exit (an interpreter with the database library to tear down):
    its result is read at once; a job's error is still raised as submitit raises it."""
    import submitit

    from nsightwrap.fallback.probejob import _LocalJob

    def slow_exit(x):  # a closure: pickled by value, so the job's process needs no test module
        import atexit
        import time as t

        atexit.register(t.sleep, 5)
        if x < 0:
            raise ValueError("boom")
        return x + 1

    ex = submitit.LocalExecutor(folder=tmp_path)
    ex.update_parameters(timeout_min=1)
    job = _LocalJob(ex.submit(slow_exit, 1))
    start = time.monotonic()
    while not job.done():
        assert time.monotonic() - start < 20
        time.sleep(0.01)
    assert job.result() == 2 and not job.job.done()  # its process is still exiting
    failing = _LocalJob(ex.submit(slow_exit, -1))
    with pytest.raises(Exception, match="boom"):
        while not failing.done():
            time.sleep(0.01)
        failing.result()
