"""`nsightwrap triage`: runs without ncu, compute-sanitizer, the walk, a verdict (issue 21), with the fakes.

The subject programs: tests/fake_triage/flaky.py (kernels that fail in some runs, decided by a seed, seen by the
fake CUPTI tracer), tests/fake_sanitizer/app.py under the fake compute-sanitizer, tests/fake_ncu/app.py under
the fake ncu for the walk.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

import pytest
from helpers import (
    FAKE_APP,
    FAKE_SANITIZER,
    FAKE_SMI_DIR,
    FLAKY,
    SAN_APP,
    cli_main,
    inline_pytest,
    no_leftovers,
    read_until,
    run_cli,
    start_cli,
)

import nsightwrap
from nsightwrap.diagnose.plain import FAILED, FINISHED, HUNG
from nsightwrap.diagnose.run import TriageOptions, _Calibrated, triage_command
from nsightwrap.ncu.context import RunConfig
from nsightwrap.status import EXIT_CODES, OK, PROFILER_INDUCED, PROGRAM_FAULT
from nsightwrap.store.debuglog import debug_log
from nsightwrap.store.keys import Environment
from nsightwrap.store.triage import triage_rows

NONE = TriageOptions(tools=())


def flaky(*steps: str) -> list[str]:
    return [sys.executable, str(FLAKY), *steps]


def failing(seed: str, rate: float, n: int) -> bool:
    """flaky.py's own rule (the same formula, so the expected count is known before the runs)."""
    import random

    return random.Random(f"{seed}:{n}").random() < rate


@pytest.fixture
def env(triage_env):
    """The triage tests' environment (conftest.triage_env)."""
    return triage_env


def test_an_intermittent_failure_is_counted_with_its_cuda_error_and_kernel(env, monkeypatch, store):
    monkeypatch.setenv("FAKE_TRIAGE_RATE", "0.5")
    expected = sum(failing("11", 0.5, n) for n in (1, 2))
    # the seed gives an intermittent failure (run 1 fails, run 2 not), and run 3, with CUDA_LAUNCH_BLOCKING=1, fails
    assert 0 < expected < 2 and failing("11", 0.5, 3)
    r = triage_command(flaky("a", "b@fault=illegal", "c", "sync"), TriageOptions(runs=2, tools=()), store=store)
    assert r.failed == expected and r.status == PROGRAM_FAULT and r.exit_code == EXIT_CODES[PROGRAM_FAULT] == 8
    bad = [x for x in r.runs if x.outcome == FAILED]
    # b's record came (as the real faulting kernel's did): nothing in flight, c launched last before the sync.
    assert all(x.error.name == "cudaErrorIllegalAddress" and x.kernel is None and "fake::c<" in x.last_launch
               for x in bad)
    # The guess ("after c, the last kernel launched") gives way to what CUDA_LAUNCH_BLOCKING=1 showed.
    assert f"fails without ncu in {expected} of 2 runs (cudaErrorIllegalAddress); with CUDA_LAUNCH_BLOCKING=1 it " \
           "failed in b" in r.verdict
    assert r.verdict.endswith("not a profiler problem")
    no_leftovers()


def test_an_asynchronous_failure_gets_one_run_with_cuda_launch_blocking(env, store):
    r = triage_command(flaky("a", "b@fault=torch", "c", "sync"), TriageOptions(runs=2, tools=()), store=store)
    assert r.blocking is not None and r.blocking.env == (("CUDA_LAUNCH_BLOCKING", "1"),)
    assert r.blocking.outcome == FAILED and "fake::b<" in r.blocking.kernel
    assert "with CUDA_LAUNCH_BLOCKING=1 it failed in b" in r.verdict


def test_a_synchronous_failure_needs_no_blocking_run(env, store):
    r = triage_command(flaky("a", "b@fault=oom"), TriageOptions(runs=1, tools=()), store=store)
    assert r.failed == 1 and r.blocking is None and "cudaErrorMemoryAllocation" in r.verdict


