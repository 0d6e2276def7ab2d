"""profile(fn) costs no more than profiling by hand (issue 15).

The warm-up calls' time reaches the watchdog before the profiled range (a
file in the call's folder, read by the stall rule), a known call time skips
the plain run, and a shared Profiler locates and probes ncu once.
"""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
import time
from pathlib import Path

import pytest
from callees import other_step, quick_step, slow_step, step_with_hang
from helpers import FAKE_DIR, FAKE_SMI_DIR, FAST_ALLOWANCE, inline_pytest, run_config

from nsightwrap.calibrate.confirm import Calibrator
from nsightwrap.call import child
from nsightwrap.call.api import profile
from nsightwrap.call.profiler import Profiler
from nsightwrap.call.spec import CallFiles, make_spec, subject
from nsightwrap.fallback.ladder import Ladder, Rung
from nsightwrap.ncu.allowance import (
    NOT_CALIBRATED,
    AllowancePolicy,
    Calibration,
    KernelAllowances,
    kernel_allowance,
)
from nsightwrap.ncu.calltime import (
    REPORTED,
    ReportedCallTime,
    read_call_time,
    reported_calibration,
    typical_call,
    write_call_time,
)
from nsightwrap.ncu.context import RunConfig
from nsightwrap.ncu.options import ProfileOptions
from nsightwrap.ncu.progress import KernelInProgress, StallRule, WatchState
from nsightwrap.store.hangstore import HangStore
from nsightwrap.store.keys import Environment
from nsightwrap.watch.files import write_atomic

FAKE = str(FAKE_DIR)
if FAKE not in sys.path:
    sys.path.insert(0, FAKE)  # NSIGHTWRAP_PROFILER_API names fakecuda

ONE_RUNG = Ladder("one", (Rung("requested", requested=True),))


# --- functions that child.run calls in this process (the child process's: tests/callees.py) ---

def sleepy(seconds):
    time.sleep(seconds)
    return seconds


RANGE_OPENED = []


def range_start():
    """A profiler-start that notes what the watchdog could read at that moment."""
    RANGE_OPENED.append(read_call_time(os.environ["TEST_CALL_TIME"]))


def range_stop():
    pass


# --- fixtures ---------------------------------------------------------------------------


pytestmark = pytest.mark.usefixtures("fake_rows")


#: profile(fn)'s calibration is fn's own call time (seconds the tests choose), not a fake program's interpreter
#: start: these tests keep a margin of 1, which their silences are sized against (helpers' FAST_ALLOWANCE has 0.25).
CALL_ALLOWANCE = AllowancePolicy(margin=1.0, floor_s=0.5)


@pytest.fixture
def cfg(tmp_path, fake_env, monkeypatch) -> RunConfig:
    monkeypatch.setenv("NSIGHTWRAP_PROFILER_API", "fakecuda:profiler_start:profiler_stop")
    return run_config(tmp_path, stall_timeout=0.4, allowance=CALL_ALLOWANCE)


@pytest.fixture
def plain_runs(monkeypatch):
    """Counts the plain (calibration) runs of the child."""
    import nsightwrap.call.profiler as profiler

    runs = []

    def counted(*args, **kwargs):
        runs.append(args)
        return real(*args, **kwargs)

    real = profiler.plain_run
    monkeypatch.setattr(profiler, "plain_run", counted)
    return runs


# --- the side channel: pure, time injected ----------------------------------------------


FULL = ProfileOptions(set="full")  # 38 passes: four between two progress marks
ONE_PASS = ProfileOptions(metrics=("gpu__time_duration.sum",))


def _stalled(silent_s: float, replay_pass=None) -> WatchState:
    """A kernel in progress whose last progress mark was `silent_s` ago (now = 100)."""
    state = WatchState(started_at=0.0, last_output_at=0.0)
    state.current = KernelInProgress("softmax", 0, 100.0 - silent_s, 100.0 - silent_s, marks=1,
                                     replay_pass=replay_pass)
    return state


def test_before_the_call_time_is_reported_the_base_rule_judges(tmp_path):
    rule = ReportedCallTime(StallRule(1.0), str(tmp_path / "call-time.json"), FULL)
    stall = rule(_stalled(5.0), 100.0).stall
    assert (stall.allowance_s, stall.basis, stall.calibrated) == (1.0, NOT_CALIBRATED, False)
    assert rule.call_s is None and reported_calibration(rule) is None


