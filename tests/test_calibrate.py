"""Calibrated verdicts: the allowance rule, the stall rule with it, confirm-before-record, the store.

Everything here but the last section runs without processes (time and the
calibration run are injected).
"""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from helpers import FakeContext, version_1_store

from nsightwrap.calibrate import Calibrator, calibrated_allowance, program_verdict
from nsightwrap.ncu.allowance import (
    BASE_CLOCK_FACTOR,
    FLOOR_S,
    GIVEN,
    AllowancePolicy,
    Calibration,
    KernelAllowances,
    estimate_passes,
    kernel_allowance,
)
from nsightwrap.ncu.attempt import Attempt, KernelResult
from nsightwrap.ncu.context import RunConfig
from nsightwrap.ncu.events import KernelDone, KernelStarted, NcuWarning, Progress, ReplayPass
from nsightwrap.ncu.names import function_core, normalize_kernel
from nsightwrap.ncu.options import ProfileOptions
from nsightwrap.ncu.progress import Stall, StallRule, WatchState
from nsightwrap.status import CRASHED, HANG, OK, TIMEOUT
from nsightwrap.store.hangstore import HangStore
from nsightwrap.store.keys import Environment

ONE_METRIC = ProfileOptions(metrics=("gpu__time_duration.sum",))
SOL = ProfileOptions(sections=("SpeedOfLight",))
H100 = Environment("host", "NVIDIA H100 80GB HBM3", "580.1", "2025.3.1")


# --- the allowance rule ---------------------------------------------------------------------

def test_a_real_hang_is_called_within_3_s_once_calibrated():
    # wait_for_host runs 0.02 ms without ncu (issue 10): the floor decides, above ncu's own 1.1 s gaps.
    for options in (ONE_METRIC, SOL, ProfileOptions(set="full")):
        allowance = kernel_allowance(0.02e-3, passes=estimate_passes(options))
        assert 1.1 * 2 < allowance <= 3.0


@pytest.mark.parametrize("seconds", [8.0, 14.0, 30.0])
def test_a_slow_single_pass_is_allowed(seconds):
    # One pass under base clocks takes seconds x 1.245 in silence (FACTS.md); the allowance keeps a margin.
    allowance = kernel_allowance(seconds, passes=estimate_passes(ONE_METRIC))
    assert allowance > 2 * seconds * BASE_CLOCK_FACTOR


def test_ten_passes_of_a_2_s_kernel_are_allowed_the_gaps_seen():
    # A 2 s kernel with 10 passes printed its marks every 2-8 s on the GPU machine.
    assert kernel_allowance(2.0, passes=estimate_passes(SOL)) > 8.0 * 1.2


def test_clock_control_none_and_passes_per_gap():
    assert kernel_allowance(1.0, passes=1, clock_factor=1.0, margin=1.0, floor_s=0.0) == pytest.approx(1.0)
    assert kernel_allowance(1.0, passes=38, clock_factor=1.0, margin=1.0, floor_s=0.0) == pytest.approx(4.0)
    none = KernelAllowances.for_options(Calibration.from_wall(1.0), ProfileOptions(clock_control="none"))
    assert none.clock_factor == 1.0
    assert KernelAllowances.for_options(Calibration.from_wall(1.0), SOL).clock_factor == BASE_CLOCK_FACTOR


def test_passes_from_the_options():
    assert estimate_passes(None) == estimate_passes(ProfileOptions()) == 10  # ncu's default set is basic
    assert estimate_passes(ProfileOptions(set="detailed")) == 20
    assert estimate_passes(ProfileOptions(set="full")) == 38
    assert estimate_passes(SOL) == 10 and estimate_passes(ONE_METRIC) == 1
    assert estimate_passes(ProfileOptions(sections=("SourceCounters",))) == 38  # unknown: as many as full


