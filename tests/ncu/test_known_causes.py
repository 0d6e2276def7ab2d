"""Known causes need no waiting (issue 19, item 4).

FACTS.md ("Multi-process programs"): with every rank of a job profiled, ncu
serialises kernel launches across the processes, so a collective waits for
its other half forever. Such a stall is called at once, with that cause as
its evidence and no calibration (nsightwrap.ncu.known); and a walk of a
recognised launch leaves the collectives out up front and profiles them on
one rank, so no attempt waits on a certain hang. The rule is tested with
injected time; the walks and the CLI with the fake torchrun
(tests/fake_dist) and the fake ncu's `NAME@collective` kernels (the sweep,
and a torchrun job's walk made twice: tests/fallback/test_multi.py).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pandas as pd
import pytest
from helpers import KNOWN, CountingMeasure, app, cli_main, dist_config, run_config

from nsightwrap.calibrate.confirm import Calibrator
from nsightwrap.cli.screen import progress_line
from nsightwrap.fallback.collectives import (
    COLLECTIVES_JOB,
    JobShape,
    UpFront,
    up_front,
    without_collectives,
)
from nsightwrap.fallback.result import KNOWN_EMPTY
from nsightwrap.fallback.session import Session
from nsightwrap.fallback.walk import walk_ladder
from nsightwrap.ncu.allowance import AllowancePolicy
from nsightwrap.ncu.context import RunContext
from nsightwrap.ncu.engine import profile_command
from nsightwrap.ncu.known import COLLECTIVES_SERIALISED, CollectiveRule, known_cause_rule, run_rules
from nsightwrap.ncu.options import KernelFilter, ProfileOptions
from nsightwrap.ncu.progress import NcuObserver, StallRule
from nsightwrap.status import HANG
from nsightwrap.store.hangstore import HangStore
from nsightwrap.store.keys import Environment, ProfileKey

DIST = Path(__file__).parents[1] / "fake_dist"
AR = "ncclDevKernel_AllReduce_Sum_f32_RING_LL"
STEPS = ["gemm", f"{AR}@collective", "softmax", "gemm", f"{AR}@collective", "softmax", f"{AR}@collective"]
EVIDENCE = ("known cause: ncu serialises kernel launches across the processes it profiles, so a collective waits "
            "for its other half forever (FACTS.md)")


def torchrun(*steps: str, n: int = 2, launcher: Path = DIST / "torchrun") -> list[str]:
    return [str(launcher), "--nproc-per-node", str(n), *app(*steps)[1:]]


def rows(attempt) -> pd.DataFrame:
    return pd.DataFrame({"function": [k.name for k in attempt.kernels]})


def names(attempt) -> list[str]:
    return sorted(k.name for k in attempt.kernels)


# --- the rule, with injected time -------------------------------------------------------------------------
def state_after(*chunks: tuple[float, str]) -> NcuObserver:
    obs = NcuObserver(0.0)
    for now, text in chunks:
        obs.feed(text, now)
    return obs


TWO_RANKS = ((0.0, "==PROF== Connected to process 11 (/usr/bin/python3)\n"),
             (0.0, "==PROF== Connected to process 12 (/usr/bin/python3)\n"))
COLLECTIVE = (0.2, f'==PROF== Profiling "{AR}" - 3: 0%..')


def test_a_collective_stalled_with_every_rank_profiled_is_called_after_the_grace_with_its_cause():
    state = state_after(*TWO_RANKS, COLLECTIVE).state
    rule = CollectiveRule(grace_s=1.0)
    assert state.most_connected == 2 and rule.deadline(state) == pytest.approx(1.2)
    assert rule(state, 1.19) is None
    verdict = rule(state, 1.25)
    stall = verdict.stall
    assert verdict.status == HANG and stall.kernel == AR and stall.kernel_id == 3 and stall.where == "0%.."
    assert stall.known_cause and not stall.calibrated and stall.basis == COLLECTIVES_SERIALISED == EVIDENCE
    assert stall.evidence() == f"silent 1.1 s; allowance 1.0 s {EVIDENCE}"
    assert stall.first_pass and "raise the timeout" not in stall.message()  # no slow-kernel hint: it is known
    # The patient rules would still wait: 3 s of suspicion, then a calibration, then its allowance.
    assert StallRule(3.0)(state, 1.25) is None
    # The live line shows the grace, not the patient rule's allowance.
    line = progress_line("run", state, rule | StallRule(3.0), 0.7)
    assert f'kernel "{AR}" #3: 0%..' in line and "silent 0 s of 1" in line
    gemm = state_after(*TWO_RANKS, (0.2, '==PROF== Profiling "gemm" - 3: 0%..')).state
    assert "silent 0 s of 3" in progress_line("run", gemm, rule | StallRule(3.0), 0.7)  # not the rule's kernel


def test_the_rule_needs_a_collective_and_several_profiled_processes():
    rule = CollectiveRule(grace_s=1.0)
    other = state_after(*TWO_RANKS, (0.2, '==PROF== Profiling "gemm" - 3: 0%..')).state
    assert rule(other, 60.0) is None and rule.deadline(other) == float("inf")
    one = state_after(TWO_RANKS[0], COLLECTIVE).state
    assert rule(one, 60.0) is None  # one process: a collective's other half is not under ncu
    # The launcher says how many ranks, before ncu said anything about connections ...
    assert CollectiveRule(grace_s=1.0, ranks=2)(state_after(COLLECTIVE).state, 1.5).stall.known_cause
    # ... and processes connected at once count even after one has gone.
    gone = state_after(*TWO_RANKS, (0.1, "==PROF== Disconnected from process 12\n"), COLLECTIVE).state
    assert rule(gone, 1.5) is not None
    # It moves: a mark resets the silence (no profiled collective moves, but nothing is assumed).
    moving = state_after(*TWO_RANKS, COLLECTIVE, (1.0, "....")).state
    assert rule(moving, 1.5) is None and rule(moving, 2.1) is not None


def test_which_runs_get_the_rule():
    command = torchrun(*STEPS)
    assert known_cause_rule(command, ProfileOptions()).ranks == 2
    assert known_cause_rule(app("gemm"), ProfileOptions()).ranks is None  # found by ncu's connections, if ever
    assert known_cause_rule(command, ProfileOptions(rank=0)) is None  # one rank alone: single passes finish
    cfg = run_config(Path("/nonexistent"), allowance=KNOWN)
    assert isinstance(run_rules(command, ProfileOptions(), cfg).rules[0], CollectiveRule)
    assert run_rules(command, ProfileOptions(), cfg).rules[0].grace_s == 0.1
    given = cfg.replace(stall_timeout=5.0, stall_timeout_given=True)  # the user's stall timeout wins everywhere
    assert not any(isinstance(r, CollectiveRule) for r in getattr(run_rules(command, ProfileOptions(), given),
                                                                  "rules", ()))
    with pytest.raises(ValueError):
        AllowancePolicy(known_cause_s=0)


def test_up_front_plan_and_the_filters_it_makes():
    shape = JobShape.of(torchrun(*STEPS))
    assert up_front(shape, ProfileOptions()) == UpFront()
    assert up_front(shape, ProfileOptions(rank=1)) is None
    assert up_front(JobShape.of(app("gemm")), ProfileOptions()) is None
    assert up_front(JobShape.of(torchrun("gemm", n=1)), ProfileOptions()) is None  # one process: nothing hangs
    assert up_front(JobShape.of([str(DIST / "mpirun"), *app("gemm")]), ProfileOptions()) == UpFront()  # count unsaid
    assert up_front(shape, ProfileOptions(kernel=KernelFilter("gemm"))) is None  # names no collective
    assert up_front(shape, ProfileOptions(kernel=KernelFilter(AR))) == UpFront(main=False)
    opts, note = without_collectives(torchrun(*STEPS), ProfileOptions(kernel=KernelFilter("gemm|nccl", True)))
    assert opts.kernel.value == "regex:^(?!nccl|nvshmem).*?(?:gemm|nccl).*"
    assert "left out" in note and "--rank 0 --metrics gpu__time_duration.sum" in note and "--profile" in note
    assert without_collectives(app("gemm"), ProfileOptions()) == (ProfileOptions(), None)


# --- real processes: the fake torchrun and the fake ncu ---------------------------------------------------
@pytest.fixture
def cfg(tmp_path, fake_env, tag):
    """Stall timeouts that a fake kernel never reaches, and the known cause's grace on the tests' clock: a
    collective that stalls can only be called by its known cause."""
    return dist_config(tmp_path, dict(os.environ), allowance=KNOWN)


def test_run_calls_the_collective_at_once_without_calibrating(cfg):
    command = torchrun(*STEPS)
    counting = CountingMeasure()
    calibrator = Calibrator(command, measure=counting)
    opts = ProfileOptions(set="basic")
    a = calibrator.run(lambda ctx: profile_command(command, opts, ctx), RunContext.create(cfg), opts)
    assert a.status == HANG and a.stalled_kernel == AR and a.stall.known_cause, a.log
    assert a.allowance_basis == EVIDENCE and a.to_dict()["stall"]["known_cause"] is True
    assert counting.calls == 0 and calibrator.measured == 0  # no calibration: the cause is known
    assert 0.1 <= a.detection_s < 0.6  # before the (suspicion's) stall timeout of 0.6 s
    assert sorted({k.name for k in a.finished_kernels}) == ["gemm"]  # what finished before it is kept


def test_an_unannounced_multi_process_program_is_known_by_its_connections(cfg, tmp_path):
    """No launcher nsightwrap knows (a copy of the fake torchrun under another name): ncu connected to two
    processes at once, so the collective's stall is the known cause; the walk leaves its family out, and as
    no rank can be wrapped alone, says why it stays unprofiled. Two attempts, no calibration."""
    spawner = tmp_path / "spawn2"
    spawner.symlink_to(DIST / "torchrun")
    command = torchrun(*STEPS, launcher=spawner)
    assert JobShape.of(command).launch is None
    store = HangStore(tmp_path / "h.db")
    counting = CountingMeasure()
    r = walk_ladder(Session.open(command, cfg, store=store,
                                 calibrator=Calibrator(command, store=store, measure=counting)),
                    ProfileOptions(set="basic"), "default", reader=rows)
    hung, main = r.attempts
    assert hung.status == HANG and hung.stall.known_cause and hung.connected >= 2
    assert main.status == "ok" and names(main) == ["gemm"] * 4 + ["softmax"] * 4
    assert r.unprofiled == [AR] and "serialises kernel launches" in r.why_unprofiled[AR]
    assert counting.calls == 0
    (rec,) = [rec for rec in store.records() if rec.hung]
    assert (rec.kernel, rec.processes, rec.ranks, rec.trusted) == (AR, hung.connected, "all", True)
    assert rec.basis == EVIDENCE and rec.calibrated and store.uncalibrated_hangs() == {}
    # The store keeps the job's size: a single-process run of a kernel of that name is not taken for it.
    version = rec.ncu_version
    here = {"gpu": rec.gpu, "driver": rec.driver}  # None here; the GPU machine's own where nvidia-smi answers
    assert not store.hangs_for(AR, ProfileKey("basic"), Environment(**here, ncu_version=version, processes=1))
    assert store.hangs_for(AR, ProfileKey("basic"), Environment(**here, ncu_version=version,
                                                                processes=hung.connected))


# A torchrun job's walk, twice (two attempts each time, no calibration), and the sweep that finds the collective by
# its known cause without calibrating: tests/fallback/test_multi.py (test_walk_profiles_every_rank_but_the_collective_
# and_the_collective_on_one_rank, test_sweep_probes_the_collective_on_one_rank), which made the same runs.


def test_the_walk_combines_the_users_filter_with_the_collectives(cfg):
    r = walk_ladder(Session.open(torchrun(*STEPS), cfg),
                    ProfileOptions(set="basic", kernel=KernelFilter("gemm|AllReduce", True)), "default", reader=rows)
    main, one_rank = r.attempts
    assert main.command[main.command.index("--kernel-name") + 1] == "regex:^(?!nccl|nvshmem).*?(?:gemm|AllReduce).*"
    assert names(main) == ["gemm"] * 4 and names(one_rank) == [AR] * 3
    # A filter naming the collective exactly needs no run of every rank.
    only = walk_ladder(Session.open(torchrun(*STEPS), cfg),
                       ProfileOptions(set="basic", kernel=KernelFilter(AR)), "default", reader=rows)
    (attempt,) = only.attempts
    assert names(attempt) == [AR] * 3 and "--rank" in attempt.command


def test_a_job_without_collectives_costs_one_rank_run_once_then_nothing(cfg, tmp_path):
    store = HangStore(tmp_path / "h.db")
    command = torchrun("gemm", "softmax")
    first = walk_ladder(Session.open(command, cfg, store=store), ProfileOptions(set="basic"), "default", reader=rows)
    assert [a.status for a in first.attempts] == ["ok", "no-kernels"] and first.unprofiled == []
    assert any("the program launches none" in n for n in first.steps[-1].notes)
    second = walk_ladder(Session.open(command, cfg, store=store), ProfileOptions(set="basic"), "default", reader=rows)
    assert [a.status for a in second.attempts] == ["ok"] and second.unprofiled == []
    assert KNOWN_EMPTY in [s.skipped for s in second.steps if s.job == COLLECTIVES_JOB]


def test_cli_run_of_a_torchrun_job_leaves_the_collectives_out_and_says_so(fake_env, tmp_path, tag, capsys,
                                                                          monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, out, err = cli_main(["run", "--json", "--set", "basic", "--grace", "1", "--", *torchrun(*STEPS)], capsys)
    assert code == 0, err
    d = json.loads(out)
    assert d["status"] == "ok" and sorted(k["name"] for k in d["kernels"]) == ["gemm"] * 4 + ["softmax"] * 4
    assert d["command"][d["command"].index("--kernel-name") + 1] == "regex:^(?!nccl|nvshmem).*"
    assert any("are left out of the run" in n and "--profile default" in n for n in d["notes"])
    assert "are left out of the run" in err  # said before the run, on stderr


def test_cli_run_of_one_collective_named_exactly_is_run_as_given_and_called_at_once(fake_env, tmp_path, tag, capsys,
                                                                                   monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, out, err = cli_main(["run", "--json", "-q", "--set", "basic", "--kernel-name", AR, "--grace", "0.2", "--",
                               *torchrun(*STEPS)], capsys)
    d = json.loads(out)
    assert code == 3 and d["status"] == "hang" and d["stalled_kernel"] == AR, err
    assert d["stall"]["known_cause"] and d["allowance_basis"] == EVIDENCE and d["calibration"] is None
    assert d["detection_s"] < 3.0  # the grace (1 s), not the 3 s suspicion and a calibration
    assert not any("are left out of the run" in n for n in d["notes"])
    assert any("--rank 0 --metrics gpu__time_duration.sum" in n for n in d["notes"])  # what to run instead