def test_a_reported_call_time_calibrates_each_kernel_for_the_passes_collected(tmp_path):
    path = tmp_path / "call-time.json"
    rule = ReportedCallTime(StallRule(1.0), str(path), FULL)
    write_call_time(path, [1.0])
    allowance = kernel_allowance(1.0, passes=38)  # 2.5 s + 4 x 1.245 x 1 s x 4 passes between two marks
    assert allowance == pytest.approx(22.42)
    assert rule(_stalled(6.0), 100.0) is None and rule.call_s == 1.0  # the old 3 x call + 2 s called it hung
    assert rule.deadline(_stalled(6.0)) == pytest.approx(94.0 + allowance)
    assert rule.allowance(_stalled(6.0)) == pytest.approx(allowance)  # what the live status line shows
    stall = rule(_stalled(allowance + 0.1), 100.0).stall
    assert stall.calibrated and stall.allowance_s == pytest.approx(allowance)
    assert stall.basis == ("from calibration (fn's calls ran 1.00 s without ncu, bounding softmax, "
                           "profile(fn) warm-up calls)")
    assert reported_calibration(rule) == Calibration.from_call(1.0, REPORTED)
    one_pass = ReportedCallTime(StallRule(1.0), str(path), ONE_PASS, AllowancePolicy(margin=1.0, floor_s=0.5))
    assert one_pass.allowance(_stalled(0.0)) == pytest.approx(
        kernel_allowance(1.0, passes=1, margin=1.0, floor_s=0.5))


def test_a_call_time_is_replaced_at_once_and_a_failed_write_leaves_nothing(tmp_path):
    """Bug: a failed write left its temporary file beside the call-time file."""
    path = tmp_path / "call-time.json"
    write_call_time(path, [0.5])
    write_call_time(path, [0.25])
    assert json.loads(path.read_text())["call_s"] == [0.25] and os.listdir(tmp_path) == ["call-time.json"]
    blocked = tmp_path / "blocked.json"
    (blocked / "inside").mkdir(parents=True)  # a folder where the file should go: the final rename fails
    with pytest.raises(OSError):
        write_call_time(blocked, [0.5])
    assert sorted(os.listdir(tmp_path)) == ["blocked.json", "call-time.json"]


def test_write_atomic_writes_text_and_bytes_with_the_mode_asked(tmp_path):
    write_atomic(tmp_path / "t.txt", "héllo")
    write_atomic(tmp_path / "b.bin", b"\x00\x01")
    write_atomic(tmp_path / "p.json", "{}", mode=0o600)
    assert (tmp_path / "t.txt").read_text(encoding="utf-8") == "héllo"
    assert (tmp_path / "b.bin").read_bytes() == b"\x00\x01"
    assert (tmp_path / "p.json").stat().st_mode & 0o777 == 0o600
    assert sorted(os.listdir(tmp_path)) == ["b.bin", "p.json", "t.txt"]


def test_a_reported_call_time_replaces_the_uncalibrated_default(tmp_path):
    """Like any calibration: a real hang in a 1 ms call is called at 2.5 s, not at the default 20 s."""
    path = tmp_path / "call-time.json"
    write_call_time(path, [1e-3])
    judged = ReportedCallTime(StallRule(20.0), str(path), FULL).current().judge(_stalled(5.0))
    assert judged.seconds == pytest.approx(kernel_allowance(1e-3, passes=38)) and judged.calibrated
    assert judged.basis == ("from calibration (fn's calls ran 1.00 ms without ncu, bounding softmax, profile(fn) "
                            "warm-up calls)")
    # The call just timed wins over a call time known before (an earlier call, the store).
    known = KernelAllowances.for_options(Calibration.from_call(2.0, "profile(fn) hang store"), FULL)
    judged = ReportedCallTime(StallRule(1.0, allowances=known), str(path), FULL).current().judge(_stalled(5.0))
    assert judged.seconds == pytest.approx(kernel_allowance(1e-3, passes=38)) and "warm-up calls)" in judged.basis
    # Silence after an application-replay pass may be the program's own work, which one call does not bound.
    quiet = ReportedCallTime(StallRule(1.0), str(path), FULL).current().judge(_stalled(5.0, replay_pass=1))
    assert quiet.seconds == 3.0 and not quiet.calibrated


