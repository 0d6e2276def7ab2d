"""The next whole-program run started early (issue 22: a sweep on 2 GPUs in <= 0.6x the 1-GPU time).

A job announces the kernel it suspects (nsightwrap.fallback.announce); the sweep asks the engine to start the
next whole-program run beside it where a GPU is idle (ProbeEngine.speculate); the next run() takes that job,
or cancels it when the verdict went another way.
"""

from __future__ import annotations

import json
import threading
import time

from helpers import ManualGpus, ManualTask, wait_until

from nsightwrap.fallback.announce import StallAnnouncer, read_suspect, suspected_kernel
from nsightwrap.fallback.executor import ProbeEngine
from nsightwrap.fallback.spec import ExecutorSpec
from nsightwrap.ncu.progress import KernelInProgress, StallRule, WatchState
from nsightwrap.watch.rules import TotalTimeout

# --- what a job announces -----------------------------------------------------------------------


def _state(name: str, last_mark: float) -> WatchState:
    state = WatchState(started_at=0.0, last_output_at=0.0)
    state.current = KernelInProgress(name, 3, last_mark, last_mark)
    return state


def test_a_kernel_is_suspected_after_half_its_allowance_not_before():
    rule = StallRule(timeout=3.0)
    state = _state("gemm", 10.0)
    assert suspected_kernel(state, rule, 11.4) is None
    assert suspected_kernel(state, rule, 11.5) == "gemm"


def test_nothing_is_suspected_between_kernels_in_report_creation_or_without_a_bound():
    rule = StallRule(timeout=3.0)
    idle = WatchState(started_at=0.0, last_output_at=0.0)
    assert suspected_kernel(idle, rule, 100.0) is None
    assert suspected_kernel(_state("<report creation>", 0.0), rule, 100.0) is None
    assert suspected_kernel(_state("gemm", 0.0), TotalTimeout(float("inf")), 100.0) is None


def test_the_announcer_writes_each_new_suspect_once_and_numbers_them(tmp_path):
    now = [0.0]
    path = tmp_path / "suspect.json"
    announcer = StallAnnouncer(path, clock=lambda: now[0])
    rule = StallRule(timeout=2.0)
    state = _state("a", 0.0)
    assert announcer.look(state, rule) is None and read_suspect(path) is None
    now[0] = 1.0
    assert announcer.look(state, rule) == "a" and read_suspect(path) == (read_suspect(path).__class__)("a", 1)
    assert announcer.look(state, rule) is None  # once per kernel
    state.current = KernelInProgress("b", 4, 1.0, 1.0)
    now[0] = 2.5
    assert announcer.look(state, rule) == "b"
    assert (read_suspect(path).kernel, read_suspect(path).count) == ("b", 2)


def test_an_unreadable_announcement_is_none(tmp_path):
    (tmp_path / "s.json").write_text("{half")
    assert read_suspect(tmp_path / "s.json") is None and read_suspect(tmp_path / "missing.json") is None


def test_the_announcers_thread_stops_when_the_run_finishes(tmp_path):
    announcer = StallAnnouncer(tmp_path / "s.json", look_s=0.01)
    announcer.started(_state("a", time.monotonic() - 100), StallRule(timeout=1.0))
    deadline = time.monotonic() + 5
    while read_suspect(tmp_path / "s.json") is None:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    thread = announcer._thread
    announcer.finished(None)
    assert thread is not None and not thread.is_alive()


# --- the engine: speculations taken or dropped ------------------------------------------------------


def _engine(gpus, tmp_path):
    return ProbeEngine(ExecutorSpec("local", poll_s=0.005), gpus, tmp_path, owned=False)


def _announce(job, kernel, count=1):
    with open(job.task.announce, "w") as f:
        json.dump({"kernel": kernel, "count": count}, f)


def _in_thread(fn):
    out = {}
    t = threading.Thread(target=lambda: out.setdefault("r", fn()))
    t.start()
    return t, out


def test_a_suspect_starts_the_next_run_on_the_idle_gpu_and_the_next_run_takes_that_job(tmp_path):
    gpus = ManualGpus(2)
    heard = []
    with _engine(gpus, tmp_path) as e:
        def suspected(kernel):
            heard.append(kernel)
            assert e.speculate(ManualTask(f"without {kernel}"))

        t, out = _in_thread(lambda: e.run(ManualTask("whole"), on_suspect=suspected))
        wait_until(lambda: gpus.jobs, "the first run was not submitted")
        first = gpus.jobs[0]
        assert first.task.announce and first.task.announce.startswith(str(tmp_path))
        _announce(first, "a")
        wait_until(lambda: len(gpus.jobs) == 2, "no speculation started")
        assert heard == ["a"] and gpus.jobs[1].slot == "1"
        first.finished = True
        t.join(5)
        assert out["r"]["options"] == "whole"
        t2, out2 = _in_thread(lambda: e.run(ManualTask("without a")))
        gpus.jobs[1].finished = True
        t2.join(5)
        assert out2["r"]["options"] == "without a" and len(gpus.jobs) == 2  # taken, not run again
        assert [x.speculative for x in e.timeline] == [False, True] and not any(x.dropped for x in e.timeline)


def test_a_speculation_the_verdict_did_not_bear_out_is_cancelled_and_its_gpu_comes_back(tmp_path):
    gpus = ManualGpus(2)
    with _engine(gpus, tmp_path) as e:
        assert e.speculate(ManualTask("without a"))
        wait_until(lambda: gpus.jobs, "not started")
        t, out = _in_thread(lambda: e.run(ManualTask("without b")))  # the run ended hanging on b, not a
        wait_until(lambda: len(gpus.jobs) == 2, "the next run was not submitted")
        gpus.jobs[1].finished = True
        t.join(5)
        assert gpus.job("without a").cancelled and out["r"]["options"] == "without b"
        wait_until(lambda: sorted(gpus.free) == ["0", "1"], "the cancelled speculation's GPU did not come back")
        assert gpus.aside == [] and [x.dropped for x in e.timeline] == [True, False]


