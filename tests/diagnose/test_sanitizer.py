"""compute-sanitizer under the watchdog (issue 21, nsightwrap/triage): its command line, its text read as it
comes into findings, the stall rule scaled by the tool's slowdown, and whole runs of the fake
compute-sanitizer (tests/fake_sanitizer) on a fast clock."""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path

import pytest
from helpers import HERE, fast_stop, no_leftovers

from nsightwrap.diagnose.findings import COLUMNS, FindingsParser, parse_text
from nsightwrap.diagnose.sanitizer import (
    SanitizerListener,
    SanitizerOptions,
    filter_argv,
    find_sanitizer,
    run_sanitizer,
    sanitizer_argv,
    sanitizer_version,
)
from nsightwrap.diagnose.slowdown import SanitizerStall, SlowdownPolicy, ToolPrior, host_seconds, kernel_seconds
from nsightwrap.errors import OptionsError, ToolError, ToolNotFound
from nsightwrap.ncu.allowance import Calibration
from nsightwrap.ncu.options import KernelFilter
from nsightwrap.status import CRASHED, ERROR, EXIT_CODES, HANG, INTERRUPTED, OK, TIMEOUT
from nsightwrap.watch.rules import Cancelled, RunState

FAKE_DIR = HERE / "fake_sanitizer"
FAKE_SANITIZER = str(FAKE_DIR / "compute-sanitizer")
DATA = HERE / "data" / "sanitizer"
SCALE = 0.05
#: Small floors for the fake's clock: a fake kernel's 1 s is 0.05 s here.
def _policy(floor_s: float) -> SlowdownPolicy:
    return SlowdownPolicy(priors={t: ToolPrior(factor=20.0, floor_s=floor_s)
                                  for t in ("memcheck", "racecheck", "initcheck", "synccheck")})


FAST = _policy(1.0)
#: For the whole runs that wait through a stall on purpose: a 0.3 s floor, the rest as FAST (what those tests
#: check is the prior's 4 x 20 x the kernel's time and 4 x the longest gap; the floor is only waited through).
QUICK_FLOOR = 0.3
QUICK = _policy(QUICK_FLOOR)


def app(*steps: str) -> list[str]:
    return [sys.executable, str(FAKE_DIR / "app.py"), *steps]


def fake_env(**extra: str) -> dict:
    return dict(os.environ, FAKE_SAN_SCALE=str(SCALE), **extra)


def run(*steps: str, tool: str = "memcheck", env: dict | None = None, **kw):
    kw.setdefault("policy", FAST)
    return run_sanitizer(app(*steps), tool, sanitizer=FAKE_SANITIZER, env=env or fake_env(), stop=fast_stop(),
                         version="2025.3.1.0", **kw)


def data(name: str) -> str:
    return (DATA / name).read_text()


# --- the text: findings and summaries (FACTS' shapes, tests/data/sanitizer) -------------------------------


def test_memcheck_finding_names_kind_kernel_access_thread_and_line():
    findings, summary = parse_text(data("memcheck_oob.txt"), "memcheck")  # real: H200, CUDA 13.0
    oob, api = findings[0], findings[-1]
    assert len(findings) == 33 and {f.kind for f in findings[:-1]} == {"Invalid __global__ write"}
    assert (oob.kernel, oob.size, oob.address) == ("oob_write(float *, int)", 4, "0x7f07fe801000")
    assert (oob.thread, oob.block, oob.where) == ("(0,0,0)", "(32,0,0)", "tk_capture.cu:58")
    assert oob.host_frames == ["main [0x901d] in triage_kernels"]
    assert oob.detail == ["Access to 0x7f07fe801000 is out of bounds",
                          "and is 1 bytes after the nearest allocation at 0x7f07fe800000 of size 4,096 bytes"]
    assert api.kind == "CUDA error cudaErrorLaunchFailure on cudaDeviceSynchronize"
    assert (summary.errors, summary.program_error, summary.complete) == (33, True, True)


