"""ProfileOptions -> argv, compared as lists; validate() against real ncu lists."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from nsightwrap.errors import OptionsError
from nsightwrap.ncu.catalog import NcuInfo, parse_table, probe_ncu
from nsightwrap.ncu.options import KernelFilter, ProfileOptions, build_argv, validate
from nsightwrap.status import ReplayMode

DATA = Path(__file__).parents[1] / "data" / "ncu"
NCU = "/opt/ncu/ncu"
CMD = ["./app", "--size", "4"]


@pytest.fixture(scope="module")
def info(tmp_path_factory) -> NcuInfo:
    """NcuInfo as probe_ncu builds it from ncu 2025.3.1's real output."""
    tmp = tmp_path_factory.mktemp("ncu")
    exe = tmp / "ncu"
    exe.write_text("#!/bin/sh\n")
    exe.chmod(0o755)
    answers = {
        "--version": "Version 2025.3.1.0 (build 36398880) (public-release)\n",
        "--list-sets": (DATA / "list_sets.txt").read_text(),
        "--list-sections": (DATA / "list_sections.txt").read_text(),
    }
    return probe_ncu(str(exe), tmp / "cache", lambda argv: (0, answers[argv[1]]))


# --------------------------------------------------------------------------
# KernelFilter
# --------------------------------------------------------------------------


def test_kernel_filter_from_user():
    assert KernelFilter.from_user("regex:v22.*") == KernelFilter("v22.*", regex=True)
    assert KernelFilter.from_user("v22.*") == KernelFilter("v22.*", regex=True)  # the user's bare text is a regex
    assert KernelFilter.from_user("exact:vec_add") == KernelFilter("vec_add", regex=False)
    assert KernelFilter.from_user("regex:^foo", base="mangled") == KernelFilter("^foo", True, "mangled")
    # ncu's own spelling (--kernel-name, ProfileOptions(kernel=str)): bare text is an exact name.
    assert KernelFilter.from_user("vec_add", exact=True) == KernelFilter("vec_add", regex=False)
    assert KernelFilter.from_user("regex:^v", exact=True) == KernelFilter("^v", regex=True)
    with pytest.raises(OptionsError, match="must be a string"):
        KernelFilter.from_user(3)


def test_kernel_filter_argv():
    assert KernelFilter.from_user("regex:v22.*").argv() == ["--kernel-name", "regex:v22.*"]
    assert KernelFilter("vec_add").argv() == ["--kernel-name", "vec_add"]
    assert KernelFilter("_Z3foov", base="mangled").argv() == [
        "--kernel-name-base",
        "mangled",
        "--kernel-name",
        "_Z3foov",
    ]


@pytest.mark.parametrize("kwargs", [
    {"pattern": ""}, {"pattern": "x", "base": "short"}, {"pattern": "x", "regex": "yes"}])
def test_kernel_filter_rejects_bad_values(kwargs):
    with pytest.raises(OptionsError):
        KernelFilter(**kwargs)


def test_kernel_filter_bad_base_names_allowed_values():
    with pytest.raises(OptionsError, match="'function', 'demangled', 'mangled'"):
        KernelFilter("x", base="short")


# --------------------------------------------------------------------------
# build_argv
# --------------------------------------------------------------------------


def test_default_argv():
    assert build_argv(NCU, ProfileOptions(), CMD) == [NCU, "--replay-mode", "kernel", *CMD]


