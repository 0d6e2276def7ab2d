"""Program faults are never ncu hangs (issue 19, item 3).

When the kernel ncu stalled on does not finish without ncu within the
calibration limit, or the program fails without ncu, the verdict is a
program fault (timeout 4, crashed 7, `program_fault` naming the kernel),
never a recorded hang; a calibration run that cannot start is an error (5)
that says what to do. Unit tests with a fake measure, then real runs with the
fake ncu (no nsys: the plain run calibrates) through the library and the CLI.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import replace

import pytest
from helpers import FAKE_APP, FakeContext, app, cli_main, no_leftovers, run_config, unavailable

from nsightwrap.calibrate import Calibrator
from nsightwrap.calibrate.confirm import confirm_limit
from nsightwrap.errors import OptionsError
from nsightwrap.fallback.ladder import ladder_from_dict
from nsightwrap.fallback.result import LadderResult
from nsightwrap.fallback.session import Session
from nsightwrap.fallback.sweep import sweep_sections
from nsightwrap.fallback.walk import walk_ladder
from nsightwrap.ncu.allowance import Calibration
from nsightwrap.ncu.attempt import Attempt
from nsightwrap.ncu.context import DEFAULT_CALIBRATION_LIMIT_S, RunConfig
from nsightwrap.ncu.engine import profile_command
from nsightwrap.ncu.options import ProfileOptions
from nsightwrap.ncu.progress import Stall
from nsightwrap.status import CRASHED, ERROR, EXIT_CODES, HANG, TIMEOUT
from nsightwrap.store.hangstore import HangStore
from nsightwrap.store.keys import Environment, ProfileKey

H100 = Environment("host", "NVIDIA H100 80GB HBM3", "580.1", "2025.3.1")
SOL = ProfileOptions(sections=("SpeedOfLight",))
#: A ladder whose rungs all run (no floor): a walk that went on after a program fault would show it.
TWO_RUNGS = ladder_from_dict({"name": "two", "rungs": [
    {"name": "requested", "requested": True}, {"name": "duration", "metrics": ["gpu__time_duration.sum"]}]})


# --- the verdict, with a fake measure ------------------------------------------------------------

def _attempt(kernel="k", silent=3.0, detected_at=7.5):
    stall = Stall(kernel, 4, "0%..", silent, 3.0, detected_at, True, False)
    return Attempt(status=HANG, reason="r", command=("ncu", "app"), returncode=None, kernels=(), stall=stall,
                   report=None, report_complete=False, elapsed_s=detected_at + 0.5, stop=None, warnings=(),
                   errors=(), notes=(), log="", started_at="2026-11-27T00:00:00+00:00", cookie="c")


def _confirm(measured, config=RunConfig(), attempt=None):
    """One stalled attempt confirmed with a measure that returns `measured` (or raises it); the limits it got."""
    limits = []

    def measure(command, config, **kw):
        limits.append(kw["limit_s"])
        if isinstance(measured, BaseException):
            raise measured
        return measured

    cal = Calibrator(["app"], env=H100, measure=measure)
    runs = []
    a = cal.run(lambda ctx: runs.append(1) or (attempt or _attempt()), FakeContext(config), SOL)
    ok = isinstance(measured, Calibration) and measured.ok
    assert ok or len(runs) == 1  # a fault or an error is never run again under ncu
    return a, limits


def test_the_calibration_run_gets_the_limit_after_the_stall_not_120_s():
    """The stalled kernel's last mark came 4.5 s into the run under ncu: the plain run may take that plus the
    calibration limit (50 s by default; before: max(120 s, 4 x the attempt), or the whole --timeout)."""
    a, limits = _confirm(Calibration.from_wall(1.0))
    assert limits == [pytest.approx(4.5 + DEFAULT_CALIBRATION_LIMIT_S)] and DEFAULT_CALIBRATION_LIMIT_S == 50.0
    _, limits = _confirm(Calibration.from_wall(1.0), RunConfig(calibration_limit=5.0, timeout=600.0))
    assert limits == [pytest.approx(9.5)]
    assert confirm_limit(_attempt(), RunConfig(calibration_limit=2.0)) == (pytest.approx(6.5), pytest.approx(4.5))


def test_the_calibration_limit_must_be_positive():
    with pytest.raises(OptionsError, match="calibration_limit"):
        RunConfig(calibration_limit=0)


def test_a_kernel_that_does_not_finish_without_ncu_is_a_program_fault_naming_it():
    """From a kernel tracer: the stalled kernel was still in flight without ncu when the limit ended."""
    measured = replace(Calibration.failed(TIMEOUT, "the traced run was stopped", "cupti"),
                       unfinished=(("void ns::k<int>(float*, int)", 61.2), ("other", 3.0)))
    a, _ = _confirm(measured, attempt=_attempt(kernel="k"))
    assert a.status == TIMEOUT and a.exit_code == 4
    assert '"void ns::k<int>(float*, int)" did not finish without ncu' in a.program_fault
    assert "61.2 s" in a.program_fault and "calibration limit of 50 s" in a.program_fault
    assert 'also in flight: "other" (3.0 s)' in a.program_fault
    assert a.reason.startswith("program fault, not an ncu hang") and a.stall.kernel == "k"
    assert a.to_dict()["program_fault"] == a.program_fault


def test_without_a_tracer_the_fault_names_the_stalled_kernel_and_the_limit():
    a, _ = _confirm(Calibration.failed(TIMEOUT, "did not finish", "plain run"),
                    RunConfig(calibration_limit=20.0))
    assert a.status == TIMEOUT and a.program_fault
    assert "did not finish without ncu within 24.5 s" in a.program_fault
    assert 'calibration limit of 20 s after it reached "k"' in a.program_fault
    assert "--calibration-limit" in a.program_fault


def test_a_program_that_fails_without_ncu_is_crashed_naming_what_was_in_flight():
    a, _ = _confirm(replace(Calibration.failed(CRASHED, "exit code 3", "cupti"), unfinished=(("k", 0.5),)))
    assert a.status == CRASHED and a.exit_code == 7
    assert 'kernels in flight when it failed: "k" (0.5 s)' in a.program_fault
    a, _ = _confirm(Calibration.failed(CRASHED, "exit code 3", "plain run"))
    assert a.status == CRASHED and 'under ncu it stalled in "k"' in a.program_fault


def test_a_calibration_run_that_cannot_start_is_an_error_that_says_what_to_do():
    a, _ = _confirm(PermissionError(13, "Permission denied", "./app"))
    assert a.status == ERROR and a.exit_code == 5 and not a.program_fault
    assert "could not be started without ncu" in a.reason and "exists and is executable" in a.reason
    assert a.calibration.status == ERROR


def test_a_program_fault_is_never_recorded(store):
    a, _ = _confirm(Calibration.failed(TIMEOUT, "did not finish", "plain run"))
    assert store.record_attempt(a, ProfileKey("basic"), H100, rung="requested") == [] and len(store) == 0
    assert not store.hangs_for("k", ProfileKey("basic"), H100)


def test_a_walk_result_takes_the_status_of_its_program_fault():
    a, _ = _confirm(Calibration.failed(CRASHED, "exit code 3", "plain run"))
    from nsightwrap.fallback.result import Step

    result = LadderResult(TWO_RUNGS, steps=[Step("main", TWO_RUNGS[0], 0, a)], stopped="the program fails")
    assert result.status == CRASHED and result.program_fault is a and result.hangs == []
    from nsightwrap.call.result import ProfileResult

    assert ProfileResult(result).program_fault == a.program_fault and not ProfileResult(result).hung


# --- real runs with the fake ncu ---------------------------------------------------------------

@pytest.fixture
def cfg(fake_env, tmp_path):
    """No nsys here (fake_env's): the plain run calibrates. The stalled kernel may run 0.5 s without ncu (its
    programs that hang by themselves do so whatever the limit)."""
    return run_config(tmp_path, env=fake_env, calibration_limit=0.5)


def test_a_walk_on_a_program_that_hangs_by_itself_stops_with_a_program_fault(cfg, tmp_path):
    program = app("vec_add", "k@always", "vec_add")
    with HangStore(tmp_path / "h.db") as store:
        r = walk_ladder(Session.open(program, cfg, store=store),
                        ProfileOptions(set="basic"), TWO_RUNGS, reader=lambda a: __import__("pandas").DataFrame())
        [a] = r.attempts  # stopped there: no second rung, no rung recorded as hanging
        assert a.status == TIMEOUT and '"k"' in a.program_fault and "within" in a.program_fault
        assert r.status == TIMEOUT and r.program_fault is a and r.hangs == [] and "without ncu" in r.stopped
        assert len(store) == 0 and store.calibration_for(program, H100) is None
    assert a.calibration is not None and not a.calibration.ok
    no_leftovers()


def test_a_program_that_fails_without_ncu_is_crashed_not_a_hang(cfg):
    a = Calibrator(app("k@hang", "exit:3")).run(
        lambda ctx: profile_command(app("k@hang", "exit:3"), SOL, ctx), _context(cfg), SOL)
    assert a.status == CRASHED and a.exit_code == 7 and '"k"' in a.program_fault
    assert "exit code 3" in a.reason + " ".join(a.notes)


def _context(cfg):
    from nsightwrap.ncu.context import RunContext

    return RunContext.create(cfg)


def test_a_sweep_stops_with_the_program_fault_and_records_nothing(cfg, tmp_path):
    with HangStore(tmp_path / "s.db") as store:
        r = sweep_sections(Session.open(app("vec_add", "k@always"), cfg, store=store),
                           sections=["SpeedOfLight", "Occupancy"])
        assert r.status == TIMEOUT and r.program_fault is not None and '"k"' in r.program_fault.program_fault
        assert r.kernels == [] and len(store) == 0
        d = r.to_dict()
        assert d["status"] == TIMEOUT and d["program_fault"] and "program fault" in r.table()


# --- the command line ------------------------------------------------------------------------------

@pytest.mark.parametrize("profile", [False, True])
def test_cli_a_program_that_hangs_by_itself_exits_4_with_the_fault(fake_env, quick_suspicion, tmp_path, profile, capsys,
                                                                  monkeypatch):
    """In this process (main(argv)): the exit code is main's."""
    store = tmp_path / "h.db"
    monkeypatch.chdir(tmp_path)
    args = ["run", "-q", "--json", "--store", str(store), "--calibration-limit", "0.5", "--set", "basic",
            *(["--profile", "quick"] if profile else []), "--", *app("vec_add", "k@always")]
    code, out, err = cli_main(args, capsys)
    assert code == EXIT_CODES[TIMEOUT], err
    d = json.loads(out)
    assert d["status"] == TIMEOUT and d["exit_code"] == 4 and '"k"' in d["program_fault"]
    assert "calibration limit of 0.5 s" in d["program_fault"]
    if store.exists():
        with HangStore(store) as s:
            assert len(s) == 0