def test_call_time_file_format(tmp_path):
    path = tmp_path / "t.json"
    assert read_call_time(path) is None
    path.write_text('{"format": 1, "call_s": [0.5')  # half a file
    assert read_call_time(path) is None
    path.write_text(json.dumps({"format": 99, "call_s": [0.5]}))
    assert read_call_time(path) is None
    write_call_time(path, [3.0, 0.2, 0.25])
    assert read_call_time(path) == 0.25  # the first call alone pays the set-up
    assert typical_call([0.7]) == 0.7 and not list(tmp_path.glob("*.tmp"))


def test_run_config_watches_the_file_only_when_told(tmp_path):
    assert not isinstance(RunConfig().rules(), ReportedCallTime)
    path = tmp_path / "t.json"
    rules = RunConfig(call_time_file=str(path), timeout=600, allowance=FAST_ALLOWANCE).rules(FULL)
    reported = rules.rules[0]
    assert isinstance(reported, ReportedCallTime) and reported.rule.timeout == 10.0
    assert (reported.options, reported.policy) == (FULL, FAST_ALLOWANCE)  # the passes and the policy
    write_call_time(path, [0.5])
    assert rules(_stalled(1.0), 100.0) is None and reported_calibration(rules).bound_s == 0.5
    given = RunConfig(call_time_file=str(path), stall_timeout=3.0, stall_timeout_given=True).rules(FULL)
    assert not isinstance(given, ReportedCallTime)  # an explicit stall timeout wins


def test_child_reports_warmup_time_before_it_opens_the_range(tmp_path, monkeypatch):
    monkeypatch.setenv("NSIGHTWRAP_PROFILER_API", f"{__name__}:range_start:range_stop")
    call_time = tmp_path / "call-time.json"
    monkeypatch.setenv("TEST_CALL_TIME", str(call_time))
    RANGE_OPENED.clear()
    spec = make_spec(sleepy, (0.05,), {}, warmup=2, repeat=1)
    spec.call_time_path = str(call_time)
    result = child.run(spec)
    assert len(RANGE_OPENED) == 1 and RANGE_OPENED[0] is not None and RANGE_OPENED[0] >= 0.05
    assert len(result.warmup_s) == 2 and min(result.warmup_s) >= 0.05

    RANGE_OPENED.clear()
    call_time.unlink()
    child.run(make_spec(sleepy, (0.0,), {}, warmup=0, repeat=1))
    assert RANGE_OPENED == [None] and not call_time.exists()  # no warm-up, nothing to report


# --- profile(fn) with the fake ncu: real child processes --------------------------------


def test_warmup_time_sets_the_allowance_without_a_plain_run(cfg, plain_runs, monkeypatch):
    import nsightwrap.call.profiler as profiler

    reads = []
    real = profiler.read_result
    monkeypatch.setattr(profiler, "read_result", lambda path: reads.append(Path(path).name) or real(path))
    # Silent 0.6 s between progress marks, with a stall timeout of 0.4 s: hung, unless the call's
    # calibration covers it (0.3 s warm-up, basic's 10 passes, the tests' policy: 0.5 + 1.245 x 0.3 = 0.87 s).
    r = profile(slow_step, 0.3, 0.6, profile=ONE_RUNG, config=cfg)
    assert [a.status for a in r.attempts] == ["ok"] and list(r.df["function"]) == ["slow_kernel"]
    assert plain_runs == []
    # The walk's child result is read once (the same run served test_the_walks_child_result_is_read_once).
    assert reads == ["walk-result.pkl"]
    assert r.calibration_source == "warm-up" and 0.3 <= r.calibration_s < 2.0
    assert r.stall_timeout == pytest.approx(kernel_allowance(r.calibration_s, passes=10, margin=CALL_ALLOWANCE.margin,
                                                             floor_s=CALL_ALLOWANCE.floor_s))
    assert r.value == "done"  # from the measured call under ncu