def test_kernel_names_as_ncu_and_nsys_spell_them():
    cal = Calibration.from_kernels({"wait_for_host": 2e-5, "ns::gemm<4>": 0.5}, program_s=1.5)
    assert cal.kernel_time("wait_for_host")[0] == 2e-5
    assert cal.kernel_time("gemm")[0] == 0.5
    assert cal.kernel_time("void ns::gemm<4>(float*)")[0] == 0.5
    seconds, what = cal.kernel_time("other")  # not timed: the program's wall time bounds it
    assert seconds == 1.5 and "bounding other" in what
    assert Calibration.from_kernels({"a": 1.0}).kernel_time("b") is None


def test_a_kernel_in_an_anonymous_namespace_as_ncu_and_nsys_spell_it():
    # PyTorch's softmax lives in at::native::(anonymous namespace), whose brackets are no parameter list:
    # nsys times it under its full name, ncu prints it demangled (other spellings of the template
    # arguments), as its function name, or cut short.
    nsys = ("void at::native::(anonymous namespace)::cunn_SoftMaxForward<(int)4, float, float, float, "
            "at::native::(anonymous namespace)::SoftMaxForwardEpilogue>(T4 *, const T2 *, int)")
    cal = Calibration.from_kernels({nsys: 0.25, "(anonymous namespace)::k(int)": 0.125}, program_s=9.0)
    for ncu in ("void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float, float, float, "
                "at::native::<unnamed>::SoftMaxForwardEpilogue>(float *, const float *, int)",
                "cunn_SoftMaxForward", "void at::native::(anonymous namespace)::cunn_SoftMax..."):
        seconds, what = cal.kernel_time(ncu)
        assert seconds == 0.25 and "bounding" not in what, ncu
    assert cal.kernel_time("k")[0] == 0.125 and cal.kernel_time("(anonymous namespace)::k(float)")[0] == 0.125
    assert function_core("(anonymous namespace)::k(int)") == normalize_kernel("(anonymous namespace)::k(int)") == "k"
    assert function_core("void at::native::(anonymous namespace)::softmax_warp<float,4>(float*)") == "softmax_warp"


def test_kernel_time_builds_its_lookups_once(monkeypatch):
    import nsightwrap.ncu.allowance as allowance

    cal = Calibration.from_kernels({f"void ns::k{i}<4>(float*)": i * 1e-3 for i in range(50)}, program_s=1.0)
    cores = []
    monkeypatch.setattr(allowance, "function_core", lambda name: cores.append(name) or function_core(name))
    for _ in range(3):
        assert cal.kernel_time("void ns::k3<4>(float*)")[0] == pytest.approx(3e-3)  # by name: no core
        assert cal.kernel_time("void ns::k7<4>(float *)")[0] == pytest.approx(7e-3)
        assert cal.kernel_time("ns::k4...")[0] == pytest.approx(49e-3)  # cut short: k4, k40..k49
    assert len(cores) == 50 + 3 * 2  # each calibrated name once; then each name asked that is not one
    assert replace(cal, program_s=2.0).kernel_time("k7")[0] == pytest.approx(7e-3)  # a copy has its own


def test_calibration_from_a_call_for_profile_fn():
    cal = Calibration.from_call(0.25)
    allowance = KernelAllowances.for_options(cal, SOL).kernel("softmax")
    assert allowance.calibrated and "fn's calls ran 250 ms without ncu" in allowance.basis
    assert KernelAllowances.for_options(cal, SOL).program() is None  # a re-run child also starts Python


# --- the stall rule with allowances -----------------------------------------------------------

def _started(state, t, name="k", kid=0):
    state.observe(KernelStarted(name, kid), t)
    state.observe(Progress(kid, "0%", 0, 0), t)
    state.observe(Progress(kid, ".", 0, 1), t)
    state.observe(Progress(kid, ".", 0, 2), t)


def test_calibrated_hang_is_called_at_the_floor_with_its_evidence():
    rule = StallRule(10.0, allowances=KernelAllowances.for_options(
        Calibration.from_kernels({"wait_for_host": 2e-5}, program_s=0.5), SOL))
    s = WatchState(0.0, 0.0)
    _started(s, 1.0, "wait_for_host")
    assert rule(s, 1.0 + FLOOR_S - 0.01) is None
    v = rule(s, 1.0 + 3.0)
    assert v.status == HANG and v.stall.calibrated
    assert v.stall.basis == "from calibration (wait_for_host ran 0.020 ms without ncu, nsys)"
    assert v.stall.evidence().startswith("silent 3.0 s; allowance 2.5 s from calibration (wait_for_host")
    assert "single replay pass longer" not in v.reason  # that hint is for kernels not calibrated