def test_no_speculation_without_an_idle_gpu_or_while_tasks_wait(tmp_path):
    gpus = ManualGpus(1)
    with _engine(gpus, tmp_path) as e:
        t, _ = _in_thread(lambda: e.run(ManualTask("whole")))
        wait_until(lambda: gpus.jobs, "not started")
        assert not e.speculate(ManualTask("without a"))  # the one GPU is busy
        gpus.jobs[0].finished = True
        t.join(5)
    two = ManualGpus(2)
    with _engine(two, tmp_path) as e:
        assert e.speculate(ManualTask("x"))
        assert not e.speculate(ManualTask("x"))  # the same one is already there
        e.drop_speculations()
        wait_until(lambda: len(two.free) == 2, "the dropped speculation's GPU did not come back")


def test_drop_speculations_cancels_what_the_last_run_did_not_need(tmp_path):
    gpus = ManualGpus(2)
    with _engine(gpus, tmp_path) as e:
        assert e.speculate(ManualTask("without c"))
        wait_until(lambda: gpus.jobs, "not started")
        e.drop_speculations()
        assert gpus.jobs[0].cancelled
        wait_until(lambda: len(gpus.free) == 2, "GPU not back")
        assert e.counts() == (0, 0, 0)


# --- end to end: the fakes on two fake GPUs -----------------------------------------------------


# The command line's sweep on two GPUs, whose next whole-program run starts before the last one's verdict, is
# test_executor.py's test_cli_sweep_on_the_local_executor_runs_each_probe_as_a_job_on_its_own_gpu (one run of
# submitit jobs for the local executor's checks and this one).


# --- a speculation that fails, races its taking, or outlives the sweep (review of session 8) ---------


def test_a_failed_speculation_is_nobodys_error_and_its_chain_runs_its_own_job(tmp_path):
    gpus = ManualGpus(2)
    with _engine(gpus, tmp_path) as e:
        assert e.speculate(ManualTask("without a"))
        wait_until(lambda: gpus.jobs, "not started")
        gpus.jobs[0].failed = RuntimeError("node failure")
        wait_until(lambda: gpus.aside == ["0"], "the failed speculation's GPU was not set aside")
        t, out = _in_thread(lambda: e.run(ManualTask("without a")))
        wait_until(lambda: len(gpus.jobs) == 2, "the chain's own job was not submitted")
        gpus.jobs[1].finished = True
        t.join(5)
        assert out["r"]["gpu"] == "1" and e.counts() == (0, 0, 1)


def test_a_speculation_taken_while_running_is_retried_elsewhere_when_its_job_fails(tmp_path):
    gpus = ManualGpus(2)
    with _engine(gpus, tmp_path) as e:
        assert e.speculate(ManualTask("without a"))
        wait_until(lambda: gpus.jobs, "not started")
        t, out = _in_thread(lambda: e.run(ManualTask("without a")))  # taken while its job runs
        time.sleep(0.05)
        gpus.jobs[0].failed = RuntimeError("node failure")
        wait_until(lambda: len(gpus.jobs) == 2, "the taken probe was not run again")
        gpus.jobs[1].finished = True
        t.join(5)
        assert not t.is_alive() and out["r"]["gpu"] == "1" and gpus.aside == ["0"]


def test_a_dropped_speculation_never_runs_again_even_when_its_job_fails(tmp_path):
    gpus = ManualGpus(2)
    with _engine(gpus, tmp_path) as e:
        assert e.speculate(ManualTask("without a"))
        wait_until(lambda: gpus.jobs, "not started")
        gpus.jobs[0].deaf = True
        e.drop_speculations()
        gpus.jobs[0].failed = RuntimeError("killed by its cancel")
        wait_until(lambda: e.counts() == (0, 0, 0), "the dropped job was not collected")
        time.sleep(0.05)
        assert len(gpus.jobs) == 1 and gpus.aside == [] and sorted(gpus.free) == ["0", "1"]


def test_closing_stops_a_dropped_speculation_that_still_runs(tmp_path):
    gpus = ManualGpus(2)
    e = _engine(gpus, tmp_path)
    e.cancel_wait_s = 0.1
    assert e.speculate(ManualTask("without a"))
    wait_until(lambda: gpus.jobs, "not started")
    gpus.jobs[0].deaf = True  # still running after its cancel
    e.drop_speculations()
    e.close()
    assert gpus.jobs[0].cancels >= 2 and e.running == []


def test_a_refused_speculation_leaves_the_chain_to_submit_its_own(tmp_path):
    gpus = ManualGpus(2)
    with _engine(gpus, tmp_path) as e:
        gpus.refuse = RuntimeError("sbatch: error: Batch job submission failed")
        assert e.speculate(ManualTask("without a"))
        wait_until(lambda: e.counts() == (0, 0, 0) and not e._speculations, "the refused speculation stayed")
        gpus.refuse = None
        t, out = _in_thread(lambda: e.run(ManualTask("without a")))
        wait_until(lambda: gpus.jobs, "the chain's own job was not submitted")
        gpus.jobs[0].finished = True
        t.join(5)
        assert out["r"]["options"] == "without a"


def test_slurm_never_speculates(tmp_path):
    e = ProbeEngine(ExecutorSpec("slurm", poll_s=0.005), ManualGpus(2), tmp_path, owned=False)
    with e:
        assert not e.speculate(ManualTask("without a"))
