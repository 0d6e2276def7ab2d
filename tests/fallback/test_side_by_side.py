"""A torchrun job's collectives, profiled on one rank, run beside the main program's run (nsightwrap.fallback.lines):
the same steps and rows as one run after the other, each run's ranks meeting on a port of their own. Real processes:
the fake torchrun (tests/fake_dist) listens on its rendezvous port (FAKE_DIST_PORTS=1), as the real one does, and the
fake program's `together:DIR:S` step tells whether a rank of the other run was alive at the same time."""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path

import pandas as pd
import pytest
from helpers import app, dist_config, sigint_when, start_cli

from nsightwrap.fallback.collectives import COLLECTIVES_JOB
from nsightwrap.fallback.ladder import ladder_from_dict
from nsightwrap.fallback.session import Session
from nsightwrap.fallback.walk import walk_ladder
from nsightwrap.ncu.options import ProfileOptions
from nsightwrap.store.hangstore import HangStore
from nsightwrap.watch.tree import COOKIE_VAR, OWNER_VAR, processes_with

DIST = Path(__file__).parents[1] / "fake_dist"
AR = "ncclDevKernel_AllReduce_Sum_f32_RING_LL"
STEPS = ["gemm", f"{AR}@collective", "softmax", f"{AR}@collective"]
#: The default ladder's rungs that a walk of these tests reaches: what was asked, basic (the hung kernel's line: one
#: rung, not the default's floor, detailed and basic, which add attempts and nothing side by side), the collectives'.
SHORT_LADDER = ladder_from_dict({"name": "short", "rungs": [
    {"name": "requested", "requested": True}, {"name": "basic", "set": "basic"},
    {"name": "one-rank-launch-stats", "ranks": "one", "sections": ["LaunchStats"],
     "metrics": ["gpu__time_duration.sum"]}]})


def torchrun(*steps: str, launcher: tuple[str, ...] = ()) -> list[str]:
    return [str(DIST / "torchrun"), *launcher, "--nproc-per-node", "2", *app(*steps)[1:]]


def rows(attempt) -> pd.DataFrame:
    return pd.DataFrame({"function": [k.name for k in attempt.kernels]})


@pytest.fixture
def ports(fake_env, monkeypatch):
    monkeypatch.setenv("FAKE_DIST_PORTS", "1")
    monkeypatch.setenv("PET_MASTER_PORT", str(_free_port()))  # this test's own: tests run side by side too
    return dict(os.environ)


def _free_port() -> int:
    from nsightwrap.watch.launchers import free_port

    return free_port()


def _walk(tmp_path, env, command, *, side_by_side=True, store=None, stall_timeout=None, ladder="default"):
    said: list[str] = []
    cfg = dist_config(tmp_path, env)
    session = Session.open(command, cfg, store=store, on_output=said.append, side_by_side=side_by_side,
                           stall_timeout=stall_timeout)
    return walk_ladder(session, ProfileOptions(set="full"), ladder, reader=rows), "".join(said)


def _shape(result) -> list[tuple]:
    return [(s.job, s.rung.name, s.skipped, s.attempt.status if s.attempt else None) for s in result.steps]


def test_the_collectives_run_beside_the_main_run_and_the_walk_is_the_serial_ones(ports, tmp_path):
    meet = tmp_path / "meet"
    meet.mkdir()
    beside, said = _walk(tmp_path, ports, torchrun(f"together:{meet}:20", *STEPS), store=HangStore(tmp_path / "a.db"))
    # Both runs were alive at once (each rank saw a rank of the other run), on two ports.
    assert said.count("together: ports") >= 2 and "alone" not in said, said
    # Output comes in pieces, not lines, and another rank's piece may follow a line cut short ("59025" + "0...",
    # seen once): only whole lines count.
    ports_seen = set(re.findall(r"together: ports (\d+) (\d+)\n", said))
    assert len(ports_seen) == 1 and len(set(next(iter(ports_seen)))) == 2
    side = [s for s in beside.steps if s.job == COLLECTIVES_JOB and s.attempt is not None]
    assert len(side) == 1 and any("run beside another run of the job" in n for n in side[0].notes)
    assert "PET_MASTER_PORT=" in " ".join(side[0].notes)

    (tmp_path / "meet2").mkdir()
    serial, said = _walk(tmp_path, ports, torchrun(f"together:{tmp_path / 'meet2'}:0.3", *STEPS), side_by_side=False,
                         store=HangStore(tmp_path / "b.db"))
    assert "together" not in said and said.count("alone: port") >= 2
    assert not any("run beside" in n for s in serial.steps for n in s.notes)
    # The same steps, statuses and rows, in the same order.
    assert _shape(beside) == _shape(serial)
    assert list(beside.df["function"]) == list(serial.df["function"])
    assert beside.to_dict()["status"] == serial.to_dict()["status"] == "ok"


