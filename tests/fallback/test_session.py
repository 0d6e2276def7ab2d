"""The session (nsightwrap.fallback.session): one object per profiled program, one attempt's path for the
walk and the sweep, results of one shape, and what a walk asks nvidia-smi (fake ncu, fake nvidia-smi)."""

from __future__ import annotations

import inspect
import json
import os
import uuid

import pytest
from helpers import FAKE_SMI_DIR, STALL_S, app, attempt_rows, cli_main, run_config

from nsightwrap.call.profiler import Profiler
from nsightwrap.fallback.ladder import ladder_from_dict
from nsightwrap.fallback.session import GpuKept, Session, Tag
from nsightwrap.fallback.sweep import sweep_sections
from nsightwrap.fallback.walk import walk_ladder
from nsightwrap.ncu.engine import profile_command
from nsightwrap.ncu.options import ProfileOptions
from nsightwrap.status import EXIT_CODES, HANG, OK
from nsightwrap.store.hangstore import HangStore

#: Two rungs; with a kernel that hangs only under SpeedOfLight, a walk of three attempts: the program hangs
#: on k, the program resumes without k, k alone at the second rung works.
TWO = ladder_from_dict({"name": "two", "rungs": [
    {"name": "requested", "requested": True}, {"name": "duration", "metrics": ["gpu__time_duration.sum"]}]})
PROGRAM = app("vec_add", "k@hang-if=SpeedOfLight", "vec_add")


@pytest.fixture
def smi_log(fake_env, monkeypatch, tmp_path):
    """The fake nvidia-smi on PATH, logging each call to the returned file."""
    log = tmp_path / "smi.log"
    monkeypatch.setenv("PATH", f"{FAKE_SMI_DIR}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_SMI_SCOPE", uuid.uuid4().hex)  # this test's processes only
    monkeypatch.setenv("FAKE_SMI_LOG", str(log))
    return log


def _calls(log) -> list[str]:
    return log.read_text().splitlines() if log.exists() else []


def test_the_entry_points_take_few_parameters_and_one_way_to_run():
    for fn in (walk_ladder, sweep_sections):
        assert len(inspect.signature(fn).parameters) <= 6, fn.__name__
    for fn in (walk_ladder, sweep_sections, profile_command, Session.open, Profiler):
        names = set(inspect.signature(fn).parameters)
        assert not {"config", "context"} <= names, fn.__name__


def test_one_encoding_of_an_explicit_stall_timeout(tmp_path, fake_env):
    given = Session.open(app("vec_add"), run_config(tmp_path, env=fake_env), stall_timeout=0.7)
    assert given.stall_timeout == 0.7 and given.config.stall_timeout_given
    # A rung's own stall timeout does not override an explicit one; without one it applies.
    assert given.context_for(stall_timeout=30.0).config.stall_timeout == 0.7
    free = Session.open(app("vec_add"), run_config(tmp_path, env=fake_env))
    assert free.stall_timeout is None and free.context_for(stall_timeout=30.0).config.stall_timeout == 30.0


def test_an_attempt_is_recorded_and_the_store_answers_through_the_session(tmp_path, fake_env):
    store = HangStore(tmp_path / "h.db")
    session = Session.open(app("vec_add", "k@hang"), run_config(tmp_path, env=fake_env), stall_timeout=STALL_S,
                           store=store)
    opts = ProfileOptions(set="basic")
    a = session.attempt(opts, Tag(ladder="test"))
    assert a.status == HANG and a.stalled_kernel == "k"
    assert session.hangs_for("k", opts) and session.verdict("k", opts).hung
    assert session.hanging_kernels(opts) == ["k"]


def test_the_walk_gives_the_verdict_the_cli_prints(smi_log, tmp_path, capsys):
    """The verdict, and what a walk of three attempts asks nvidia-smi: at most four times (these two tests made the
    same walk once)."""
    cfg = run_config(tmp_path, report_dir=str(tmp_path / "r"), env=dict(os.environ), check_gpu=True)
    r = walk_ladder(Session.open(PROGRAM, cfg, stall_timeout=STALL_S, store=HangStore(tmp_path / "h.db")),
                    ProfileOptions(set="basic"), TWO, reader=attempt_rows)
    assert [(s.job, s.rung.name, s.attempt.status) for s in r.steps] == [
        ("main", "requested", "hang"), ("main", "requested", "ok"), ("k", "duration", "ok")]
    calls = _calls(smi_log)
    assert len(calls) <= 4, calls
    doc = r.to_dict()
    assert r.status == OK and r.exit_code == EXIT_CODES[OK] == doc["exit_code"] and doc["status"] == OK
    assert [s["rung"] for s in doc["steps"]] == ["requested", "requested", "duration"]
    json.dumps(doc)  # plain types
    code, out, err = cli_main(["run", "--json", "--profile", "quick", "--stall-timeout", "0.6", "--store",
                               str(tmp_path / "s.db"), "-o", str(tmp_path / "r2"), "--", *app("vec_add")], capsys)
    printed = json.loads(out)  # main(argv) in this process: what it prints and returns is what the CLI's are
    assert code == printed["exit_code"] == 0 and set(printed) == set(doc), err


# The sweep's result carries its exit code (a hang found is the sweep's success: 0): tests/fallback/test_sweep.py's
# test_sweep_cli, whose sweep of a kernel that hangs prints it.


def test_a_gpu_that_keeps_processes_stops_with_the_attempt_recorded(tmp_path, fake_env, monkeypatch):
    import nsightwrap.ncu.engine as engine

    store = HangStore(tmp_path / "h.db")
    session = Session.open(app("vec_add"), run_config(tmp_path, env=fake_env), stall_timeout=0.6, store=store)
    real = engine.build_attempt

    def kept(*a, **kw):
        return real(*a, **{**kw, "gpu_left_after": ["123 (app)"]})

    monkeypatch.setattr(engine, "build_attempt", kept)
    with pytest.raises(GpuKept, match="false hangs") as caught:
        session.attempt(ProfileOptions(set="basic"), Tag(ladder="test"))
    assert caught.value.attempt.status == OK and session.verdict("vec_add", ProfileOptions(set="basic")) is not None


def test_through_the_cli_too_with_the_preflight(smi_log, tmp_path, capsys):
    """`run --profile` (the preflight's GPU checks included): the GPU inventory once, and the processes once
    per attempt at most (the preflight's listing serves the first attempt, a stopped attempt's the next). Through
    main(argv) in this process: nvidia-smi is asked by what the command runs, not by its process."""
    ladder = tmp_path / "two.yaml"
    ladder.write_text("name: two\nrungs:\n  - {name: requested, requested: true}\n"
                      "  - {name: duration, metrics: [gpu__time_duration.sum]}\n")
    code, out, err = cli_main(["run", "--json", "--profile", str(ladder), "--stall-timeout", str(STALL_S),
                               "--store", str(tmp_path / "s.db"), "-o", str(tmp_path / "r"), "--", *PROGRAM], capsys)
    assert code == 0, err
    doc = json.loads(out)
    assert [(s["job"], s["attempt"]["status"]) for s in doc["steps"]] == [("main", "hang"), ("main", "ok"),
                                                                          ("k", "ok")]
    calls = _calls(smi_log)
    assert len(calls) <= 4 and sum("--query-gpu" in c for c in calls) == 1, calls
