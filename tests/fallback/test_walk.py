"""Walking down fallback ladders with the fake ncu (real processes)."""

from __future__ import annotations

import os
import re

import pytest
import yaml
from helpers import STALL_S, app, attempt_rows, cli_main, run_config, scaled_ladder

from nsightwrap.errors import AttemptFailed, LadderError
from nsightwrap.fallback.ladder import (
    builtin_profiles,
    exclude_kernels,
    ladder_from_dict,
    load_ladder,
    rewrite_for_replay,
)
from nsightwrap.fallback.session import Session
from nsightwrap.fallback.walk import walk_ladder
from nsightwrap.ncu.catalog import probe_ncu
from nsightwrap.ncu.context import RunConfig
from nsightwrap.ncu.options import KernelFilter, ProfileOptions

rows = attempt_rows


@pytest.fixture
def cfg(tmp_path, fake_env) -> RunConfig:
    return run_config(tmp_path, report_dir=str(tmp_path / "r"), env=fake_env, stall_timeout_given=True)


def where(result):
    df = result.df
    return list(zip(df["function"], df["rung"]))


# A kernel that hangs whenever SourceCounters is collected (in the full and detailed sets).
PROGRAM = app("vec_add", "k@hang-if=SourceCounters", "vec_add", "block_reduce")


def test_only_the_hanging_kernel_steps_down_and_a_second_walk_skips_known_hangs(cfg, ncu_lookups, store):
    """One walk, then the same walk again with what the store learnt (two tests once: both began with this
    walk), then again with retry_known_hangs."""
    r = walk_ladder(Session.open(PROGRAM, cfg, store=store), ProfileOptions(set="full"), "default", reader=rows)
    # One run context for the whole walk: ncu located and probed once for its five attempts.
    assert len(r.attempts) == 5 and ncu_lookups == {"find_ncu": 1, "probe_ncu": 1}
    assert {a.ncu for a in r.attempts} == {cfg.env["NSIGHTWRAP_NCU"]}
    # k hung in its first pass, so the floor came first; it worked, so the rungs above it were tried
    # in order, and basic, which worked too, took the floor's place.
    assert [(s.job, s.rung.name, s.attempt.status) for s in r.steps] == [
        ("main", "requested", "hang"), ("main", "requested", "ok"), ("k", "duration", "ok"),
        ("k", "detailed", "hang"), ("k", "basic", "ok")]
    assert "give way to rung 'basic'" in r.steps[2].notes[-1]
    assert sorted(where(r)) == sorted([("vec_add", "requested"), ("vec_add", "requested"),
                                       ("block_reduce", "requested"), ("k", "basic")])
    assert r.hangs == [("k", "requested"), ("k", "detailed")]
    # The resumed main attempt skipped the finished kernel and excluded k.
    resumed = r.steps[1].attempt.command
    assert "--launch-skip" in resumed and resumed[resumed.index("--launch-skip") + 1] == "1"
    assert any(a.startswith("regex:^(?!(?:k)$)") for a in resumed)
    assert r.unprofiled == [] and r.stopped is None
    assert "hung on k" in r.summary()

    first = r
    second = walk_ladder(Session.open(PROGRAM, cfg, store=store), ProfileOptions(set="full"), "default", reader=rows)
    assert len(first.attempts) == 5
    assert len(second.attempts) == 2  # main (k excluded from the start) and k at basic
    skipped = [(s.job, s.rung.name) for s in second.steps if s.skipped]
    assert skipped == [("k", "requested"), ("k", "detailed")]
    assert sorted(where(second)) == sorted(where(first))
    # With retry_known_hangs, both known hangs are tried again: the first walk's steps (its first four, up to the
    # second known hang; its fifth adds nothing here), none skipped.
    again = walk_ladder(Session.open(PROGRAM, cfg, store=store), ProfileOptions(set="full"), "default", reader=rows,
                        retry_known_hangs=True, max_attempts=4)
    assert [(s.job, s.rung.name, s.attempt.status) for s in again.steps] == [
        ("main", "requested", "hang"), ("main", "requested", "ok"), ("k", "duration", "ok"), ("k", "detailed", "hang")]
    assert "max_attempts=4" in again.stopped