def test_a_program_that_hangs_by_itself_is_called_within_its_allowance_and_stopped(env, store):
    config = RunConfig(calibration_limit=1.0)  # a kernel not timed yet may stay in flight this long
    r = triage_command(flaky("a", "b@hang"), TriageOptions(runs=1, tools=()), config, store=store)
    (run,) = r.runs
    assert run.outcome == HUNG and "fake::b<" in run.kernel and run.elapsed_s < 10
    assert "hangs without ncu in 1 of 1 runs (in b)" in r.verdict and r.status == PROGRAM_FAULT
    no_leftovers()


def test_allowances_come_from_the_kernel_times_of_the_runs_before():
    from nsightwrap.diagnose.plain import PlainRun

    cal = _Calibrated(limit_s=50.0)
    assert cal.allowance("void fake::b<float>(float*, int)") == 50.0  # not timed yet: the calibration limit
    cal.learn(PlainRun(1, FINISHED, 0, 2.0, "", kernel_times=(("void fake::b<float>(float*, int)", 0.5),)))
    assert cal.allowance("void fake::b<float>(float*, int)") == pytest.approx(5.0 + 4 * 0.5)
    assert cal.allowance("b") == pytest.approx(7.0)  # ncu's spelling of the same kernel
    assert cal.run_limit(None) == pytest.approx(30.0 + 5 * 2.0) and cal.run_limit(3.0) == 3.0


def test_sanitizer_findings_name_the_tool_kernel_and_line_and_clear_runs_say_so(env, store):
    cmd = [sys.executable, str(SAN_APP), "a", "b@race", "c"]
    r = triage_command(cmd, TriageOptions(runs=1, tools=("memcheck", "racecheck")), store=store,
                       sanitize=_real_sanitizer(FAKE_SANITIZER))
    assert r.status == PROGRAM_FAULT and r.verdict.startswith("racecheck: ")
    assert " in b (triage_kernels.cu:19)" in r.verdict and "runs cleanly without ncu in 1 of 1 runs" in r.verdict
    assert [v.outcome for v, _ in r.sanitizers] == ["clean", "findings"]
    no_leftovers()


def _real_sanitizer(path: Path):
    from nsightwrap.diagnose.sanitizer import run_sanitizer

    return lambda *a, **kw: run_sanitizer(*a, **dict(kw, sanitizer=str(path)))


def test_a_sound_program_is_ok_and_the_verdict_says_what_was_run(env, store):
    r = triage_command([sys.executable, str(SAN_APP), "a", "b"], TriageOptions(runs=1), store=store,
                       sanitize=_real_sanitizer(FAKE_SANITIZER))
    assert r.status == OK and r.exit_code == 0
    assert r.elapsed_s == pytest.approx(r.runs_s + r.overhead_s) and r.runs_s > 0  # bench_triage's measure
    assert "runs cleanly without ncu in 1 of 1 runs; memcheck, racecheck, synccheck, initcheck found nothing" in (
        r.verdict)


def test_a_kernel_that_hangs_only_under_ncu_is_profiler_induced_with_the_settings_that_work(
        env, fake_env, fake_rows, store):
    r = triage_command([sys.executable, str(FAKE_APP), "a", "b@hang-if=MemoryWorkloadAnalysis", "c"],
                       TriageOptions(runs=1, tools=(), walk=True, set="full", ladder=_ladder()),
                       RunConfig(stall_timeout=0.5, stall_timeout_given=True), store=store)
    assert r.status == PROFILER_INDUCED and r.exit_code == 9, r.verdict
    assert r.verdict == ("profiler-induced: b hangs under ncu with set full; works with metrics "
                         "gpu__time_duration.sum, kernel replay"), r.verdict
    no_leftovers()