def test_the_print_limit_caps_what_is_printed_not_what_is_counted():
    findings, summary = parse_text(data("memcheck_flaky.txt"), "memcheck")  # real: flaky 1.0
    assert len(findings) == 100 and {(f.kind, f.line) for f in findings} == {("Invalid __global__ write", 79)}
    assert (summary.errors, summary.not_printed, summary.count) == (1025, 925, 1025)


def test_a_run_stopped_during_a_kernel_that_never_ends():
    findings, summary = parse_text(data("memcheck_stopped.txt"), "memcheck")  # real: SIGINT, banner only
    assert findings == [] and not summary.complete


def test_the_misaligned_read_facts_records():
    (read, api), summary = parse_text(data("memcheck_misaligned.txt"), "memcheck")
    assert (read.kind, read.size, read.where) == ("Invalid __global__ read", 16, "misaligned.cu:14")
    assert read.kernel == "load_vec4(const float4 *, float *, int)"
    assert any("misaligned" in d for d in read.detail) and "misaligned address" in api.detail


def test_racecheck_race_and_hazard_reports():
    (race,), summary = parse_text(data("racecheck.txt"), "racecheck")  # real
    assert (race.kind, race.where, race.other_line, race.hazards) == ("Race Read/Write", "tk_capture.cu:67",
                                                                      67, 32768)
    assert race.kernel == "reduce_race(const float *, float *, int)" and summary.hazards_displayed == 1
    hazards, summary = parse_text(data("racecheck_hazard.txt"), "racecheck")  # real, --print-limit 5
    assert [h.kind for h in hazards] == ["RAW hazard"] * 5
    assert (hazards[1].block, hazards[1].address, hazards[1].thread) == ("(8,0,0)", "0x581", "(96,0,0)")
    assert (hazards[1].line, hazards[1].other_line, hazards[1].host_frames) == (67, 67,
                                                                                ["main [0x925c] in triage_kernels"])
    assert (summary.hazards_displayed, summary.hazard_errors, summary.hazard_warnings) == (5, 24576, 7936)
    assert summary.count == 24576 + 7936


def test_initcheck_and_synccheck():
    uninit, summary = parse_text(data("initcheck.txt"), "initcheck")  # real
    assert len(uninit) == 100 and (summary.errors, summary.not_printed) == (4096, 3996)
    assert [(f.kind, f.size, f.line, f.thread) for f in uninit[:2]] == [
        ("Uninitialized __global__ memory read", 4, 74, "(0,0,0)"),
        ("Uninitialized __global__ memory read", 4, 74, "(1,0,0)")]
    assert uninit[0].address == "0x7f401e002000" and uninit[0].kernel == "read_uninit(const float *, float *, int)"
    (barrier,), _ = parse_text(data("synccheck.txt"), "synccheck")
    assert barrier.kind == "Barrier error detected. Divergent thread(s) in block" and barrier.line == 60
    (inner,), _ = parse_text(data("synccheck_device_frame.txt"), "synccheck")
    # inside an intrinsic: the kernel is the device frame's, and so is the line
    assert (inner.kernel, inner.where) == ("broken_sync(float *, unsigned long)", "kernel.cu:12")
    findings, summary = parse_text(data("synccheck_race.txt"), "synccheck")  # real: a race is racecheck's
    assert findings == [] and summary.errors == 0


def test_pieces_of_any_size_give_the_same_findings():
    text = data("memcheck_oob.txt") + "the program's own line\n"
    whole, _ = parse_text(text, "memcheck")
    parser = FindingsParser("memcheck")
    got = []
    for i in range(0, len(text), 7):
        got += parser.feed(text[i:i + 7])
    got += parser.close()
    assert [f.to_dict() for f in got] == [f.to_dict() for f in whole]
    assert parser.program_lines == 2  # the CUDA error the program prints, and this line


def test_a_program_line_without_its_newline_does_not_hide_the_next_finding():
    # two writers on one pipe: the program's "step 3" and its newline came on either side of a finding
    text = data("initcheck.txt").replace("========= Uninitialized", "step 3========= Uninitialized", 1)
    findings, summary = parse_text(text, "initcheck")
    assert [f.kind for f in findings] == ["Uninitialized __global__ memory read"] * 100 and summary.errors == 4096
    banner = data("initcheck.txt").replace("========= \n", "========= \n==================== results\n", 1)
    findings, _ = parse_text(banner, "initcheck")  # the program's own row of "=" is no finding
    assert [f.kind for f in findings] == ["Uninitialized __global__ memory read"] * 100