def test_a_callers_calibrator_uses_the_walks_environment(tmp_path, fake_env, store, monkeypatch):
    """The walk detects this machine once (nvidia-smi) and hands it to the caller's Calibrator, which
    looks up its calibration in the store with it instead of detecting the machine again."""
    from nsightwrap.calibrate.confirm import Calibrator
    from nsightwrap.store.keys import Environment

    detected = []
    real_detect = Environment.detect
    monkeypatch.setattr(Environment, "detect", classmethod(
        lambda cls, *a, **k: detected.append(1) or real_detect(*a, **k)))
    config = run_config(tmp_path, report_dir=str(tmp_path / "r"), env=fake_env)  # calibrated allowances
    calibrator = Calibrator(app("vec_add"), store=store)
    r = walk_ladder(Session.open(app("vec_add"), config, store=store, calibrator=calibrator),
                    ProfileOptions(set="basic"), "default", reader=rows)
    assert [a.status for a in r.attempts] == ["ok"] and calibrator._looked_up
    assert len(detected) == 1 and calibrator._env.ncu_version == probe_ncu(fake_env["NSIGHTWRAP_NCU"]).version


def test_a_kernel_that_hangs_in_its_first_pass_meets_the_floor_next(cfg, store):
    """FACTS: a kernel that waits for the host hangs under any collection; one stalled run at the floor
    spares the rungs above it that serialise it the same way (each would cost a stalled run)."""
    program = app("vec_add", "k@hang", "vec_add")
    r = walk_ladder(Session.open(program, cfg, store=store), ProfileOptions(set="basic"), "default", reader=rows)
    steps = [(s.job, s.rung.name, s.attempt.status if s.attempt else "skipped") for s in r.steps]
    assert steps == [("main", "requested", "hang"), ("main", "requested", "ok"), ("k", "duration", "hang"),
                     ("k", "speed-of-light", "skipped"), ("k", "application-replay", "skipped"),
                     ("k", "range-replay", "no-kernels")]
    assert all("implied: it hung even at 'duration'" in s.skipped for s in r.steps if s.skipped)
    assert r.unprofiled == ["k"] and r.hangs == [("k", "requested"), ("k", "duration")]
    assert r.steps[2].attempt.stall.first_pass
    # Only hangs seen are recorded: nothing for the implied rungs.
    assert sorted(rec.rung for rec in store.records(kernel="k") if rec.hung) == ["duration", "requested"]
    second = walk_ladder(Session.open(program, cfg, store=store), ProfileOptions(set="basic"), "default", reader=rows)
    assert [s.job for s in second.steps if s.attempt] == ["main"]
    assert [s.skipped.split(" ")[0] for s in second.steps if s.skipped] == [
        "known", "implied:", "implied:", "profiled", "known"]
    assert second.unprofiled == ["k"]


def test_the_floors_rows_stand_when_no_rung_above_it_works(cfg):
    ladder = ladder_from_dict({"name": "t", "rungs": [
        {"name": "requested", "requested": True}, {"name": "speed-of-light", "sections": ["SpeedOfLight"]},
        {"name": "duration", "metrics": ["gpu__time_duration.sum"]}]})
    r = walk_ladder(Session.open(app("k@hang-if=SpeedOfLight", "vec_add"), cfg),
                    ProfileOptions(set="basic"), ladder, reader=rows)
    assert [(s.job, s.rung.name, s.attempt.status) for s in r.steps] == [
        ("main", "requested", "hang"), ("main", "requested", "ok"), ("k", "duration", "ok"),
        ("k", "speed-of-light", "hang")]
    assert sorted(where(r)) == [("k", "duration"), ("vec_add", "requested")]
    assert r.unprofiled == [] and r.steps[2].notes == ()


