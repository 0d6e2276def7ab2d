"""Calibration with the fake ncu and the fake nsys (real processes, sub-second kernels)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import app, cli_main

from nsightwrap.calibrate import Calibrator
from nsightwrap.fallback.ladder import ladder_from_dict
from nsightwrap.fallback.session import Session
from nsightwrap.fallback.sweep import sweep_sections
from nsightwrap.fallback.walk import walk_ladder
from nsightwrap.ncu.allowance import AllowancePolicy
from nsightwrap.ncu.context import RunConfig, RunContext
from nsightwrap.ncu.engine import profile_command
from nsightwrap.ncu.options import ProfileOptions
from nsightwrap.status import EXIT_CODES, NO_KERNELS, OK, TIMEOUT
from nsightwrap.store.hangstore import HangStore
from nsightwrap.watch.tree import StopPolicy

FAKE_NSYS = Path(__file__).parents[1] / "fake_nsys" / "nsys"
ONE_METRIC = ProfileOptions(metrics=("gpu__time_duration.sum",))
BASIC = ["LaunchStats", "Occupancy", "SpeedOfLight", "WorkloadDistribution"]
#: The quick ladder without its rungs' own stall timeouts (8 s and 6 s, for kernels not calibrated).
QUICK = ladder_from_dict({"name": "quick-test", "rungs": [
    {"name": "requested", "requested": True}, {"name": "speed-of-light", "sections": ["SpeedOfLight"]},
    {"name": "duration", "metrics": ["gpu__time_duration.sum"]}]})


@pytest.fixture
def env(fake_env, monkeypatch):
    monkeypatch.setenv("NSIGHTWRAP_NSYS", str(FAKE_NSYS))
    return {**fake_env, "NSIGHTWRAP_NSYS": str(FAKE_NSYS)}


@pytest.fixture
def cfg(tmp_path, env):
    """The uncalibrated allowance (0.6 s) and the floor (0.5 s) shrunk like the fake's kernels."""
    return RunConfig(report_dir=str(tmp_path / "r"), stall_timeout=0.6, check_gpu=False, env=env,
                     allowance=AllowancePolicy(floor_s=0.5),
                     stop=StopPolicy(grace=2.0, term_wait=1.0, kill_wait=2.0, drain=1.0))


def reader(attempt):
    import pandas as pd

    return pd.DataFrame({"function": [k.name for k in attempt.finished_kernels]})


def test_a_single_pass_longer_than_the_allowance_is_run_again_not_called_hung(cfg, tmp_path):
    command = app("vec_add", "k@spin=0.65", "vec_add")  # one pass: 0.65 s x 1.245 in silence > 0.4 s
    store = HangStore(tmp_path / "h.db")
    calibrator = Calibrator(command, store=store, lazy=True)
    context = RunContext.create(cfg.replace(stall_timeout=0.4))
    a = calibrator.run(lambda ctx: profile_command(command, ONE_METRIC, ctx), context, ONE_METRIC)
    assert a.status == OK and [k.name for k in a.kernels] == ["vec_add", "k", "vec_add"]
    assert a.calibration.source == "nsys" and 0.65 <= dict(a.calibration.kernels)["k"] < 1.35
    assert 'a first run stalled on "k"' in a.notes[-1] and "ran again" in a.notes[-1]
    assert calibrator.measured == 1 and store.calibration_for(command, calibrator._env) is not None