def test_every_option_in_stable_order():
    options = ProfileOptions(
        set="detailed",
        sections=("SpeedOfLight", "regex:^Memory"),
        metrics=("gpu__time_duration.sum", "sm__throughput.avg.pct_of_peak_sustained_elapsed"),
        replay_mode=ReplayMode.APPLICATION,
        kernel=KernelFilter.from_user("regex:v22.*"),
        kernel_id="::foo:2",
        launch_skip=3,
        launch_count=5,
        launch_skip_before_match=0,
        nvtx_include=("Domain A@Range A", "Range C"),
        nvtx_exclude=("Range B]",),
        profile_from_start=False,
        cache_control="none",
        clock_control="base",
        target_processes="application-only",
        graph_profiling="node",
        import_source=True,
        export="/tmp/out/report",
        force_overwrite=True,
        extra_args=("--check-exit-code", "0"),
    )
    assert build_argv(NCU, options, CMD) == [
        NCU,
        "--set", "detailed",
        "--section", "SpeedOfLight",
        "--section", "regex:^Memory",
        "--metrics", "gpu__time_duration.sum,sm__throughput.avg.pct_of_peak_sustained_elapsed",
        "--replay-mode", "application",
        "--kernel-name", "regex:v22.*",
        "--kernel-id", "::foo:2",
        "--launch-skip", "3",
        "--launch-count", "5",
        "--launch-skip-before-match", "0",
        "--nvtx",
        "--nvtx-include", "Domain A@Range A",
        "--nvtx-include", "Range C",
        "--nvtx-exclude", "Range B]",
        "--profile-from-start", "off",
        "--cache-control", "none",
        "--clock-control", "base",
        "--target-processes", "application-only",
        "--graph-profiling", "node",
        "--import-source", "on",
        "--export", "/tmp/out/report",
        "--force-overwrite",
        "--check-exit-code", "0",
        *CMD,
    ]  # fmt: skip


def test_argv_is_pure_and_repeatable():
    options = ProfileOptions(sections=("Occupancy",), nvtx=True)
    command = list(CMD)
    first = build_argv(NCU, options, command)
    assert build_argv(NCU, options, command) == first
    first.append("mutated")
    assert command == CMD
    assert build_argv(NCU, options, command)[-1] == CMD[-1]


@pytest.mark.parametrize(
    "options, middle",
    [
        (ProfileOptions(nvtx=True), ["--nvtx"]),
        (ProfileOptions(nvtx_include=("A",)), ["--nvtx", "--nvtx-include", "A"]),
        (ProfileOptions(nvtx=True, nvtx_exclude=("B",)), ["--nvtx", "--nvtx-exclude", "B"]),
        (ProfileOptions(profile_from_start=True), ["--profile-from-start", "on"]),
        (ProfileOptions(import_source=False), ["--import-source", "off"]),
        (ProfileOptions(kernel=KernelFilter("k", base="demangled")),
         ["--kernel-name-base", "demangled", "--kernel-name", "k"]),
        (ProfileOptions(replay_mode="app-range"), []),
        (ProfileOptions(metrics=("a",)), ["--metrics", "a"]),
        (ProfileOptions(launch_skip=0), ["--launch-skip", "0"]),
    ],
)
def test_single_options(options, middle):
    argv = build_argv(NCU, options, ["app"])
    replay = ["--replay-mode", options.replay_mode.value]
    rest = [a for a in argv[1:-1]]
    # --replay-mode always appears; remove it to compare the rest
    i = rest.index("--replay-mode")
    assert rest[i : i + 2] == replay
    del rest[i : i + 2]
    assert rest == middle
    assert argv[0] == NCU and argv[-1] == "app"


def test_extra_args_come_after_options_before_command():
    argv = build_argv(NCU, ProfileOptions(export="r", extra_args=("--verbose",)), ["app", "--verbose"])
    assert argv == [NCU, "--replay-mode", "kernel", "--export", "r", "--verbose", "app", "--verbose"]


@pytest.mark.parametrize("command", [[], (), "python app.py"])
def test_empty_or_string_command_is_rejected(command):
    with pytest.raises(OptionsError, match="command"):
        build_argv(NCU, ProfileOptions(), command)


# --------------------------------------------------------------------------
# ProfileOptions type checks
# --------------------------------------------------------------------------


def test_options_are_frozen_and_use_tuples():
    options = ProfileOptions(sections=["A", "B"], metrics=["m"], extra_args=["-x"])
    assert options.sections == ("A", "B") and options.metrics == ("m",) and options.extra_args == ("-x",)
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.set = "full"  # type: ignore[misc]
    assert hash(options) == hash(ProfileOptions(sections=("A", "B"), metrics=("m",), extra_args=("-x",)))


def test_replay_mode_from_string_and_replace():
    options = ProfileOptions(replay_mode="range")
    assert options.replay_mode is ReplayMode.RANGE
    changed = options.replace(replay_mode="kernel", set="full")
    assert changed.replay_mode is ReplayMode.KERNEL and changed.set == "full"
    assert options.set is None
    with pytest.raises(OptionsError, match="launch_count"):
        options.replace(launch_count=-1)