def test_a_job_that_fixes_its_rendezvous_port_runs_its_collectives_after_the_main_run(ports, tmp_path, caplog):
    meet = tmp_path / "meet"
    meet.mkdir()
    port = str(_free_port())
    with caplog.at_level("INFO", logger="nsightwrap"):
        result, said = _walk(tmp_path, ports, torchrun(f"together:{meet}:0.3", *STEPS,
                                                       launcher=("--master-port", port)))
    assert "together" not in said and said.count(f"alone: port {port}") >= 2
    assert "the collectives' run waits for the main program's" in caplog.text and "--master-port" in caplog.text
    assert [a.status for a in result.attempts] == ["ok", "ok"]


def test_another_job_after_a_hang_waits_for_both_runs(ports, tmp_path):
    """A kernel that hangs in the main run gets a line of its own, which starts once the runs before it ended: the
    steps are the serial walk's, in its order (main, its rerun past the hang, the collectives, the kernel's rungs)."""
    meet = tmp_path / "meet"
    meet.mkdir()
    steps = [f"together:{meet}:20", "gemm", f"{AR}@collective", "softmax@hang-if=SourceCounters", f"{AR}@collective"]
    # An explicit stall timeout: the hang is taken at once, not calibrated and confirmed first (the calibration's
    # own runs are not what this test is about).
    beside, said = _walk(tmp_path, ports, torchrun(*steps), store=HangStore(tmp_path / "a.db"), ladder=SHORT_LADDER,
                         stall_timeout=0.6)
    assert "together: ports" in said
    assert [(s.job, s.rung.name, s.attempt.status) for s in beside.steps if s.attempt] == [
        ("main", "requested", "hang"), ("main", "requested", "ok"), (COLLECTIVES_JOB, "one-rank-launch-stats", "ok"),
        ("softmax", "basic", "ok")]
    assert beside.hangs == [("softmax", "requested")]


def test_ctrl_c_while_both_runs_run_is_interrupted_records_nothing_and_leaves_no_process(ports, tmp_path):
    meet = tmp_path / "meet"
    meet.mkdir()
    store = tmp_path / "h.db"
    p = start_cli(["run", "--json", "-q", "--no-preflight", "--profile", "default", "--set", "basic", "--store",
                   str(store), "--", *torchrun(f"together:{meet}:20", "sleep:30", *STEPS)], ports, cwd=tmp_path)

    def both_up() -> None:
        deadline = time.monotonic() + 30
        while len({f.name.partition(".")[0] for f in meet.iterdir()}) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)  # both runs' ranks are up
        assert len({f.name.partition(".")[0] for f in meet.iterdir()}) == 2

    d = sigint_when(p, both_up, timeout=40)
    assert d["status"] == "interrupted" and d["exit_code"] == 130
    assert processes_with(COOKIE_VAR, d["attempt"]["cookie"]) == []
    assert processes_with(OWNER_VAR, str(p.pid)) == []  # neither run left a process
    assert HangStore(store).records() == []


def test_runs_that_fail_beside_each_other_are_made_again_alone(ports, tmp_path):
    """A program that fixes its own rendezvous port (bind:PORT, as init_method="tcp://...:PORT" does): whichever run
    comes second fails to listen there (both runs are up first: together); it is made again alone, and the walk
    is the serial one."""
    meet = tmp_path / "meet"
    meet.mkdir()
    port = str(_free_port())
    # The run that listens holds the port until the other run was refused it (a note in `refused`), however late the
    # machine's load runs that one: it held it 0.5 s before, and a loaded run of the suite once saw no EADDRINUSE.
    # Made again alone, the refused run finds the note there and goes on at once.
    refused = tmp_path / "refused"
    refused.mkdir()
    beside, said = _walk(tmp_path, ports, torchrun(f"together:{meet}:10", f"bind:{port}:{refused}",
                                                   f"refused:{refused}:10", *STEPS), store=HangStore(tmp_path / "a.db"))
    assert "EADDRINUSE" in said, said  # one of the two runs did fail beside the other
    assert [(s.job, s.rung.name, s.attempt.status) for s in beside.steps if s.attempt] == [
        ("main", "requested", "ok"), (COLLECTIVES_JOB, "one-rank-launch-stats", "ok")]
    notes = " ".join(n for s in beside.steps for n in s.notes)
    assert "not taken, it was made again alone" in notes and beside.to_dict()["status"] == "ok"
    assert sorted(beside.df["function"]) == sorted(["gemm", "softmax"] * 2 + [AR.split("@")[0]] * 2)


