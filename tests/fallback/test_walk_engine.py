"""The walk's independent jobs on the cluster engine (issue 22, item 2): `Session(executor=...)` against the
serial walk. The walk's logic runs on in-process backends (helpers.ThreadGpus, InlineGpus: the engine and its
run_probe as on a node, without submitit's processes); the command line's walk runs submitit's LocalExecutor
with the fakes (two fake GPUs) end to end."""

from __future__ import annotations

import json
import os
import time

import pytest
from helpers import (
    ROOT,
    STALL_S,
    InlineGpus,
    ThreadGpus,
    alive_in_scope,
    app,
    attempt_rows,
    beside,
    cli_main,
    ctrl_c_sweep,
    run_config,
)
from helpers import store_records as records
from helpers import walk_steps as steps

from nsightwrap.fallback import walk as walk_module
from nsightwrap.fallback.executor import ProbeEngine
from nsightwrap.fallback.session import Session
from nsightwrap.fallback.spec import ExecutorSpec
from nsightwrap.fallback.walk import walk_ladder
from nsightwrap.ncu.options import ProfileOptions
from nsightwrap.store.hangstore import HangStore

# a hangs whenever WarpStateStats (of the full set only) is collected, b whenever SourceCounters is: they step down
# to different rungs (a to detailed, b to basic) in 8 attempts a walk (b hanging with Occupancy took 10, each
# attempt a fake ncu run).
TWO_HANGS = app("vec_add", "a@hang-if=WarpStateStats", "vec_add", "b@hang-if=SourceCounters", "block_reduce")
#: The command line's walk: one line beside the main one, each attempt a submitit job (two lines were 8 jobs; how
#: lines of different kernels go together is the in-process tests' above). On a ladder of two rungs (TWO_RUNGS):
#: 3 attempts (the default ladder's line goes on from duration to detailed, a fourth job of ~1 s of CPU; its
#: decisions are the in-process tests').
ONE_HANG = app("vec_add", "a@hang-if=WarpStateStats", "block_reduce")
TWO_RUNGS = ("name: two\nrungs:\n  - name: requested\n    requested: true\n"
             "  - name: duration\n    metrics: [gpu__time_duration.sum]\n")


def cfg(tmp_path, check_gpu=True):
    return run_config(tmp_path, report_dir=str(tmp_path / "r"), env=dict(os.environ), check_gpu=check_gpu,
                      stall_timeout_given=True)


def walk(tmp_path, name, executor=None):
    """TWO_HANGS walked here (serial) or on `executor`; the GPU checks only on the engine, where its jobs on two GPUs
    must not take each other for foreign processes (the serial walk's checks, nvidia-smi once or twice an attempt,
    find nothing and change no step or record)."""
    with HangStore(tmp_path / f"{name}.db") as store:
        session = Session.open(TWO_HANGS, cfg(tmp_path, check_gpu=executor is not None), store=store,
                               executor=executor)
        return walk_ladder(session, ProfileOptions(set="full"), "default", reader=attempt_rows)


def on_threads(monkeypatch, tmp_path):
    """The walks' engines run their jobs on ThreadGpus (a fresh pair of fake GPUs each); the spec to walk with."""
    monkeypatch.setattr(walk_module, "open_engine", lambda spec, jobs, on_counts=None: ProbeEngine(
        spec, ThreadGpus(), tmp_path, owned=False, on_counts=on_counts))
    return ExecutorSpec("local", jobs=2, poll_s=0.01)


def test_the_walk_on_two_gpus_gives_the_serial_walks_result_and_its_jobs_overlap(fake_gpus, tmp_path, monkeypatch):
    spec = on_threads(monkeypatch, tmp_path)  # (the serial walk opens no engine)
    with beside(walk, tmp_path, "serial") as serial_walk:  # the serial walk at the same time, in a thread of its own
        engine = walk(tmp_path, "engine", spec)
        serial = serial_walk.result()
    assert steps(engine) == steps(serial)
    assert {s.attempt.stalled_kernel for s in serial.steps if s.attempt} >= {"a", "b"}
    assert (engine.status, engine.unprofiled, engine.stopped) == (serial.status, serial.unprofiled, serial.stopped)
    assert engine.df.sort_values(list(engine.df.columns)).reset_index(drop=True).equals(
        serial.df.sort_values(list(serial.df.columns)).reset_index(drop=True))
    assert records(tmp_path / "engine.db") == records(tmp_path / "serial.db")
    assert serial.jobs == [] and len(engine.jobs) == len(engine.attempts)
    assert {j.where for j in engine.jobs} == {"0", "1"}
    # a's and b's lines ran at once, each on its own GPU (the engine's timeline: the attempts' times on the node).
    span = [(j.chain, j.node["attempt_start"], j.node["attempt_end"], j.where) for j in engine.jobs]
    assert any(s1 < e2 and s2 < e1 and w1 != w2 for c1, s1, e1, w1 in span for c2, s2, e2, w2 in span if c1 != c2)


# --- a GPU that keeps processes: the engine's rule, set aside and run again elsewhere ----------------------