def test_kernel_given_as_string_is_parsed():
    assert ProfileOptions(kernel="regex:^v").kernel == KernelFilter("^v", regex=True)


@pytest.mark.parametrize(
    "kwargs, words",
    [
        ({"launch_skip": -1}, ["launch_skip", "negative"]),
        ({"launch_count": -2}, ["launch_count", "negative"]),
        ({"launch_count": 0}, ["launch_count"]),
        ({"launch_skip_before_match": 1.5}, ["launch_skip_before_match", "whole number"]),
        ({"launch_skip": True}, ["launch_skip"]),
        ({"replay_mode": "kernels"}, ["replay_mode", "'kernel'", "'application'", "'range'", "'app-range'"]),
        ({"cache_control": "some"}, ["cache_control", "'all'", "'none'"]),
        ({"clock_control": "reset"}, ["clock_control", "'base'", "'none'"]),
        ({"target_processes": "children"}, ["target_processes", "'all'", "'application-only'"]),
        ({"graph_profiling": "graphs"}, ["graph_profiling", "'node'", "'graph'"]),
        ({"profile_from_start": "on"}, ["profile_from_start", "True or False"]),
        ({"import_source": 1}, ["import_source"]),
        ({"nvtx": None}, ["nvtx"]),
        ({"force_overwrite": "yes"}, ["force_overwrite"]),
        ({"sections": "SpeedOfLight"}, ["sections", "('SpeedOfLight',)"]),
        ({"metrics": ("a", "")}, ["metrics", "non-empty"]),
        ({"nvtx_include": 3}, ["nvtx_include"]),
        ({"set": ""}, ["set"]),
        ({"export": 5}, ["export"]),
        ({"kernel": 5}, ["kernel"]),
    ],
)
def test_bad_values_name_the_field(kwargs, words):
    with pytest.raises(OptionsError) as err:
        ProfileOptions(**kwargs)
    for word in words:
        assert word in str(err.value)


# --------------------------------------------------------------------------
# validate against ncu 2025.3.1's lists
# --------------------------------------------------------------------------


def test_valid_options_pass(info):
    validate(
        ProfileOptions(
            set="full",
            sections=("SpeedOfLight", "regex:^MemoryWorkload", "regex:Roofline"),
            kernel=KernelFilter.from_user("regex:v22.*"),
            graph_profiling="graph",
        ),
        info,
    )
    validate(ProfileOptions(replay_mode="range", nvtx_include=("A",), profile_from_start=None), info)
    validate(ProfileOptions(replay_mode="application", graph_profiling="node", import_source=True), info)


def test_unknown_section_names_closest(info):
    with pytest.raises(OptionsError) as err:
        validate(ProfileOptions(sections=("SpeedOfLite",)), info)
    text = str(err.value)
    assert "'SpeedOfLite'" in text
    assert "'SpeedOfLight'" in text
    assert "ncu --list-sections" in text


def test_unknown_section_case_slip_names_closest(info):
    with pytest.raises(OptionsError, match="'MemoryWorkloadAnalysis'"):
        validate(ProfileOptions(sections=("memoryworkloadanalysis",)), info)


def test_unknown_set_names_closest(info):
    with pytest.raises(OptionsError) as err:
        validate(ProfileOptions(set="ful"), info)
    text = str(err.value)
    assert "'ful'" in text and "'full'" in text and "ncu --list-sets" in text


def test_unknown_without_close_match_still_says_how_to_list(info):
    with pytest.raises(OptionsError) as err:
        validate(ProfileOptions(sections=("Zzzzzz",)), info)
    assert "Did you mean" not in str(err.value)
    assert "ncu --list-sections" in str(err.value)


def test_regex_section_must_compile_and_match(info):
    with pytest.raises(OptionsError, match="not a valid regular expression"):
        validate(ProfileOptions(sections=("regex:(",)), info)
    with pytest.raises(OptionsError, match="matches no section"):
        validate(ProfileOptions(sections=("regex:^Nope",)), info)