def test_the_floor_of_a_ladder():
    from nsightwrap.fallback.floor import floor_index, implied_by_floor

    basic = ProfileOptions(set="basic")
    default = load_ladder("default").for_processes(False)
    assert [r.name for r in default.rungs] == ["requested", "detailed", "basic", "speed-of-light",
                                               "application-replay", "range-replay", "duration"]
    assert floor_index(default, basic) == 6
    assert [implied_by_floor(r, basic) for r in default.rungs] == [True] * 5 + [False, True]
    quick = load_ladder("quick")
    assert floor_index(quick, basic) == 3  # one-rank-duration profiles one rank alone: not the floor
    assert not implied_by_floor(quick[2], basic)
    no_floor = ladder_from_dict({"name": "t", "rungs": [
        {"name": "requested", "requested": True}, {"name": "occupancy", "sections": ["Occupancy"]},
        {"name": "own", "metrics": ["gpu__time_duration.sum"], "extra_args": ["--cache-control", "none"]}]})
    assert floor_index(no_floor, basic) is None
    # Asked for one metric in application replay, a duration rung replays the application too: no floor.
    app_replay = ProfileOptions(metrics=("gpu__time_duration.sum",), replay_mode="application")
    assert floor_index(load_ladder("quick"), app_replay) is None


def test_application_replay_hang_resumes_from_the_start(cfg):
    """ncu prints a pass line for a kernel and then hangs in it: no kernel finished, so nothing is skipped."""
    ladder = ladder_from_dict({"name": "t", "rungs": [
        {"name": "requested", "requested": True}, {"name": "basic", "set": "basic"}]})
    program = app("vec_add", "k@hang", "vec_add")
    # Two metrics, no section: 2 application-replay passes (runs of the program), not the 4 of a section or the 38
    # of the full set; k hangs wherever it is profiled (a multi-pass collection all the same).
    opts = ProfileOptions(metrics=("gpu__time_duration.sum", "sm__cycles_elapsed.avg"), replay_mode="application")
    r = walk_ladder(Session.open(program, cfg), opts, ladder, reader=rows)
    hung = r.steps[0].attempt
    assert hung.status == "hang" and [k.name for k in hung.kernels] == ["vec_add", "k"]
    assert hung.finished_kernels == ()
    resumed = r.steps[1].attempt
    assert "--launch-skip" not in resumed.command and resumed.status == "ok"
    assert {k.passes for k in resumed.kernels} == {2}  # application replay of a multi-pass collection
    assert sorted(where(r)) == [("vec_add", "requested"), ("vec_add", "requested")] and r.unprofiled == ["k"]


def test_finished_kernels():
    from nsightwrap.ncu.attempt import Attempt, KernelResult
    from nsightwrap.ncu.progress import Stall

    def attempt(status, kernels, stall=None):
        return Attempt(status, "", (), 0, tuple(kernels), stall, None, False, 1.0, None, (), (), (), "", "", "")

    stall = Stall("k", 1, "0%..", 5.0, 5.0, 6.0, False, False)
    kernel_replay = [KernelResult("a", 0, 10)]
    assert attempt("hang", kernel_replay, stall).finished_kernels == tuple(kernel_replay)
    app_replay = [KernelResult("a", 0, 1, "application"), KernelResult("k", 1, 1, "application")]
    assert attempt("hang", app_replay, stall).finished_kernels == ()
    assert attempt("ok", app_replay).finished_kernels == tuple(app_replay)
    assert attempt("timeout", app_replay).finished_kernels == ()


def test_kernel_that_hangs_everywhere_is_reported(cfg):
    # The quick ladder with its stall timeouts (8, 6, 6 s) on the fake's clock.
    r = walk_ladder(Session.open(app("vec_add", "k@hang"), cfg),
                    ProfileOptions(set="basic"), scaled_ladder("quick"), reader=rows)
    assert r.unprofiled == ["k"]
    assert where(r) == [("vec_add", "requested")]
    # k hung in its first pass: the floor (duration) came next and hung too, so speed-of-light, whose
    # first pass serialises k the same way, was not run.
    assert [h[1] for h in r.hangs] == ["requested", "duration"]
    assert [(s.rung.name, s.skipped is not None) for s in r.steps if s.job == "k"] == [
        ("duration", False), ("speed-of-light", True)]
    assert "implied: it hung even at 'duration'" in r.steps[-1].skipped


def test_range_replay_rung_rewrites_the_kernel_filter(cfg):
    ladder = ladder_from_dict({"name": "t", "rungs": [
        {"name": "requested", "requested": True},
        {"name": "range", "sections": ["SpeedOfLight"], "replay_mode": "range"}]})
    r = walk_ladder(Session.open(app("vec_add", "start", "k@hang", "stop"), cfg),
                    ProfileOptions(set="basic"), ladder, reader=rows)
    assert where(r) == [("vec_add", "requested"), ("range", "range")]
    notes = " ".join(n for s in r.steps for n in s.notes)
    assert "instead of kernel filter 'k'" in notes


