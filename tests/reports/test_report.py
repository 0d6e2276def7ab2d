"""Reports -> DataFrames, on real reports made on an H200 with ncu 2025.3.1.

What the fixtures hold was read off them with ncu_report (see each test).
Every test runs without a GPU or ncu; the CSV path runs against a fake ncu.
"""

from __future__ import annotations

import copy
import json
import os
import pickle
import stat
import subprocess
import sys
import textwrap
import warnings
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
from pandas.api.types import is_float_dtype, is_integer_dtype, is_numeric_dtype, is_string_dtype

# First, on purpose: with the wheel loaded, load_report never loads a second build (see nsightwrap.reports.ncu.module).
try:
    import ncu_report
except ImportError:  # a machine with only an Nsight Compute install's extras/python module
    ncu_report = None

from helpers import DATA

from nsightwrap.errors import NsightwrapError, ReportError, ToolNotFound
from nsightwrap.ncu.attempt import Attempt
from nsightwrap.reports.ncu import (
    IDENTITY_COLUMNS,
    TIDY_COLUMNS,
    api,
    attempt_dataframe,
    find_report_module,
    load_report,
    module,
    parse_raw_csv,
    raw_csv_argv,
    scan,
    schema,
)
from nsightwrap.reports.ncu.load import run_ncu

REPORTS = DATA / "reports"
CSV = DATA / "csv"
BASIC = REPORTS / "basic_ok.ncu-rep"
DURATION = REPORTS / "duration_ok.ncu-rep"
PARTIAL = REPORTS / "partial_mixed_basic.ncu-rep"
RANGE = REPORTS / "range_ok.ncu-rep"

MIXED8 = ["vec_add"] * 3 + ["block_reduce", "vec_add", "block_reduce", "vec_add", "block_reduce"]
VEC_ADD = "vec_add(const float *, const float *, float *, int)"
BLOCK_REDUCE = "block_reduce(const float *, float *, int)"

# report, function names in order, pid (from the probe log), metrics per result (wheel 2026.3.1)
FIXTURES = [
    (BASIC, MIXED8, 567, 563),
    (DURATION, MIXED8, 709, 254),
    (PARTIAL, ["vec_add"] * 3, 852, 563),
    (RANGE, ["range"], 805, 546),
]
IDS = ["basic", "duration", "partial", "range"]

needs_wheel = pytest.mark.skipif(ncu_report is None, reason="the ncu_report wheel is not installed")


# --------------------------------------------------------------------------
# Wide form
# --------------------------------------------------------------------------


@pytest.mark.parametrize("path,names,pid,n_metrics", FIXTURES, ids=IDS)
def test_wide_form_on_each_fixture(path, names, pid, n_metrics):
    df = load_report(path)
    assert df.shape[0] == len(names)
    if df.attrs["reader_origin"] == getattr(ncu_report, "__file__", None):
        assert df.shape[1] == len(IDENTITY_COLUMNS) + n_metrics
    assert list(df.columns[: len(IDENTITY_COLUMNS)]) == list(IDENTITY_COLUMNS)
    assert df["function"].tolist() == names
    assert df["result"].tolist() == list(range(len(names)))
    assert df["range"].tolist() == [0] * len(names)
    assert df["process"].tolist() == [pid] * len(names)
    assert set(df["process_name"]) == {"/tmp/nw/app"}
    assert df["nvtx"].isna().all()  # profiled without --nvtx
    assert df["gpu__time_duration.sum"].gt(0).all()
    assert df.attrs["units"]["gpu__time_duration.sum"] == "ns"
    assert df.attrs["report"] == str(path)
    assert df.attrs["reader"] in ("extras", "wheel")


def test_identity_of_basic_report():
    df = load_report(BASIC)
    first, reduce_ = df.iloc[0], df.iloc[3]
    assert (first["function"], first["demangled"], first["mangled"]) == ("vec_add", VEC_ADD, "_Z7vec_addPKfS0_Pfi")
    assert (reduce_["demangled"], reduce_["mangled"]) == (BLOCK_REDUCE, "_Z12block_reducePKfPfi")
    assert set(df["grid_size"]) == {"(4096, 1, 1)"} and set(df["block_size"]) == {"(256, 1, 1)"}
    assert (first["grid_x"], first["grid_y"], first["grid_z"]) == (4096, 1, 1)
    assert (first["block_x"], first["block_y"], first["block_z"]) == (256, 1, 1)
    assert set(df["registers_per_thread"]) == {16}
    # block_reduce declares a 1 KiB __shared__ array; vec_add none
    assert df.loc[df["function"] == "block_reduce", "shared_mem_static"].tolist() == [1024] * 3
    assert df.loc[df["function"] == "vec_add", "shared_mem_static"].tolist() == [0] * 5
    assert set(df["shared_mem_dynamic"]) == {0}
    assert (first["device"], first["device_name"], first["compute_capability"]) == (0, "NVIDIA H200", "9.0")
    assert (first["context"], first["stream"], first["host"]) == (1, 7, "127.0.0.1")
    for col in ("result", "range", "grid_x", "block_x", "registers_per_thread", "shared_mem_static",
                "device", "context", "stream", "process"):
        assert is_integer_dtype(df[col]), col


