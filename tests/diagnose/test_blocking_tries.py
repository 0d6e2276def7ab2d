"""Every CUDA_LAUNCH_BLOCKING=1 run of a triage is kept and counted as a run, not as triage's own overhead: an
intermittent failure may draw a good blocking run before a failing one (2x H200, `bench_triage.py --gpu`, flaky:
the earlier draws' time was counted as overhead, 1.40 s)."""

from __future__ import annotations

import sys

from helpers import FLAKY

from nsightwrap.diagnose.plain import FAILED, FINISHED
from nsightwrap.diagnose.run import TriageOptions, triage_command


def test_each_blocking_try_is_kept_and_its_time_is_a_run(triage_env, monkeypatch, store):
    # Seed 5 at rate 0.5: of runs 1-3 only run 3 fails, blocking run 4 passes, blocking run 5 fails.
    monkeypatch.setenv("FAKE_TRIAGE_SEED", "5")
    monkeypatch.setenv("FAKE_TRIAGE_RATE", "0.5")
    r = triage_command([sys.executable, str(FLAKY), "a", "b@fault=torch", "c", "sync"],
                       TriageOptions(runs=3, tools=()), store=store)
    assert [t.outcome for t in r.blocking_tries] == [FINISHED, FAILED]
    assert r.blocking is r.blocking_tries[-1] and "fake::b<" in r.blocking.kernel
    own = sum(x.elapsed_s for x in r.runs) + sum(x.elapsed_s for x in r.blocking_tries)
    assert abs(r.runs_s - own) < 1e-9 and r.overhead_s < r.blocking_tries[0].elapsed_s + 0.5
    assert r.to_dict()["blocking_tries"] == 2
    assert r.summary().count("CUDA_LAUNCH_BLOCKING=1 (run") == 2
