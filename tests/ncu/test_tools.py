"""find_ncu's search order, parse_table on real ncu output, probe_ncu's cache."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from helpers import no_driver_path
from hypothesis import given, settings
from hypothesis import strategies as st

from nsightwrap.errors import ToolError, ToolNotFound
from nsightwrap.ncu.catalog import NcuInfo, Section, SectionSet, parse_table, parse_version, probe_ncu
from nsightwrap.ncu.locate import find_ncu
from nsightwrap.watch.locate import run_command

DATA = Path(__file__).parents[1] / "data" / "ncu"
VERSION_TEXT = (
    "NVIDIA (R) Nsight Compute Command Line Profiler\n"
    "Copyright (c) 2018-2025 NVIDIA Corporation\n"
    "Version 2025.3.1.0 (build 36398880) (public-release)\n"
)


def read(name: str) -> str:
    return (DATA / name).read_text()


def make_exe(path: Path, executable: bool = True) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\nexit 0\n")
    mode = 0o755 if executable else 0o644
    path.chmod(mode)
    return path


# --------------------------------------------------------------------------
# find_ncu
# --------------------------------------------------------------------------


@pytest.fixture
def layout(tmp_path: Path):
    """One fake ncu in every place find_ncu looks, so each test removes what it must not win."""
    places = {
        "explicit": make_exe(tmp_path / "explicit" / "ncu"),
        "env": make_exe(tmp_path / "envvar" / "ncu"),
        "path": make_exe(tmp_path / "pathdir" / "ncu"),
        "cuda_home": make_exe(tmp_path / "cudahome" / "bin" / "ncu"),
        "cuda_root": make_exe(tmp_path / "cudaroot" / "bin" / "ncu"),
        "nsight": make_exe(tmp_path / "nsight" / "2025.3.1" / "ncu"),
    }
    env = {
        "NSIGHTWRAP_NCU": str(places["env"]),
        "PATH": str(places["path"].parent),
        "CUDA_HOME": str(tmp_path / "cudahome"),
    }
    roots = {"cuda_root": str(tmp_path / "cudaroot"), "nsight_root": str(tmp_path / "nsight")}
    return places, env, roots


def test_find_ncu_order(layout):
    places, env, roots = layout
    assert find_ncu(str(places["explicit"]), env, **roots) == str(places["explicit"])
    assert find_ncu(None, env, **roots) == str(places["env"])
    del env["NSIGHTWRAP_NCU"]
    assert find_ncu(None, env, **roots) == str(places["path"])
    env["PATH"] = ""
    assert find_ncu(None, env, **roots) == str(places["cuda_home"])
    del env["CUDA_HOME"]
    assert find_ncu(None, env, **roots) == str(places["cuda_root"])
    places["cuda_root"].unlink()
    assert find_ncu(None, env, **roots) == str(places["nsight"])


def test_find_ncu_empty_env_var_is_ignored(layout):
    places, env, roots = layout
    env["NSIGHTWRAP_NCU"] = ""
    assert find_ncu(None, env, **roots) == str(places["path"])


def test_find_ncu_picks_newest_install_numerically(tmp_path):
    root = tmp_path / "nsight"
    for version in ("2024.9.9", "2025.3.1", "2025.10.0", "notes"):
        make_exe(root / version / "ncu")
    make_exe(root / "2026.1.0" / "ncu", executable=False)  # broken install is skipped
    found = find_ncu(None, {}, cuda_root=str(tmp_path / "none"), nsight_root=str(root))
    assert found == str(root / "2025.10.0" / "ncu")


@pytest.mark.parametrize("executable", [False, None])
def test_find_ncu_bad_explicit_path_is_an_error_naming_it(layout, executable):
    places, env, roots = layout
    bad = places["explicit"].parent / "bad-ncu"
    if executable is not None:
        make_exe(bad, executable=False)
    with pytest.raises(ToolNotFound) as info:
        find_ncu(str(bad), env, **roots)
    assert str(bad) in str(info.value)
    assert "--ncu" in str(info.value)


def test_find_ncu_bad_env_path_does_not_fall_through(layout):
    places, env, roots = layout
    env["NSIGHTWRAP_NCU"] = str(places["env"].parent / "missing")
    with pytest.raises(ToolNotFound) as info:
        find_ncu(None, env, **roots)
    assert "NSIGHTWRAP_NCU" in str(info.value)
    assert str(places["env"].parent / "missing") in str(info.value)


def test_find_ncu_directory_is_not_an_executable(layout):
    places, env, roots = layout
    with pytest.raises(ToolNotFound):
        find_ncu(str(places["explicit"].parent), env, **roots)


def test_find_ncu_bare_explicit_name_is_looked_up_on_path(tmp_path):
    tool = make_exe(tmp_path / "bin" / "ncu-2025")
    assert find_ncu("ncu-2025", {"PATH": str(tool.parent)}) == str(tool)
    with pytest.raises(ToolNotFound):
        find_ncu("ncu-1999", {"PATH": str(tool.parent)})


def test_find_ncu_skips_non_executable_on_path(tmp_path):
    make_exe(tmp_path / "pathdir" / "ncu", executable=False)
    root = make_exe(tmp_path / "cudaroot" / "bin" / "ncu")
    env = {"PATH": str(tmp_path / "pathdir")}
    assert find_ncu(None, env, cuda_root=str(tmp_path / "cudaroot"), nsight_root=str(tmp_path / "x")) == str(root)


def test_find_ncu_nothing_found_lists_every_place(tmp_path):
    env = {"PATH": str(tmp_path / "pathdir"), "CUDA_HOME": str(tmp_path / "cudahome")}
    make_exe(tmp_path / "cudaroot" / "bin" / "ncu", executable=False)
    with pytest.raises(ToolNotFound) as info:
        find_ncu(None, env, cuda_root=str(tmp_path / "cudaroot"), nsight_root=str(tmp_path / "nsight"))
    err = info.value
    assert err.tool == "ncu"
    assert len(err.searched) == 4
    text = str(err)
    for place in (
        str(tmp_path / "pathdir"),
        str(tmp_path / "cudahome" / "bin" / "ncu"),
        str(tmp_path / "cudaroot" / "bin" / "ncu") + " (exists but is not executable)",
        str(tmp_path / "nsight" / "*" / "ncu"),
    ):
        assert place in text
    assert "Nsight Compute" in text and "NSIGHTWRAP_NCU" in text and "--ncu" in text


def test_find_ncu_reads_os_environ_when_env_not_given(tmp_path, monkeypatch):
    tool = make_exe(tmp_path / "ncu")
    monkeypatch.setenv("NSIGHTWRAP_NCU", str(tool))
    assert find_ncu() == str(tool)


# --------------------------------------------------------------------------
# parse_table on real output
# --------------------------------------------------------------------------


def sets_by_id() -> dict[str, list[str]]:
    rows = parse_table(read("list_sets.txt"))
    return {r["Identifier"]: [s.strip() for s in r["Sections"].split(",")] for r in rows}


def test_parse_real_list_sets():
    rows = parse_table(read("list_sets.txt"))
    assert [r["Identifier"] for r in rows] == ["basic", "detailed", "full", "nvlink", "pmsampling", "roofline"]
    assert list(rows[0]) == ["Identifier", "Sections", "Enabled", "Estimated Metrics"]
    assert rows[0]["Enabled"] == "yes" and rows[0]["Estimated Metrics"] == "213"
    assert rows[2]["Estimated Metrics"] == "7794"
    sets = sets_by_id()
    assert sets["basic"] == ["LaunchStats", "Occupancy", "SpeedOfLight", "WorkloadDistribution"]
    full = sets["full"]
    assert len(full) == 21 and len(set(full)) == 21
    for name in (
        "MemoryWorkloadAnalysis_Chart",
        "NumaAffinity",
        "SourceCounters",
        "SpeedOfLight_HierarchicalDoubleRooflineChart",
        "SpeedOfLight_HierarchicalHalfRooflineChart",
        "SpeedOfLight_HierarchicalTensorRooflineChart",
        "SpeedOfLight_RooflineChart",
    ):
        assert name in full
    assert "MemoryWorkloadAnalysis_Chart" in sets["detailed"]
    assert sets["roofline"][-1] == "WorkloadDistribution"


def test_sets_reference_only_listed_sections():
    section_ids = {r["Identifier"] for r in parse_table(read("list_sections.txt"))}
    for name, sections in sets_by_id().items():
        assert set(sections) <= section_ids, name


def test_parse_real_list_sections():
    rows = parse_table(read("list_sections.txt"))
    assert len(rows) == 24
    ids = [r["Identifier"] for r in rows]
    assert ids[0] == "C2CLink" and ids[-1] == "WorkloadDistribution"
    by_id = {r["Identifier"]: r for r in rows}
    assert by_id["SpeedOfLight_HierarchicalTensorRooflineChart"]["Display Name"] == (
        "GPU Speed Of Light Hierarchical Roofline Chart (Tensor Core)"
    )
    assert by_id["LaunchStats"]["Enabled"] == "yes"
    assert by_id["NumaAffinity"]["Filename"].endswith("/Sections/NumaAffinity.section")


@pytest.mark.parametrize(
    "mangle",
    [
        lambda t: "\n".join(line.rstrip() for line in t.splitlines()),  # trailing blanks trimmed, no final newline
        lambda t: t.replace("\n", "\r\n"),
        lambda t: "==PROF== something first\n\n" + t + "\n\n",
        lambda t: t.rstrip("\n"),
    ],
)
def test_parse_table_tolerates_whitespace_changes(mangle):
    for name in ("list_sets.txt", "list_sections.txt"):
        text = read(name)
        assert parse_table(mangle(text)) == parse_table(text)


def test_parse_table_long_and_short_lines():
    text = (
        "---- ---- -----\n"
        "A    B    C\n"
        "---- ---- -----\n"
        "x    y    longer than its rule\n"
        "z\n"
        "     abcd\n"
        "     ef   tail\n"
        "w    a\n"
        "     b\n"
    )
    # A continuation short of its column width stood for blanks ncu trimmed.
    assert parse_table(text) == [
        {"A": "x", "B": "y", "C": "longer than its rule"},
        {"A": "z", "B": "abcdef", "C": "tail"},
        {"A": "w", "B": "a   b", "C": ""},
    ]


def test_parse_table_without_table_is_a_value_error():
    with pytest.raises(ValueError):
        parse_table("==ERROR== something went wrong\n")
    with pytest.raises(ValueError):
        parse_table("---- ----\nA    B\n")


def test_parse_table_no_rows():
    assert parse_table("--- ---\nA   B\n--- ---\n") == []


# Hypothesis: render random tables the way ncu does and read them back.

WORD = st.text(alphabet="abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.()/", min_size=1, max_size=14)


def render(widths: list[int], header: list[str], rows: list[list[str]], trim: bool, final_newline: bool) -> str:
    """ncu's layout: cells cut every `width` characters, even mid-word;
    continuation lines leave the first column blank."""

    def lines_of(cells: list[str]) -> list[str]:
        chunks = [[c[i : i + w] for i in range(0, len(c), w)] or [""] for c, w in zip(cells, widths)]
        height = max(len(c) for c in chunks)
        out = []
        for k in range(height):
            parts = [(ch[k] if k < len(ch) else "").ljust(w) for ch, w in zip(chunks, widths)]
            line = " ".join(parts)
            out.append(line.rstrip() if trim else line)
        return out

    rule = " ".join("-" * w for w in widths)
    lines = [rule, *lines_of(header), rule]
    for row in rows:
        lines.extend(lines_of(row))
    return "\n".join(lines) + ("\n" if final_newline else "")


@st.composite
def tables(draw):
    ncols = draw(st.integers(1, 5))
    widths = [draw(st.integers(3, 16)) for _ in range(ncols)]
    header = []
    for i, w in enumerate(widths):
        name = draw(WORD.filter(lambda s, w=w: len(s) <= w))
        header.append(f"{name}{i}"[-w:] if len(f"{name}{i}") > w else f"{name}{i}")
    # Names must be distinct to be dict keys; the index suffix usually does it.
    if len(set(header)) != len(header):
        header = [f"c{i}" for i in range(ncols)]

    def cell(first: bool) -> str:
        if first:
            # ncu sizes the first column to fit: it never wraps.
            return draw(WORD.filter(lambda s: len(s) <= widths[0]))
        words = draw(st.lists(WORD, max_size=6))
        sep = draw(st.sampled_from([" ", ", ", ","]))
        return sep.join(words)

    rows = [[cell(i == 0) for i in range(ncols)] for _ in range(draw(st.integers(0, 5)))]
    return widths, header, rows


# 100 examples, not 300: tables of 1-5 columns, 0-5 rows, cells of 0-6 words, trimmed or not; 100 draw each of
# these (and wrapped cells in every column) many times over (1.75 s of CPU for 300; issue 20).
@settings(max_examples=100, deadline=None)
@given(tables(), st.booleans(), st.booleans())
def test_parse_table_round_trips_wrapped_tables(table, trim, final_newline):
    widths, header, rows = table
    text = render(widths, header, rows, trim, final_newline)
    expected = [dict(zip(header, row)) for row in rows]
    assert parse_table(text) == expected


# --------------------------------------------------------------------------
# version
# --------------------------------------------------------------------------


def test_parse_version_real_output():
    assert parse_version(VERSION_TEXT) == ("2025.3.1.0", "36398880")


@pytest.mark.parametrize(
    "text, expected",
    [
        ("Version 2023.1.0", ("2023.1.0", None)),
        ("NVIDIA (R) Nsight Compute\nversion 2024.2.1.0 (build 3412)\n", ("2024.2.1.0", "3412")),
        ("Version 2025.3.1.0 (build abc-123)", ("2025.3.1.0", "abc-123")),
    ],
)
def test_parse_version_tolerant(text, expected):
    assert parse_version(text) == expected


def test_parse_version_garbage():
    with pytest.raises(ValueError):
        parse_version("command not found\n")


# --------------------------------------------------------------------------
# probe_ncu
# --------------------------------------------------------------------------


class FakeNcu:
    """Answers like ncu 2025.3.1 and counts calls."""

    def __init__(self, answers: dict[str, tuple[int, str]] | None = None):
        self.calls: list[list[str]] = []
        self.answers = {
            "--version": (0, VERSION_TEXT),
            "--list-sets": (0, read("list_sets.txt")),
            "--list-sections": (0, read("list_sections.txt")),
        }
        self.answers.update(answers or {})

    def __call__(self, argv):
        self.calls.append(list(argv))
        return self.answers[argv[1]]


@pytest.fixture
def ncu(tmp_path: Path) -> str:
    return str(make_exe(tmp_path / "bin" / "ncu"))


def test_probe_ncu_reads_everything(ncu, tmp_path):
    runner = FakeNcu()
    info = probe_ncu(ncu, tmp_path / "cache", runner)
    assert runner.calls == [[ncu, "--version"], [ncu, "--list-sets"], [ncu, "--list-sections"]]
    assert info.path == ncu
    assert (info.version, info.build) == ("2025.3.1.0", "36398880")
    assert info.set_ids == ("basic", "detailed", "full", "nvlink", "pmsampling", "roofline")
    assert len(info.section_ids) == 24
    basic = info.sets[0]
    assert basic == SectionSet(
        "basic", ("LaunchStats", "Occupancy", "SpeedOfLight", "WorkloadDistribution"), True, 213
    )
    assert info.sections_of_set("full")[-1] == "WorkloadDistribution"
    assert len(info.sections_of_set("full")) == 21
    occupancy = info.sections[info.section_ids.index("Occupancy")]
    assert occupancy == Section("Occupancy", "Occupancy", True, occupancy.filename)
    with pytest.raises(KeyError, match="basic"):
        info.sections_of_set("fulll")


def test_probe_ncu_cache_hit_skips_runner(ncu, tmp_path):
    cache = tmp_path / "cache"
    first = probe_ncu(ncu, cache, FakeNcu())
    runner = FakeNcu()
    second = probe_ncu(ncu, cache, runner)
    assert runner.calls == []
    assert second == first
    assert len(list(cache.glob("*.json"))) == 1


def test_probe_ncu_cache_is_per_path_symlink_shares_it(ncu, tmp_path):
    cache = tmp_path / "cache"
    probe_ncu(ncu, cache, FakeNcu())
    link = tmp_path / "link-ncu"
    link.symlink_to(ncu)
    runner = FakeNcu()
    info = probe_ncu(str(link), cache, runner)
    assert runner.calls == []
    assert info.path == str(link)  # the caller's spelling, not the cached one


def test_probe_ncu_changed_binary_reprobes(ncu, tmp_path):
    cache = tmp_path / "cache"
    probe_ncu(ncu, cache, FakeNcu())
    st_ = os.stat(ncu)
    os.utime(ncu, ns=(st_.st_atime_ns, st_.st_mtime_ns + 1_000_000_000))
    runner = FakeNcu({"--version": (0, "Version 2026.1.0.0 (build 1)")})
    info = probe_ncu(ncu, cache, runner)
    assert len(runner.calls) == 3
    assert info.version == "2026.1.0.0"
    # and the new answer is the one cached now
    again = FakeNcu()
    assert probe_ncu(ncu, cache, again).version == "2026.1.0.0"
    assert again.calls == []


def test_probe_ncu_changed_size_reprobes(ncu, tmp_path):
    cache = tmp_path / "cache"
    probe_ncu(ncu, cache, FakeNcu())
    st_ = os.stat(ncu)
    with open(ncu, "a") as f:
        f.write("# grown\n")
    os.utime(ncu, ns=(st_.st_atime_ns, st_.st_mtime_ns))
    runner = FakeNcu()
    probe_ncu(ncu, cache, runner)
    assert len(runner.calls) == 3


@pytest.mark.parametrize(
    "content",
    ["{not json", "", "[]", '{"format": 1}', json.dumps({"format": 1, "key": None, "info": {}})],
)
def test_probe_ncu_corrupt_cache_is_ignored_and_rewritten(ncu, tmp_path, content):
    cache = tmp_path / "cache"
    probe_ncu(ncu, cache, FakeNcu())
    (file,) = cache.glob("*.json")
    file.write_text(content)
    runner = FakeNcu()
    info = probe_ncu(ncu, cache, runner)
    assert len(runner.calls) == 3
    assert info.version == "2025.3.1.0"
    assert json.loads(file.read_text())["info"]["version"] == "2025.3.1.0"


def test_probe_ncu_cache_with_wrong_key_is_ignored(ncu, tmp_path):
    cache = tmp_path / "cache"
    probe_ncu(ncu, cache, FakeNcu())
    (file,) = cache.glob("*.json")
    data = json.loads(file.read_text())
    data["key"]["st_size"] += 1
    file.write_text(json.dumps(data))
    runner = FakeNcu()
    probe_ncu(ncu, cache, runner)
    assert len(runner.calls) == 3


def test_probe_ncu_unwritable_cache_still_works(ncu, tmp_path):
    blocker = tmp_path / "file-not-dir"
    blocker.write_text("")
    runner = FakeNcu()
    info = probe_ncu(ncu, blocker / "cache", runner)
    assert info.version == "2025.3.1.0"


def test_probe_ncu_cache_dir_from_env(ncu, tmp_path):
    env = {"NSIGHTWRAP_CACHE_DIR": str(tmp_path / "envcache")}
    probe_ncu(ncu, None, FakeNcu(), env=env)
    assert len(list((tmp_path / "envcache").glob("*.json"))) == 1


def test_probe_ncu_failure_is_tool_error_with_output(ncu, tmp_path):
    runner = FakeNcu({"--list-sets": (1, "==ERROR== cannot read section files\n")})
    with pytest.raises(ToolError) as info:
        probe_ncu(ncu, tmp_path / "cache", runner)
    assert "--list-sets" in str(info.value)
    assert "status 1" in str(info.value)
    assert "cannot read section files" in str(info.value)
    assert not list((tmp_path / "cache").glob("*.json"))


@pytest.mark.parametrize(
    "flag, text",
    [
        ("--version", "ncu: something odd\n"),
        ("--list-sets", "no table here\n"),
        ("--list-sections", "------ ----\nFoo    Bar\n------ ----\nx      y\n"),
    ],
)
def test_probe_ncu_unparseable_is_tool_error(ncu, tmp_path, flag, text):
    with pytest.raises(ToolError) as info:
        probe_ncu(ncu, tmp_path / "cache", FakeNcu({flag: (0, text)}))
    assert flag in str(info.value)
    assert text.strip().splitlines()[0] in str(info.value)


def test_ncu_info_json_round_trip(ncu, tmp_path):
    info = probe_ncu(ncu, tmp_path / "cache", FakeNcu())
    assert NcuInfo.from_dict(json.loads(json.dumps(info.to_dict()))) == info


# --------------------------------------------------------------------------
# the default runner (real child processes, no ncu needed)
# --------------------------------------------------------------------------


def test_run_command_merges_output():
    rc, text = run_command([sys.executable, "-c",
                            "import sys; print('out'); print('err', file=sys.stderr); sys.exit(3)"])
    assert rc == 3
    assert "out" in text and "err" in text


def test_run_command_timeout_is_tool_error():
    with pytest.raises(ToolError, match="did not finish"):
        run_command([sys.executable, "-c", "import time; time.sleep(10)"], timeout=0.5)


def test_run_command_missing_program_is_tool_error(tmp_path):
    with pytest.raises(ToolError, match="could not run"):
        run_command([str(tmp_path / "nope")])


def test_no_import_side_effects():
    code = (
        "import os, sys; sys.path.insert(0, sys.argv[1]); before = dict(os.environ); "
        "import nsightwrap.ncu.locate, nsightwrap.ncu.catalog, nsightwrap.ncu.options; "
        "assert dict(os.environ) == before"
    )
    rc, text = run_command([sys.executable, "-c", code, str(Path(__file__).parents[2])])
    assert rc == 0, text


def test_doctor_names_the_ncu_found(monkeypatch, tmp_path, capsys):
    from nsightwrap.cli.main import main

    fake = Path(__file__).parents[1] / "fake_ncu" / "ncu"
    monkeypatch.setenv("NSIGHTWRAP_NCU", str(fake))
    monkeypatch.setenv("NSIGHTWRAP_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("PATH", no_driver_path(tmp_path))  # nvidia-smi fails: the driver check FAILs
    rc = main(["doctor"])
    out = capsys.readouterr().out
    assert f"ok    ncu         {fake} (version 2025.3.1.0; 6 sets, 24 sections)" in out
    assert rc == 2 and "FAIL  driver" in out
    monkeypatch.setenv("NSIGHTWRAP_NCU", str(tmp_path / "missing"))
    assert main(["doctor"]) == 2
    assert "FAIL  ncu" in capsys.readouterr().out


def test_the_probe_runs_in_the_background_once(tmp_path):
    """run --profile probes ncu while the walk's modules load; `info` waits for that one probe."""
    import threading
    import time

    from nsightwrap.errors import ToolError
    from nsightwrap.ncu.context import RunConfig, RunContext

    calls, started = [], threading.Event()

    def probe(path, cache, *, env):
        calls.append(threading.current_thread().name)
        started.set()
        time.sleep(0.05)
        if len(calls) == 1 and path.endswith("broken"):
            raise ToolError("ncu --list-sections failed")
        return ("info", path)

    ctx = RunContext.create(RunConfig(ncu="/x/ncu"), locate=lambda ncu, env: ncu, probe=probe)
    assert ctx.prefetch() is ctx and started.wait(5)
    assert ctx.info == ("info", "/x/ncu") and ctx.replace(stall_timeout=1.0).info == ctx.info
    assert calls == ["nsightwrap-probe"]
    # A probe that failed in the background is asked again where its error can be raised.
    calls.clear()
    broken = RunContext.create(RunConfig(ncu="/x/broken"), locate=lambda ncu, env: ncu, probe=probe).prefetch()
    assert broken.info == ("info", "/x/broken") and len(calls) == 2