def test_values_units_and_dtypes_of_basic_report():
    df = load_report(BASIC)
    assert df.loc[0, "gpu__time_duration.sum"] == 5984.0
    assert df["gpu__time_duration.sum"].tolist()[:4] == [5984.0, 5760.0, 5824.0, 10752.0]
    units = df.attrs["units"]
    assert units["gpu__time_duration.sum"] == "ns"
    assert units["dram__cycles_elapsed.avg.per_second"] == "hz"
    assert units["sm__throughput.avg.pct_of_peak_sustained_elapsed"] == "%"
    assert units["launch__registers_per_thread"] == "register/thread"
    assert units["device__attribute_display_name"] == ""
    assert units["shared_mem_static"] == "byte/block"
    assert set(df.columns[len(IDENTITY_COLUMNS):]) <= set(units)
    assert is_float_dtype(df["gpu__time_duration.sum"])
    assert is_float_dtype(df["sm__throughput.avg.pct_of_peak_sustained_elapsed"])
    assert is_integer_dtype(df["launch__grid_size"]) and df.loc[0, "launch__grid_size"] == 4096
    assert is_integer_dtype(df["device__attribute_l2_cache_size"])
    assert is_string_dtype(df["device__attribute_display_name"])
    assert df.loc[0, "launch__func_cache_config"] == "CachePreferNone"
    numeric = [c for c in df.columns[len(IDENTITY_COLUMNS):] if is_numeric_dtype(df[c])]
    assert len(numeric) > 500


@needs_wheel
def test_units_are_shared_by_every_frame_taken_not_copied_into_each():
    """pandas deep-copies `attrs` into every frame and column it derives: a full set's 2,246 units made each
    `df[c]` cost 1 ms and `itertuples()` of a two-row report 2.3 s. They are read-only and shared instead."""
    df = load_report(REPORTS / "full_two.ncu-rep")
    units = df.attrs["units"]
    assert len(units) > 2000
    assert df["function"].attrs["units"] is units and df.head(1).attrs["units"] is units
    assert copy.deepcopy(df.attrs)["units"] is units and copy.copy(units) is units
    with pytest.raises(TypeError, match="read-only"):
        units["gpu__time_duration.sum"] = "s"
    with pytest.raises(TypeError, match="read-only"):
        units.update(x="")
    mine = dict(units)  # a copy to change
    mine["gpu__time_duration.sum"] = "s"
    assert units["gpu__time_duration.sum"] == "ns"
    back = pickle.loads(pickle.dumps(df))
    assert type(back.attrs["units"]) is dict and back.attrs["units"] == units  # loads without nsightwrap
    assert json.loads(json.dumps(units)) == units and schema.SharedAttr.fromkeys(["a"], "") == {"a": ""}
    tidy = load_report(REPORTS / "full_two.ncu-rep", tidy=True)
    assert tidy["metric"].attrs["breakdowns"] is tidy.attrs["breakdowns"]


def test_range_result():
    df = load_report(RANGE)
    row = df.iloc[0]
    assert (row["result"], row["range"], row["function"], row["demangled"], row["mangled"]) == (
        0, 0, "range", "range", "range")
    assert row["gpu__time_duration.sum"] == 225664.0  # the whole range


def test_partial_report_loads_the_finished_kernels():
    df = load_report(PARTIAL)
    assert df["function"].tolist() == ["vec_add"] * 3
    assert df["gpu__time_duration.sum"].notna().all()
    assert df.attrs["units"]["gpu__time_duration.sum"] == "ns"


def test_report_of_a_run_stopped_before_any_result(tmp_path):
    """Blocks 0 and 1 of a real report (session, module): no result yet."""
    data = BASIC.read_bytes()
    offset = 8 + int.from_bytes(data[4:8], "little")
    for _ in range(2):
        size = int.from_bytes(data[offset:offset + 4], "little")
        offset += 4 + size + scan.pb_fields(data[offset + 4:offset + 4 + size]).get(5, 0)
    empty = tmp_path / "none.ncu-rep"
    empty.write_bytes(data[:offset])
    df = load_report(empty)
    assert df.shape == (0, len(IDENTITY_COLUMNS)) and list(df.columns) == list(IDENTITY_COLUMNS)
    assert list(load_report(empty, tidy=True).columns) == list(TIDY_COLUMNS)
    assert metric_columns(load_report(empty, metrics="gpu__time_duration.sum")) == ["gpu__time_duration.sum"]


def test_an_attempt_gives_its_report():
    assert load_report(SimpleNamespace(report=DURATION, status="ok")).shape[0] == 8
    with pytest.raises(ReportError, match="kept no report"):
        load_report(SimpleNamespace(report=None, status="hang", reason="stalled"))


# --------------------------------------------------------------------------
# Tidy form
# --------------------------------------------------------------------------


@pytest.mark.parametrize("path,names,pid,n_metrics", FIXTURES, ids=IDS)
def test_tidy_form_on_each_fixture(path, names, pid, n_metrics):
    wide = load_report(path)
    tidy = load_report(path, tidy=True)
    assert list(tidy.columns) == list(TIDY_COLUMNS)
    metric_cols = [c for c in wide.columns[len(IDENTITY_COLUMNS):] if not c.startswith("breakdown:")]
    assert len(tidy) == int(wide[metric_cols].notna().sum().sum())
    assert is_float_dtype(tidy["value"]) and not tidy["metric"].str.startswith("breakdown:").any()
    assert tidy.groupby("result")["function"].first().tolist() == names
    assert tidy["result"].is_monotonic_increasing
    duration = tidy[tidy["metric"] == "gpu__time_duration.sum"]
    assert duration["value"].tolist() == wide["gpu__time_duration.sum"].tolist()
    assert set(duration["unit"]) == {"ns"}
    assert tidy.attrs["units"]["gpu__time_duration.sum"] == "ns"