def test_bad_kernel_regex(info):
    with pytest.raises(OptionsError, match="kernel name"):
        validate(ProfileOptions(kernel="regex:[a-"), info)


@pytest.mark.parametrize("mode", ["range", "app-range"])
def test_range_replay_rejects_what_ncu_rejects_all_at_once(info, mode):
    options = ProfileOptions(
        replay_mode=mode,
        kernel=KernelFilter("vec_add"),
        kernel_id="::vec_add:1",
        import_source=True,
        profile_from_start=False,
        sections=("Occupancy",),
    )
    with pytest.raises(OptionsError) as err:
        validate(options, info)
    text = str(err.value)
    assert "4 problems" in text
    for fix in ("drop kernel;", "drop kernel_id", "drop import_source", "drop profile_from_start"):
        assert fix in text
    for flag in ("--kernel-name", "--kernel-id", "--import-source on", "--profile-from-start off"):
        assert flag in text
    assert f"{mode} replay" in text


@pytest.mark.parametrize("mode", ["range", "app-range"])
def test_range_replay_accepts_ncu_defaults_spelled_out(info, mode):
    # ncu 2025.3.1 accepts --import-source off and --profile-from-start on in
    # range replay (checked on the GPU machine); only the other values fail.
    validate(ProfileOptions(replay_mode=mode, import_source=False, profile_from_start=True), info)
    with pytest.raises(OptionsError, match="drop profile_from_start"):
        validate(ProfileOptions(replay_mode=mode, profile_from_start=False), info)
    with pytest.raises(OptionsError, match="drop import_source"):
        validate(ProfileOptions(replay_mode=mode, import_source=True), info)


@pytest.mark.parametrize("mode", ["application", "range", "app-range"])
def test_graph_profiling_needs_kernel_replay(info, mode):
    with pytest.raises(OptionsError) as err:
        validate(ProfileOptions(replay_mode=mode, graph_profiling="graph"), info)
    assert "replay_mode 'kernel'" in str(err.value) and "drop graph_profiling" in str(err.value)


def test_all_problems_reported_together(info):
    options = ProfileOptions(
        set="fulll",
        sections=("Occupancy", "LaunchStat", "regex:^Nothing$"),
        replay_mode="range",
        kernel_id="::k:1",
        graph_profiling="graph",
    )
    with pytest.raises(OptionsError) as err:
        validate(options, info)
    text = str(err.value)
    assert "5 problems" in text
    assert text.count("\n  - ") == 5
    for piece in ("'fulll'", "'full'", "'LaunchStat'", "'LaunchStats'", "^Nothing$", "kernel_id", "graph_profiling"):
        assert piece in text


def test_validate_uses_the_given_info_not_a_fixed_list(info):
    custom = dataclasses.replace(info, sections=info.sections[:1], sets=())
    with pytest.raises(OptionsError, match="unknown section set 'basic'"):
        validate(ProfileOptions(set="basic"), custom)
    first = info.sections[0].identifier
    validate(ProfileOptions(sections=(first,)), custom)


def test_help_text_mentions_every_flag_we_emit():
    """Guards against typos in flag names: each one is in the real ncu --help."""
    help_text = (DATA / "ncu_help.txt").read_text()
    options = ProfileOptions(
        set="full",
        sections=("A",),
        metrics=("m",),
        kernel=KernelFilter("k", base="mangled"),
        kernel_id="x",
        launch_skip=1,
        launch_count=1,
        launch_skip_before_match=1,
        nvtx_include=("a",),
        nvtx_exclude=("b",),
        profile_from_start=True,
        cache_control="all",
        clock_control="none",
        target_processes="all",
        graph_profiling="graph",
        import_source=True,
        export="r",
        force_overwrite=True,
    )
    flags = [a for a in build_argv(NCU, options, ["app"]) if a.startswith("--")]
    assert len(flags) == 21
    for flag in flags:
        assert f"{flag} " in help_text or f"[ {flag} ]" in help_text, flag


def test_parse_table_is_reused_for_sections(info):
    # The fixture's ids are exactly the ones in the real listing.
    rows = parse_table((DATA / "list_sections.txt").read_text())
    assert info.section_ids == tuple(r["Identifier"] for r in rows)
