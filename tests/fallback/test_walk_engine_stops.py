"""A walk on the engine whose engine gives up (every GPU set aside) ends as the serial walk ends on a GPU that keeps
processes: `stopped` says why, the steps so far are kept, an answer with its own status (not a usage error)."""

from __future__ import annotations

import os

from helpers import InlineGpus, app, attempt_rows, run_config

from nsightwrap.fallback import walk as walk_module
from nsightwrap.fallback.executor import ProbeEngine
from nsightwrap.fallback.session import Session
from nsightwrap.fallback.spec import ExecutorSpec
from nsightwrap.fallback.walk import walk_ladder
from nsightwrap.ncu.options import ProfileOptions


def test_an_engine_that_gives_up_stops_the_walk_with_its_steps_kept(fake_gpus, tmp_path, monkeypatch):
    backend = InlineGpus(keeps=lambda gpu, n: n > 1)  # after the first attempt, every GPU keeps processes
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


def test_a_busy_gpu_beside_one_set_aside_is_not_the_end(tmp_path):
    """GPU 0 set aside while GPU 1 runs a job: a job that waits for a GPU must wait for GPU 1, not fail with
    'every GPU was set aside' (it did: the local backend counted busy GPUs as gone)."""
    from nsightwrap.fallback.probejob import LocalBackend

    backend = LocalBackend(tmp_path, ["0", "1"])
    backend.free.clear()  # GPU 1 busy, GPU 0 ...
    backend.set_aside("0", None, None)  # ... set aside
    assert backend.room() == 0 and backend.exhausted() is None
    backend.set_aside("1", None, None)
    assert "every GPU was set aside" in backend.exhausted()