def test_tidy_value_is_numeric_when_every_chosen_metric_is():
    tidy = load_report(BASIC, metrics=["gpu__time_duration.sum", "dram__cycles_elapsed.avg"], tidy=True)
    assert len(tidy) == 16
    assert is_float_dtype(tidy["value"])
    assert tidy.iloc[0][["result", "function", "demangled", "metric", "value", "unit"]].tolist() == [
        0, "vec_add", VEC_ADD, "gpu__time_duration.sum", 5984.0, "ns"]


def test_tidy_value_is_numeric_with_text_and_breakdowns_apart():
    tidy = load_report(BASIC, tidy=True)
    assert is_float_dtype(tidy["value"])
    name = tidy[tidy["metric"] == "device__attribute_display_name"]
    assert name["value"].isna().all() and name["text"].str.startswith("NVIDIA").all()
    numbers = tidy[tidy["text"].isna()]
    assert numbers["value"].notna().all() and len(numbers) > 1000
    assert not tidy["metric"].str.startswith("breakdown:").any()
    breakdowns = tidy.attrs["breakdowns"]
    assert breakdowns and all(k.startswith("breakdown:") for k in breakdowns)
    assert all(isinstance(v, tuple) and v and "__" in v[0] for v in breakdowns.values())
    assert not any(k.startswith("breakdown:") for k in tidy.attrs["units"])


# --------------------------------------------------------------------------
# Choosing metrics
# --------------------------------------------------------------------------


def metric_columns(df):
    return list(df.columns[len(IDENTITY_COLUMNS):])


def test_one_exact_metric():
    df = load_report(BASIC, metrics="gpu__time_duration.sum")
    assert metric_columns(df) == ["gpu__time_duration.sum"]
    assert df.loc[0, "gpu__time_duration.sum"] == 5984.0
    assert df.loc[3, "grid_size"] == "(4096, 1, 1)"  # identity columns are always there
    assert df.attrs["units"]["gpu__time_duration.sum"] == "ns"


def test_names_globs_and_regexes_in_order_without_duplicates():
    df = load_report(BASIC, metrics=["gpu__time_duration.sum", "dram__cycles_active.*",
                                     "regex:^sm__throughput\\.avg", "gpu__time_duration.sum"])
    assert metric_columns(df) == [
        "gpu__time_duration.sum",
        "dram__cycles_active.avg", "dram__cycles_active.avg.pct_of_peak_sustained_elapsed",
        "dram__cycles_active.max", "dram__cycles_active.max.pct_of_peak_sustained_elapsed",
        "dram__cycles_active.min", "dram__cycles_active.min.pct_of_peak_sustained_elapsed",
        "dram__cycles_active.sum", "dram__cycles_active.sum.pct_of_peak_sustained_elapsed",
        "sm__throughput.avg.pct_of_peak_sustained_elapsed",
    ]


def test_glob_selects_exactly_what_it_matches():
    full = load_report(BASIC)
    df = load_report(BASIC, metrics="dram__*")
    expected = sorted(c for c in metric_columns(full) if c.startswith("dram__"))
    assert metric_columns(df) == expected
    pd.testing.assert_frame_equal(df[expected], full[expected])


def test_regex_matches_anywhere_like_ncu():
    df = load_report(BASIC, metrics="regex:time_duration")
    assert metric_columns(df) == [f"gpu__time_duration.{r}" for r in ("avg", "max", "min", "sum")]


def test_pattern_matching_nothing_adds_nothing():
    assert metric_columns(load_report(BASIC, metrics="nosuch__*")) == []
    assert metric_columns(load_report(BASIC, metrics=[])) == []


def test_unknown_exact_name_lists_close_matches():
    with pytest.raises(ReportError) as err:
        load_report(BASIC, metrics=["gpu__time_duration.summ", "gpu__time_duration.sum"])
    message = str(err.value)
    assert str(BASIC) in message and "gpu__time_duration.summ" in message
    assert "close: gpu__time_duration.sum" in message
    assert isinstance(err.value, NsightwrapError)


def test_bad_regex_and_bad_types():
    with pytest.raises(ReportError, match="not a valid regular expression"):
        load_report(BASIC, metrics="regex:(")
    with pytest.raises(TypeError):
        load_report(BASIC, metrics=[3])


def test_only_the_chosen_metrics_are_read(monkeypatch):
    ncu_report_module = module.choose_reader(None).module
    calls = []

    def spy(original):
        def counting(action, name):
            calls.append(name)
            return original(action, name)
        return counting

    # nsightwrap calls the SWIG function directly where the module has it
    flat = getattr(ncu_report_module, "_ncu_report", None)
    if flat is not None and hasattr(flat, "IAction_metric_by_name"):
        monkeypatch.setattr(flat, "IAction_metric_by_name", spy(flat.IAction_metric_by_name))
    monkeypatch.setattr(ncu_report_module.IAction, "metric_by_name", spy(ncu_report_module.IAction.metric_by_name))
    load_report(BASIC, metrics="gpu__time_duration.sum")
    assert calls.count("gpu__time_duration.sum") == 8
    assert len(calls) <= 8 * (1 + len(schema.IDENTITY_METRICS) + 2)  # + identity lookups
    calls.clear()
    load_report(BASIC)
    rng = ncu_report_module.load_report(str(BASIC)).range_by_idx(0)
    held = sum(len(rng.action_by_idx(i).metric_names()) for i in range(rng.num_actions()))
    assert len(calls) == held  # all metrics: one lookup per value, identity taken from them


