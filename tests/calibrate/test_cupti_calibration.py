"""Calibration with the CUPTI tracer first (the fake tracer in tests/fake_ncu): source order, the early stop,
kernels that never finish without ncu, crashes, the live line's event, doctor's line."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest
from helpers import FAKE_NSYS, app, fast_stop

from nsightwrap.calibrate import Calibrator
from nsightwrap.calibrate.cupti.trace import StalledKernel
from nsightwrap.calibrate.measure import measure
from nsightwrap.cli.preflight import OK as CHECK_OK
from nsightwrap.cli.preflight import WARN, Facts, check_timing
from nsightwrap.cli.screen import calibration_line
from nsightwrap.ncu.allowance import AllowancePolicy
from nsightwrap.ncu.context import RunConfig, RunContext
from nsightwrap.ncu.engine import profile_command
from nsightwrap.ncu.listen import CalibrationProgress, RunListener
from nsightwrap.ncu.options import ProfileOptions
from nsightwrap.status import CRASHED, OK, TIMEOUT


@pytest.fixture
def env(fake_env, tmp_path, monkeypatch):
    """The fake tracer: any file as the library (no compiler needed); no nsys unless a test gives it."""
    lib = tmp_path / "libfake_tracer.so"
    lib.write_text("")
    monkeypatch.setenv("NSIGHTWRAP_TRACER", str(lib))
    monkeypatch.setenv("NSIGHTWRAP_NSYS", str(tmp_path / "no-nsys"))
    return dict(fake_env, NSIGHTWRAP_TRACER=str(lib), NSIGHTWRAP_NSYS=str(tmp_path / "no-nsys"))


def config(env, **kw) -> RunConfig:
    return RunConfig(env=env, check_gpu=False, stop=fast_stop(), **kw)


def timed(command, env, **kw):
    kw.setdefault("limit_s", 30.0)
    kw.setdefault("use_nsys", False)
    t = time.monotonic()
    cal = measure(command, config(env), **kw)
    return cal, time.monotonic() - t


def core_times(cal) -> dict[str, float]:
    """Kernel times by the name ncu prints (the fake tracer's names are templated, in a namespace)."""
    return {name: cal.kernel_time(name)[0] for name in ("a", "b", "k", "g1", "g2", "long") if cal.kernel_time(name)}


# --- source order -------------------------------------------------------------------------------------------

def test_the_tracer_times_each_kernel_first(env):
    cal, _ = timed(app("a@spin=0.05", "k@spin=0.3", "a"), env, use_nsys=True)
    assert cal.ok and cal.source == "cupti" and cal.notes == ()
    times = core_times(cal)
    assert 0.3 <= times["k"] < 0.6 and 0.05 <= times["a"] < 0.3
    assert cal.kernels[0][0].startswith("void fake::a<float>")  # its own (demangled) names, matched by core
    assert cal.program_s is not None and cal.unfinished == () and cal.marks_ranges is False


def test_without_the_tracer_nsys_then_a_plain_run_and_the_notes_say_why(env, monkeypatch):
    monkeypatch.setenv("NSIGHTWRAP_TRACER", "off")
    env = dict(env, NSIGHTWRAP_TRACER="off", NSIGHTWRAP_NSYS=str(FAKE_NSYS))
    monkeypatch.setenv("NSIGHTWRAP_NSYS", str(FAKE_NSYS))
    cal, _ = timed(app("k@spin=0.1"), env, use_nsys=True)
    assert cal.source == "nsys" and cal.notes[0].startswith("no CUPTI tracer (the CUPTI tracer is off")
    cal, _ = timed(app("k@spin=0.1"), env, use_nsys=False)
    assert cal.source == "plain run" and "off" in cal.notes[0]


def test_a_tracer_that_records_nothing_leaves_its_run_as_the_plain_one(env, tmp_path):
    pids = tmp_path / "pids"
    cal, _ = timed(app(f"stick:{pids}", "print:no CUDA here"), env)
    assert cal.ok and cal.source == "plain run" and cal.bound_s is not None
    assert "the tracer recorded nothing" in cal.notes[0] and "traced run's wall time" in cal.notes[-1]
    assert len(pids.read_text().split()) == 1  # the program ran once, not twice


def test_a_tracer_that_cannot_set_itself_up_says_so_and_nsys_follows(env, monkeypatch):
    monkeypatch.setenv("FAKE_TRACER_ERROR", "CUPTI_ERROR_INSUFFICIENT_PRIVILEGES")
    monkeypatch.setenv("NSIGHTWRAP_NSYS", str(FAKE_NSYS))
    env = dict(env, FAKE_TRACER_ERROR="CUPTI_ERROR_INSUFFICIENT_PRIVILEGES", NSIGHTWRAP_NSYS=str(FAKE_NSYS))
    cal, _ = timed(app("k@spin=0.1"), env, use_nsys=True)
    assert cal.source == "nsys" and "CUPTI_ERROR_INSUFFICIENT_PRIVILEGES" in cal.notes[0]


def test_the_traced_run_carries_the_tracer_in_a_private_folder_removed_afterwards(env, tmp_path):
    out = []
    cal = measure(app("env:NSIGHTWRAP_TRACE_DIR", "env:CUDA_INJECTION64_PATH", "k"), config(env), limit_s=30,
                  use_nsys=False, on_output=out.append)
    text = "".join(out)
    folder = text.split("NSIGHTWRAP_TRACE_DIR=")[1].split()[0]
    assert f"CUDA_INJECTION64_PATH={env['NSIGHTWRAP_TRACER']}" in text
    assert cal.source == "cupti" and not Path(folder).exists()


# --- stop as soon as it knows enough ------------------------------------------------------------------------

def test_the_run_stops_once_the_stalled_kernel_finished(env):
    """A program of 3 s whose stalled kernel ends at 0.5 s is stopped then, not run to its end."""
    cal, took = timed(app("a", "k@spin=0.5", "long@spin=2.5", "print:the end"), env, stalled=StalledKernel("k", 0))
    assert cal.ok and cal.source == "cupti" and took < 2.0
    assert 0.5 <= core_times(cal)["k"] < 0.8 and "long" not in core_times(cal)
    assert cal.notes[0].startswith('stopped early after "k" finished')
    assert [n for n, _ in cal.unfinished] == ["void fake::long<float>(float*, int)"]
    assert cal.program_s is None  # the run's time bounds nothing it did not reach


def test_the_ordinal_waits_for_that_launch(env):
    cal, took = timed(app("k@spin=0.05", "k@spin=0.4", "long@spin=3"), env, stalled=StalledKernel("k", 1))
    assert cal.ok and took < 2.5 and core_times(cal)["k"] >= 0.4  # the second launch, not the first


def test_a_kernel_that_never_finishes_without_ncu_is_a_timeout_naming_it(env):
    cal, took = timed(app("a@spin=0.05", "k@always"), env, stalled=StalledKernel("k"), kernel_limit_s=0.5)
    assert not cal.ok and cal.status == TIMEOUT and cal.source == "cupti" and took < 3.0
    assert 'kernel "void fake::k<float>(float*, int)" did not finish' in cal.reason
    assert "kernel limit of 0.5 s" in cal.reason and "nothing else was in flight" in cal.reason
    assert "not an ncu hang" in cal.reason
    [(name, seconds)] = cal.unfinished
    assert name.startswith("void fake::k<") and seconds >= 0.5


def test_a_total_timeout_names_the_kernels_in_flight(env):
    cal, took = timed(app("a@spin=0.05", "k@always"), env, limit_s=0.6)  # k is in flight ~0.1 s in
    assert cal.status == TIMEOUT and took < 3.6
    assert 'in flight: "void fake::k<float>(float*, int)"' in cal.reason
    assert [n for n, _ in cal.unfinished] == ["void fake::k<float>(float*, int)"]


CRASHER = """
import json, os, sys, time
path = os.path.join(os.environ["NSIGHTWRAP_TRACE_DIR"], f"trace-{os.getpid()}.jsonl")
fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
def w(**ev): os.write(fd, (json.dumps(dict(ev, pid=os.getpid())) + "\\n").encode())
w(ev="init", mono_ns=time.monotonic_ns(), cupti_ns=0, version=1)
w(ev="launch", corr=1, seq=0, name="void reduce<4>(float*)", mono_ns=time.monotonic_ns())
w(ev="launch", corr=2, seq=1, name="scan(int*)", mono_ns=time.monotonic_ns())
print("illegal memory access", flush=True)
os._exit(7)
"""


def test_a_crash_names_the_kernels_in_flight(env):
    cal, _ = timed([sys.executable, "-c", CRASHER], env)
    assert cal.status == CRASHED and cal.source == "cupti" and "exit code 7" in cal.reason
    assert '"void reduce<4>(float*)"' in cal.reason and '"scan(int*)"' in cal.reason
    assert "illegal memory access" in cal.reason
    assert [n for n, _ in cal.unfinished] == ["void reduce<4>(float*)", "scan(int*)"]


def test_graph_kernels_and_ranges(env):
    cal, _ = timed(app("graph:g1@spin=0.2+g2", "start", "k", "stop"), env)
    times = core_times(cal)
    assert cal.ok and 0.2 <= times["g1"] < 0.5 and "g2" in times and cal.marks_ranges is True


def test_to_dict_says_what_was_unfinished(env):
    cal, _ = timed(app("k@always"), env, stalled=StalledKernel("k"), kernel_limit_s=0.3)
    d = json.loads(json.dumps(cal.to_dict()))
    assert d["source"] == "cupti" and d["unfinished"][0][0].startswith("void fake::k<")


# --- the live line ----------------------------------------------------------------------------------------

class Heard(RunListener):
    def __init__(self):
        self.progress: list[CalibrationProgress] = []

    def calibrating(self, progress):
        self.progress.append(progress)


def test_the_listener_hears_the_kernel_running_without_ncu(env):
    heard = Heard()
    cal, _ = timed(app("k@spin=1.2"), env, stalled=StalledKernel("k"), listener=heard)
    assert cal.ok and heard.progress[-1].done
    running = [p for p in heard.progress if p.running]
    assert running and running[-1].running[0][0].startswith("void fake::k<") and running[-1].waiting_for == "k"
    assert running[-1].running[0][1] >= 0.5  # it heard the kernel's time grow
    line = calibration_line("rung 1/3", running[-1], running[-1].at + 2.0)
    assert line.startswith("[rung 1/3]  calibrating without ncu (cupti, ")
    assert 'kernel "void fake::k<float>(float*, int)" running' in line and 'stops when "k" finishes' in line


def test_calibration_line_is_pure():
    p = CalibrationProgress("cupti", at=10.0, elapsed_s=3.0, running=(("k", 1.0), ("m", 0.5)), kernels_done=4)
    assert calibration_line("", p, 12.0) == ('calibrating without ncu (cupti, 5 s): kernel "k" running 3.0 s '
                                              "(+1 more in flight); 4 kernel(s) done")


# --- through the Calibrator, with the fake ncu ------------------------------------------------------------

def test_a_stall_is_calibrated_by_the_tracer_which_stops_after_the_stalled_kernel(env, tmp_path):
    cfg = RunConfig(report_dir=str(tmp_path / "r"), stall_timeout=0.4, check_gpu=False, env=env,
                    allowance=AllowancePolicy(floor_s=0.5), stop=fast_stop())
    # k's single pass: 0.75 s in silence, suspected at 0.4 s; the program's end is far away
    command = app("vec_add", "k@spin=0.6", "vec_add", "sleep:20")
    heard = Heard()
    context = RunContext.create(cfg).with_listener(heard)
    one = ProfileOptions(metrics=("gpu__time_duration.sum",))
    calibrator = Calibrator(command, lazy=True)
    t = time.monotonic()
    a = calibrator.run(lambda ctx: profile_command(command[:-1], one, ctx), context, one)
    assert a.status == OK and a.calibration.source == "cupti" and time.monotonic() - t < 15
    assert any(n.startswith('stopped early after "k"') for n in a.calibration.notes)
    assert heard.progress and heard.progress[-1].done


# --- doctor -------------------------------------------------------------------------------------------------

def facts(env) -> Facts:
    return Facts(context=None, ncu_problem="", gpus=None, store=Path("/nonexistent/h.db"), env=env)


def test_doctor_says_which_timing_source_will_be_used(env, tmp_path):
    c = check_timing(facts(env))
    assert c.status == CHECK_OK and "CUPTI tracer (prebuilt" in c.detail
    off = check_timing(facts(dict(env, NSIGHTWRAP_TRACER="off")))
    assert off.status == WARN and "plain run's wall time" in off.detail and "is off" in off.detail
    assert "g++" in off.remedy and "NSIGHTWRAP_TRACER" in off.remedy
    assert "timing" in off.line() and "->" in off.line()


def test_confirm_hands_the_stalled_launch_and_the_kernel_limit_to_measure(env):
    from nsightwrap.calibrate.confirm import Calibrator as C
    from nsightwrap.ncu.attempt import Attempt
    from nsightwrap.ncu.progress import Stall
    from nsightwrap.status import HANG
    from nsightwrap.store.keys import Environment

    calls = []

    def fake_measure(command, config, **kwargs):
        calls.append(kwargs)
        from nsightwrap.ncu.allowance import Calibration
        return Calibration.failed(TIMEOUT, "k did not finish without ncu", "cupti")

    stall = Stall("k", 3, "0%..", 10.0, 3.0, 11.0, True, True)
    attempt = Attempt(status=HANG, reason="r", command=("ncu", "app"), returncode=None, kernels=(), stall=stall,
                      report=None, report_complete=False, elapsed_s=12.0, stop=None, warnings=(), errors=(),
                      notes=(), log="", started_at="2026-11-27T00:00:00+00:00", cookie="c")
    heard = Heard()
    context = RunContext.create(RunConfig(check_gpu=False, calibration_limit=7.0)).with_listener(heard)
    calibrator = C(["app"], env=Environment.detect(), measure=fake_measure)
    out = calibrator.confirm(attempt, lambda ctx: attempt, context)
    # its first launch (ncu profiled none of it before), whatever ncu's launch ID (3) says
    assert calls[0]["stalled"] == StalledKernel("k", 0) and calls[0]["kernel_limit_s"] == 7.0  # the setting
    assert calls[0]["listener"] is heard
    assert out.status == TIMEOUT and "not an ncu hang" in out.reason


def test_the_live_screen_shows_the_calibration_in_place_of_the_attempt_line():
    import io

    from rich.console import Console

    from nsightwrap.cli.screen import LiveScreen

    screen = LiveScreen(Console(file=io.StringIO(), force_terminal=True, width=200), clock=lambda: 11.0)
    screen._live = type("NoLive", (), {"is_started": False})()  # drawn by hand here, not by rich's thread
    screen.stage("rung 1/3 'requested'")
    progress = CalibrationProgress("cupti", at=10.0, elapsed_s=2.0, running=(("k", 1.5),), waiting_for="k")
    screen.calibrating(progress)
    text = screen.__rich__().plain
    assert "[rung 1/3 'requested']  calibrating without ncu (cupti, 3 s): kernel \"k\" running 2.5 s" in text
    screen.calibrating(CalibrationProgress("cupti", at=11.0, elapsed_s=3.0, done=True))
    assert "calibrating" not in screen.__rich__().plain


def test_a_program_that_hangs_by_itself_is_a_program_fault_within_the_calibration_limit(env, tmp_path):
    cfg = RunConfig(report_dir=str(tmp_path / "r"), stall_timeout=0.4, check_gpu=False, env=env,
                    allowance=AllowancePolicy(floor_s=0.5), stop=fast_stop(), calibration_limit=0.6)
    command = app("vec_add", "k@always")
    one = ProfileOptions(metrics=("gpu__time_duration.sum",))
    calibrator = Calibrator(command, lazy=True)
    t = time.monotonic()
    a = calibrator.run(lambda ctx: profile_command(command, one, ctx), RunContext.create(cfg), one)
    assert a.status == TIMEOUT and time.monotonic() - t < 15
    # The kernel limit, or the run's own limit (the calibration limit after the point where the program reached
    # the kernel under ncu) at about the same moment: either way the kernel in flight is named.
    assert '"void fake::k<float>(float*, int)" did not finish without ncu' in a.program_fault
    assert [name for name, _ in a.calibration.unfinished] == ["void fake::k<float>(float*, int)"]


def test_records_dropped_once_traced_are_a_note_not_a_fallback(env, monkeypatch):
    monkeypatch.setenv("FAKE_TRACER_DROPPED", "3")
    cal, _ = timed(app("k@spin=0.1"), dict(env, FAKE_TRACER_DROPPED="3"))
    assert cal.ok and cal.source == "cupti" and "k" in core_times(cal)
    assert cal.notes[-1].startswith("the tracer: process ") and "CUPTI dropped 3 activity records" in cal.notes[-1]


def test_a_later_kernel_the_early_stopped_calibration_did_not_reach_is_calibrated_in_turn(env, tmp_path):
    """Stopped after "a", the calibration has no time for "b": b's stall is confirmed by a second traced run
    up to b, never judged without its time (a single pass of b is longer than the uncalibrated allowance)."""
    cfg = RunConfig(report_dir=str(tmp_path / "r"), stall_timeout=0.4, stall_growth=1.2, check_gpu=False,
                    env=env, allowance=AllowancePolicy(floor_s=0.5), stop=fast_stop())
    # a's single pass (0.62 s in silence) is suspected at 0.4 s; b's (1.25 s) outgrows a's pace (1.2 x 0.62 s);
    # the program's 60 s tail, never reached by a run stopped early, keeps the time bound below far from a run
    # that went to the end (6 s alone, 25 s under the suite's load)
    command = app("a@spin=0.5", "vec_add", "b@spin=1.0", "sleep:60")
    one = ProfileOptions(metrics=("gpu__time_duration.sum",))
    calibrator = Calibrator(command, lazy=True)
    t = time.monotonic()
    a = calibrator.run(lambda ctx: profile_command(command[:-1], one, ctx), RunContext.create(cfg), one)
    assert a.status == OK and [k.name for k in a.kernels] == ["a", "vec_add", "b"], a.reason
    assert calibrator.measured == 2 and time.monotonic() - t < 50
    assert {"a", "b"} <= set(core_times(a.calibration))


def test_every_rank_of_a_job_is_traced_and_the_job_stops_after_its_collective(env):
    """Each rank writes its own trace; a name ncu cut short ("...") matches the full one."""
    dist = Path(__file__).parents[1] / "fake_dist" / "torchrun"
    ar = "ncclDevKernel_AllReduce_Sum_f32_RING_LL"
    command = [str(dist), "--nproc-per-node", "2", *app("gemm", f"{ar}@collective", "long@spin=3")[1:]]
    cal, took = timed(command, env, stalled=StalledKernel("ncclDevKernel_AllReduce_Sum_f...", 0))
    assert cal.ok and cal.source == "cupti" and took < 2.8, (took, cal)
    assert cal.kernel_time(ar) is not None and cal.notes[0].startswith("stopped early after")


def _stalled_attempt(kernel: str):
    from nsightwrap.ncu.attempt import Attempt
    from nsightwrap.ncu.progress import Stall
    from nsightwrap.status import HANG

    stall = Stall(kernel, None, "0%..", 10.0, 3.0, 11.0, True, True)
    return Attempt(status=HANG, reason="r", command=("ncu", "app"), returncode=None, kernels=(), stall=stall,
                   report=None, report_complete=False, elapsed_s=12.0, stop=None, warnings=(), errors=(),
                   notes=(), log="", started_at="2026-11-27T00:00:00+00:00", cookie="c")


def test_a_calibration_stopped_early_is_kept_and_measured_again_for_a_kernel_it_did_not_reach(env, tmp_path):
    from nsightwrap.ncu.allowance import Calibration
    from nsightwrap.store.hangstore import HangStore
    from nsightwrap.store.keys import Environment

    store, where = HangStore(tmp_path / "h.db"), Environment.detect()
    partial = Calibration.from_kernels({"void fake::a<float>(float*, int)": 0.5}, source="cupti")
    assert store.record_calibration(partial, ["app"], where) == 1  # its kernels, no program row
    assert store.record_calibration(Calibration.from_call(1.0), ["app"], where) == 0  # a bare bound: not kept
    kept = store.calibration_for(["app"], where)
    assert kept.kernel_time("a")[0] == 0.5 and kept.bound_s is None and kept.kernel_time("b") is None
    calls = []

    def fake_measure(command, config, **kwargs):
        calls.append(kwargs["stalled"])
        return Calibration.from_kernels({"a": 0.5, "b": 4.0}, source="cupti")

    calibrator = Calibrator(["app"], store=store, env=where, measure=fake_measure)
    context = RunContext.create(RunConfig(check_gpu=False))
    calibrator.confirm(_stalled_attempt("a"), lambda ctx: _stalled_attempt("a"), context)
    assert calls == []  # "a" is in the kept calibration: nothing measured
    calibrator.confirm(_stalled_attempt("b"), lambda ctx: _stalled_attempt("b"), context)
    assert calls == [StalledKernel("b", 0)] and calibrator.measured == 1
    assert store.calibration_for(["app"], where).kernel_time("b")[0] == 4.0


def _attempt_with_kernels(kernels, **more):
    from nsightwrap.ncu.attempt import Attempt, KernelResult
    from nsightwrap.ncu.progress import Stall
    from nsightwrap.status import HANG

    stall = Stall("k", 9, "0%..", 10.0, 3.0, 11.0, True, True)
    return Attempt(status=HANG, reason="r", command=("ncu", "app"), returncode=None,
                   kernels=tuple(KernelResult(n, i, 10) for i, n in enumerate(kernels)), stall=stall, report=None,
                   report_complete=False, elapsed_s=12.0, stop=None, warnings=(), errors=(), notes=(), log="",
                   started_at="2026-11-27T00:00:00+00:00", cookie="c", **more)


def test_the_stalled_launch_is_counted_among_the_kernels_launches_not_by_ncus_id():
    """Review finding: ncu's ID numbers the launches it profiles (across processes, after a skip), so it was
    compared with the wrong counter and an earlier, shorter launch of the kernel ended the calibration."""
    from nsightwrap.calibrate.confirm import stalled_launch
    from nsightwrap.ncu.options import ProfileOptions

    assert stalled_launch(_attempt_with_kernels(["a", "k", "b", "k"])) == StalledKernel("k", 2)  # its third launch
    skipped = ProfileOptions(launch_skip=1)
    assert stalled_launch(_attempt_with_kernels(["k"]), skipped) == StalledKernel("k")  # which launch: unknown
    assert stalled_launch(_attempt_with_kernels(["k"]), ProfileOptions(profile_from_start=False)).ordinal is None
    assert stalled_launch(_attempt_with_kernels(["k"], connected=2)).ordinal is None  # ranks number launches apart
    assert stalled_launch(_attempt_with_kernels(["k"], kernel_count=5)).ordinal is None  # not every launch kept


def test_with_a_launch_skip_the_run_is_not_stopped_at_an_earlier_launch(env):
    """The reviewer's reproduction: k (0.05 s), then k (0.6 s). Stopped at the first k, the calibration said
    50 ms; without an ordinal it runs on and times both."""
    cal, _ = timed(app("a@spin=0.05", "k@spin=0.05", "k@spin=0.6"), env, stalled=StalledKernel("k"))
    assert cal.ok and core_times(cal)["k"] >= 0.6 and not any("stopped early" in n for n in cal.notes)