def test_transient_errors_are_retried(cfg, tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_NCU_FAIL_FIRST", f"2:{tmp_path / 'count'}")
    r = walk_ladder(Session.open(app("vec_add"), cfg.replace(env=dict(os.environ)), retry_wait=(0.01, 0.02)),
                    ProfileOptions(set="basic"), "default", reader=rows)
    assert where(r) == [("vec_add", "requested")]
    assert (tmp_path / "count").read_text() == "3"


def test_permanent_errors_fail_at_once(cfg, monkeypatch):
    monkeypatch.setenv("FAKE_NCU_ERROR", "ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA "
                                         "GPU Performance Counters on the target device 0.")
    with pytest.raises(AttemptFailed, match="NVreg_RestrictProfilingToAdminUsers"):
        walk_ladder(Session.open(app("vec_add"), cfg.replace(env=dict(os.environ))),
                    ProfileOptions(set="basic"), "default", reader=rows)


# --- ladders as data ----------------------------------------------------------------


def test_builtin_profiles_load_and_validate(fake_env, tmp_path):
    info = probe_ncu(fake_env["NSIGHTWRAP_NCU"], tmp_path)
    assert {"default", "quick", "deep"} <= set(builtin_profiles())
    for name in builtin_profiles():
        load_ladder(name).validate(info)
    default = load_ladder("default")
    assert [r.name for r in default.for_request(ProfileOptions(set="basic"), info)] == [
        "requested", "speed-of-light", "one-rank-launch-stats", "one-rank-duration", "application-replay",
        "range-replay", "duration"]
    # A single-process program never meets the one-rank rungs.
    assert [r.name for r in default.for_processes(False)] == [
        "requested", "detailed", "basic", "speed-of-light", "application-replay", "range-replay", "duration"]


def test_profile_file_errors(tmp_path, fake_env):
    info = probe_ncu(fake_env["NSIGHTWRAP_NCU"], tmp_path)
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({"name": "x", "rungs": [{"name": "a", "sectons": ["SpeedOfLight"]}]}))
    with pytest.raises(LadderError, match="sectons.*did you mean 'sections'"):
        load_ladder(str(bad))
    with pytest.raises(LadderError, match="non-empty"):
        ladder_from_dict({"name": "x", "rungs": []})
    with pytest.raises(LadderError, match="unknown section 'SpeedOfLigt'.*SpeedOfLight"):
        ladder_from_dict({"name": "x", "rungs": [{"sections": ["SpeedOfLigt"]}]}).validate(info)
    with pytest.raises(LadderError, match="no profile named 'defualt'.*default"):
        load_ladder("defualt")
    with pytest.raises(LadderError, match="replay_mode"):
        ladder_from_dict({"rungs": [{"replay_mode": "ranges"}]})
    good = tmp_path / "mine.yaml"
    good.write_text("name: mine\nrungs:\n  - {requested: true}\n"
                    "  - {metrics: gpu__time_duration.sum, stall_timeout: 3}\n")
    ladder = load_ladder(str(good))
    assert ladder.rungs[1].metrics == ("gpu__time_duration.sum",) and ladder.rungs[1].stall_timeout == 3


@pytest.mark.parametrize("rung,message", [
    ("{name: a, requested: 'false'}", "requested must be true or false"),
    ("{name: a, requested: 1}", "requested must be true or false"),
    ("{name: a, set: basic, stall_timeout: yes}", "stall_timeout must be a number.*yes/no"),
    ("{name: a, set: basic, stall_timeout: '10'}", "stall_timeout must be a number"),
    ("{name: 3, set: basic}", "name must be a string"),
    ("{name: a, set: [basic]}", "set must be a string"),
])
def test_profile_values_are_typed_strictly(tmp_path, rung, message):
    """YAML's loose types (`'false'` is true to bool(), `yes` is 1 s) are refused with what to write."""
    bad = tmp_path / "typed.yaml"
    bad.write_text(f"name: typed\nrungs:\n  - {rung}\n")
    with pytest.raises(LadderError, match=message):
        load_ladder(str(bad))