def test_notes_and_their_lines_are_no_findings():
    text = ("========= COMPUTE-SANITIZER\n"
            "=========     Host Frame: main [0x10] in prog\n"  # a finding's body whose header was cut off
            "========= Error: process didn't terminate successfully\n"
            "=========     The application may have hit an error when dereferencing Unified Memory from the host.\n"
            "========= ERROR SUMMARY: 0 errors\n")
    findings, summary = parse_text(text, "memcheck")
    assert findings == [] and summary.program_error and summary.errors == 0
    assert any("Unified Memory" in line for line in summary.lines)


def test_a_run_cut_mid_way_keeps_what_was_printed():
    text = data("initcheck.txt")
    cut = text[:text.index("by thread (1,0,0)")]  # stopped inside the second finding, before any summary
    findings, summary = parse_text(cut, "initcheck")
    assert len(findings) == 2 and findings[1].thread is None
    assert not summary.complete and summary.count is None


def test_a_finding_is_handed_on_as_soon_as_it_ends():
    parser = FindingsParser("memcheck")
    text = data("memcheck_oob.txt")
    first_end = text.index("========= \n", text.index("Host Frame")) + len("========= \n")
    assert [f.kind for f in parser.feed(text[:first_end])] == ["Invalid __global__ write"]


# --- the command line -------------------------------------------------------------------------------------


def test_argv_for_each_option():
    opts = SanitizerOptions(print_limit=3, error_exitcode=86, launch_timeout=0, racecheck_report="hazard")
    argv = sanitizer_argv("/cs", ["./prog", "a b"], "racecheck", kernel_filter=KernelFilter.from_user("exact:red"),
                          options=opts)
    assert argv == ["/cs", "--tool", "racecheck", "--print-limit", "3", "--error-exitcode", "86",
                    "--launch-timeout", "0", "--racecheck-report", "hazard", "--kernel-name", "kns=red",
                    "./prog", "a b"]
    assert sanitizer_argv("/cs", ["p"], "memcheck", options=opts)[:3] == ["/cs", "--tool", "memcheck"]
    assert "--racecheck-report" not in sanitizer_argv("/cs", ["p"], "memcheck", options=opts)


def test_kernel_filters_map_to_a_substring_or_are_refused():
    assert filter_argv(KernelFilter.from_user("regex:^gemm")) == ["--kernel-name", "kns=gemm"]
    assert filter_argv(KernelFilter.from_user("gemm")) == ["--kernel-name", "kns=gemm"]
    with pytest.raises(OptionsError, match="not a regular expression"):
        filter_argv(KernelFilter.from_user("regex:gemm_(a|b)"))
    mangled = KernelFilter.from_user("exact:_Z11reduce_racePKfPfi", base="mangled")
    assert filter_argv(mangled, [KernelFilter.from_user("exact:vec_add")]) == [
        "--kernel-name", "kne=_Z11reduce_racePKfPfi", "--kernel-name-exclude", "kns=vec_add"]
    argv = sanitizer_argv("/cs", ["p"], options=SanitizerOptions(exclude=("vec_add", "regex:^init")))
    assert argv[3:] == ["--kernel-name-exclude", "kns=vec_add", "--kernel-name-exclude", "kns=init", "p"]
    with pytest.raises(OptionsError, match="not a regular expression"):
        SanitizerOptions(exclude=("regex:a.*b",))


@pytest.mark.parametrize("bad", [dict(print_limit=-1), dict(error_exitcode=True), dict(launch_timeout=-2),
                                 dict(racecheck_report="fast")])
def test_bad_options_are_refused_when_built(bad):
    with pytest.raises(OptionsError):
        SanitizerOptions(**bad)


