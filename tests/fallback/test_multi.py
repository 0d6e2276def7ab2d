"""Multi-process jobs end to end: the fake torchrun (tests/fake_dist) starts 2 ranks of the fake program
under the fake ncu, whose collective (NCCL all-reduce) stalls at `0%..` unless one rank alone runs
under ncu with a single-pass collection (FACTS, "Multi-process programs"). Real processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
from helpers import KNOWN, CountingMeasure, app, cli_main, dist_config, sigint_when

from nsightwrap.calibrate.confirm import Calibrator
from nsightwrap.fallback.collectives import COLLECTIVE_ALL_RANKS, COLLECTIVES_JOB
from nsightwrap.fallback.ladder import ladder_from_dict
from nsightwrap.fallback.session import Session
from nsightwrap.fallback.sweep import sweep_sections
from nsightwrap.fallback.walk import walk_ladder
from nsightwrap.ncu.engine import profile_command
from nsightwrap.ncu.options import ProfileOptions
from nsightwrap.store.hangstore import HangStore
from nsightwrap.watch.launchers import WRAPPER_MODULE
from nsightwrap.watch.tree import COOKIE_VAR, processes_with

DIST = Path(__file__).parents[1] / "fake_dist"
AR = "ncclDevKernel_AllReduce_Sum_f32_RING_LL"
#: Per step: a matmul, the all-reduce, a softmax; two steps, then a last all-reduce (a barrier: the ranks
#: print their last line after it, not in the middle of another rank's progress line).
STEPS = ["gemm", f"{AR}@collective", "softmax", "gemm", f"{AR}@collective", "softmax", f"{AR}@collective"]
SHORT = ["gemm", f"{AR}@collective", "softmax", f"{AR}@collective"]


def torchrun(*steps: str, n: int = 2) -> list[str]:
    return [str(DIST / "torchrun"), "--nproc-per-node", str(n), *app(*steps)[1:]]


def rows(attempt) -> pd.DataFrame:
    """Rows from the attempt's record (the fake's reports are copies, not this program's)."""
    return pd.DataFrame({"function": [k.name for k in attempt.kernels]})


@pytest.fixture
def cfg(tmp_path, fake_env, tag):
    return dist_config(tmp_path, dict(os.environ))


def names(attempt) -> list[str]:
    return sorted(k.name for k in attempt.kernels)


def test_every_rank_under_ncu_hangs_on_the_collective_and_every_rank_is_stopped(cfg):
    a = profile_command(torchrun("env:" + COOKIE_VAR, *STEPS), ProfileOptions(set="basic"), cfg)
    assert a.status == "hang" and a.stalled_kernel == AR and a.stall.where.startswith("0%")
    assert a.connected == 2  # two ranks connected at once: a multi-process program
    # torchrun passes its environment to the ranks: both carry the run's cookie, so the tree stop reaches them.
    assert a.log.count(f"{COOKIE_VAR}={a.cookie}") == 2
    assert processes_with(COOKIE_VAR, a.cookie) == [] and not a.stop.survivors


def test_one_rank_alone_profiles_the_collective_with_a_single_pass_collection(cfg):
    a = profile_command(torchrun(*STEPS), ProfileOptions(metrics=("gpu__time_duration.sum",), rank=0), cfg)
    assert a.status == "ok", a.log
    assert a.command[a.command.index("-m") + 1] == WRAPPER_MODULE and "--no-python" in a.command
    assert names(a) == sorted([AR, AR, AR, "gemm", "gemm", "softmax", "softmax"]), a.log  # rank 0's kernels
    assert "rank 0 (RANK=0) runs under the profiler" in a.log and a.connected == 1
    # A multi-pass collection on one rank alone hangs on the collective: test_when_single_pass_hangs_on_one_rank_too...
    # below (its walk's one-rank SpeedOfLight attempt, which this test made once more).


def test_the_gpu_check_covers_every_rank(cfg, tmp_path, monkeypatch):
    """Ranks that stay on the GPU after the stop (a kernel still spinning) are seen, every one of them."""
    import nsightwrap.ncu.engine as engine

    sticky = tmp_path / "sticky"
    monkeypatch.setenv("FAKE_SMI_STICKY", str(sticky))
    monkeypatch.setenv("PATH", f"{Path(__file__).parents[1] / 'fake_nvidia_smi'}{os.pathsep}{os.environ['PATH']}")
    # No wait for the listing to settle (10 s; 0.5 s between listings): the fake GPU lists the ranks for good.
    monkeypatch.setattr(engine._left_on_gpu, "__defaults__", (0.0,))
    a = profile_command(torchrun("stick:" + str(sticky), *SHORT), ProfileOptions(set="basic"),
                        cfg.replace(check_gpu=True, env=dict(os.environ)))
    assert a.status == "hang" and a.connected == 2
    ranks = sorted(int(p) for p in sticky.read_text().split())
    assert sorted(int(x.split()[0]) for x in a.gpu_left_after) == ranks and len(ranks) == 2