# --------------------------------------------------------------------------
# Sections
# --------------------------------------------------------------------------


def test_speed_of_light_section():
    df = load_report(BASIC, sections="SpeedOfLight")
    cols = metric_columns(df)
    # the header of the section, as the report stores it
    assert cols[:10] == [
        "sm__throughput.avg.pct_of_peak_sustained_elapsed", "gpu__time_duration.sum",
        "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed", "gpc__cycles_elapsed.max",
        "l1tex__throughput.avg.pct_of_peak_sustained_active", "sm__cycles_active.avg",
        "lts__throughput.avg.pct_of_peak_sustained_elapsed", "gpc__cycles_elapsed.avg.per_second",
        "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed", "dram__cycles_elapsed.avg.per_second",
    ]
    # the body's two breakdown tables stand for the metrics they list
    assert "sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_elapsed" in cols
    assert "lts__t_sectors.avg.pct_of_peak_sustained_elapsed" in cols
    assert not any(c.startswith("breakdown:") for c in cols)
    assert "launch__grid_size" not in cols
    assert all(is_float_dtype(df[c]) for c in cols)


def test_sections_are_case_insensitive_and_combine_with_metrics():
    launch = load_report(BASIC, sections=["launchstats"])
    assert "launch__grid_size" in metric_columns(launch) and "gpu__time_duration.sum" not in metric_columns(launch)
    both = load_report(BASIC, sections="LaunchStats", metrics="gpu__time_duration.sum")
    assert metric_columns(both) == metric_columns(launch) + ["gpu__time_duration.sum"]


def test_metrics_option_section_of_a_metrics_only_report():
    df = load_report(DURATION, sections="section0")  # what `ncu --metrics` makes
    assert metric_columns(df) == ["gpu__time_duration.sum"]


def test_unknown_section_lists_the_report_sections():
    with pytest.raises(ReportError) as err:
        load_report(BASIC, sections="SpeedOfLite")
    message = str(err.value)
    assert "SpeedOfLite" in message and "close: SpeedOfLight" in message
    assert "LaunchStats" in message and "Occupancy" in message


# --------------------------------------------------------------------------
# Errors
# --------------------------------------------------------------------------


def test_missing_file(tmp_path):
    missing = tmp_path / "nope.ncu-rep"
    with pytest.raises(ReportError, match="no such file") as err:
        load_report(missing)
    assert err.value.path == str(missing) and str(missing) in str(err.value)


def test_text_file_renamed(tmp_path):
    fake = tmp_path / "notes.ncu-rep"
    fake.write_text("kernel timings: 1.2 ms\n")
    with pytest.raises(ReportError, match="not an Nsight Compute report") as err:
        load_report(fake)
    assert str(fake) in str(err.value) and "--export" in str(err.value)


def test_empty_file_and_folder(tmp_path):
    empty = tmp_path / "empty.ncu-rep"
    empty.write_bytes(b"")
    with pytest.raises(ReportError, match="empty"):
        load_report(empty)
    with pytest.raises(ReportError, match="not a file"):
        load_report(tmp_path)


@pytest.mark.parametrize("keep", [0.5, 6, 100, 60_000, -1], ids=["half", "6B", "100B", "60kB", "all-but-1"])
def test_truncated_report(tmp_path, keep):
    data = BASIC.read_bytes()
    cut = tmp_path / "cut.ncu-rep"
    cut.write_bytes(data[: int(len(data) * keep)] if isinstance(keep, float) else data[:keep])
    with pytest.raises(ReportError, match="truncated") as err:
        load_report(cut)
    assert str(cut) in str(err.value) and "profile again" in str(err.value)