def test_an_unknown_tool_is_refused_before_launching():
    with pytest.raises(OptionsError, match="memcheck, racecheck, synccheck, initcheck"):
        sanitizer_argv("/cs", ["p"], "leakcheck")


def test_found_by_variable_next_to_ncu_and_its_version(tmp_path):
    assert find_sanitizer(env={"NSIGHTWRAP_SANITIZER": FAKE_SANITIZER, "PATH": ""}) == FAKE_SANITIZER
    bin_dir = tmp_path / "cuda" / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "ncu").write_text("")
    tool = bin_dir / "compute-sanitizer"
    tool.write_text("#!/bin/sh\n")
    tool.chmod(0o755)
    found = find_sanitizer(env={"PATH": ""}, ncu=str(bin_dir / "ncu"), cuda_root=str(tmp_path / "none"))
    assert found == str(tool)
    with pytest.raises(ToolNotFound, match="NSIGHTWRAP_SANITIZER"):
        find_sanitizer(env={"PATH": ""}, cuda_root=str(tmp_path / "none"))
    assert sanitizer_version(FAKE_SANITIZER) == "2025.3.1.0"
    with pytest.raises(ToolError, match="not a version"):
        sanitizer_version("/x", runner=lambda argv: (0, "hello"))


# --- the stall rule: the calibrated time x the tool's slowdown ---------------------------------------------


def test_a_stall_is_called_within_the_scaled_allowance_not_after_a_flat_minute():
    cal = Calibration.from_kernels({"reduce_race(float *, int)": 0.002, "other": 0.5})
    kernel_s, basis = kernel_seconds(cal, "reduce_race")
    assert kernel_s == 0.002 and "reduce_race" in basis
    rule = SanitizerStall("racecheck", kernel_s, basis)  # the default, FACTS-based priors
    state = RunState(started_at=0.0, last_output_at=0.0)
    allowance = rule.allowance()
    assert allowance == pytest.approx(10.0 + 4 * 200 * 0.002)
    assert allowance < 60
    assert rule(state, allowance - 0.1) is None
    verdict = rule(state, allowance + 0.1)
    assert verdict.status == HANG and "allowance" in verdict.reason and "reduce_race" in verdict.reason
    assert verdict.stall["calibrated"] and verdict.stall["prior_factor"] == 200


def test_the_hazard_report_and_an_uncalibrated_run():
    assert SanitizerStall("racecheck", 0.01, "", hazard_report=True).allowance() == pytest.approx(10 + 4 * 1200 * 0.01)
    rule = SanitizerStall("initcheck", None, "not calibrated")
    assert rule.allowance() == pytest.approx(20 + 4 * 200 * 0.01) and not rule.calibrated


@pytest.mark.parametrize("tool", ["memcheck", "racecheck", "synccheck", "initcheck"])
@pytest.mark.parametrize("hazard_report", [False, True])
def test_even_uncalibrated_no_default_allowance_is_a_flat_minute(tool, hazard_report):
    assert SanitizerStall(tool, None, "", hazard_report=hazard_report and tool == "racecheck").allowance() < 60


def test_the_measured_slowdown_widens_the_allowance():
    rule = SanitizerStall("memcheck", 0.01, "k", policy=FAST)  # 1 + 4 x 20 x 0.01 = 1.8 s
    state = RunState(started_at=0.0, last_output_at=0.0)
    assert rule(state, 1.5) is None
    state.last_output_at = 1.5  # a silence of 1.5 s ended in output: 150x measured
    assert rule(state, 1.6) is None
    assert rule.slowdown() == pytest.approx(150)
    assert rule.allowance() == pytest.approx(1 + 4 * 1.5)
    assert rule(state, 1.5 + 6.9) is None and rule(state, 1.5 + 7.1).status == HANG


def test_the_program_s_own_time_is_allowed_for_its_host_work():
    cal = Calibration.from_kernels({"k": 0.01}, program_s=12.0)  # e.g. 11 s of imports before its first kernel
    rule = SanitizerStall("memcheck", *kernel_seconds(cal), host_s=host_seconds(cal))
    assert rule.allowance() == pytest.approx(10 + 12 + 4 * 100 * 0.01)
    assert host_seconds(None) == 0.0 and host_seconds(Calibration.failed(HANG, "hung", "plain")) == 0.0