def test_mpirun_rank_wrapper_reads_open_mpis_rank(cfg):
    command = [str(DIST / "mpirun"), "-np", "2", *app("gemm", f"{AR}@collective", f"{AR}@collective")]
    a = profile_command(command, ProfileOptions(metrics=("gpu__time_duration.sum",), rank=1), cfg)
    assert a.status == "ok" and names(a) == sorted([AR, AR, "gemm"])
    assert "rank 1 (OMPI_COMM_WORLD_RANK=1)" in a.log


def test_walk_profiles_every_rank_but_the_collective_and_the_collective_on_one_rank(cfg, tmp_path):
    """Two attempts, the first time and the second, and no calibration (this test and tests/ncu/test_known_causes.py's
    walk of a torchrun job once: both walked this job twice)."""
    store = HangStore(tmp_path / "h.db")
    command = torchrun(*STEPS)
    counting = CountingMeasure()
    r = walk_ladder(Session.open(command, cfg, store=store, calibrator=Calibrator(command, store=store,
                                                                                  measure=counting)),
                    ProfileOptions(set="basic"), "default", reader=rows)
    # torchrun is recognised: the collectives are left out from the start, no attempt waits on one
    # (tests/ncu/test_known_causes.py; the hang of a collective with every rank profiled: below and there).
    main, one_rank = r.attempts
    # Every non-collective kernel of both ranks, from a run that left out the NCCL family.
    assert main.status == "ok" and names(main) == ["gemm"] * 4 + ["softmax"] * 4
    assert main.command[main.command.index("--kernel-name") + 1] == "regex:^(?!nccl|nvshmem).*"
    # The all-reduce on rank 0 alone, single pass; the rungs with every rank profiled were not tried.
    assert one_rank.status == "ok" and names(one_rank) == [AR, AR, AR]
    assert all(k.passes == 1 for k in one_rank.kernels) and "--rank" in one_rank.command
    # (The set asked is basic: the default ladder's rungs above it, detailed and basic, are not the walk's.)
    assert [(s.rung.name, s.skipped) for s in r.steps if s.job == COLLECTIVES_JOB] == [
        ("requested", COLLECTIVE_ALL_RANKS), ("speed-of-light", COLLECTIVE_ALL_RANKS), ("one-rank-launch-stats", None)]
    assert sorted(r.df["function"]) == sorted(names(main) + names(one_rank))
    assert r.unprofiled == [] and r.processes == 2 and r.hangs == []
    assert not [rec for rec in store.records() if rec.hung]
    assert {rec.processes for rec in store.records()} == {2}
    assert {(rec.kernel, rec.ranks) for rec in store.records() if rec.rung == "one-rank-launch-stats"} == {(AR, "one")}

    assert counting.calls == 0  # nothing hung: no calibration

    # The second walk: the same two attempts, nothing more.
    second = walk_ladder(Session.open(command, cfg, store=store, calibrator=Calibrator(command, store=store,
                                                                                       measure=counting)),
                         ProfileOptions(set="basic"), "default", reader=rows)
    assert [a.status for a in second.attempts] == ["ok", "ok"] and second.hangs == [] and second.unprofiled == []
    assert sorted(second.df["function"]) == sorted(r.df["function"])
    main, one_rank = second.attempts
    assert names(main) == ["gemm"] * 4 + ["softmax"] * 4 and names(one_rank) == [AR] * 3
    assert {k.passes for k in one_rank.kernels} == {1} and "--rank" in one_rank.command and counting.calls == 0
    skipped = [s.skipped for s in second.steps if s.job == COLLECTIVES_JOB and s.skipped]
    assert skipped and set(skipped) == {COLLECTIVE_ALL_RANKS}
    assert not [rec for rec in store.records() if rec.hung]


def test_a_ladder_without_a_one_rank_rung_says_why_the_collective_stays_unprofiled(cfg):
    ladder = ladder_from_dict({"name": "plain", "rungs": [{"name": "requested", "requested": True},
                                                          {"name": "sol", "sections": ["SpeedOfLight"]}]})
    r = walk_ladder(Session.open(torchrun(*SHORT), cfg), ProfileOptions(set="basic"), ladder, reader=rows)
    assert r.unprofiled == [COLLECTIVES_JOB] and len(r.attempts) == 1  # left out up front, and no rung for it
    why = r.why_unprofiled[COLLECTIVES_JOB]
    assert "serialises kernel launches" in why and "no one-rank rung" in why
    assert "hung at every rung" in r.summary() and why in r.summary()


def test_when_single_pass_hangs_on_one_rank_too_the_walk_says_ncu_cannot(cfg):
    ladder = ladder_from_dict({"name": "sol-only", "rungs": [
        {"name": "requested", "requested": True}, {"name": "one-sol", "ranks": "one", "sections": ["SpeedOfLight"]}]})
    # An explicit stall timeout: the one-rank hang is taken at once, without a calibration and a confirming run;
    # one run after the other: a hang beside the main run would be made again alone (test_side_by_side.py).
    r = walk_ladder(Session.open(torchrun(*SHORT), cfg, stall_timeout=0.6, side_by_side=False),
                    ProfileOptions(set="basic"), ladder, reader=rows)
    assert r.unprofiled == [COLLECTIVES_JOB] and "multi-pass collections hang too" in r.why_unprofiled[COLLECTIVES_JOB]
    assert [(s.rung.name, s.attempt.status) for s in r.steps if s.attempt] == [("requested", "ok"), ("one-sol", "hang")]
    multi_pass = r.attempts[-1]  # SpeedOfLight on one rank: its replayed pass of the collective waits forever
    assert multi_pass.stalled_kernel == AR and "--rank" in multi_pass.command and multi_pass.connected == 1
    assert processes_with(COOKIE_VAR, multi_pass.cookie) == [] and not multi_pass.stop.survivors