def test_slow_single_pass_is_not_called_hung():
    # `0%....50%....` at once, then one pass of 8 s x 1.245 in silence, then `100% - 1 pass`.
    rule = StallRule(10.0, allowances=KernelAllowances.for_options(
        Calibration.from_kernels({"spin_cycles": 8.0}, program_s=8.5), ONE_METRIC))
    s = WatchState(0.0, 0.0)
    _started(s, 1.0, "spin_cycles")
    s.observe(NcuWarning("Launching the workload is taking more time than expected."), 4.0)
    assert rule(s, 1.0 + 8.0 * BASE_CLOCK_FACTOR + 0.5) is None
    s.observe(KernelDone("spin_cycles", 0, 1), 11.0)
    assert s.current is None and s.max_passes == 1


def test_without_calibration_the_default_rule_and_its_basis():
    s = WatchState(0.0, 0.0)
    _started(s, 0.0)
    v = StallRule(10.0)(s, 10.0)
    assert not v.stall.calibrated and v.stall.basis == "default (not calibrated)"
    assert "allowance 10.0 s default (not calibrated)" in v.reason
    assert StallRule(4.0, basis=GIVEN)(s, 4.0).stall.basis == GIVEN


def test_application_replay_uses_the_program_time_until_ncu_warns():
    cal = Calibration.from_kernels({"k": 1e-5}, program_s=1.0)
    rule = StallRule(10.0, allowances=KernelAllowances.for_options(cal, SOL, AllowancePolicy(floor_s=0.5)))
    s = WatchState(0.0, 0.0)
    s.observe(ReplayPass("k", 0, 1), 1.0)
    quiet = rule.judge(s)
    assert quiet.calibrated and "the program ran 1.00 s" in quiet.basis
    assert quiet.seconds == pytest.approx(0.5 + 4 * BASE_CLOCK_FACTOR * 1.0)
    s.observe(NcuWarning("Launching the workload is taking more time than expected."), 4.0)
    assert rule.judge(s).seconds == pytest.approx(0.5, abs=0.01)  # the launch itself is stuck: the kernel's


def test_config_rules_explicit_stall_timeout_wins_over_calibration():
    cal = Calibration.from_kernels({"k": 1e-5}, program_s=1.0)
    calibrated = RunConfig(calibration=cal).rules(SOL)
    assert calibrated.allowances is not None and calibrated.allowances.passes == 10
    given = RunConfig(calibration=cal, stall_timeout=30.0, stall_timeout_given=True).rules(SOL)
    assert given.allowances is None and given.basis == GIVEN and given.timeout == 30.0
    assert RunConfig(calibration=Calibration.failed(TIMEOUT, "hangs", "plain run")).rules().allowances is None


# --- confirm before recording -------------------------------------------------------------------

def _attempt(status=HANG, silent=10.0, kernel="k", calibrated=False, kernels=(), where="0%..", warned=True):
    quiet = where.startswith("application replay") and not warned  # as StallRule sets it
    stall = None if status != HANG else Stall(kernel, 1, where, silent, silent, silent + 1.0, True, warned,
                                              basis="x" if calibrated else "default (not calibrated)",
                                              calibrated=calibrated, quiet_replay=quiet)
    return Attempt(status=status, reason="r", command=("ncu", "app"), returncode=None, kernels=tuple(kernels),
                   stall=stall, report=None, report_complete=False, elapsed_s=silent + 2.0, stop=None, warnings=(),
                   errors=(), notes=(), log="", started_at="2026-11-27T00:00:00+00:00", cookie="c")


def _calibrator(calibration, store=None, **kw):
    calls = []

    def measure(command, config, **kwargs):
        calls.append(kwargs)
        return calibration

    return Calibrator(["app"], store=store, env=H100, measure=measure, **kw), calls