def test_a_real_hang_is_confirmed_and_the_next_attempts_are_calibrated(cfg, tmp_path):
    program = app("vec_add", "k@hang", "vec_add")
    store = HangStore(tmp_path / "h.db")
    first = walk_ladder(Session.open(program, cfg, store=store), ProfileOptions(set="basic"), QUICK, reader=reader)
    assert first.unprofiled == ["k"]
    hangs = [a for a in first.attempts if a.status == "hang"]
    assert hangs and all(a.stall.calibrated for a in hangs)
    assert "hang confirmed by calibration" in hangs[0].notes[-1]
    # Once calibrated the verdict comes at the (test) floor, not at the uncalibrated 0.6 s.
    assert all(0.5 <= a.stall.allowance_s < 0.6 for a in hangs[1:])
    records = [r for r in store.records(kernel="k") if r.hung]
    assert records and all(r.calibrated for r in records) and store.uncalibrated_hangs() == {}
    # The second walk finds the calibration and the hangs in the store: nothing measured, rungs skipped.
    calibrator = Calibrator(program, store=store)
    second = walk_ladder(Session.open(program, cfg, store=store, calibrator=calibrator),
                         ProfileOptions(set="basic"), QUICK, reader=reader)
    assert calibrator.measured == 0 and len(second.attempts) == 1 and second.attempts[0].calibration is not None


RANGE_THEN_DURATION = ladder_from_dict({"name": "t", "rungs": [
    {"name": "requested", "requested": True},
    {"name": "range-replay", "sections": ["SpeedOfLight"], "replay_mode": "range"},
    {"name": "duration", "metrics": ["gpu__time_duration.sum"]}]})


def test_range_replay_is_skipped_for_a_program_that_marks_no_range(cfg, tmp_path):
    """nsys saw the program's API calls while calibrating: no cudaProfilerStart, so range replay would
    profile nothing (FACTS: "No ranges were profiled"), and that rung is not run, now or next time."""
    program, store = app("vec_add", "k@hang", "vec_add"), HangStore(tmp_path / "h.db")
    r = walk_ladder(Session.open(program, cfg, store=store),
                    ProfileOptions(set="basic"), RANGE_THEN_DURATION, reader=reader)
    assert [(s.job, s.rung.name, s.attempt.status if s.attempt else "skipped") for s in r.steps] == [
        ("main", "requested", "hang"), ("main", "requested", "ok"), ("k", "range-replay", "skipped"),
        ("k", "duration", "hang")]
    assert "nsys saw no cudaProfilerStart call" in r.steps[2].skipped
    assert r.attempts[0].calibration.marks_ranges is False and r.unprofiled == ["k"]
    second = walk_ladder(Session.open(program, cfg, store=store),
                         ProfileOptions(set="basic"), RANGE_THEN_DURATION, reader=reader)
    assert [s.job for s in second.steps if s.attempt] == ["main"]  # the stored calibration knows it too
    assert "nsys saw no cudaProfilerStart call" in second.steps[2].skipped


def test_range_replay_runs_for_a_program_that_marks_ranges(cfg):
    r = walk_ladder(Session.open(app("vec_add", "start", "k@hang", "stop"), cfg),
                    ProfileOptions(set="basic"), RANGE_THEN_DURATION, reader=reader)
    assert r.attempts[0].calibration.marks_ranges is True
    assert [(s.job, s.rung.name, s.attempt.status) for s in r.steps][2:] == [("k", "range-replay", "ok")]


def test_an_explicit_stall_timeout_wins_over_every_rung(cfg):
    ladder = ladder_from_dict({"name": "slow-rungs", "rungs": [
        {"name": "requested", "requested": True, "stall_timeout": 30},
        {"name": "duration", "metrics": ["gpu__time_duration.sum"], "stall_timeout": 30}]})
    r = walk_ladder(Session.open(app("k@hang"), cfg, stall_timeout=0.4),
                    ProfileOptions(set="basic"), ladder, reader=reader)
    hangs = [a for a in r.attempts if a.stall]
    assert [a.stall.allowance_s for a in hangs] == [pytest.approx(0.4, abs=0.15)] * 2
    assert {a.stall.basis for a in hangs} == {"given (--stall-timeout / stall_timeout=)"}
    assert all(a.calibration is None for a in r.attempts)


