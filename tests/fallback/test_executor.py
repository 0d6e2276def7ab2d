"""Sweeps on a cluster engine (nsightwrap.fallback.executor): submitit's LocalExecutor with the fakes."""

from __future__ import annotations

import json
import os
import stat
import sys
import threading
import time
from types import SimpleNamespace

import pytest
from helpers import HERE, ROOT, GpuSlots, alive_in_scope, app, cli_main, ctrl_c_sweep, run_config

from nsightwrap.errors import NsightwrapError
from nsightwrap.fallback.executor import ProbeEngine
from nsightwrap.fallback.probejob import StoreSetting, store_setting_of
from nsightwrap.fallback.session import Session
from nsightwrap.fallback.spec import ExecutorSpec
from nsightwrap.fallback.sweep import sweep_sections
from nsightwrap.store.hangstore import HangStore
from nsightwrap.store.keys import Environment, ProfileKey

FAKE_SLURM_DIR = HERE / "fake_slurm"


def cfg(tmp_path, **kw):
    return run_config(tmp_path, report_dir=str(tmp_path / "r"), env=dict(os.environ), check_gpu=True, **kw)


def test_local_executor_refuses_more_jobs_than_gpus(fake_gpus, tmp_path):
    with pytest.raises(NsightwrapError, match="needs 3 GPU"):
        sweep_sections(Session.open(app("a"), cfg(tmp_path), executor=ExecutorSpec("local", jobs=3)),
                       sections=["SourceCounters"])


def test_a_store_password_travels_in_a_0600_file_never_in_the_task(tmp_path):
    s = StoreSetting.keep("postgresql://team:s3cret@db.example/hangs", tmp_path)
    assert "s3cret" not in s.public and s.public == "postgresql://team@db.example/hangs"
    assert stat.S_IMODE(os.stat(s.secret_file).st_mode) == 0o600
    assert s.setting() == "postgresql://team:s3cret@db.example/hangs"
    assert StoreSetting.keep("/home/u/hangs.db", tmp_path) == StoreSetting("/home/u/hangs.db")



def test_a_probe_reopens_the_users_store_on_the_node_whichever_backend(store_setting, tmp_path):
    """The setting a probe's job gets opens the same store again: a database's full URL (its password then goes
    into the 0600 file, not the task), never the masked one a database store prints."""
    with HangStore(store_setting) as store:
        setting = store_setting_of(store)
        kept = StoreSetting.keep(setting, tmp_path)
        assert setting == store_setting
        with HangStore(kept.setting()) as again:
            again.record("k", ProfileKey(set="full"), "hang", env=Environment(gpu="G", driver="d", ncu_version="n"))
        assert [r.kernel for r in store.records()] == ["k"]

# --- the dispatcher's rules, with a fake backend (no submitit) ---------------------------------------


class FakeJob:
    def __init__(self, task, slot, outcome):
        self.task, self.slot, self.outcome, self.cancelled = task, slot, outcome, False
        self.job_id = f"job-{slot}"

    def done(self):
        return True

    def result(self):
        if isinstance(self.outcome, Exception):
            raise self.outcome
        return self.outcome


class FakeBackend(GpuSlots):
    """GPUs as slots; `plan` says what each job does, by GPU: an exception, 'left' (GPU keeps processes), or ok."""

    def __init__(self, gpus, plan, hold=False):
        super().__init__(gpus)
        self.plan, self.hold, self.jobs = plan, hold, []

    def submit(self, tasks):
        out = []
        for t in tasks:
            g = self.free.pop(0)
            what = self.plan.get(g)
            left = ("4242 app",) if what == "left" else ()
            reply = {"host": "h", "gpu": g, "status": "ok", "attempt": SimpleNamespace(gpu_left_after=left)}
            outcome = what if isinstance(what, Exception) else reply
            job = FakeJob(t, g, outcome)
            if self.hold:
                job.done = lambda: False
            self.jobs.append(job)
            out.append((job, g))
        return out



def engine(backend, tmp_path, retries=2, lines=None):
    return ProbeEngine(ExecutorSpec("local", retries=retries, poll_s=0.01), backend, tmp_path, owned=False,
                       on_counts=None if lines is None else lines.append)