def test_a_run_without_a_stall_pays_nothing():
    cal, calls = _calibrator(Calibration.from_wall(1.0))
    ok = _attempt(status=OK)
    assert cal.run(lambda ctx: ok, FakeContext(RunConfig()), SOL) is ok and calls == []


def test_a_stall_explained_by_nothing_is_confirmed_without_a_rerun():
    cal, calls = _calibrator(Calibration.from_kernels({"k": 2e-5}, program_s=0.4))
    runs = []

    def attempt_fn(ctx):
        runs.append(ctx.config.calibration)
        return _attempt(silent=10.0)

    a = cal.run(attempt_fn, FakeContext(RunConfig()), SOL)
    assert runs == [None] and len(calls) == 1  # one run, one calibration
    assert a.status == HANG and a.stall.calibrated and a.stall.allowance_s == pytest.approx(FLOOR_S, abs=0.01)
    assert a.stall.silent_s == 10.0 and a.detection_s == 10.0  # what happened stays true
    assert a.notes[-1].startswith("hang confirmed by calibration: silent 10.0 s; allowance 2.5 s from calibration")
    assert a.to_dict()["allowance_basis"].startswith("from calibration (k ran")
    assert a.to_dict()["calibration"]["source"] == "nsys"


def test_a_slow_kernel_runs_again_with_its_allowance():
    cal, calls = _calibrator(Calibration.from_kernels({"k": 14.0}, program_s=15.0))
    runs = []

    def attempt_fn(ctx):
        runs.append(ctx.config.calibration)
        return _attempt(silent=10.0) if len(runs) == 1 else _attempt(status=OK)

    a = cal.run(attempt_fn, FakeContext(RunConfig()), ONE_METRIC)
    assert a.status == OK and len(runs) == 2 and runs[1] is not None and runs[1].kernels == (("k", 14.0),)
    assert "ran again" in a.notes[-1] and "k ran 14.00 s without ncu" in a.notes[-1]
    # The next attempt of the same program uses the calibration from the start, measured once.
    runs.clear()
    cal.run(attempt_fn, FakeContext(RunConfig()), ONE_METRIC)
    assert runs[0] is not None and len(calls) == 1


def test_an_uncalibrated_kernel_is_suspected_early_and_calibration_decides():
    from nsightwrap.calibrate.confirm import SUSPECT_AFTER_S

    cal, calls = _calibrator(Calibration.from_kernels({"k": 2e-5}, program_s=0.4))
    seen = []

    def attempt_fn(ctx):
        seen.append(ctx.config.stall_timeout)
        return _attempt(silent=SUSPECT_AFTER_S)

    a = cal.run(attempt_fn, FakeContext(RunConfig()), SOL)
    assert seen == [SUSPECT_AFTER_S] and len(calls) == 1  # suspected at 3 s, not 10 s; one calibration
    assert a.status == HANG and a.stall.calibrated  # confirmed: 3 s of silence > the kernel's 2.5 s allowance


def test_a_suspect_that_calibration_cannot_bound_is_judged_by_the_patient_rule():
    cal, _ = _calibrator(Calibration.from_kernels({"other": 1.0}))  # nothing about k, no program time
    seen = []

    def attempt_fn(ctx):
        seen.append(ctx.config.stall_timeout)
        return _attempt(silent=3.0) if len(seen) == 1 else _attempt(status=OK)

    a = cal.run(attempt_fn, FakeContext(RunConfig()), SOL)
    assert seen == [3.0, 10.0] and a.status == OK  # never a hang on suspicion alone


def test_no_suspicion_when_the_stall_timeout_is_given():
    cal, calls = _calibrator(Calibration.from_wall(1.0))
    seen = []
    a = cal.run(lambda ctx: seen.append(ctx.config.stall_timeout) or _attempt(silent=7.0),
                FakeContext(RunConfig(stall_timeout=7.0, stall_timeout_given=True)), SOL)
    assert seen == [7.0] and calls == [] and a.status == HANG


