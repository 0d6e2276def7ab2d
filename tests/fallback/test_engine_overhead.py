"""What a probe's job costs beyond its attempt on the local executor (issue 22): the node asks nvidia-smi only
for the GPU checks (the machine is the sweep's own: its environment travels with the task), the engine looks at
local jobs often (a poll of a process), and each job's timeline says where the time went."""

from __future__ import annotations

import contextlib
import gc
import os
import time
from types import SimpleNamespace

import pytest
from helpers import HERE, app, run_config

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
    import threading

    from nsightwrap.fallback import probejob as probejob_module
    from nsightwrap.fallback.collectives import JobShape
    from nsightwrap.fallback.probejob import ProbeTask, StoreSetting, run_probe
    from nsightwrap.fallback.session import Session
    from nsightwrap.ncu.options import ProfileOptions

    real, real_run, started, opened = probejob_module.HangStore, Session.run, threading.Event(), []

    def run(self, *args, **kw):  # the attempt's start
        started.set()
        return real_run(self, *args, **kw)

    def slow_store(setting):  # opens only once the attempt has started (or 10 s later: the attempt waited for it)
        started.wait(10.0)
        opened.append(time.time())
        return real(setting)

    monkeypatch.setattr(Session, "run", run)
    monkeypatch.setattr(probejob_module, "HangStore", slow_store)
    command = app("vec_add")
    task = ProbeTask(tuple(command), ProfileOptions(set="basic"), run_config(tmp_path, env=fake_env),
                     StoreSetting(str(tmp_path / "h.db")), JobShape.of(command))
    reply = run_probe(task)
    times = reply["node_s"]
    assert reply["status"] == "ok" and reply["recorded"]
    assert times["began"] <= times["attempt_start"] <= opened[0] <= times["ended"]
    with real(tmp_path / "h.db", readonly=True) as store:
        assert [r.kernel for r in store.records()] == ["vec_add"]


def test_a_local_job_is_done_once_its_result_is_written_not_once_its_process_exits(tmp_path):
    """The job's process may take a while to exit (an interpreter with the database library to tear down):
    its result is read at once; a job's error is still raised as submitit raises it."""
    import submitit

    from nsightwrap.fallback.probejob import _LocalJob

    gate = str(tmp_path / "exit")  # the jobs' processes exit once it is there (or after 60 s)

    def slow_exit(x):  # a closure: pickled by value, so the job's process needs no test module
        import atexit
        import os as o
        import time as t

        def linger():
            deadline = t.monotonic() + 60
            while not o.path.exists(gate) and t.monotonic() < deadline:
                t.sleep(0.02)

        atexit.register(linger)
        if x < 0:
            raise ValueError("boom")
        return x + 1

    ex = submitit.LocalExecutor(folder=tmp_path)
    ex.update_parameters(timeout_min=1)
    try:
        job = _LocalJob(ex.submit(slow_exit, 1))
        start = time.monotonic()
        while not job.done():
            assert time.monotonic() - start < 20
            time.sleep(0.01)
        assert job.result() == 2 and not job.job.done()  # its process is still exiting
    finally:
        open(gate, "w").close()  # seen exiting (or the test failed): its process, and the next job's, may end
    failing = _LocalJob(ex.submit(slow_exit, -1))
    with pytest.raises(Exception, match="boom"):
        while not failing.done():
            time.sleep(0.01)
        failing.result()


def test_a_jobs_process_freezes_its_objects_once_its_probe_is_done(tmp_path, fake_env, monkeypatch):
    """Both backends submit run_probe_job: the probe, then gc.freeze() whatever its outcome. The job's process exits
    right after submitit writes the reply, and its last garbage collections then skip what it imported (submitit,
    numpy, the database library): ~0.2 s of CPU a job (0.88 -> 0.67 s, a local job and its controller)."""
    from nsightwrap.fallback import probejob
    from nsightwrap.fallback.collectives import JobShape
    from nsightwrap.fallback.probejob import LocalBackend, ProbeTask, SlurmBackend, StoreSetting, run_probe_job
    from nsightwrap.fallback.spec import ExecutorSpec
    from nsightwrap.ncu.options import ProfileOptions

    calls = []
    monkeypatch.setattr(gc, "freeze", lambda: calls.append("freeze"))  # this process's objects stay collectable

    def probe(task):
        calls.append(("probe", task))
        if task == "fails":
            raise RuntimeError("the node failed")
        return {"status": "ok"}

    monkeypatch.setattr(probejob, "run_probe", probe)
    assert run_probe_job("t") == {"status": "ok"} and calls == [("probe", "t"), "freeze"]
    with pytest.raises(RuntimeError, match="node failed"):
        run_probe_job("fails")
    assert calls[2:] == [("probe", "fails"), "freeze"]

    submitted = []

    class Executor:  # submitit's executor, as the backends use it
        def submit(self, fn, task):
            submitted.append(fn)
            return SimpleNamespace(job_id="1")

        def update_parameters(self, **params):
            pass

        def batch(self):
            return contextlib.nullcontext()

    command = app("vec_add")
    task = ProbeTask(tuple(command), ProfileOptions(set="basic"), run_config(tmp_path, env=fake_env),
                     StoreSetting(str(tmp_path / "h.db")), JobShape.of(command))
    local = LocalBackend(tmp_path / "local", ["0"])
    local.executors["0"] = Executor()
    local.submit([task])
    monkeypatch.setenv("PATH", f"{HERE / 'fake_slurm'}{os.pathsep}{os.environ['PATH']}")  # submitit looks for srun
    slurm = SlurmBackend(tmp_path / "slurm", ExecutorSpec("slurm"))
    slurm.executor = Executor()
    slurm.submit([task])
    assert submitted == [run_probe_job, run_probe_job]