def test_the_filter_picks_its_kernel_and_kernels_it_leaves_out_do_not_count():
    cal = Calibration.from_kernels({"big": 2.0, "small_k": 0.01}, program_s=3.0)
    assert kernel_seconds(cal, "small_k")[0] == 0.01
    assert kernel_seconds(cal, None)[0] == 2.0
    assert kernel_seconds(cal, "absent")[0] == 3.0  # the program's time bounds it
    assert kernel_seconds(None)[0] is None
    assert kernel_seconds(Calibration.failed(HANG, "hung", "plain run"))[0] is None


# --- whole runs of the fake compute-sanitizer ---------------------------------------------------------------


def test_a_clean_run_says_so():
    r = run("print:hello", "vec_add")
    assert (r.status, r.exit_code, r.clean, r.summary) == (OK, 0, True, "memcheck: 0 errors")
    assert list(r.findings.columns) == list(COLUMNS) and r.findings.empty
    assert r.to_dict()["clean"] and r.command[:3] == [FAKE_SANITIZER, "--tool", "memcheck"]
    no_leftovers()


def test_an_out_of_bounds_write_is_found():
    heard = []

    class Hear(SanitizerListener):
        def finding(self, finding):
            heard.append(finding.kind)

    r = run("vec_add", "oob@oob=2", listener=Hear())
    assert r.status == ERROR and r.exit_code == EXIT_CODES[ERROR] and r.returncode == 1
    df = r.findings
    assert list(df["kind"]) == ["Invalid __global__ write"] * 2 + ["CUDA error cudaErrorLaunchFailure on "
                                                                    "cudaDeviceSynchronize"]
    assert set(df["kernel"][:2]) == {"oob(float *, int)"} and list(df["line"][:2]) == [58, 58]
    assert r.summary == "memcheck: 3 errors: Invalid __global__ write in oob (triage_kernels.cu:58)"
    assert heard == list(df["kind"])
    assert (r.headline.kind, r.headline.line, r.kernels) == ("Invalid __global__ write", 58, ["oob"])


@pytest.mark.parametrize("tool, step, kind, line", [
    ("racecheck", "reduce_race@race", "Race Read/Write", 19),
    ("initcheck", "uninit@uninit", "Uninitialized __global__ memory read", 74),
    ("synccheck", "sync_div@sync", "Barrier error detected. Divergent thread(s) in block", 60)])
def test_each_tool_finds_its_bug_and_only_its_own(tool, step, kind, line):
    r = run("vec_add", step, tool=tool)
    assert r.status == ERROR and r.returncode == 0
    assert list(r.findings["kind"]) == [kind] and list(r.findings["line"]) == [line]
    assert run(step, tool="memcheck").clean


def test_racecheck_summary_and_the_kernel_filter():
    r = run("reduce_race@race", "other@race", tool="racecheck", kernel_filter="exact:reduce_race")
    assert list(r.findings["kernel"]) == ["reduce_race(const float *, float *, int)"]
    assert r.summary == ("racecheck: 1 hazard displayed (1 error, 0 warnings): Race Read/Write in reduce_race "
                         "(triage_kernels.cu:19)")
    assert r.command[-6:-4] == ["--kernel-name", "kns=reduce_race"]
    assert r.hazards == 32768 and run("vec_add").hazards is None
    r = run("reduce_race@race", "other@race", tool="racecheck", options=SanitizerOptions(exclude=("other",)))
    assert list(r.findings["kernel"]) == ["reduce_race(const float *, float *, int)"]