def test_cli_a_calibration_run_that_cannot_start_is_an_error_not_a_traceback(fake_env, quick_suspicion, tmp_path, capfd,
                                                                           monkeypatch):
    """The program runs under ncu, then loses its execute bit: the plain run cannot start it. main(argv) in this
    process, its output read at the file descriptors (capfd): a traceback it printed is in `err`, and an exception
    it let out fails the test."""
    prog = tmp_path / "prog.sh"
    prog.write_text(f'#!/bin/sh\nchmod -x "$0"\nexec "{sys.executable}" "{FAKE_APP}" vec_add k@hang\n')
    prog.chmod(0o755)
    monkeypatch.chdir(tmp_path)
    code, out, err = cli_main(["run", "-q", "--json", "--store", str(tmp_path / "h.db"), "--set", "basic", "--",
                               str(prog)], capfd)
    if os.geteuid() == 0 and code != EXIT_CODES[ERROR]:
        unavailable("root may run a file without its execute bit here")
    assert code == EXIT_CODES[ERROR], err
    assert "Traceback" not in err
    d = json.loads(out)
    assert d["status"] == ERROR and d["program_fault"] is None
    assert "could not be started without ncu" in d["reason"] and "executable" in d["reason"]


def test_cli_help_states_the_calibration_limit(capsys):
    for command in ("run", "sweep-sections"):
        with pytest.raises(SystemExit) as done:  # argparse's --help, in this process
            cli_main([command, "--help"], capsys)
        assert done.value.code == 0
        text = " ".join(capsys.readouterr().out.split())
        assert "--calibration-limit SEC" in text and "(default 50)" in text