def _ladder() -> str:
    """A two-rung ladder file: the requested settings, then a single metric."""
    path = Path(os.environ["TMPDIR"]) / "two.yaml"
    path.write_text("name: two\nrungs:\n  - name: requested\n    requested: true\n  - name: duration\n"
                    "    metrics: [gpu__time_duration.sum]\n")
    return str(path)


def test_every_run_is_recorded_with_its_hypothesis_and_the_debug_log_compares_working_and_failing(
        env, monkeypatch, store):
    monkeypatch.setenv("FAKE_TRIAGE_RATE", "0.5")
    assert [failing("11", 0.5, n) for n in (1, 2)] == [True, False]  # a failing run and a working one
    r = triage_command(flaky("a", "b@fault=illegal", "sync"), TriageOptions(runs=2, tools=()), store=store)
    rows = triage_rows(store, triage_id=r.triage_id)
    plain = [x for x in rows if x.tool == "plain"]
    assert len(plain) == 2 + (r.blocking is not None) and rows[-1].tool == "triage"
    assert all(x.hypothesis and x.conclusion for x in rows)
    kept = store.calibration_for(flaky("a", "b@fault=illegal", "sync"), Environment.detect())
    assert kept is not None and kept.kernel_time("a") is not None  # the traced runs calibrate a later walk
    log = debug_log(store, "b")
    assert "## Triage: is it ncu or the kernel?" in log and "**Hypothesis:** the program fails or hangs" in log
    assert "## Key differences between a working and a failing triage run" in log
    assert "| environment | **as is** | **CUDA_LAUNCH_BLOCKING=1** |" in log or "| outcome | finished | failed |" in log


def test_a_store_that_cannot_be_written_costs_a_note_not_the_triage(env, tmp_path):
    from nsightwrap.store.hangstore import HangStore

    with HangStore(tmp_path / "h.db"):
        pass
    with HangStore(tmp_path / "h.db", readonly=True) as ro:
        r = triage_command(flaky("a"), TriageOptions(runs=1, tools=()), store=ro)
    assert r.status == OK and any("not recorded in the hang store" in n for n in r.notes)


def test_the_command_line_prints_one_json_object_and_exits_with_the_verdicts_code(env, tmp_path, capsys):
    cmd = ["triage", "--runs", "2", "--tools", "none", "--store", str(tmp_path / "h.db"), "--json", "--",
           *flaky("a", "b@fault=misaligned", "sync")]
    p = run_cli(cmd, env=env)
    doc = json.loads(p.stdout)
    assert p.returncode == 8 and doc["status"] == PROGRAM_FAULT and doc["exit_code"] == 8
    assert doc["failed"] == 2 and doc["of"] == 2 and doc["runs"][0]["error"]["name"] == "cudaErrorMisalignedAddress"
    assert "overhead_s" in doc and doc["verdict"].endswith("not a profiler problem")
    code, out, _ = cli_main(["hangs", "show", "b", "--markdown", "--store", str(tmp_path / "h.db")], capsys)
    assert code == 0 and "### Triage attempt 1: plain (failed)" in out


@pytest.mark.parametrize("args", [["--runs", "0"], ["--tools", "memcheck,bogus"], ["--kernel", ""]])
def test_bad_options_are_refused_before_anything_runs(env, args, capsys):
    code, out, _ = cli_main(["triage", *args, "--json", "--", *flaky("a")], capsys)
    assert code == 2 and json.loads(out)["status"] == "error"