@pytest.mark.parametrize("warmup, basis", [(1, "profile(fn) warm-up calls)"), (0, "profile(fn) plain run)")])
def test_a_hang_judged_against_fns_call_time_is_calibrated_once_only(cfg, plain_runs, monkeypatch, warmup, basis):
    # The call time (warm-up calls reported to the watchdog, or a plain run) calibrates the kernels: the
    # verdict stands, with no second timing of fn (nsys or a plain run) to confirm it.
    calibrations = []
    monkeypatch.setattr(Calibrator, "calibrate", lambda self, *a, **k: calibrations.append(a))
    r = profile(step_with_hang, 1, warmup=warmup, profile=ONE_RUNG, config=cfg)
    hung = r.attempts[0]
    assert hung.status == "hang" and hung.stall.kernel == "wait_for_host" and hung.stall.calibrated
    assert hung.stall.basis.startswith("from calibration (fn's calls ran") and hung.stall.basis.endswith(basis)
    assert hung.calibration is not None and hung.calibration.bound_s is not None  # in the attempt's record
    assert calibrations == [] and len(plain_runs) == (warmup == 0)
    assert ("wait_for_host", "requested") in r.hangs and r.value == 1


def test_without_the_warmup_time_the_stall_costs_a_calibration_and_a_second_run(cfg, plain_runs):
    # The same silence stalls the 0.4 s rule; the stall is not recorded as a hang (issue 10: confirm
    # before recording) but costs a plain calibration run and a second profile, which the warm-up saves.
    r = profile(slow_step, 0.3, 0.6, profile=ONE_RUNG, config=cfg, calibrate=False)
    assert r.hangs == [] and [a.status for a in r.attempts][-1] == "ok"
    assert r.calibration_s is None


def test_a_known_call_time_skips_the_plain_run(cfg, plain_runs, tmp_path):
    store = tmp_path / "hangs.db"
    first = profile(quick_step, 1, warmup=0, profile=ONE_RUNG, config=cfg, store=store)
    assert len(plain_runs) == 1 and first.calibration_source == "plain run"
    with HangStore(store) as s:
        cal = s.call_time(subject(make_spec(quick_step, (1,), {}, 0, 1)), Environment.detect("2025.3.1.0"))
    assert cal is not None and cal.source == "plain run" and cal.seconds == first.calibration_s

    second = profile(quick_step, 1, warmup=0, profile=ONE_RUNG, config=cfg, store=store)  # a new process, say
    assert len(plain_runs) == 1 and second.calibration_source == "hang store"
    assert second.stall_timeout == first.stall_timeout and second.value == 1

    other_args = profile(quick_step, 2, warmup=0, profile=ONE_RUNG, config=cfg, store=store)
    assert len(plain_runs) == 2 and other_args.calibration_source == "plain run"


def test_a_shared_profiler_probes_once_and_reuses_call_times(cfg, plain_runs, ncu_lookups, monkeypatch):
    detected = []
    real_detect = Environment.detect
    monkeypatch.setattr(Environment, "detect", classmethod(
        lambda cls, *a, **k: detected.append(1) or real_detect(*a, **k)))
    with Profiler(cfg, store=str(Path(cfg.report_dir) / "hangs.db")) as p:
        a = p.profile(quick_step, 1, warmup=0, profile=ONE_RUNG)
        b = p.profile(other_step, 1, profile=ONE_RUNG)
        c = p.profile(quick_step, 1, warmup=0, profile=ONE_RUNG)
    assert ncu_lookups == {"find_ncu": 1, "probe_ncu": 1} and len(detected) == 1
    assert (a.calibration_source, b.calibration_source, c.calibration_source) == (
        "plain run", "warm-up", "earlier call")
    assert len(plain_runs) == 1 and [a.value, b.value, c.value] == [1, 2, 1]


def test_profile_refuses_config_beside_a_profiler(cfg):
    from nsightwrap.errors import NsightwrapError

    with Profiler(cfg) as p, pytest.raises(NsightwrapError, match="to the Profiler"):
        profile(quick_step, 1, profiler=p, config=cfg)