def test_cli_sweep_on_a_program_that_hangs_by_itself_exits_4(fake_env, quick_suspicion, tmp_path, capsys, monkeypatch):
    store = tmp_path / "s.db"
    monkeypatch.chdir(tmp_path)
    code, out, err = cli_main(["sweep-sections", "-q", "--json", "--no-preflight", "--store", str(store), "--section",
                               "SpeedOfLight", "--calibration-limit", "0.5", "--",
                               *app("vec_add", "k@always")], capsys)
    assert code == EXIT_CODES[TIMEOUT], err
    d = json.loads(out)
    assert d["status"] == TIMEOUT and d["exit_code"] == 4 and '"k"' in d["program_fault"] and d["kernels"] == []
    with HangStore(store) as s:
        assert len(s) == 0


@pytest.mark.parametrize("command, cwd", [(["/nonexistent/prog"], None), (app("vec_add"), "/nonexistent-folder")])
def test_library_calibration_that_cannot_start_is_an_error_calibration(fake_env, tmp_path, command, cwd):
    """No such program, or no such working folder: a failed (error) calibration that says what to do, not an
    OSError raised from deep inside the watch (before: a traceback)."""
    calibration = Calibrator(command).calibrate(RunConfig(cwd=cwd, env=fake_env, check_gpu=False))
    assert calibration.status == ERROR and "could not be started without ncu" in calibration.reason
    assert "No such file or directory" in calibration.reason and "working folder" in calibration.reason


def test_the_stalled_kernel_is_found_in_the_trace_by_ncus_cut_name():
    measured = replace(Calibration.failed(TIMEOUT, "over the kernel limit", "cupti"),
                       unfinished=(("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096>)", 60.5),))
    a, _ = _confirm(measured, attempt=_attempt(kernel="ncclDevKernel_AllReduce_Sum_f..."))
    assert a.program_fault.startswith('"ncclDevKernel_AllReduce_Sum_f32_RING_LL(') and "60.5 s" in a.program_fault


def test_a_source_that_could_not_start_the_program_gets_the_advice_once():
    a, _ = _confirm(Calibration.failed(ERROR, "the program could not be started without ncu: [Errno 2]", "cupti"))
    assert a.status == ERROR and a.reason.count("exists and is executable") == 1
    a, _ = _confirm(FileNotFoundError(2, "No such file or directory", "./app"))
    assert a.status == ERROR and a.reason.count("exists and is executable") == 1