@needs_wheel
def test_ncu_report_alone_does_not_notice_truncation(tmp_path):
    """Why the file is checked first: ncu_report neither crashes nor fails on
    a truncated report; it returns the complete kernels and a nameless one."""
    data = BASIC.read_bytes()
    cut = tmp_path / "cut.ncu-rep"
    cut.write_bytes(data[: len(data) // 2])
    code = textwrap.dedent(f"""
        import ncu_report
        try:
            ctx = ncu_report.load_report({str(cut)!r})
            rng = ctx.range_by_idx(0)
            print([rng.action_by_idx(i).name() for i in range(rng.num_actions())])
        except Exception as exc:
            print("raised", type(exc).__name__)
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, f"ncu_report crashed the process: {done.returncode} {done.stderr}"
    # the 2026.3.1 wheel: no error, the three complete kernels and a nameless fourth
    assert done.stdout.strip() == "['vec_add', 'vec_add', 'vec_add', None]" or done.stdout.startswith("raised")


def test_trailing_bytes_are_a_cut_block(tmp_path):
    odd = tmp_path / "odd.ncu-rep"
    odd.write_bytes(BASIC.read_bytes() + b"\x01\x02")
    with pytest.raises(ReportError, match="truncated: it ends 2 byte"):
        load_report(odd)


def test_unknown_format_versions_defer_to_ncu_report(tmp_path, monkeypatch):
    """For a format version never checked, a failed walk is trusted only when
    ncu_report's answer looks broken too (no results, or a nameless one)."""
    monkeypatch.setattr(scan, "_KNOWN_FORMAT_VERSIONS", range(0))
    df = load_report(BASIC, metrics="gpu__time_duration.sum")
    assert df["function"].tolist() == MIXED8 and set(df["process"]) == {567}
    cut = tmp_path / "cut.ncu-rep"
    cut.write_bytes(BASIC.read_bytes()[:250_000])
    assert scan.check_report_file(cut).problem.startswith("is truncated")
    with pytest.raises(ReportError, match="truncated"):
        load_report(cut)


# --------------------------------------------------------------------------
# The report file walk
# --------------------------------------------------------------------------


def test_walk_finds_one_process_per_result():
    walked = scan.check_report_file(BASIC)
    assert walked.version == 7 and walked.problem is None
    assert [p.pid for p in walked.processes] == [567] * 8
    assert {(p.host, p.name) for p in walked.processes} == {("127.0.0.1", "/tmp/nw/app")}
    assert len(scan.check_report_file(RANGE).processes) == 1  # a range result counts too


def test_protobuf_fields():
    assert scan.pb_fields(b"\x08\x96\x01\x12\x03abc\x28\x05") == {1: 150, 2: b"abc", 5: 5}
    with pytest.raises(ValueError):
        scan.pb_fields(b"\x12\x09ab")


# --------------------------------------------------------------------------
# NVTX
# --------------------------------------------------------------------------


class FakeDomain:
    def __init__(self, name, push_pop=(), start_end=()):
        self._name, self._pp, self._se = name, tuple(push_pop), tuple(start_end)

    def name(self):
        return self._name

    def push_pop_ranges(self):
        return self._pp

    def start_end_ranges(self):
        return self._se


class FakeState:
    def __init__(self, domains):
        self._d = dict(enumerate(domains))

    def domains(self):
        return tuple(self._d)

    def domain_by_id(self, i):
        return self._d.get(i)


def test_nvtx_text():
    assert api.nvtx_text(None) is None
    assert api.nvtx_text(FakeState([])) is None
    assert api.nvtx_text(FakeState([FakeDomain("", ["train", "forward"])])) == "train/forward"
    state = FakeState([FakeDomain("", ["step"]), FakeDomain("torch", ["aten::mm"], ["epoch 1"])])
    assert api.nvtx_text(state) == "step; torch@aten::mm; torch@epoch 1"


# --------------------------------------------------------------------------
# ncu's raw CSV
# --------------------------------------------------------------------------


def test_parse_raw_csv_fixture():
    df = parse_raw_csv((CSV / "raw_basic.csv").read_text())
    assert list(df.columns[: len(IDENTITY_COLUMNS)]) == list(IDENTITY_COLUMNS)
    assert df.shape == (3, len(IDENTITY_COLUMNS) + 11)
    assert df["function"].tolist() == ["vec_add", "vec_add", "block_reduce"]
    assert df["demangled"].tolist() == [VEC_ADD, VEC_ADD, BLOCK_REDUCE]
    assert df["result"].tolist() == [0, 1, 2] and set(df["process"]) == {567}
    assert (df.loc[0, "grid_size"], df.loc[0, "grid_x"], df.loc[0, "block_y"]) == ("(4096, 1, 1)", 4096, 1)
    assert df["shared_mem_static"].tolist() == [0, 0, 1024]
    assert (df.loc[0, "compute_capability"], df.loc[0, "device"], df.loc[0, "stream"]) == ("9.0", 0, 7)
    assert df.loc[0, "device_name"] == "NVIDIA H200"
    assert df["range"].isna().all() and df["mangled"].isna().all() and df["nvtx"].isna().all()
    assert df["gpu__time_duration.sum"].tolist() == [5984, 5760, 10752]
    assert is_integer_dtype(df["gpu__time_duration.sum"]) and is_integer_dtype(df["dram__bytes_read.sum"])
    assert is_float_dtype(df["sm__throughput.avg.pct_of_peak_sustained_elapsed"])
    assert is_string_dtype(df["launch__func_cache_config"])
    assert df["smsp__pcsamp_sample_count"].isna().all()  # "n/a"
    units = df.attrs["units"]
    assert (units["gpu__time_duration.sum"], units["dram__bytes_read.sum"]) == ("nsecond", "byte")
    assert units["launch__grid_size"] == "" and "Kernel Name" not in units


def test_parse_raw_csv_with_thousands_separators_and_a_prologue():
    df = parse_raw_csv((CSV / "raw_auto_units.csv").read_text())
    assert df["function"].tolist() == ["vectorized_elementwise_kernel", "ampere_sgemm_128x64_nn"]
    assert df["sm__cycles_elapsed.sum"].tolist() == [1179370, 13516800]
    assert df["dram__bytes_read.sum"].tolist() == [8.39, 1204.5]
    assert df["gpu__time_duration.sum"].tolist() == [5.98, 1210.24]
    assert (df.loc[1, "grid_x"], df.loc[1, "grid_y"], df.loc[1, "grid_z"]) == (16, 32, 2)
    assert df.attrs["units"]["gpu__time_duration.sum"] == "usecond"
    assert df["registers_per_thread"].isna().all()  # not in this CSV


def test_parse_raw_csv_needs_a_header():
    with pytest.raises(ValueError, match="header"):
        parse_raw_csv("==ERROR== could not open file\n")


def fake_ncu(tmp_path, csv_file):
    """An executable that records its argv and prints a raw-page CSV."""
    script = tmp_path / "bin" / "ncu"
    script.parent.mkdir(parents=True, exist_ok=True)
    script.write_text(textwrap.dedent(f"""\
        #!{sys.executable}
        import sys
        open({str(tmp_path / 'argv.txt')!r}, 'w').write('\\n'.join(sys.argv[1:]))
        sys.stdout.write(open({str(csv_file)!r}).read())
    """))
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return script


def test_csv_path_when_no_ncu_report_imports(tmp_path, monkeypatch):
    def no_wheel():
        raise ImportError("No module named 'ncu_report'")

    monkeypatch.setattr(module, "_import_wheel", no_wheel)
    monkeypatch.setattr(module, "_loaded_builds", dict)
    ncu = fake_ncu(tmp_path, CSV / "raw_basic.csv")
    df = load_report(BASIC, ncu=ncu)
    assert (tmp_path / "argv.txt").read_text().splitlines() == raw_csv_argv(str(ncu), BASIC)[1:]
    assert (df.attrs["reader"], df.attrs["reader_origin"]) == ("csv", str(ncu))
    assert df["function"].tolist() == ["vec_add", "vec_add", "block_reduce"]
    one = load_report(BASIC, metrics=["gpu__time_duration.sum", "launch__*"], ncu=ncu)
    assert metric_columns(one)[0] == "gpu__time_duration.sum" and len(metric_columns(one)) == 7
    tidy = load_report(BASIC, metrics="gpu__time_duration.sum", tidy=True, ncu=ncu)
    assert tidy["value"].tolist() == [5984, 5760, 10752] and set(tidy["unit"]) == {"nsecond"}
    with pytest.raises(ReportError, match="gpu__time_duration.summ"):
        load_report(BASIC, metrics="gpu__time_duration.summ", ncu=ncu)
    with pytest.raises(ReportError, match="sections= needs the ncu_report"):
        load_report(BASIC, sections="SpeedOfLight", ncu=ncu)


def test_csv_path_failure_names_the_command(tmp_path, monkeypatch):
    monkeypatch.setattr(module, "_import_wheel", lambda: (_ for _ in ()).throw(ImportError("none")))
    monkeypatch.setattr(module, "_loaded_builds", dict)
    ncu = tmp_path / "ncu"
    ncu.write_text("#!/bin/sh\necho '==ERROR== Failed to open report.'\nexit 1\n")
    ncu.chmod(0o755)
    with pytest.raises(ReportError, match="exited with status 1") as err:
        load_report(BASIC, ncu=ncu)
    assert "Failed to open report" in str(err.value)


def test_nothing_to_read_with(monkeypatch):
    monkeypatch.setattr(module, "_import_wheel", lambda: (_ for _ in ()).throw(ImportError("none")))
    monkeypatch.setattr(module, "_loaded_builds", dict)
    monkeypatch.setattr(module, "find_ncu", lambda: (_ for _ in ()).throw(ToolNotFound("ncu", [], "")))
    with pytest.raises(ReportError, match="no way to read reports"):
        load_report(BASIC)


def ran_with(ncu, report=BASIC) -> Attempt:
    """An attempt whose run was `ncu --export ... app` (its argv starts with the ncu that ran)."""
    return Attempt(status="ok", reason="", command=(str(ncu), "--export", str(report), "./app"), returncode=0,
                   kernels=(), stall=None, report=report, report_complete=True, elapsed_s=0.0, stop=None,
                   warnings=(), errors=(), notes=(), log="", started_at="", cookie="")


def test_an_attempt_is_read_with_the_ncu_of_its_run(tmp_path, monkeypatch):
    monkeypatch.setattr(module, "_import_wheel", lambda: (_ for _ in ()).throw(ImportError("none")))
    monkeypatch.setattr(module, "_loaded_builds", dict)
    searched = []
    found = fake_ncu(tmp_path / "env", CSV / "raw_basic.csv")  # what a search of $NSIGHTWRAP_NCU / PATH would give
    monkeypatch.setattr(module, "find_ncu", lambda: searched.append(1) or str(found))
    run = fake_ncu(tmp_path / "run", CSV / "raw_basic.csv")
    for df in (attempt_dataframe(ran_with(run)), load_report(ran_with(run), metrics="gpu__time_duration.sum")):
        assert (df.attrs["reader"], df.attrs["reader_origin"]) == ("csv", str(run))
        assert (tmp_path / "run" / "argv.txt").read_text().splitlines() == raw_csv_argv(str(run), BASIC)[1:]
    other = fake_ncu(tmp_path / "other", CSV / "raw_basic.csv")
    assert attempt_dataframe(ran_with(run), ncu=other).attrs["reader_origin"] == str(other)  # ncu= wins
    assert searched == []  # an ncu was given every time: no search
    gone = attempt_dataframe(ran_with(tmp_path / "uninstalled" / "ncu"))  # the run's ncu is no more: search
    assert gone.attrs["reader_origin"] == str(found) and searched == [1]


def test_a_one_rank_attempt_is_read_with_its_ncu_not_its_launcher(tmp_path, monkeypatch):
    """Bug: a one-rank attempt's argv starts with its launcher (torchrun), and that was taken for the ncu."""
    monkeypatch.setattr(module, "_import_wheel", lambda: (_ for _ in ()).throw(ImportError("none")))
    monkeypatch.setattr(module, "_loaded_builds", dict)
    monkeypatch.setattr(module, "find_ncu", lambda: pytest.fail("the attempt's ncu exists: no search"))
    launcher = tmp_path / "torchrun"  # exists, and is not the ncu
    launcher.write_text("#!/bin/sh\nexit 3\n")
    launcher.chmod(0o755)
    run = fake_ncu(tmp_path / "run", CSV / "raw_basic.csv")
    one_rank = replace(ran_with(launcher), command=(str(launcher), "--nproc-per-node=1", str(run), "--export",
                                                     str(BASIC), "./app"), ncu=str(run))
    assert run_ncu(one_rank) == str(run)
    df = attempt_dataframe(one_rank)
    assert (df.attrs["reader"], df.attrs["reader_origin"]) == ("csv", str(run))


@needs_wheel
def test_an_attempt_is_read_with_the_extras_of_its_ncu(tmp_path):
    ncu = fake_install(tmp_path / "nsight-compute" / "2025.3.1")
    df = attempt_dataframe(ran_with(ncu, DURATION), metrics="gpu__time_duration.sum")
    assert df.attrs["reader"] == "extras"
    assert df.attrs["reader_origin"] == os.path.realpath(ncu.parent / "extras" / "python" / "ncu_report.py")
    assert (ncu.parent / "extras" / "python" / "used.txt").read_text().endswith(f".ncu_report {DURATION}\n")


# --------------------------------------------------------------------------
# Which ncu_report: the install's extras, else the wheel
# --------------------------------------------------------------------------

SHIM = '''\
"""A stand-in for <install>/extras/python/ncu_report.py: the wheel, recording use."""
from pathlib import Path
from ncu_report import *  # noqa: F401,F403  (the wheel)
import ncu_report as _wheel

USED = Path(__file__).with_name("used.txt")


def load_report(file_name):
    with open(USED, "a") as fh:
        fh.write(f"{__name__} {file_name}\\n")
    return _wheel.load_report(file_name)
'''


def fake_install(root: Path) -> Path:
    """<root>/ncu (a launcher script) and <root>/extras/python/ncu_report.py."""
    (root / "extras" / "python").mkdir(parents=True)
    (root / "extras" / "python" / "ncu_report.py").write_text(SHIM)
    ncu = root / "ncu"
    ncu.write_text("#!/bin/sh\nexit 0\n")
    ncu.chmod(0o755)
    return ncu


@needs_wheel
def test_extras_module_of_the_given_ncu_is_used(tmp_path):
    ncu = fake_install(tmp_path / "nsight-compute" / "2025.3.1")
    before = set(sys.modules)
    df = load_report(DURATION, ncu=ncu)
    used = (ncu.parent / "extras" / "python" / "used.txt").read_text().splitlines()
    assert len(used) == 1 and used[0].endswith(f".ncu_report {DURATION}")
    assert used[0].startswith("_nsightwrap_ncu_report_")
    assert df.attrs["reader"] == "extras"
    assert df.attrs["reader_origin"] == os.path.realpath(ncu.parent / "extras" / "python" / "ncu_report.py")
    assert df["gpu__time_duration.sum"].tolist()[0] == 6304.0
    assert set(sys.modules) - before <= {"ncu_report"}  # the private names are gone again
    assert sys.modules["ncu_report"].__file__.endswith(os.path.join("ncu_report", "__init__.py"))
    load_report(DURATION, ncu=ncu.parent)  # the install folder works too, same module
    assert len((ncu.parent / "extras" / "python" / "used.txt").read_text().splitlines()) == 2


@needs_wheel
def test_wheel_when_the_ncu_has_no_extras(tmp_path):
    ncu = tmp_path / "ncu"
    ncu.write_text("#!/bin/sh\nexit 0\n")
    ncu.chmod(0o755)
    df = load_report(DURATION, ncu=ncu)
    assert df.attrs["reader"] == "wheel"
    assert df.attrs["reader_origin"] == sys.modules["ncu_report"].__file__
    with pytest.raises(ReportError, match="does not exist"):
        load_report(DURATION, ncu=tmp_path / "missing" / "ncu")


@needs_wheel
def test_a_native_extras_build_is_passed_over_once_numpy_is_loaded(tmp_path):
    # ncu 2025.3.1's extras _ncu_report.so crashed (SIGSEGV) when imported after numpy (GPU machine).
    ncu = fake_install(tmp_path / "native")
    (ncu.parent / "extras" / "python" / "_ncu_report.so").write_bytes(b"never loaded")
    assert "numpy" in sys.modules
    df = load_report(DURATION, ncu=ncu)
    assert df.attrs["reader"] == "wheel" and "crashes (SIGSEGV) when loaded after numpy" in df.attrs["reader_note"]
    assert not (ncu.parent / "extras" / "python" / "used.txt").exists()


@needs_wheel
def test_a_second_ncu_report_build_is_never_loaded(tmp_path, monkeypatch):
    monkeypatch.setattr(module, "_numpy_loaded", lambda: False)
    ncu = fake_install(tmp_path / "other")
    (ncu.parent / "extras" / "python" / "_ncu_report.so").write_bytes(b"not loaded")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        reader = module.choose_reader(ncu)
    assert reader.module is sys.modules["ncu_report"]
    assert any("already loaded" in str(w.message) for w in caught)
    assert not (ncu.parent / "extras" / "python" / "used.txt").exists()


@needs_wheel
def test_the_install_build_already_loaded_is_used_as_is(tmp_path):
    ncu = fake_install(tmp_path / "same")
    (ncu.parent / "extras" / "python" / "_ncu_report.so").symlink_to(ncu_report._ncu_report.__file__)
    reader = module.choose_reader(ncu)
    assert reader.module is ncu_report and reader.kind == "extras"
    assert not (ncu.parent / "extras" / "python" / "used.txt").exists()


def test_find_report_module_follows_links_scripts_and_layouts(tmp_path):
    install = tmp_path / "opt" / "nsight-compute" / "2025.3.1"
    fake_install(install)
    module = install / "extras" / "python" / "ncu_report.py"
    real = install / "target" / "linux-desktop-glibc_2_11_3-x64" / "ncu"
    real.parent.mkdir(parents=True)
    real.write_text("#!/bin/sh\n")

    assert find_report_module(install / "ncu") == module
    assert find_report_module(install) == module
    assert find_report_module(real) == module

    bin_dir = tmp_path / "usr" / "local" / "cuda" / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "ncu-link").symlink_to(install / "ncu")
    assert find_report_module(bin_dir / "ncu-link") == module
    wrapper = bin_dir / "ncu"
    wrapper.write_text(f'#!/bin/sh\nexec "{install / "ncu"}" "$@"\n')
    assert find_report_module(wrapper) == module

    kit = tmp_path / "cuda-13.0"
    fake_install(kit / "nsight-compute-2025.3.1")
    (kit / "bin").mkdir()
    (kit / "bin" / "ncu").write_text('#!/bin/sh\nexec "$(dirname "$0")/../nsight-compute-2025.3.1/ncu" "$@"\n')
    kit_module = kit / "nsight-compute-2025.3.1" / "extras" / "python" / "ncu_report.py"
    assert find_report_module(kit / "bin" / "ncu") == kit_module

    # CUDA 13.0's bin/ncu on the GPU machine names no install: it picks one at run time.
    cuda13 = tmp_path / "cuda-13.1" / "bin"
    cuda13.mkdir(parents=True)
    computed = cuda13 / "ncu"
    computed.write_text('#!/bin/sh\nDIR="$(dirname "$(readlink -f -- "$0")")"\n'
                        'for d in "$DIR"/../../opt/nsight-compute/*; do T="$d"; done\nexec "$T/ncu" "$@"\n')
    computed.chmod(0o755)
    (install / "ncu").chmod(0o755)
    assert find_report_module(computed) == module

    lonely = tmp_path / "elsewhere" / "ncu"
    lonely.parent.mkdir()
    lonely.write_text("#!/bin/sh\n")
    assert find_report_module(lonely) is None


# --- values against ncu's own CSV export of the same files (captured on the GPU machine) -------

# Columns whose CSV form differs by design: the CSV has no range index and no mangled name,
# and shows the process by its base name.
CSV_DIFFERS = {"range", "mangled", "process_name"}


@needs_wheel
@pytest.mark.parametrize("name, n", [("basic_ok", 8), ("partial_mixed_basic", 3), ("full_two", 2),
                                     ("app_replay_two", 2), ("torch_nvtx", 2)])
def test_values_match_ncu_csv_export(name, n):
    """`ncu --import F --csv --page raw --print-units base` on the GPU machine (devtools/make_fixtures.sh)."""
    df = load_report(REPORTS / f"{name}.ncu-rep")
    raw = parse_raw_csv((CSV / f"{name}.raw.csv").read_text())
    my_units, their_units = df.attrs["units"], raw.attrs.get("units", {})
    assert len(df) == len(raw) == n
    assert list(df["function"]) == list(raw["function"])
    common = [c for c in raw.columns if c in df.columns and c not in CSV_DIFFERS]
    assert len(common) >= 0.98 * len(raw.columns) - len(CSV_DIFFERS)
    numeric = 0
    for c in common:
        mine, theirs = df[c], raw[c]
        if pd.api.types.is_numeric_dtype(theirs) and theirs.notna().any():
            numeric += 1
            # The CSV prints two decimals: compare to that precision.
            np.testing.assert_allclose(pd.to_numeric(mine).astype(float), theirs.astype(float), rtol=1e-3,
                                       atol=0.006, equal_nan=True, err_msg=c)
        elif theirs.notna().any():
            assert [str(v) for v in mine] == [str(v) for v in theirs], c
        else:  # empty in the CSV: no value here either (instanced-only metrics of the full set)
            assert mine.isna().all() or (mine == "").all(), c
        if their_units.get(c):
            assert my_units.get(c) == their_units[c], c
    assert numeric > 500


@needs_wheel
def test_pytorch_report_with_nvtx_ranges():
    """A Triton kernel on PyTorch tensors, launched twice inside nested NVTX ranges (ncu --nvtx, GPU machine)."""
    df = load_report(REPORTS / "torch_nvtx.ncu-rep")
    assert list(df["function"]) == ["scale_kernel", "scale_kernel"]
    assert list(df["nvtx"]) == ["outer/step0", "outer/step1"]
    assert df["process_name"].str.endswith("python3.12").all() and (df["gpu__time_duration.sum"] > 0).all()
    raw = parse_raw_csv((CSV / "torch_nvtx.raw.csv").read_text())
    assert list(raw["nvtx"]) == list(df["nvtx"])