def test_sweep_probes_the_collective_on_one_rank(cfg, tmp_path):
    """The collective's whole run is called by its known cause, after its grace (this test and
    tests/ncu/test_known_causes.py's sweep once: both swept this job)."""
    store = HangStore(tmp_path / "s.db")
    command = torchrun(*SHORT)
    known = cfg.replace(allowance=KNOWN)
    session = Session.open(command, known, store=store)
    # The program's calibration first (a plain run, as the sweep's first uncalibrated stall would make it): the
    # one-rank probe's hang is then judged by its calibrated allowance at once, not suspected and run again.
    assert session.environment is not None and session.calibrator.calibrate(session.config).ok
    r = sweep_sections(session, sections=["SourceCounters", "LaunchStats"])  # Occupancy too added only probes
    assert [(a.status, a.stalled_kernel) for a in r.whole_runs] == [("hang", AR), ("ok", None)]
    first = r.whole_runs[0]
    assert first.stall.known_cause and first.stall.silent_s < 0.6  # not the 0.6 s stall timeout: the grace
    (k,) = r.kernels
    assert k.kernel == AR and sorted(k.singles) == ["SourceCounters"]  # multi-pass: hangs even on one rank
    assert k.largest_working == ("LaunchStats",)
    probes = [rec for rec in store.records() if rec.kernel == AR and rec.ranks == "one"]
    assert probes and all(WRAPPER_MODULE in rec.command for rec in probes)
    assert {rec.processes for rec in store.records()} == {2}


def test_cli_walk_on_a_torchrun_job(fake_env, tmp_path, tag, capsys, monkeypatch):
    """The command line's walk through main(argv) in this process (its answer, not its process, is tested)."""
    ladder = tmp_path / "fast.yaml"
    ladder.write_text("name: fast\nrungs:\n  - {name: requested, requested: true}\n"
                      "  - {name: one-rank, ranks: one, metrics: [gpu__time_duration.sum]}\n")
    monkeypatch.chdir(tmp_path)
    code, out, err = cli_main(["run", "-q", "--json", "--profile", str(ladder), "--set", "basic", "--stall-timeout",
                               "0.6", "--grace", "1", "--rank", "1", "--store", str(tmp_path / "s.db"), "--",
                               *torchrun(*STEPS)], capsys)
    assert code == 0, err
    d = json.loads(out)
    # torchrun is recognised: the collectives are left out up front, so nothing hangs (tests/ncu/test_known_causes.py).
    assert d["processes"] == 2 and d["unprofiled"] == [] and d["hangs"] == [] and len(d["steps"]) == 3
    last = d["steps"][-1]["attempt"]
    assert last["command"][last["command"].index("--rank") + 1] == "1" and last["status"] == "ok"


def test_sigint_in_the_middle_leaves_no_rank_behind(fake_env, tmp_path, tag):
    # The collective named exactly: `run` leaves collectives out of a recognised launch otherwise.
    p = subprocess.Popen([sys.executable, "-m", "nsightwrap", "run", "--json", "--stall-timeout", "60", "--set",
                          "basic", "--kernel-name", AR, "--", *torchrun(*STEPS)], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE,
                         env=dict(os.environ), cwd=tmp_path)

    def collective_profiled() -> bytes:
        buf = b""
        os.set_blocking(p.stderr.fileno(), False)
        deadline = time.monotonic() + 30
        # With --kernel-name, ncu's line has no ` - ID` (FACTS): wait for the collective's own line.
        while f'Profiling "{AR}"'.encode() not in buf and time.monotonic() < deadline:
            time.sleep(0.05)
            buf += p.stderr.read() or b""
        return buf

    d = sigint_when(p, collective_profiled, timeout=30)
    assert d["status"] == "interrupted" and processes_with(COOKIE_VAR, d["cookie"]) == []


def test_ctrl_c_between_two_attempts_of_a_walk_says_so(monkeypatch, capsys, tmp_path, fake_env):
    import nsightwrap.fallback.walk as walk
    from nsightwrap.cli.main import main

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(walk, "walk_ladder", interrupted)
    rc = main(["run", "--json", "-q", "--no-preflight", "--profile", "default", "--rank", "1", "--store",
               str(tmp_path / "h.db"), "--", *torchrun(*SHORT)])
    assert rc == 130
    d = json.loads(capsys.readouterr().out)
    assert d["status"] == "interrupted" and "between two attempts" in d["reason"]