def test_a_failed_job_sets_its_gpu_aside_and_the_probe_runs_again_on_another(tmp_path):
    backend = FakeBackend(["0", "1"], {"0": RuntimeError("node failure")})
    lines = []
    with engine(backend, tmp_path, lines=lines) as e:
        reply = e.run("probe")
    assert reply["gpu"] == "1" and backend.aside == ["0"]
    assert [j.slot for j in backend.jobs] == ["0", "1"]
    assert any("finished" in line for line in lines) and any("1 running" in line for line in lines)


def test_a_gpu_that_keeps_processes_is_set_aside_too(tmp_path):
    backend = FakeBackend(["0", "1"], {"0": "left"})
    with engine(backend, tmp_path) as e:
        assert e.run("probe")["gpu"] == "1"
    assert backend.aside == ["0"]


def test_retries_are_bounded_and_the_error_says_where(tmp_path):
    backend = FakeBackend(["0", "1", "2"], {g: RuntimeError("job error") for g in "012"})
    with engine(backend, tmp_path, retries=1) as e, pytest.raises(NsightwrapError, match="failed 2 time") as err:
        e.run("probe")
    assert "GPU 0" in str(err.value) and "GPU 1" in str(err.value) and backend.aside == ["0", "1"]


def test_no_gpu_left_ends_the_probe_with_advice(tmp_path):
    backend = FakeBackend(["0"], {"0": "left"})
    with engine(backend, tmp_path, retries=3) as e, pytest.raises(NsightwrapError, match="every GPU was set aside"):
        e.run("probe")


