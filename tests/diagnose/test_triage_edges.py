"""Triage's review fixes (batch B): cancelled sanitizer runs, sanitizer limits, up-front checks, programs that
cannot be executed, the verdict's words per tool, the CUDA error names, the kernel the sanitizers named."""

from __future__ import annotations

import sys
import threading
from pathlib import Path
from types import SimpleNamespace

import pytest
from helpers import FAKE_SANITIZER, FLAKY, SAN_APP, no_leftovers, run_cli

from nsightwrap.diagnose.cudaerrors import find_cuda_error
from nsightwrap.diagnose.plain import FINISHED, PlainRun
from nsightwrap.diagnose.run import (
    RUN_FACTOR,
    RUN_FLOOR_S,
    SANITIZER_RUNS_OF_LIMIT,
    TriageOptions,
    triage_command,
)
from nsightwrap.diagnose.sanitizer import run_sanitizer
from nsightwrap.diagnose.verdict import (
    CLEAN,
    FINDINGS,
    SAN_ERROR,
    STALLED,
    SanitizerView,
    judge,
    sanitizer_outcome,
)
from nsightwrap.errors import OptionsError, ProgramNotRunnable, ToolNotFound
from nsightwrap.status import INTERRUPTED, OK, PROGRAM_FAULT
from nsightwrap.store.triage import triage_rows
from nsightwrap.watch.rules import Cancelled


@pytest.fixture
def env(triage_env):
    """The triage tests' environment (conftest.triage_env)."""
    return triage_env


@pytest.mark.parametrize("output,name", [
    ("cuLaunchKernel: CUDA_ERROR_INVALID_VALUE", "cudaErrorInvalidValue"),
    ("cuStreamSynchronize: CUDA_ERROR_INVALID_HANDLE", "cudaErrorInvalidResourceHandle"),
    ("CUDA error: invalid configuration argument", "cudaErrorInvalidConfiguration"),
    ("CUDA error: invalid device function", "cudaErrorInvalidDeviceFunction"),
])
def test_a_driver_name_maps_only_to_the_runtime_error_it_really_is(output, name):
    assert find_cuda_error(output + "\n").name == name


# ---- triage_command with the fakes (tests/fake_triage/flaky.py, tests/fake_sanitizer) ----




def _stub(calls: list, findings: tuple = (), status: str = "ok", reason: str = ""):
    """A sanitize callable that runs nothing: it keeps its arguments and answers a SanitizerRun-like object."""
    def sanitize(command, tool, **kw):
        calls.append((tool, kw))
        return SimpleNamespace(tool=tool, status=status, findings_list=list(findings), errors=len(findings),
                               stalled=status == "hang", summary=f"{tool}: stub", reason=reason, version="1")
    return sanitize


def test_a_cancelled_sanitizer_run_ends_triage_interrupted_and_records_nothing_more(env, store):
    cancel, calls = threading.Event(), []
    cancel.set()  # Ctrl-C reached the first sanitizer run

    def sanitize(command, tool, **kw):
        calls.append(tool)
        return run_sanitizer(command, tool, **dict(kw, sanitizer=str(FAKE_SANITIZER), also=Cancelled(cancel)))

    r = triage_command([sys.executable, str(SAN_APP), "a", "b@race"], TriageOptions(runs=1, tools=("memcheck",
                       "racecheck")), store=store, sanitize=sanitize)
    assert r.status == INTERRUPTED and r.exit_code == 130 and calls == ["memcheck"]
    assert [row.tool for row in triage_rows(store, triage_id=r.triage_id)] == ["plain"]  # no sanitizer, no verdict
    no_leftovers()


def test_a_sanitizer_run_gets_a_finite_limit_without_timeout_and_the_timeout_with_it(env):
    calls: list = []
    r = triage_command([sys.executable, str(FLAKY), "a"], TriageOptions(runs=1, tools=("memcheck",)),
                       sanitize=_stub(calls))
    limit = calls[0][1]["limit_s"]
    assert limit == pytest.approx(SANITIZER_RUNS_OF_LIMIT * (RUN_FLOOR_S + RUN_FACTOR * r.runs[0].elapsed_s))
    triage_command([sys.executable, str(FLAKY), "a"], TriageOptions(runs=1, tools=("memcheck",), timeout=7.0),
                   sanitize=_stub(calls))
    assert calls[1][1]["limit_s"] == 7.0