def test_the_child_imports_no_pandas_and_itself_once(tmp_path, fake_env, monkeypatch):
    (tmp_path / "light.py").write_text(
        "import sys\n"
        "def loaded_modules():\n"
        "    return {'modules': sorted(sys.modules), 'main': sys.modules['__main__'].__file__}\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import light

    files = CallFiles(tmp_path)
    spec = make_spec(light.loaded_modules, (), {}, warmup=0, repeat=1)
    spec.result_path = str(files.plain_result)
    files.write_spec(spec)
    out = subprocess.run(files.command(files.plain_result), capture_output=True, text=True, timeout=60,
                         env=dict(os.environ, NSIGHTWRAP_PROFILER_API="fakecuda:profiler_start:profiler_stop",
                                  PYTHONPATH=os.pathsep.join(p for p in sys.path if p)))
    assert out.returncode == 0, out.stderr
    seen = pickle.loads(child_value(files))
    heavy = [m for m in seen["modules"] if m.split(".")[0] in ("pandas", "ncu_report", "numpy")
             or m.startswith(("nsightwrap.reports", "nsightwrap.fallback.walk", "nsightwrap.call.api"))]
    assert heavy == []
    # Nor what only the parent's stall rule and the watch need (~15 ms of CPU a child): the call-time file and
    # write_atomic come without the progress parser, tempfile, uuid, hashlib or difflib.
    assert [m for m in ("nsightwrap.ncu.progress", "nsightwrap.ncu.events", "tempfile", "uuid", "hashlib", "difflib")
            if m in seen["modules"]] == []
    assert seen["main"].endswith(os.path.join("nsightwrap", "call", "__main__.py"))  # child.py ran once


def child_value(files: CallFiles) -> bytes:
    from nsightwrap.call.spec import read_result

    result = read_result(files.plain_result)
    assert result is not None and result.ok, result and result.error
    return result.value_pickle


def test_the_fixture_shares_one_profiler_across_a_session(tmp_path, fake_env, ncu_lookups, monkeypatch):
    # A session inside this process (helpers.inline_pytest): its two tests locate and probe ncu once.
    (tmp_path / "test_inner_share.py").write_text(
        "import callees, test_profile_cost as t\n"
        "def test_a(nsight_profile):\n"
        "    assert nsight_profile(callees.quick_step, 1, profile=t.ONE_RUNG).value == 1\n"
        "def test_b(nsight_profile):\n"
        "    assert nsight_profile(callees.other_step, 1, profile=t.ONE_RUNG).value == 2\n")
    monkeypatch.setenv("NSIGHTWRAP_PROFILER_API", "fakecuda:profiler_start:profiler_stop")
    # the fixtures skip where nvidia-smi lists no GPU: the fake one lists one
    monkeypatch.setenv("PATH", os.pathsep.join([str(FAKE_SMI_DIR), os.environ.get("PATH", "")]))
    inner = inline_pytest(tmp_path, monkeypatch)
    assert inner.code == 0 and inner.count("passed") == 2, inner.text()
    assert ncu_lookups == {"find_ncu": 1, "probe_ncu": 1}


def test_a_store_of_schema_1_gains_the_calibrations_table(tmp_path):
    import sqlite3

    from nsightwrap.store.schema import MIGRATIONS, SCHEMA_VERSION

    path = tmp_path / "old.db"
    conn = sqlite3.connect(path)
    conn.executescript(MIGRATIONS[0] + "; CREATE TABLE schema_version (version INTEGER NOT NULL);"
                       " INSERT INTO schema_version VALUES (1);")
    conn.close()
    env = Environment("h", "NVIDIA H100", "580", "2025.3.1.0")
    with HangStore(path) as store:
        assert store.schema_version == SCHEMA_VERSION >= 2
        assert store.call_time("fn:m:f:0", env) is None
        store.record_call_time("fn:m:f:0", 0.25, env, source="warm-up")
        store.record_call_time("fn:m:f:0", 0.5, Environment("h", "NVIDIA H200", "580"), source="warm-up")
        found = store.call_time("fn:m:f:0", Environment("other-host", "NVIDIA H100", "580"))
    assert (found.seconds, found.source, found.gpu) == (0.25, "warm-up", "NVIDIA H100")  # any host, this GPU


def test_the_plain_run_marks_no_range_and_the_profiled_run_does(cfg, monkeypatch):
    """With no warm-up the plain (calibration) run calls fn before any CUDA call of the child: a range there failed
    on the GPU machine (cuProfilerStart: CUDA error 3, as triage's did) and fn was blamed. It runs without one; the
    profiled run marks its range as before."""
    import nsightwrap.call.profiler as profiler

    plain, real = [], profiler.plain_run
    monkeypatch.setattr(profiler, "plain_run", lambda *a, **kw: plain.append(real(*a, **kw)) or plain[-1])
    r = profile(quick_step, 1, warmup=0, profile=ONE_RUNG, config=cfg)
    assert [p.range_api for p in plain] == ["no range (not profiled)"]
    assert r.value == 1 and "fakecuda" in r.range_api