@pytest.mark.parametrize("status", [TIMEOUT, CRASHED])
def test_a_program_that_hangs_or_fails_by_itself_is_not_an_ncu_hang(status):
    failed = program_verdict(timed_out=status == TIMEOUT, returncode=3, elapsed_s=1.0, limit_s=60.0,
                             source="plain run")
    cal, _ = _calibrator(failed)
    runs = []
    a = cal.run(lambda ctx: runs.append(1) or _attempt(), FakeContext(RunConfig()), SOL)
    assert a.status == status and a.program_fault and "not an ncu hang" in a.reason and len(runs) == 1
    assert any(n.startswith("under ncu: kernel") for n in a.notes)


def test_no_calibration_while_the_gpu_still_runs_the_stopped_program():
    cal, calls = _calibrator(Calibration.from_wall(1.0))
    left = replace(_attempt(), gpu_left_after=("123 (app)",))
    a = cal.run(lambda ctx: left, FakeContext(RunConfig()), SOL)
    assert calls == [] and a.status == HANG and "not calibrated" in a.notes[-1]


def test_an_explicit_stall_timeout_is_taken_as_it_is():
    cal, calls = _calibrator(Calibration.from_wall(1.0))
    hung = _attempt()
    assert cal.run(lambda ctx: hung, FakeContext(RunConfig(stall_timeout_given=True)), SOL) is hung
    assert calls == []


def test_calibrated_allowance_follows_the_stall_rule():
    cal = Calibration.from_kernels({"k": 1.0}, program_s=3.0)
    a = _attempt(kernels=[KernelResult("a", 0, 38)])
    assert calibrated_allowance(a, cal, SOL, RunConfig()).seconds == pytest.approx(
        kernel_allowance(1.0, passes=38))  # the passes a finished kernel needed
    quiet = _attempt(where="application replay pass 1", warned=False)
    assert calibrated_allowance(quiet, cal, SOL, RunConfig()).seconds == pytest.approx(
        kernel_allowance(3.0, passes=1))
    paced = replace(a, stall=replace(a.stall, pace_s=100.0))
    assert calibrated_allowance(paced, cal, SOL, RunConfig()).seconds == 100.0


def test_the_confirmation_and_the_stall_rule_make_one_choice():
    """In quiet application replay both take the program's time, else the kernel's: KernelAllowances.for_stall."""
    cal = Calibration.from_kernels({"k": 1e-5}, program_s=1.0)
    allowances = KernelAllowances.for_options(cal, SOL)
    rule = StallRule(10.0, allowances=allowances)
    s = WatchState(0.0, 0.0)
    s.observe(ReplayPass("k", 0, 1), 1.0)
    quiet = rule(s, 100.0).stall
    assert quiet.quiet_replay and quiet.where == "application replay pass 1"
    assert rule.judge(s) == allowances.for_stall("k", None, True) == allowances.program()
    a = replace(_attempt(), stall=quiet)
    assert calibrated_allowance(a, cal, SOL, RunConfig()) == replace(allowances.program(), seconds=max(
        allowances.program().seconds, quiet.pace_s))
    s.observe(NcuWarning("Launching the workload is taking more time than expected."), 2.0)
    warned = rule(s, 100.0).stall
    assert not warned.quiet_replay and warned.slow_warning_seen
    assert rule.judge(s) == allowances.for_stall("k", None, False) == allowances.kernel("k")
    assert calibrated_allowance(replace(a, stall=warned), cal, SOL, RunConfig()) == allowances.kernel("k")
    _started(s, 101.0, "k")
    assert not rule(s, 200.0).stall.quiet_replay


def test_use_environment_keeps_an_environment_already_given(monkeypatch):
    def detect(*args, **kwargs):
        raise AssertionError("Environment.detect is not called when the environment is set")

    monkeypatch.setattr(Environment, "detect", detect)
    given, _ = _calibrator(Calibration.from_wall(1.0))
    given.use_environment(replace(H100, gpu="other"))
    assert given._environment() == H100  # the one given to the Calibrator stays
    handed = Calibrator(["app"])
    handed.use_environment(H100)
    handed.use_environment(replace(H100, gpu="other"))  # the first one handed over stays too
    assert handed._environment() == H100