def test_a_missing_sanitizer_or_a_filter_it_cannot_express_is_said_before_any_run(env, tmp_path):
    with pytest.raises(ToolNotFound):
        triage_command([sys.executable, str(FLAKY), "a"],
                       TriageOptions(runs=2, tools=("memcheck",), sanitizer=str(tmp_path / "no-sanitizer")))
    with pytest.raises(OptionsError, match="regular expression"):
        triage_command([sys.executable, str(FLAKY), "a"],
                       TriageOptions(runs=2, tools=("memcheck",), kernel="regex:a.*b", sanitizer=str(FAKE_SANITIZER)))
    assert not Path(env["FAKE_TRIAGE_COUNTER"]).exists()  # no run was made
    p = run_cli(["triage", "--runs", "2", "--sanitizer", str(tmp_path / "no-sanitizer"), "--store",
                 str(tmp_path / "h.db"), "--json", "--",
                 sys.executable, str(FLAKY), "a"], env)
    assert p.returncode == 2 and "compute-sanitizer" in p.stderr and "Traceback" not in p.stderr
    assert not Path(env["FAKE_TRIAGE_COUNTER"]).exists()


def test_a_program_the_system_cannot_execute_is_said_with_advice_not_a_traceback(env, tmp_path):
    prog = tmp_path / "prog"
    prog.write_text("echo no shebang line\n")
    prog.chmod(0o755)
    with pytest.raises(ProgramNotRunnable, match="could not execute it .*Exec format error.*python3"):
        triage_command([str(prog)], TriageOptions(runs=1, tools=()))
    p = run_cli(["triage", "--runs", "1", "--tools", "none", "--store", str(tmp_path / "h.db"), "--", str(prog)], env)
    assert p.returncode == 2 and "Exec format error" in p.stderr and "Traceback" not in p.stderr
    no_leftovers()


def _finding(kernel: str = "b(float*)") -> SimpleNamespace:
    return SimpleNamespace(kind="Race Write/Read", kernel=kernel, file="k.cu", line=19)


def test_the_kernel_falls_back_to_the_one_the_sanitizers_named_for_the_result_and_the_walk(env):
    from nsightwrap.diagnose.verdict import WalkView

    walked: list = []

    def walker(command, kernel, **kw):
        walked.append(kernel)
        return WalkView("ok"), None

    r = triage_command([sys.executable, str(FLAKY), "a"], TriageOptions(runs=1, tools=("racecheck",), walk=True),
                       sanitize=_stub([], findings=(_finding(),)), walker=walker)
    assert r.kernel == "b" and walked == ["b"]


# ---- the verdict's words (pure) ----


def test_only_the_tools_that_ran_clean_found_nothing_and_one_that_errored_says_why():
    views = [SanitizerView("memcheck", CLEAN, 0), SanitizerView("racecheck", SAN_ERROR, 0, reason="it crashed"),
             SanitizerView("initcheck", CLEAN, 0), SanitizerView("synccheck", STALLED, 0)]
    status, line = judge([PlainRun(1, FINISHED, 0, 1.0, "")], views, None)
    assert status == OK
    assert "memcheck, initcheck found nothing; racecheck could not run (it crashed)" in line
    assert "racecheck found nothing" not in line and "synccheck: stalled" in line


def test_a_tool_that_stalled_after_findings_keeps_its_findings():
    run = SimpleNamespace(tool="racecheck", status="hang", stalled=True, findings_list=[_finding()] * 3, errors=3,
                          summary="", reason="stalled")
    view = sanitizer_outcome(run)
    assert view.outcome == FINDINGS and view.count == 3
    status, line = judge([PlainRun(1, FINISHED, 0, 1.0, "")], [view], None)
    assert status == PROGRAM_FAULT and line.startswith("racecheck: 3 shared-memory hazards")