def test_after_an_application_replay_hang_the_next_rung_skips_nothing(cfg):
    """The hung kernel's application-replay pass never finished: the next rung must not skip it.

    (A ladder without a single-pass floor, so that the rungs are tried in their order.)"""
    ladder = ladder_from_dict({"name": "t", "rungs": [
        {"name": "requested", "requested": True},
        {"name": "application-replay", "sections": ["SpeedOfLight"], "replay_mode": "application"},
        {"name": "occupancy", "sections": ["Occupancy"]}]})
    r = walk_ladder(Session.open(app("vec_add", "k@hang-if=SpeedOfLight", "vec_add"),
                                 cfg.replace(stall_timeout=0.4, stall_timeout_given=True)),
                    ProfileOptions(set="basic"), ladder, reader=reader)
    assert [(s.job, s.rung.name, s.attempt.status) for s in r.steps] == [
        ("main", "requested", "hang"), ("main", "requested", "ok"), ("k", "application-replay", "hang"),
        ("k", "occupancy", "ok")]
    assert "--launch-skip" not in r.steps[3].attempt.command
    assert ("k", "occupancy") in [(row.function, row.rung) for row in r.df.itertuples()]


def test_a_program_that_hangs_by_itself_stops_the_walk(cfg, tmp_path):
    program = app("vec_add", "k@always")
    store = HangStore(tmp_path / "h.db")
    calibrator = Calibrator(program, store=store, use_nsys=False, limit_s=0.5)  # it hangs by itself: any limit
    r = walk_ladder(Session.open(program, cfg, store=store, calibrator=calibrator),
                    ProfileOptions(set="basic"), QUICK, reader=reader)
    [a] = r.attempts
    assert a.status == TIMEOUT and a.program_fault and "not an ncu hang" in a.reason
    assert r.stopped and "without ncu" in r.stopped
    assert not any(rec.trusted for rec in store.records(kernel="k"))
    assert store.calibration_for(program, calibrator._env) is None  # a failed calibration is not kept


def test_sweep_on_a_kernel_that_hangs_with_anything_costs_fewer_probes_than_one_at_a_time(cfg, tmp_path):
    r = sweep_sections(Session.open(app("vec_add", "k@hang"), cfg, store=HangStore(tmp_path / "s.db")), sections=BASIC)
    [k] = r.kernels
    assert sorted(k.singles) == BASIC and k.hangs_whatever and k.probes_run <= k.naive_probes == 4
    assert r.status == "hang" and "whatever is collected" in r.table()
    assert r.whole_runs[0].stall.calibrated  # confirmed by calibration before anything was recorded


def test_sweep_that_profiles_nothing_says_no_kernels(cfg, tmp_path, capsys, monkeypatch):
    r = sweep_sections(Session.open(app("vec_add", "block_reduce"), cfg.replace(stall_timeout_given=True)),
                       sections=BASIC, kernel="no_such_kernel")
    assert r.status == NO_KERNELS and not r.clean and "nothing was profiled" in r.table()
    monkeypatch.chdir(tmp_path)
    code, out, err = cli_main(["sweep-sections", "-q", "--kernel", "no_such_kernel", "--store", str(tmp_path / "s.db"),
                               "--section", "SpeedOfLight", "--", *app("vec_add")], capsys)
    assert code == EXIT_CODES[NO_KERNELS], err
    assert "nothing was profiled" in out


def test_cli_run_calibrate(env, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)

    def run(*args):
        return cli_main(["run", "-q", "--json", "--store", str(tmp_path / "h.db"), "--calibrate", *args], capsys)

    code, out, err = run("--metrics", "gpu__time_duration.sum", "--", *app("vec_add", "k@spin=0.3"))
    assert code == 0, err
    d = json.loads(out)
    assert d["status"] == "ok" and d["calibration"]["source"] == "nsys" and "k" in d["calibration"]["kernels"]
    assert d["allowance_basis"] is None and d["detection_s"] is None
    with HangStore(tmp_path / "h.db") as store:
        assert len(store.conn.execute("SELECT * FROM calibrations").fetchall()) == 3  # vec_add, k, "*"
    # The up-front calibration gets the whole --timeout, twice (nsys may be the one stuck: a plain run decides);
    # the program hangs by itself, so any limit ends it.
    code, out, err = run("--timeout", "0.6", "--", *app("k@always"))
    assert code == EXIT_CODES[TIMEOUT], err
    assert "not an ncu hang" in json.loads(out)["reason"]