def test_units_survive_merging_the_rows_of_several_reports():
    import pandas as pd

    from nsightwrap.fallback.ladder import Ladder, Rung
    from nsightwrap.fallback.result import LadderResult

    a = pd.DataFrame({"function": ["k1"], "gpu__time_duration.sum": [5.0]})
    a.attrs = {"units": {"gpu__time_duration.sum": "ns"}, "report": "/r/a.ncu-rep"}
    b = pd.DataFrame({"function": ["k2"], "dram__bytes.sum": [7.0]})
    b.attrs = {"units": {"dram__bytes.sum": "byte"}, "report": "/r/b.ncu-rep"}
    result = LadderResult(Ladder("x", (Rung("r"),)), frames=[a, pd.DataFrame(), b])
    df = result.df
    assert list(df["function"]) == ["k1", "k2"]
    assert df.attrs["units"] == {"gpu__time_duration.sum": "ns", "dram__bytes.sum": "byte"}
    assert df.attrs["reports"] == ["/r/a.ncu-rep", "/r/b.ncu-rep"]


def test_rewrite_for_range_replay_says_what_it_dropped():
    opts = ProfileOptions(kernel=KernelFilter("v22", True), import_source=True, profile_from_start=False,
                          launch_skip=3).replace(replay_mode="range")
    new, notes = rewrite_for_replay(opts)
    assert new.kernel is None and new.import_source is None and new.profile_from_start is None
    assert new.launch_skip is None
    assert len(notes) == 4
    same, none = rewrite_for_replay(ProfileOptions(kernel=KernelFilter("v22", True)))
    assert same.kernel is not None and none == []


@pytest.mark.parametrize("user,names,matches,misses", [
    (None, ["k"], ["vec_add", "k2", "kk"], ["k"]),
    (KernelFilter("v22.*", True), ["v22_bad"], ["v22_good", "xv22"], ["v22_bad", "other"]),
    (KernelFilter("^v22", True), ["v22_bad"], ["v22_good"], ["xv22", "v22_bad"]),
    (KernelFilter("vec_add", False), ["k"], ["vec_add"], ["vec_add2", "k"]),
])
def test_exclusion_filter(user, names, matches, misses):
    f = exclude_kernels(user, names)
    assert f.regex
    for m in matches:
        assert re.search(f.pattern, m), m
    for m in misses:
        assert not re.search(f.pattern, m), m


def test_run_profile_cli(fake_env, tmp_path, capsys, monkeypatch):
    """`run --profile`: the walk from the command line, with the user's regex filter kept in every attempt (through
    main(argv) in this process: the command line's own process is tests/cli's)."""
    import json

    monkeypatch.chdir(tmp_path)
    ladder = tmp_path / "fast.yaml"  # the built-in ladders' own stall timeouts (6-8 s) would win over --stall-timeout
    ladder.write_text("name: fast\nrungs:\n  - {name: requested, requested: true}\n"
                      "  - {name: sol, sections: [SpeedOfLight]}\n")
    code, out, err = cli_main(["run", "-q", "--json", "--profile", str(ladder), "--set", "full", "--stall-timeout",
                               str(STALL_S), "--grace", "1", "--store", str(tmp_path / "s.db"), "--kernel",
                               "regex:^(k|vec_add)$", "--", *app("vec_add", "k@hang-if=SourceCounters", "vec_add")],
                              capsys)
    assert code == 0, err
    d = json.loads(out)
    assert d["unprofiled"] == [] and d["hangs"] == [["k", "requested"]]
    assert [(s["job"], s["rung"]) for s in d["steps"]] == [("main", "requested"), ("main", "requested"), ("k", "sol")]
    first, resumed = (d["steps"][i]["attempt"] for i in (0, 1))
    assert first["ncu"] == fake_env["NSIGHTWRAP_NCU"]
    assert first["command"][first["command"].index("--kernel-name") + 1] == "regex:^(k|vec_add)$"
    assert resumed["command"][resumed["command"].index("--launch-skip") + 1] == "1"
    assert "(?:^(k|vec_add)$)" in resumed["command"][resumed["command"].index("--kernel-name") + 1]