# --- profile(fn)'s call time: a calibration like any other -----------------------------------------

def _judged(config, options, silent, name="softmax"):
    """The attempt that `config`'s rules make of a kernel silent `silent` s since its marks (time injected)."""
    state = WatchState(0.0, 0.0)
    _started(state, 100.0 - silent, name)
    verdict = config.rules(options)(state, 100.0)
    return _attempt(status=OK) if verdict is None else replace(_attempt(kernel=name), stall=verdict.stall)


def test_a_stall_after_fn_reports_its_call_time_is_calibrated_and_not_calibrated_again(tmp_path):
    from nsightwrap.ncu.calltime import write_call_time

    full = ProfileOptions(set="full")
    config = RunConfig(call_time_file=str(tmp_path / "call-time.json"))  # profile(fn) with warm-up calls
    cal, calls = _calibrator(Calibration.from_wall(9.0))
    assert cal.run(lambda ctx: _judged(ctx.config, full, 9.0), FakeContext(config), full).status == OK
    write_call_time(config.call_time_file, [1.2e-3, 1.2e-3])
    allowance = kernel_allowance(1.2e-3, passes=38)
    assert _judged(config, full, allowance - 0.1).status == OK
    hung = cal.run(lambda ctx: _judged(ctx.config, full, allowance + 0.1), FakeContext(config), full)
    assert hung.status == HANG and hung.stall.calibrated and calls == []  # no second calibration run
    assert hung.stall.allowance_s == pytest.approx(allowance) and allowance < config.stall_timeout  # not the default
    assert hung.stall.basis == ("from calibration (fn's calls ran 1.20 ms without ncu, bounding softmax, profile(fn) "
                                "warm-up calls)")
    write_call_time(config.call_time_file, [1.0])  # a longer call: its own allowance
    hung = cal.run(lambda ctx: _judged(ctx.config, full, 23.0), FakeContext(config), full)
    assert hung.stall.allowance_s == pytest.approx(kernel_allowance(1.0, passes=38)) and calls == []
    assert hung.stall.basis == "from calibration (fn's calls ran 1.00 s without ncu, bounding softmax, " \
                               "profile(fn) warm-up calls)"


def test_a_stall_before_fn_reports_its_call_time_is_confirmed_as_before(tmp_path):
    full = ProfileOptions(set="full")
    config = RunConfig(call_time_file=str(tmp_path / "call-time.json"))  # no file: the child has not written it
    cal, calls = _calibrator(Calibration.from_wall(0.1))
    seen = []
    a = cal.run(lambda ctx: seen.append(ctx.config.stall_timeout) or _judged(ctx.config, full, 10.0),
                FakeContext(config), full)
    assert seen == [10.0]  # not suspected early: the call time may yet come
    assert len(calls) == 1 and a.status == HANG and a.stall.calibrated  # one calibration run confirms it
    assert a.stall.basis.startswith("from calibration (the program ran 100 ms without ncu")


# --- the hang store -------------------------------------------------------------------------------

def test_calibrations_are_kept_per_command_gpu_and_driver(tmp_path):
    with HangStore(tmp_path / "h.db") as store:
        assert store.calibration_for(["app"], H100) is None
        store.record_calibration(Calibration.from_kernels({"k": 0.5, "v": 1e-5}, program_s=1.0), ["app"], H100)
        found = store.calibration_for(["app"], H100)
        assert dict(found.kernels) == {"k": 0.5, "v": 1e-5} and found.program_s == 1.0 and found.measured_at
        assert found.marks_ranges is None  # not known: none recorded
        assert store.calibration_for(["app", "2"], H100) is None
        assert store.calibration_for(["app"], replace(H100, driver="581.0")) is None
        store.record_calibration(Calibration.from_wall(2.0), ["app"], H100)  # the newest wins
        newest = store.calibration_for(["app"], H100)
        assert newest.kernels == () and newest.bound_s == 2.0
        assert store.record_calibration(Calibration.failed(TIMEOUT, "hangs", "plain run"), ["app"], H100) == 0
        assert store.record_calibration(Calibration.from_call(0.1), ["app"], H100) == 0
        for marks in (False, True):  # whether the program marks profiler ranges, as nsys saw
            store.record_calibration(Calibration.from_kernels({"k": 0.5}, program_s=1.0, marks_ranges=marks),
                                     ["app"], H100)
            assert store.calibration_for(["app"], H100).marks_ranges is marks