def test_a_stall_is_called_within_its_allowance_and_keeps_the_findings_so_far():
    r = run("uninit@uninit", "spinner@hang", tool="initcheck", policy=QUICK,
            calibration=Calibration.from_kernels({"spinner(float *, int)": 0.01}))
    assert r.status == HANG and r.stalled and r.exit_code == EXIT_CODES[HANG]
    # the prior's 0.3 + 4 x 20 x 0.01 s, or 4 x the longest silence that ended in output (the program's start)
    assert r.stall["allowance_s"] == pytest.approx(QUICK_FLOOR + 4 * max(20 * 0.01, r.stall["longest_gap_s"]),
                                                   abs=0.01)
    assert r.elapsed_s < r.stall["allowance_s"] + 5  # called at its allowance (plus the stop), not a minute
    assert list(r.findings["kind"]) == ["Uninitialized __global__ memory read"]
    assert r.summary.startswith("initcheck: stalled after") and "1 finding kept" in r.summary
    assert not r.survivors
    no_leftovers()


def test_a_slow_kernel_within_its_scaled_allowance_is_not_a_stall():
    # 2 s alone (0.1 s on the fake clock), 30x under memcheck: 3 s of silence; allowance 0.3 + 4 x 20 x 0.1 = 8.3 s
    slow = fake_env(FAKE_SAN_FACTOR="30")
    r = run("slow@spin=2", "print:done", env=slow, policy=QUICK,
            calibration=Calibration.from_kernels({"slow(float *, int)": 0.1}))
    assert r.status == OK and r.clean
    # the same silence from a kernel calibrated at 1 ms: its allowance is 0.3 + 4 x 20 x 0.001 s, or 4 x the
    # longest silence that ended in output before it (the tool's start), well under 3 s
    r = run("slow@spin=2", "print:done", env=slow, policy=QUICK,
            calibration=Calibration.from_kernels({"slow(float *, int)": 0.001}))
    assert r.status == HANG  # called before the 3 s silence ended


def test_a_total_limit_and_a_crashing_tool():
    r = run("spinner@spin=100", limit_s=0.5)
    assert r.status == TIMEOUT and "total timeout" in r.reason
    r = run("vec_add", env=fake_env(FAKE_SAN_AT_END="crash"))
    assert r.status == CRASHED and "signal" in r.reason
    no_leftovers()


def test_a_tool_stuck_after_its_program_ended_is_stopped_too():
    r = run("vec_add", "print:done", env=fake_env(FAKE_SAN_AT_END="stall"), policy=QUICK)
    assert r.status == HANG and r.stall["allowance_s"] >= QUICK_FLOOR + 4 * 20 * 0.01  # more when a start was slow
    assert r.stall["allowance_s"] == pytest.approx(QUICK_FLOOR + 4 * max(20 * 0.01, r.stall["longest_gap_s"]),
                                                   abs=0.01)
    assert r.program_lines == 1 and not r.survivors
    no_leftovers()


def test_a_run_cancelled_from_another_thread_is_interrupted_and_keeps_its_findings():
    event = threading.Event()

    class CancelOnFinding(SanitizerListener):
        def finding(self, finding):
            event.set()

    r = run("oob@oob", tool="memcheck", listener=CancelOnFinding(), also=Cancelled(event),
            env=fake_env(FAKE_SAN_AT_END="stall"))
    assert r.status == INTERRUPTED and r.exit_code == 130 and not r.survivors
    assert len(r.findings) >= 1 and "interrupted" in r.summary
    no_leftovers()


def test_a_listener_that_fails_stops_the_tree_and_its_error_is_raised():
    class Broken(SanitizerListener):
        def finding(self, finding):
            raise RuntimeError("listener bug")

    with pytest.raises(RuntimeError, match="listener bug"):
        run("oob@oob", listener=Broken(), env=fake_env(FAKE_SAN_AT_END="stall"))
    no_leftovers()


def test_error_exitcode_and_a_program_that_fails_without_findings():
    r = run("oob@oob", options=SanitizerOptions(error_exitcode=86))
    assert r.returncode == 86 and r.status == ERROR
    r = run("vec_add", "exit:3")
    assert r.status == ERROR and r.findings.empty and "exited with 3" in r.summary


def test_a_tool_that_cannot_run_the_program_says_so(tmp_path: Path):
    r = run_sanitizer([str(tmp_path / "missing")], sanitizer=FAKE_SANITIZER, env=fake_env(), stop=fast_stop(),
                      version="x", policy=FAST)
    assert r.status == ERROR and "without its summary" in r.reason