def test_cancel_cancels_every_running_and_queued_job(tmp_path):
    backend = FakeBackend(["0"], {}, hold=True)
    e = engine(backend, tmp_path)
    errors = []

    def one():
        try:
            e.run("probe")
        except KeyboardInterrupt as x:
            errors.append(x)

    threads = [threading.Thread(target=one) for _ in range(3)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 10
    while e.counts() != (2, 1, 0):
        assert time.monotonic() < deadline, e.counts()
        time.sleep(0.01)
    backend.jobs[0].cancel = lambda check=True: setattr(backend.jobs[0], "cancelled", True)
    e.cancel()
    e.close()
    for t in threads:
        t.join(5)
    assert len(errors) == 3 and backend.jobs[0].cancelled


# --- the command line ---------------------------------------------------------------------------


def test_ctrl_c_cancels_the_jobs_and_the_sweep_ends_interrupted(fake_gpus, tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    ctrl_c_sweep(["sweep-sections", "--executor", "local", "--section", "SourceCounters", "--json",
                  "--stall-timeout", "60", "--store", str(tmp_path / "hangs.db"), "--no-preflight", "--",
                  *app("a@hang")], env)
    deadline = time.monotonic() + 10
    while alive_in_scope(os.environ["FAKE_SMI_SCOPE"]):
        assert time.monotonic() < deadline, "processes left after the sweep"
        time.sleep(0.1)


def test_cli_sweep_on_the_local_executor_runs_each_probe_as_a_job_on_its_own_gpu(fake_gpus, tmp_path, capsys,
                                                                                   monkeypatch):
    """Same culprit as the thread pool; every probe a job pinned to GPU 0 or 1; all in the user's store. One
    section, one kernel hanging with it: 3 jobs (the whole program, the next whole-program run beside it, a's probe
    without the section; two kernels were 5 jobs and 3 more in the second sweep, each job ~1 s of CPU: the sweep's
    search is tested in test_sweep.py, its probes of section sets on the engine in test_sweep_schedule.py); both
    sweeps through main(argv) in this process (the jobs are real processes; the command line's own process, its
    exit status and signals, is test_ctrl_c_cancels_the_jobs_... and test_engine_cancel_ignored.py's), the second
    one (serial) answered from the store.

    The same run (its jobs are the suite's dearest: one run for three checks) shows as well:
    - the next whole-program run starts before the last one's verdict (test_speculation.py: a speculation, taken,
      on the idle GPU: the run without a starts while a's run waits for its verdict), the culprit unchanged;
    - the nodes ask nvidia-smi only for the GPU checks (test_engine_overhead.py): one --query-gpu in all (the
      sweep's own environment, asked once, travels with each task), none per probe; every record keeps it."""
    smi = fake_gpus / "smi.log"
    monkeypatch.setenv("FAKE_SMI_LOG", str(smi))
    monkeypatch.setenv("PYTHONPATH", str(ROOT))  # the jobs' python imports this nsightwrap
    folder = tmp_path / "jobs"
    serial = ["sweep-sections", "--section", "SourceCounters", "--json", "--store", str(tmp_path / "hangs.db"),
              "--no-preflight", "--stall-timeout", "1.2",  # (hangs calibrated on a node: the Slurm tests)
              "--", *app("a@hang-if=SourceCounters")]
    code, out, err = cli_main([*serial[:1], "--executor", "local", "--executor-folder", str(folder), *serial[1:]],
                              capsys)
    assert code == 0, err
    doc = json.loads(out)
    assert {k["kernel"]: k["hang_alone"] for k in doc["kernels"]} == {"a": ["SourceCounters"]}
    assert "running" in err and "finished" in err  # the live line
    probes = [p for k in doc["kernels"] for p in k["probes"] if not p["from_store"]]
    assert probes and {p["gpu"] for p in probes} <= {"0", "1"}  # each pinned to one GPU
    assert {j["where"] for j in doc["engine_jobs"]} == {"0", "1"}  # both GPUs used
    assert len(list(folder.rglob("*_result.pkl"))) >= len(probes)  # each probe was a submitit job
    # The speculation: the run without a started before a's run had its verdict.
    wholes = [j for j in doc["engine_jobs"] if j["chain"] == ""]
    assert any(j["speculative"] and not j["dropped"] for j in wholes), doc["engine_jobs"]
    first, second = wholes[0], next(j for j in wholes if j["speculative"])
    assert second["submitted_s"] < first["seen_s"], "the second whole-program run did not start before the first's end"
    # nvidia-smi: the environment asked once; every record (one per probe, on the nodes) keeps it.
    calls = smi.read_text().splitlines()
    assert sum(c.startswith("--query-gpu") for c in calls) == 1, calls
    with HangStore(tmp_path / "hangs.db", readonly=True) as store:
        records = store.records()
    assert len({(x.gpu, x.driver, x.host, x.gpus) for x in records}) == 1 and records[0].gpu == "NVIDIA H200"
    # The probes were recorded on the "node" (run_probe), in the store given, as a sweep here looks them up: a
    # second sweep asks nothing (a serial one: its whole-program runs as jobs were 2 more, ~2 s of CPU; the lookup
    # is the same code, _ProbeRunner.probe, on the engine or not).
    code, out, err = cli_main(serial, capsys)
    assert code == 0, err
    assert all(p["from_store"] for k in json.loads(out)["kernels"] for p in k["probes"])


def test_slurm_options_need_the_slurm_executor(fake_gpus, tmp_path, capsys):
    code, out, err = cli_main(["sweep-sections", "--slurm-partition", "gpu", "--", *app("a")], capsys)
    assert code == 2 and "needs --executor slurm" in err


# --- Slurm, with fake sbatch/srun/sacct/scancel (tests/fake_slurm) -----------------------------------


@pytest.fixture
def fake_slurm(fake_gpus, monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", f"{FAKE_SLURM_DIR}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_SLURM_DIR", str(tmp_path / "slurm"))
    monkeypatch.setenv("PYTHONPATH", str(ROOT))  # the job's python imports this nsightwrap
    # submitit's sacct watcher is one for the process and keeps the states of finished jobs; the fake numbers
    # each test's jobs from 1000 again, so a job would be "done" at once with an earlier test's state
    from submitit.slurm.slurm import SlurmInfoWatcher, SlurmJob

    monkeypatch.setattr(SlurmJob, "watcher", SlurmInfoWatcher(delay_s=600))
    return tmp_path / "slurm"


def test_slurm_executor_submits_jobs_with_its_options_and_runs_a_failed_one_again_without_its_node(
        fake_slurm, tmp_path, monkeypatch):
    """One sweep on fake Slurm whose first job fails (a node failure: no result): the same culprit as the thread
    pool, every job's script with the options, the failed job run again with its node excluded. (One run of one
    section: each job is ~0.8 s of CPU; a second kernel added only jobs, a second section only a probe of a
    section set, ~2.4 s of CPU: the sweep's search is test_sweep.py's, its section sets on the engine
    test_sweep_schedule.py's.)"""
    monkeypatch.setenv("FAKE_SLURM_FAIL_FIRST", "1")
    # submitit waits up to 15 s for a failed job's result file (slow shared file systems); the fake's file
    # system is local, and the failed job never writes one: 0 as submitit's own tests do (saves ~15 s)
    monkeypatch.setattr("submitit.core.core.Job._results_timeout_s", 0)
    spec = ExecutorSpec("slurm", partition="gpu", time="10", options=(("constraint", "h100"),),
                        folder=str(tmp_path / "jobs"), poll_s=0.1)
    with HangStore(tmp_path / "hangs.db") as store:
        r = sweep_sections(Session.open(app("a@hang-if=SourceCounters"), cfg(tmp_path), store=store, executor=spec),
                           sections=["SourceCounters"])
    assert {k.kernel: k.singles for k in r.kernels} == {"a": ["SourceCounters"]}
    probes = [p for k in r.kernels for p in k.probes if not p.from_store]
    assert probes and all(p.gpu.endswith(":-") for p in probes)  # host:GPU (Slurm chose the GPU)
    # One sbatch per round of pending probes (an array when several were pending at once), each with the options.
    scripts = [p.read_text() for p in (tmp_path / "jobs").rglob("*submission*.sh")]
    assert scripts and all("--partition=gpu" in s and "--gpus-per-node=1" in s and "--constraint=h100" in s
                           and "--time=10" in s for s in scripts)
    excluded = {p.name: p.read_text() for p in fake_slurm.glob("*.exclude")}
    assert excluded.pop("1000.exclude") == "" and set(excluded.values()) == {"fakenode"}


def test_without_submitit_the_error_says_how_to_install_it(fake_gpus, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "submitit", None)  # import submitit raises ImportError
    with pytest.raises(NsightwrapError, match=r"nsightwrap\[cluster\]"):
        sweep_sections(Session.open(app("a"), cfg(tmp_path), executor=ExecutorSpec("local")),
                       sections=["SourceCounters"])


def test_on_the_engine_a_hanging_kernel_is_investigated_beside_the_next_whole_program_run(tmp_path):
    """The second whole-program run waits until kernel a's first probe has begun: only a pipelined sweep ends."""
    from nsightwrap.fallback import sweep as sweep_mod
    from nsightwrap.fallback.sweepresult import HUNG, WORKS, Probe, SweepResult

    a_probed = threading.Event()
    whole = iter([("hang", "a"), ("hang", "b"), ("ok", None)])

    class Runner:
        shape = SimpleNamespace(multi=False)
        context = SimpleNamespace(listener=SimpleNamespace(stage=lambda text: None))
        cancel = threading.Event()

        def watched(self, opts, on_suspect=None):
            status, kernel = next(whole)
            if kernel == "b":
                assert a_probed.wait(10), "kernel a was not probed while the whole program ran again"
            return SimpleNamespace(status=status, stalled_kernel=kernel, reason=""), "0"

        def chain(self, started, name, investigation, *args, **kw):
            started.set()  # no engine here: the chain counts as queued at once
            return investigation(*args, **kw)

        def probe(self, kernel, sections, metrics=()):
            if kernel == "a":
                a_probed.set()
            hung = "SourceCounters" in sections
            return Probe(kernel, frozenset(sections), HUNG if hung else WORKS, 0.0)

        def least(self, kernel):
            return Probe(kernel, frozenset(), WORKS, 0.0, metrics=("m",))

        def drop_speculations(self):
            pass

        def end_chain(self, chain):
            pass

    result = SweepResult(("SourceCounters", "Occupancy"))
    sweep_mod._pipelined(Runner(), ["SourceCounters", "Occupancy"], None, result, SimpleNamespace(parallel=2))
    assert {k.kernel: k.singles for k in result.kernels} == {"a": ["SourceCounters"], "b": ["SourceCounters"]}
