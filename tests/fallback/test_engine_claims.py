"""A chain just answered keeps its claim on the GPU it freed (ProbeEngine, CLAIM_S): a task of a chain that would
go after it does not take that GPU while the chain's thread decides on its reply (a loaded machine, a remote store
to ask first); chain_done() ends the claim at once, and a claim runs out."""

from __future__ import annotations

import threading
import time

from helpers import ManualGpus, ManualTask, wait_until

from nsightwrap.fallback.executor import ProbeEngine
from nsightwrap.fallback.spec import ExecutorSpec


def _engine(gpus, tmp_path, claim_s=5.0):
    e = ProbeEngine(ExecutorSpec("local", poll_s=0.005), gpus, tmp_path, owned=False)
    e.claim_s = claim_s
    return e


def _run(e, task, chain):
    t = threading.Thread(target=e.run, args=(task,), kwargs={"chain": chain})
    t.start()
    return t


def _served_twice(e, gpus, chain):
    """Chain `chain` has had two jobs (it would go after a chain with one)."""
    for n in range(2):
        t = _run(e, ManualTask(f"{chain}{n}"), chain)
        wait_until(lambda n=n: len(gpus.jobs) == n + 1, "not submitted")
        gpus.jobs[-1].finished = True
        t.join(5)


def test_the_gpu_waits_for_the_chain_just_answered_not_for_a_later_one(tmp_path):
    gpus = ManualGpus(1)
    with _engine(gpus, tmp_path) as e:
        _served_twice(e, gpus, "busy")  # chain "busy": 2 jobs so far
        a = _run(e, ManualTask("a0"), "a")  # chain "a": its first job
        wait_until(lambda: len(gpus.jobs) == 3, "a0 not submitted")
        waiting = _run(e, ManualTask("busy2"), "busy")  # queued behind a0
        gpus.jobs[-1].finished = True  # a0 ends: chain "a" (1 job) would go before "busy" (2)
        a.join(5)
        time.sleep(0.2)
        assert [j.task.options for j in gpus.jobs] == ["busy0", "busy1", "a0"], "the claimed GPU was given away"
        a2 = _run(e, ManualTask("a1"), "a")  # chain "a" asks again: it gets the GPU first
        wait_until(lambda: len(gpus.jobs) == 4, "a1 not submitted")
        assert gpus.jobs[-1].task.options == "a1"
        gpus.jobs[-1].finished = True
        a2.join(5)
        e.chain_done("a")  # nothing more: busy2 at once
        wait_until(lambda: len(gpus.jobs) == 5, "busy2 not submitted after chain_done")
        gpus.jobs[-1].finished = True
        waiting.join(5)


def test_a_claim_runs_out(tmp_path):
    gpus = ManualGpus(1)
    with _engine(gpus, tmp_path, claim_s=0.3) as e:
        _served_twice(e, gpus, "busy")
        a = _run(e, ManualTask("a0"), "a")
        wait_until(lambda: len(gpus.jobs) == 3, "a0 not submitted")
        waiting = _run(e, ManualTask("busy2"), "busy")
        gpus.jobs[-1].finished = True
        a.join(5)
        began = time.monotonic()
        wait_until(lambda: len(gpus.jobs) == 4, "busy2 never got the GPU")
        assert time.monotonic() - began >= 0.2
        gpus.jobs[-1].finished = True
        waiting.join(5)


def test_no_claim_holds_back_a_chain_that_goes_first_anyway(tmp_path):
    gpus = ManualGpus(1)
    with _engine(gpus, tmp_path) as e:
        t = _run(e, ManualTask("x0"), "x")
        wait_until(lambda: gpus.jobs, "x0 not submitted")
        other = _run(e, ManualTask("y0"), "y")  # chain "y": no job yet, goes before "x" (1 job)
        gpus.jobs[0].finished = True
        t.join(5)
        wait_until(lambda: len(gpus.jobs) == 2, "y0 was held back by x's claim")
        gpus.jobs[1].finished = True
        other.join(5)
