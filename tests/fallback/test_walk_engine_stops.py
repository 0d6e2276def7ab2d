"""A walk on the engine whose engine gives up (every GPU set aside) ends as the serial walk ends on a GPU that keeps
processes: `stopped` says why, the steps so far are kept, an answer with its own status (not a usage error)."""

from __future__ import annotations

import os
import uuid
from dataclasses import replace

import pytest
from helpers import FAKE_SMI_DIR, app, attempt_rows, run_config

from nsightwrap.fallback import walk as walk_module
from nsightwrap.fallback.executor import ProbeEngine
from nsightwrap.fallback.probejob import run_probe
from nsightwrap.fallback.session import Session
from nsightwrap.fallback.spec import ExecutorSpec
from nsightwrap.fallback.walk import walk_ladder
from nsightwrap.ncu.options import ProfileOptions


@pytest.fixture
def smi(fake_env, monkeypatch):
    monkeypatch.setenv("PATH", f"{FAKE_SMI_DIR}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_GPU_TARGET", "1")
    monkeypatch.setenv("FAKE_SMI_SCOPE", uuid.uuid4().hex)
    monkeypatch.setenv("FAKE_SMI_GPUS", "2")


class _Job:
    def __init__(self, reply):
        self.reply, self.job_id = reply, "inline"

    def done(self):
        return True

    def result(self):
        return self.reply

    def cancel(self, check=True):
        pass


class KeepingGpus:
    """Each job run at once on its GPU; after the first attempt every GPU keeps processes."""

    def __init__(self):
        self.free, self.aside, self.runs = ["0", "1"], [], 0

    def room(self):
        return len(self.free)

    def submit(self, tasks):
        out = []
        for task in tasks:
            g = self.free.pop(0)
            reply = run_probe(replace(task, gpu=g))
            self.runs += 1
            if self.runs > 1:
                reply["attempt"] = replace(reply["attempt"], gpu_left_after=("4242 app",))
            out.append((_Job(reply), g))
        return out

    def release(self, slot):
        self.free.append(slot)

    def set_aside(self, slot, job, reply):
        self.aside.append(slot)
        return f"GPU {slot}"

    def exhausted(self):
        return "every GPU was set aside" if not self.free and self.aside else None


def test_an_engine_that_gives_up_stops_the_walk_with_its_steps_kept(smi, tmp_path, monkeypatch):
    backend = KeepingGpus()
    monkeypatch.setattr(walk_module, "open_engine",
                        lambda spec, jobs, on_counts=None: ProbeEngine(spec, backend, tmp_path, owned=False))
    config = run_config(tmp_path, report_dir=str(tmp_path / "r"), env=dict(os.environ), check_gpu=True,
                        stall_timeout_given=True)
    session = Session.open(app("vec_add", "a@hang-if=SourceCounters", "block_reduce"), config,
                           executor=ExecutorSpec("local", poll_s=0.01, retries=1))
    result = walk_ladder(session, ProfileOptions(set="full"), "default", reader=attempt_rows)
    assert result.stopped and "set aside" in result.stopped, result.stopped
    assert result.steps and result.steps[0].attempt.stalled_kernel == "a"  # the first attempt's step is kept
    assert result.to_dict()["status"] == result.status and result.exit_code != 2