def test_a_stored_calibration_is_not_measured_again(tmp_path):
    with HangStore(tmp_path / "h.db") as store:
        first, calls = _calibrator(Calibration.from_kernels({"k": 2e-5}, program_s=0.4), store=store)
        first.run(lambda ctx: _attempt(), FakeContext(RunConfig()), SOL)
        second, again = _calibrator(Calibration.from_wall(9.0), store=store)
        seen = []
        second.run(lambda ctx: seen.append(ctx.config.calibration) or _attempt(status=OK), FakeContext(RunConfig()),
                   SOL)
        assert len(calls) == 1 and again == [] and seen[0].kernels == (("k", 2e-5),)
        lazy, _ = _calibrator(Calibration.from_wall(9.0), store=store, lazy=True)
        seen.clear()
        lazy.run(lambda ctx: seen.append(ctx.config.calibration) or _attempt(status=OK), FakeContext(RunConfig()), SOL)
        assert seen == [None]  # a single run looks in the store only when it stalls


def test_hang_records_keep_their_allowance_and_basis(tmp_path):
    from nsightwrap.store.keys import ProfileKey

    cal, _ = _calibrator(Calibration.from_kernels({"k": 2e-5}, program_s=0.4))
    confirmed = cal.run(lambda ctx: _attempt(), FakeContext(RunConfig()), SOL)
    with HangStore(tmp_path / "h.db") as store:
        [rec] = store.record_attempt(confirmed, ProfileKey.from_options(SOL), H100)
        assert rec.outcome == HANG and rec.calibrated and rec.allowance_s == pytest.approx(FLOOR_S, abs=0.01)
        [old] = store.record_attempt(_attempt(), ProfileKey.from_options(SOL), H100)
        assert not old.calibrated and old.basis == "default (not calibrated)"
        assert store.uncalibrated_hangs() == {"k": 1}
        fault = replace(_attempt(), status=TIMEOUT, program_fault="hangs by itself")
        # The program's own hang says nothing about the settings: nothing is recorded (issue 19).
        assert store.record_attempt(fault, ProfileKey.from_options(SOL), H100) == [] and len(store) == 2


def test_a_version_1_store_is_migrated(tmp_path):
    from nsightwrap.store.schema import SCHEMA_VERSION

    path = version_1_store(tmp_path / "old.db", "INSERT INTO records (time, kernel, kernel_pattern, replay_mode, "
                                                "key, outcome) VALUES ('t', 'k', 'k', 'kernel', '{}', 'hang')")
    with HangStore(path) as store:
        # through 2 (calibration), 3 (job size), 4 (ranges), 5 (triage)
        assert store.schema_version == SCHEMA_VERSION == 5
        [rec] = store.records()
        assert rec.basis is None and not rec.calibrated and store.uncalibrated_hangs() == {"k": 1}
        assert rec.processes == 1 and rec.ranks == "all"
        assert store.calibration_for(["app"], H100) is None  # the calibrations table is there, empty


def test_calibration_json_is_plain():
    cal = Calibration.from_kernels({"k": 0.5}, program_s=1.0)
    assert json.loads(json.dumps(cal.to_dict()))["kernels"] == {"k": 0.5}
    assert "1 kernel(s) timed" in cal.describe()


def test_a_name_ncu_cut_short_matches_the_kernel_nsys_timed():
    # 2x H200, torchrun: ncu printed "ncclDevKernel_AllReduce_Sum_f..." for the kernel nsys timed in full.
    cal = Calibration.from_kernels({"ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096>)": 2e-5,
                                    "other": 1.0}, program_s=11.4)
    seconds, why = cal.kernel_time("ncclDevKernel_AllReduce_Sum_f...")
    assert seconds == 2e-5 and "bounding" not in why