def test_a_hang_beside_another_run_is_not_recorded_but_made_again_alone(ports, tmp_path):
    """ncu's machine-wide profiling lock or the other run's work may make a kernel of one run silent: a hang while the
    other run was under way is not taken; the attempt is made again alone, and that one's hang is recorded. (An
    explicit stall timeout: the hang is called during the other run's wait, with no calibration between; a
    calibrated hang is judged by the silence of its last run, tested the same way.)"""
    store = HangStore(tmp_path / "a.db")
    meet = tmp_path / "meet"
    meet.mkdir()  # both runs reach the hanging kernel together; the collectives' run then waits through the stall:
    # for a rank of another run in `late`, which the main run, hung, never reaches (1 s, the stall's 0.6 and more);
    # the runs after it find the collectives' rank there (another port) and go on at once.
    late = tmp_path / "late"
    late.mkdir()
    steps = ["gemm", f"{AR}@collective", f"together:{meet}:10", "softmax@hang-if=SourceCounters", f"together:{late}:1",
             f"{AR}@collective"]
    result, _ = _walk(tmp_path, ports, torchrun(*steps), store=store, stall_timeout=0.6, ladder=SHORT_LADDER)
    main = [s for s in result.steps if s.job == "main" and s.attempt]
    assert [s.attempt.status for s in main] == ["hang", "ok"]
    assert any("not taken, it was made again alone" in n for n in main[0].notes)
    hangs = [(r.kernel, r.rung) for r in store.records() if r.hung]
    assert hangs.count(("softmax", "requested")) == 1  # once: the run made alone; the one beside, not at all
    assert result.hangs[0] == ("softmax", "requested")


def test_a_gpu_that_keeps_processes_of_one_run_stops_the_other_and_the_walk(ports, tmp_path, monkeypatch):
    import nsightwrap.ncu.engine as engine

    real = engine.build_attempt

    def kept(outcome, **kw):  # the collectives' run (its ranks under the rank wrapper) leaves a process on the GPU
        wrapped = any("nsightwrap.watch.onerank" in part for part in outcome.argv)
        return real(outcome, **{**kw, "gpu_left_after": ["4242 (python)"] if wrapped else []})

    monkeypatch.setattr(engine, "build_attempt", kept)
    store = HangStore(tmp_path / "a.db")
    # gemm is slow only where it is profiled: the main run takes 20 s more, the collectives' run does not.
    steps = ["gemm@slow=1/10", f"{AR}@collective", "gemm@slow=1/10", f"{AR}@collective"]
    t0 = time.monotonic()
    result, _ = _walk(tmp_path, ports, torchrun(*steps), store=store)
    assert "the GPU still runs processes of the last attempt (4242 (python))" in result.stopped
    assert time.monotonic() - t0 < 15  # the main run was stopped, not waited for
    assert {r.rung for r in store.records()} == {"one-rank-launch-stats"}  # the main run: nothing recorded
    assert result.to_dict()["status"] != "ok"


def test_cli_serial_runs_one_after_the_other(ports, tmp_path, capsys, monkeypatch):
    """`run --serial` hands the walk a session that runs one attempt after the other (without: beside); the serial
    walk itself, end to end, is the second half of the first test above. Through main(argv) in this process, the walk
    replaced by one that notes its session and stops as Ctrl-C between two attempts would (no attempt is run)."""
    from helpers import cli_main

    import nsightwrap.fallback.walk as walk

    seen = []

    def noted(session, *args, **kwargs):
        seen.append(session.side_by_side)
        raise KeyboardInterrupt

    monkeypatch.setattr(walk, "walk_ladder", noted)
    monkeypatch.chdir(tmp_path)
    for flags in (["--serial"], []):
        code, out, err = cli_main(["run", "-q", "--json", "--no-preflight", "--profile", "default", "--set", "basic",
                                   *flags, "--store", str(tmp_path / "s.db"), "--", *torchrun("gemm")], capsys)
        assert code == 130 and json.loads(out)["status"] == "interrupted", err
    assert seen == [False, True]