def test_a_gpu_that_keeps_processes_is_set_aside_and_the_attempt_runs_again_elsewhere(fake_gpus, tmp_path, monkeypatch):
    backend = InlineGpus(keeps=lambda gpu, n: gpu == "0")  # GPU 0 keeps processes after its job
    spec = ExecutorSpec("local", poll_s=0.01)
    monkeypatch.setattr(walk_module, "open_engine",
                        lambda spec, jobs, on_counts=None: ProbeEngine(spec, backend, tmp_path, owned=False))
    program = app("vec_add", "a@hang-if=SourceCounters", "block_reduce")
    engine = walk_ladder(Session.open(program, cfg(tmp_path), executor=spec), ProfileOptions(set="full"),
                         "default", reader=attempt_rows)
    # The serial walk's steps (written out: its walk was 5 more attempts, ~0.7 s of CPU; the engine's walk equal to
    # the serial one is the tests' above and below), the set-aside GPU's attempt run again, not a GpuKept stop.
    assert steps(engine) == [("main", "requested", None, "hang", "a"), ("main", "requested", None, "ok", None),
                             ("a", "duration", None, "ok", None), ("a", "detailed", None, "hang", "a"),
                             ("a", "basic", None, "ok", None)]
    assert engine.stopped is None
    assert backend.aside == ["0"]
    assert backend.log[:2] == [(None, "requested", "0"), (None, "requested", "1")]  # the first attempt, again
    assert {g for _, _, g in backend.log[1:]} == {"1"}


# --- the command line ------------------------------------------------------------------------------------


def test_cli_walk_on_the_local_executor_and_ctrl_c(fake_gpus, tmp_path, capsys, monkeypatch):
    """The walk through main(argv) in this process (its attempts are submitit jobs, real processes: the command
    line's own process, its exit status and SIGINT, is the Ctrl-C part's), on a profile file of two rungs."""
    monkeypatch.setenv("PYTHONPATH", str(ROOT))  # the jobs' python imports this nsightwrap
    profile = tmp_path / "two.yaml"  # a profile of the user's, read by the engine's walk
    profile.write_text(TWO_RUNGS)
    code, out, err = cli_main(["run", "--profile", str(profile), "--set", "full", "--executor", "local", "--jobs", "2",
                               "--json", "--stall-timeout", str(STALL_S), "--store", str(tmp_path / "hangs.db"),
                               "--no-preflight", "--", *ONE_HANG], capsys)
    assert code == 0, err
    doc = json.loads(out)
    assert [(s["job"], s["rung"]) for s in doc["steps"]] == [
        ("main", "requested"), ("main", "requested"), ("a", "duration")]
    assert (doc["status"], doc["ladder"]) == ("ok", "two")
    assert "running" in err and "finished" in err  # the live line: queued, running, finished
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    # Ctrl-C while an attempt's job runs: the jobs cancelled, interrupted (130), nothing left running.
    doc = ctrl_c_sweep(["run", "--profile", "default", "--executor", "local", "--json", "--stall-timeout", "60",
                        "--store", str(tmp_path / "hangs2.db"), "--no-preflight", "--", *app("a@hang")], env)
    assert doc["ladder"] == "default" and doc["store"] == str(tmp_path / "hangs2.db")  # as a serial walk answers
    deadline = time.monotonic() + 10
    while alive_in_scope(os.environ["FAKE_SMI_SCOPE"]):
        assert time.monotonic() < deadline, "processes left after the walk"
        time.sleep(0.1)


@pytest.mark.parametrize("argv, message", [
    (["--executor", "local"], "add --profile NAME"),
    (["--profile", "default", "--jobs", "2"], "--jobs N needs --executor local"),
    (["--profile", "default", "--slurm-partition", "gpu"], "needs --executor slurm"),
])
def test_cli_executor_options_of_run_are_checked_first(fake_gpus, argv, message, capsys):
    code, out, err = cli_main(["run", *argv, "--", *app("a")], capsys)
    assert code == 2 and message in err, err


def test_the_floors_rows_after_skipped_steps_and_max_attempts_on_the_engine_as_in_the_serial_walk(fake_gpus, tmp_path,
                                                                                                  monkeypatch):
    """One program (j hangs everywhere, k with SourceCounters), three walks at once (each waits mostly for its
    hangs' stall timeouts; two in threads beside the third):
    - walked whole (serially): j's rungs above the floor are skipped as implied, then k's floor rows give way to
      basic: the frame emptied is k's floor attempt's, not the frame at its step's index (an IndexError before);
    - cut at max_attempts=6, serially and on the engine: lines run ahead on the engine; their steps past the
      serial walk's max_attempts are dropped when the lines are put together (here within k's line, after j's
      skipped steps)."""
    program = app("vec_add", "j@hang", "k@hang-if=SourceCounters", "block_reduce")

    # (no GPU checks: nvidia-smi once or twice an attempt, ~0.3 s of CPU in all, nothing to do with rows or cuts;
    # the checks on the engine are the two-GPU test's)
    def walk_j_k(executor=None, max_attempts=64):  # (64: walk_ladder's default)
        return walk_ladder(Session.open(program, cfg(tmp_path, check_gpu=False), executor=executor),
                           ProfileOptions(set="full"), "default", reader=attempt_rows, max_attempts=max_attempts)

    spec = on_threads(monkeypatch, tmp_path)  # (the serial walks open no engine)
    with beside(walk_j_k) as whole, beside(walk_j_k, None, 6) as cut:
        engine = walk_j_k(spec, 6)
        serial, full = cut.result(), whole.result()
    assert any(s.job == "j" and s.skipped for s in full.steps)
    assert sorted(zip(full.df["function"], full.df["rung"])) == [
        ("block_reduce", "requested"), ("k", "basic"), ("vec_add", "requested")]
    assert "give way to rung 'basic'" in next(s for s in full.steps if s.job == "k").notes[-1]

    assert len(serial.attempts) == 6 and serial.stopped == "the walk reached max_attempts=6"
    assert steps(engine) == steps(serial) and engine.stopped == serial.stopped
    assert sorted(zip(engine.df["function"], engine.df["rung"], engine.df["attempt"])) == sorted(
        zip(serial.df["function"], serial.df["rung"], serial.df["attempt"]))
