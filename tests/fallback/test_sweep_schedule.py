"""The schedule of a sweep on the cluster engine, on a virtual clock (issue 22: 2 GPUs in <= 0.6x the 1-GPU time).

The shape of the real 2-GPU run (`kernels.cu twohang 60`, set basic): three whole-program runs (W = 6, 6, 3 s:
hang on A, hang on B, ok), then per kernel a chain of three dependent probes of 5 s (all hang), each job paying
a fixed overhead (the job's process). The sweep and the engine are the real ones; only the backend is fake:
its jobs end on a virtual clock, which a driver moves to the next job's end once every chain alive waits on a
job (so the makespan is exact, whatever the load of this machine).
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from helpers import app, run_config

from nsightwrap.fallback import sweep as sweep_module
from nsightwrap.fallback.executor import ProbeEngine
from nsightwrap.fallback.session import Session
from nsightwrap.fallback.spec import ExecutorSpec
from nsightwrap.fallback.sweep import sweep_sections
from nsightwrap.ncu.attempt import Attempt
from nsightwrap.ncu.progress import Stall

BASIC = ["LaunchStats", "Occupancy", "SpeedOfLight", "WorkloadDistribution"]
WHOLE = (6.0, 6.0, 3.0)  # seconds of the whole-program runs: hang on A, hang on B, ok
FOUND = ("A", "B", None)
PROBE = 5.0
PROBES_PER_KERNEL = 3  # LaunchStats+Occupancy, LaunchStats, one metric: all hang


def _attempt(kernel, seconds):
    stall = Stall(kernel, 0, "0%..", seconds, seconds, seconds, True, False) if kernel else None
    return Attempt("hang" if kernel else "ok", "", (), 0, (), stall, None, False, seconds, None, (), (), (), "", "", "")


class _Job:
    def __init__(self, backend, reply, end, what):
        self.backend, self.reply, self.end, self.what = backend, reply, end, what
        self.job_id = f"sim-{what}"

    def done(self):
        return self.backend.now >= self.end

    def result(self):
        self.backend.collected(self)
        return self.reply

    def cancel(self, check=True):
        pass


class VirtualGpus:
    """GPUs as slots on a virtual clock; each job's (what, GPU, start, end) in `log`."""

    def __init__(self, gpus, overhead):
        self.free, self.overhead = list(gpus), overhead
        self.now = 0.0
        self.lock = threading.Lock()
        self.log: list[tuple[str, str, float, float]] = []
        self.running: list[_Job] = []
        self.wholes = 0
        self.live = {"whole": PROBES_PER_KERNEL}  # chain -> jobs it has still to collect
        self.engine = None
        self.blocked = 0  # chains' threads inside engine.run (waiting on their job)
        self.collected_n = self.returned_n = 0  # jobs collected; engine.run calls returned (their chain acts next)

    def attach(self, engine):
        """The engine, its run() counted: a chain waits while its thread is inside run()."""
        self.engine, inner = engine, engine.run

        def run(*args, **kw):
            with self.lock:
                self.blocked += 1
            try:
                return inner(*args, **kw)
            finally:
                with self.lock:
                    self.blocked -= 1
                    self.returned_n += 1

        engine.run = run

    def settled(self) -> bool:
        """Every chain alive waits inside engine.run and no reply is on its way to a chain (collected, its run()
        not yet returned, or returned and not yet asked again): on the virtual clock a chain acts at once, so the
        clock does not move before it has (under load its thread may take a while). Meanwhile the GPU it freed is
        the engine's to keep for it (ProbeEngine's claims)."""
        return self.blocked == len(self.live) and self.collected_n == self.returned_n

    def room(self):
        return len(self.free)

    def submit(self, tasks):
        out = []
        with self.lock:
            for task in tasks:
                g = self.free.pop(0)
                if task.options.launch_count == 1:  # a kernel's probe (one launch of it alone)
                    what, kernel, seconds = task.options.kernel.pattern, task.options.kernel.pattern, PROBE
                else:
                    what, kernel, seconds = "whole", FOUND[self.wholes], WHOLE[self.wholes]
                    self.wholes += 1
                end = self.now + seconds + self.overhead
                reply = {"host": "sim", "gpu": g, "status": "x", "attempt": _attempt(kernel, seconds),
                         "node_s": {}}
                job = _Job(self, reply, end, what)
                self.log.append((what, g, self.now, end))
                self.running.append(job)
                out.append((job, g))
        return out

    def collected(self, job):
        with self.lock:
            self.collected_n += 1
            self.running.remove(job)
            self.live[job.what] -= 1
            if not self.live[job.what]:
                del self.live[job.what]
            if job.what == "whole" and job.reply["attempt"].stalled_kernel:
                self.live[job.reply["attempt"].stalled_kernel] = PROBES_PER_KERNEL

    def release(self, slot):
        self.free.append(slot)

    def set_aside(self, slot, job, reply):
        raise AssertionError("nothing fails here")

    def exhausted(self):
        return None

    def step(self) -> bool:
        """The clock moved to the next job's end, when every chain alive waits on a job that cannot start
        before then; False when not yet."""
        if self.engine is None:
            return False
        queued, _, _ = self.engine.counts()
        with self.lock:
            # Running: the jobs not yet collected (the engine may still count one whose reply its chain is about
            # to act on: moving the clock then would start the chain's next job late).
            if not self.running or queued + len(self.running) != len(self.live) or (queued and self.free):
                return False
            if not self.settled():
                return False
            if any(j.done() for j in self.running):
                return False  # the dispatcher has yet to collect it
            self.now = min(j.end for j in self.running)
            return True