def test_nsightwrap_triage_takes_a_callable_and_stays_the_package(env, tmp_path, monkeypatch):
    (tmp_path / "triage_subject.py").write_text(
        "def step(n):\n    raise RuntimeError('CUDA error: misaligned address')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import triage_subject

    r = nsightwrap.triage(triage_subject.step, 3, runs=1, tools=(), store=False)
    assert r.failed == 1 and r.runs[0].error.name == "cudaErrorMisalignedAddress" and r.status == PROGRAM_FAULT
    assert nsightwrap.diagnose.run.triage_command is triage_command  # the package's modules are still reachable


def test_a_callable_is_triaged_outside_any_profiler_range(env, tmp_path, monkeypatch):
    """On the GPU machine the triage of a callable marked a profiler range around it, and cuProfilerStart before fn's
    first CUDA call failed (CUDA error 3): every run 'failed' with no CUDA error, fn never ran (2026-11-27). Here the
    range's start fails as it did there; triage runs fn without it."""
    (tmp_path / "failing_range.py").write_text(
        "def start():\n    raise RuntimeError('cuProfilerStart failed with CUDA error 3')\n\n"
        "def stop():\n    pass\n")
    (tmp_path / "triage_clean.py").write_text("def step(n):\n    return n + 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("NSIGHTWRAP_PROFILER_API", "failing_range:start:stop")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, (str(tmp_path), os.environ.get("PYTHONPATH")))))
    import triage_clean

    r = nsightwrap.triage(triage_clean.step, 3, runs=2, tools=(), store=False, blocking=False)
    assert r.failed == 0 and [x.outcome for x in r.runs] == [FINISHED, FINISHED], r.to_dict()


def test_profile_triage_runs_triage_after_a_hang_or_failure_only_unless_always(env, tmp_path, monkeypatch):
    from types import SimpleNamespace

    from nsightwrap.call import triage as call_triage

    made = []
    monkeypatch.setattr(call_triage, "triage_callable", lambda fn, *a, **kw: made.append(fn) or "triaged")

    def result(hung: bool = False, status: str = "ok") -> SimpleNamespace:
        return SimpleNamespace(hung=hung, walk=SimpleNamespace(status=status), triage=None)

    assert call_triage.after_profile(result(), len, (), {}, True, None, None).triage is None
    assert call_triage.after_profile(result(hung=True), len, (), {}, True, None, None).triage == "triaged"
    assert call_triage.after_profile(result(status="crashed"), len, (), {}, True, None, None).triage == "triaged"
    assert call_triage.after_profile(result(), len, (), {}, "always", None, None).triage == "triaged"
    assert call_triage.after_profile(result(), len, (), {}, None, None, None).triage is None and len(made) == 3
    with pytest.raises(TypeError, match="triage="):
        call_triage.after_profile(result(), len, (), {}, "sometimes", None, None)


def test_the_pytest_fixture_triages_inside_a_test(env, tmp_path, monkeypatch):
    (tmp_path / "test_inner_triage.py").write_text(
        "import sys\n"
        f"CMD = [sys.executable, {str(FLAKY)!r}, 'a', 'b@fault=launch', 'sync']\n"
        "def test_it(nsightwrap_triage):\n"
        f"    r = nsightwrap_triage(CMD, runs=1, tools=(), store={str(tmp_path / 'h.db')!r})\n"
        "    assert r.status == 'program-fault' and r.failed == 1, r.verdict\n")
    monkeypatch.setenv("PATH", f"{FAKE_SMI_DIR}{os.pathsep}{env['PATH']}")
    inner = inline_pytest(tmp_path, monkeypatch)  # a session in this process (the fixture, not a process)
    assert inner.code == 0 and inner.count("passed") == 1, inner.text()


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_an_interrupt_stops_the_run_and_says_interrupted_once(env, tmp_path, sig):
    p = start_cli(["triage", "--runs", "3", "--tools", "none", "--calibration-limit", "60", "--store",
                   str(tmp_path / "h.db"), "--json", "--", *flaky("a", "b@hang")], env)
    try:
        read_until(p, p.stderr, b"run 1/3 without ncu")
        time.sleep(0.3)
        p.send_signal(sig)
        out, _ = p.communicate(timeout=30)
    finally:
        p.kill()
    doc = json.loads(out)
    assert p.returncode == 130 and doc["status"] == "interrupted" and doc["exit_code"] == 130
    no_leftovers()