def simulate(monkeypatch, tmp_path: Path, gpus: int, overhead: float):
    backend = VirtualGpus([str(g) for g in range(gpus)], overhead)

    def open_engine(spec, jobs, on_counts=None):
        backend.attach(ProbeEngine(spec, backend, tmp_path, owned=False, on_counts=on_counts))
        return backend.engine

    monkeypatch.setattr(sweep_module, "open_engine", open_engine)
    session = Session.open(app("A", "B"), run_config(tmp_path), executor=ExecutorSpec("local", poll_s=0.001, jobs=gpus))
    out = {}
    sweep = threading.Thread(target=lambda: out.setdefault("r", sweep_sections(
        session, sections=BASIC)))
    sweep.start()
    moved = time.monotonic()
    while sweep.is_alive():
        if backend.step():
            moved = time.monotonic()
        assert time.monotonic() - moved < 20, f"the simulation is stuck: {backend.log}"
        time.sleep(0.001)
    sweep.join()
    return out["r"], backend


@pytest.mark.parametrize("overhead", [0.5, 1.0, 3.0])
def test_two_gpus_take_at_most_0_6_of_one_gpus_time(monkeypatch, tmp_path, fake_env, overhead):
    one, one_gpu = simulate(monkeypatch, tmp_path, 1, overhead)
    two, two_gpus = simulate(monkeypatch, tmp_path, 2, overhead)
    span1, span2 = max(e for *_, e in one_gpu.log), max(e for *_, e in two_gpus.log)
    jobs = len(WHOLE) + 2 * PROBES_PER_KERNEL
    assert span1 == pytest.approx(sum(WHOLE) + 2 * PROBES_PER_KERNEL * PROBE + jobs * overhead)
    # The critical path and no more: the first two whole runs, then B's chain, each job with its overhead.
    assert span2 == pytest.approx(WHOLE[0] + WHOLE[1] + PROBES_PER_KERNEL * (PROBE + overhead) + 2 * overhead), \
        two_gpus.log
    assert span2 / span1 <= 0.6, two_gpus.log
    assert {k.kernel: k.singles for k in one.kernels} == {k.kernel: k.singles for k in two.kernels}
    # Every job's GPU is recorded, in the log and in the result (whole-program runs included); never two at once.
    assert two.whole_gpus and all(two.whole_gpus) and all(p.gpu for k in two.kernels for p in k.probes)
    assert "GPU" in two.table().splitlines()[1] and all(r["gpu"] for r in two.to_dict()["whole_program_runs"])
    for g in ("0", "1"):
        spans = sorted((s, e) for _, where, s, e in two_gpus.log if where == g)
        assert all(e <= s2 for (_, e), (s2, _) in zip(spans, spans[1:])), spans
    assert {where for _, where, _, _ in two_gpus.log} == {"0", "1"}


def test_the_engine_keeps_each_jobs_timeline(monkeypatch, tmp_path, fake_env):
    _, backend = simulate(monkeypatch, tmp_path, 2, 1.0)
    timeline = backend.engine.timeline
    assert [t.chain for t in timeline].count("") == 3 and len(timeline) == 9
    assert all(t.where in ("0", "1") and t.seen is not None and t.seen >= t.submitted for t in timeline)
