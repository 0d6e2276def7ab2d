"""Nsight Systems: argv, finding nsys, runs through the watchdog with the fake nsys, stats CSV, SQLite rows."""

from __future__ import annotations

import shutil
import sqlite3
import stat
import sys
import threading
from pathlib import Path

import pandas as pd
import pytest
from helpers import FAKE_NSYS, HERE, assert_tree_gone, fast_stop

from nsightwrap.cli.main import main
from nsightwrap.errors import NsightwrapError, NsysFailed, NsysInterrupted, OptionsError, ToolError, ToolNotFound
from nsightwrap.ncu.context import RunConfig
from nsightwrap.nsys.locate import find_nsys
from nsightwrap.nsys.options import NSYS_DEFAULTS, NsysOptions, RunSettings, build_nsys_argv, unique_nsys_path
from nsightwrap.nsys.run import classify_nsys, generated_files, profile_nsys
from nsightwrap.reports.nsys.sqlite import KERNEL_COLUMNS, kernel_rows, nsys_export_sqlite
from nsightwrap.reports.nsys.stats import (
    DEFAULT_STATS_REPORTS,
    STATS_COLUMNS,
    nsys_stats,
    parse_stats_csv,
    parse_stats_table,
    split_stats_output,
)
from nsightwrap.watch.records import RUNTIME_VAR
from nsightwrap.watch.tree import StopPolicy

DATA = HERE / "data" / "nsys"
#: The fake nsys writes its report within milliseconds of SIGINT; only its
#: escaped target outlives the grace.
FAST_STOP = fast_stop(grace=1.0)
PY_OK = [sys.executable, "-c", "print('ok: no error')"]


@pytest.fixture
def nsys_env(monkeypatch):
    monkeypatch.setenv("NSIGHTWRAP_NSYS", str(FAKE_NSYS))
    for knob in ("HANG", "WEDGED", "IMPORTER_FAILS", "PRETEND_EXISTS", "NO_KERNELS", "STATS_TITLES"):
        monkeypatch.delenv(f"FAKE_NSYS_{knob}", raising=False)


def config(tmp_path, **kw) -> RunConfig:
    kw.setdefault("stop", FAST_STOP)
    return RunConfig(check_gpu=False, report_dir=str(tmp_path / "reports"), **kw)


def test_public_api():
    import nsightwrap

    assert (nsightwrap.nsys_stats, nsightwrap.kernel_rows) == (nsys_stats, kernel_rows)
    assert (nsightwrap.profile_nsys, nsightwrap.NsysOptions) == (profile_nsys, NsysOptions)
    assert {"NsysOptions", "kernel_rows", "nsys_stats", "profile_nsys"} <= set(nsightwrap.__all__)


# ----------------------------------------------------------------- argv and options


def test_argv_default():
    argv = build_nsys_argv("/x/nsys", NsysOptions(output="out/run"), ["python", "train.py", "--n", "3"])
    assert argv == ["/x/nsys", "profile", "--trace=cuda,nvtx,osrt", "-o", "out/run.nsys-rep",
                    "python", "train.py", "--n", "3"]


def test_argv_every_option():
    opts = NsysOptions(trace="cuda,nvtx", capture_range="nvtx", nvtx_capture="step@torch", output="a.nsys-rep",
                       sample="none", extra_args=["--cuda-memory-usage=true"])
    assert build_nsys_argv("nsys", opts, ["./app"]) == [
        "nsys", "profile", "--trace=cuda,nvtx", "--sample=none", "--capture-range=nvtx", "--nvtx-capture=step@torch",
        "--cuda-memory-usage=true", "-o", "a.nsys-rep", "./app"]
    assert NsysOptions(capture_range="cudaprofilerapi").capture_range == "cudaProfilerApi"
    assert "-o" not in build_nsys_argv("nsys", NsysOptions(), ["./app"])


@pytest.mark.parametrize("kw, words", [
    ({"capture_range": "hotkeys"}, "capture_range"),
    ({"capture_range": "nvtx"}, "nvtx_capture"),
    ({"nvtx_capture": "step"}, "capture_range='nvtx'"),
    ({"trace": ()}, "trace"),
    ({"trace": ("cuda", "")}, "trace"),
    ({"extra_args": ("-o", "x")}, "output="),
    ({"extra_args": ("--force-overwrite=true",)}, "never overwrites"),
])
def test_options_rejected_when_built(kw, words):
    with pytest.raises(OptionsError) as e:
        NsysOptions(**kw)
    assert words in str(e.value)


def test_empty_command_rejected():
    with pytest.raises(OptionsError):
        build_nsys_argv("nsys", NsysOptions(), [])


def test_unique_path_never_overwrites(tmp_path):
    assert unique_nsys_path(tmp_path / "r") == tmp_path / "r.nsys-rep"
    (tmp_path / "r.nsys-rep").write_text("x")
    assert unique_nsys_path(tmp_path / "r") == tmp_path / "r-1.nsys-rep"
    (tmp_path / "r-1.qdstrm").write_text("x")  # a failed import counts as taken
    assert unique_nsys_path(tmp_path / "r.nsys-rep") == tmp_path / "r-2.nsys-rep"


# ----------------------------------------------------------------- find_nsys


def _exe(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def test_find_nsys_order(tmp_path):
    explicit = _exe(tmp_path / "explicit" / "nsys")
    from_env = _exe(tmp_path / "env" / "nsys")
    on_path = _exe(tmp_path / "path" / "nsys")
    cuda_home = _exe(tmp_path / "cudahome" / "bin" / "nsys")
    cuda_root = _exe(tmp_path / "cuda" / "bin" / "nsys")
    _exe(tmp_path / "systems" / "2025.3.1" / "bin" / "nsys")
    systems_new = _exe(tmp_path / "systems" / "2025.10.2" / "bin" / "nsys")
    bundled = _exe(tmp_path / "compute" / "2025.3.1" / "host" / "target-linux-x64" / "nsys")
    roots = dict(cuda_root=str(tmp_path / "cuda"), systems_root=str(tmp_path / "systems"),
                 compute_root=str(tmp_path / "compute"))
    env = {"NSIGHTWRAP_NSYS": str(from_env), "PATH": str(on_path.parent), "CUDA_HOME": str(tmp_path / "cudahome")}

    assert find_nsys(str(explicit), env, **roots) == str(explicit)
    assert find_nsys(None, env, **roots) == str(from_env)
    del env["NSIGHTWRAP_NSYS"]
    assert find_nsys(None, env, **roots) == str(on_path)
    env["PATH"] = str(tmp_path / "empty")
    assert find_nsys(None, env, **roots) == str(cuda_home)
    del env["CUDA_HOME"]
    assert find_nsys(None, env, **roots) == str(cuda_root)
    cuda_root.unlink()
    assert find_nsys(None, env, **roots) == str(systems_new)  # newest by number, not by string
    for p in (tmp_path / "systems").glob("*/bin/nsys"):
        p.unlink()
    assert find_nsys(None, env, **roots) == str(bundled)
    bundled.unlink()
    with pytest.raises(ToolNotFound) as e:
        find_nsys(None, env, **roots)
    msg = str(e.value)
    assert "PATH" in msg and "CUDA_HOME" in msg
    assert str(tmp_path / "systems") in msg and str(tmp_path / "compute") in msg
    assert "NSIGHTWRAP_NSYS" in msg and "Install" in msg


def test_find_nsys_named_but_missing(tmp_path):
    with pytest.raises(ToolNotFound, match="does not exist"):
        find_nsys(None, {"NSIGHTWRAP_NSYS": str(tmp_path / "nope")})


def test_nsys_defaults_are_run_configs():
    """profile_nsys(config=None) runs as with RunConfig(): nsys reads RunSettings' fields, which RunConfig has
    (nsys knows no ncu, so it names the fields rather than importing ncu's RunConfig)."""
    fields = [name for name in vars(RunSettings) if not name.startswith("_")]
    assert fields == ["timeout", "stop", "env", "cwd", "report_dir"]
    assert {f: getattr(NSYS_DEFAULTS, f) for f in fields} == {f: getattr(RunConfig(), f) for f in fields}


# ----------------------------------------------------------------- profile_nsys with the fake


def test_profile_ok(tmp_path, nsys_env):
    seen = []
    run = profile_nsys(PY_OK, NsysOptions(output=str(tmp_path / "torch")), config(tmp_path), on_output=seen.append)
    assert run.status == "ok", run.log
    assert run.report == tmp_path / "torch.nsys-rep" and run.report.exists()
    assert run.report_kind == "nsys-rep"
    assert run.returncode == 0 and "ok: no error" in run.log and "ok: no error" in "".join(seen)
    assert run.argv[:3] == (str(FAKE_NSYS), "profile", "--trace=cuda,nvtx,osrt")
    assert_tree_gone(run.cookie)
    run.raise_for_status()


def test_profile_default_output_goes_to_report_dir(tmp_path, nsys_env):
    run = profile_nsys(PY_OK, None, config(tmp_path))
    assert run.ok and run.report.parent == tmp_path / "reports" and run.report.name.endswith(".nsys-rep")


def test_importer_failure_is_an_error_with_the_qdstrm(tmp_path, nsys_env, monkeypatch):
    monkeypatch.setenv("FAKE_NSYS_IMPORTER_FAILS", "1")
    run = profile_nsys(PY_OK, NsysOptions(output=str(tmp_path / "nsys_ok")), config(tmp_path))
    assert run.returncode == 0
    assert run.status == "error"
    assert run.report == tmp_path / "nsys_ok.qdstrm" and run.report_kind == "qdstrm"
    assert "libdw" in run.reason and "QdstrmImporter" in run.reason and "NSIGHTWRAP_NSYS" in run.reason
    assert any("Importer error status" in w for w in run.warnings)
    with pytest.raises(NsysFailed) as e:
        run.raise_for_status()
    assert e.value.run is run
    assert_tree_gone(run.cookie)


def test_existing_output_is_kept_and_a_new_name_used(tmp_path, nsys_env):
    old = tmp_path / "r.nsys-rep"
    old.write_text("keep me")
    run = profile_nsys(PY_OK, NsysOptions(output=str(tmp_path / "r")), config(tmp_path))
    assert run.ok and run.report == tmp_path / "r-1.nsys-rep"
    assert old.read_text() == "keep me"
    assert any("already exists" in n for n in run.notes)


def test_nsys_saying_the_file_exists_is_an_error(tmp_path, nsys_env, monkeypatch):
    monkeypatch.setenv("FAKE_NSYS_PRETEND_EXISTS", "1")
    run = profile_nsys(PY_OK, NsysOptions(output=str(tmp_path / "r")), config(tmp_path))
    assert run.returncode == 0 and run.status == "error" and run.report is None
    assert "already exists" in run.reason


def test_missing_program(tmp_path, nsys_env):
    run = profile_nsys([str(tmp_path / "no_such_program")], NsysOptions(output=str(tmp_path / "r")), config(tmp_path))
    assert run.returncode == 0 and run.status == "error" and run.report is None
    assert "No such file" in run.reason


def test_program_failure_is_crashed(tmp_path, nsys_env):
    run = profile_nsys([sys.executable, "-c", "raise SystemExit(3)"], NsysOptions(output=str(tmp_path / "r")),
                       config(tmp_path))
    assert run.status == "crashed" and "exit code 3" in run.reason and run.report.exists()


def test_hanging_nsys_times_out_and_the_tree_is_gone(tmp_path, nsys_env, monkeypatch):
    monkeypatch.setenv("FAKE_NSYS_HANG", "1")
    run = profile_nsys(PY_OK, NsysOptions(output=str(tmp_path / "h")), config(tmp_path, timeout=1.0))
    assert run.status == "timeout" and "total timeout" in run.reason
    assert "Collecting data..." in run.log
    assert run.stop is not None and run.stop.steps[0].startswith("SIGINT to profiler")
    assert run.report == tmp_path / "h.nsys-rep"  # nsys wrote it on SIGINT
    assert run.stop.killed  # the target escaped into its own session and outlived nsys
    assert not run.stop.survivors
    assert_tree_gone(run.cookie)


def test_another_threads_cancel_raises_nsys_interrupted_as_ctrl_c_does(tmp_path, nsys_env, monkeypatch):
    """RunConfig.cancel set by another thread (a walk's line, a calibration's cancel) ends profile_nsys as Ctrl-C
    does: NsysInterrupted, the tree stopped (it returned an `interrupted` run instead, and a calibration then went
    on to a plain run)."""
    monkeypatch.setenv("FAKE_NSYS_HANG", "1")
    cancel = threading.Event()
    threading.Timer(0.3, cancel.set).start()
    with pytest.raises(NsysInterrupted) as caught:
        # A grace of 0.2 s: nsys exits at once on SIGINT, and its escaped target then had the rest of a 1 s
        # grace (SETTLE_S, 0.5 s) before SIGTERM; the stop itself is test_hanging_nsys_times_out_and_the_tree_is_gone's
        profile_nsys(PY_OK, NsysOptions(output=str(tmp_path / "c")),
                     config(tmp_path, timeout=30.0, cancel=cancel, stop=fast_stop(grace=0.2)))
    assert caught.value.run.status == "interrupted"
    assert_tree_gone(caught.value.run.cookie)


def test_wedged_nsys_is_killed(tmp_path, nsys_env, monkeypatch):
    monkeypatch.setenv("FAKE_NSYS_HANG", "1")
    monkeypatch.setenv("FAKE_NSYS_WEDGED", "1")
    stop = StopPolicy(grace=0.2, term_wait=0.2, kill_wait=2.0, drain=0.5)  # waited out: the steps are checked
    run = profile_nsys(PY_OK, NsysOptions(output=str(tmp_path / "w")), config(tmp_path, timeout=0.8, stop=stop))
    assert run.status == "timeout" and run.report is None
    assert any(s.startswith("SIGKILL") for s in run.stop.steps) and not run.stop.survivors
    assert_tree_gone(run.cookie)


def test_silence_rule_stops_a_hanging_program(tmp_path, nsys_env):
    hang = [sys.executable, "-c", "import time; print('started', flush=True); time.sleep(600)"]
    run = profile_nsys(hang, NsysOptions(output=str(tmp_path / "s")), config(tmp_path), silence_timeout=0.5)
    assert run.status == "hang" and "no output" in run.reason
    assert_tree_gone(run.cookie)


# ----------------------------------------------------------------- classification (pure)


def test_classify_without_a_process():
    transcript = ("ok: no error\nImporter error status: An unknown error occurred.\nUnable to retrieve the importer "
                  "version: skipping importation of the QDSTRM file.\nCollecting data...\n"
                  "Generating '/tmp/nsys-report-c2a4.qdstrm'\nGenerated:\n\t/out/nsys_ok.qdstrm\n")
    assert generated_files(transcript) == [Path("/out/nsys_ok.qdstrm")]
    status, reason, _ = classify_nsys(transcript, 0, Path("/out/nsys_ok.qdstrm"),
                                      nsys="/opt/nvidia/nsight-compute/2025.3.1/host/target-linux-x64/nsys")
    assert status == "error" and "libdw1" in reason and "bundled with Nsight Compute" in reason
    status, reason, _ = classify_nsys("ERROR: Report 'x' could not be found.\n", 0, Path("r.nsys-rep"))
    assert status == "error" and "--help-reports" in reason
    assert classify_nsys("Generated:\n  r.nsys-rep\n", 0, None)[0] == "error"
    assert classify_nsys("", -9, Path("r.nsys-rep"))[0] == "crashed"
    assert classify_nsys("all fine\n", 0, Path("r.nsys-rep"))[0] == "ok"
    # A program that merely prints "already exists" does not fail a run that wrote its report.
    assert classify_nsys("mkdir: cache already exists\n", 0, Path("r.nsys-rep"))[0] == "ok"


# ----------------------------------------------------------------- parse_stats_csv


@pytest.mark.parametrize("name", DEFAULT_STATS_REPORTS)
def test_parse_each_fixture(name):
    df = parse_stats_csv((DATA / f"{name}.csv").read_text(), name)
    assert tuple(df.columns) == STATS_COLUMNS[name]
    assert len(df) > 0 and df.attrs["report"] == name
    for col in df.columns:
        if col in ("Name", "Style", "Range", "Operation"):
            assert not pd.api.types.is_numeric_dtype(df[col])
        else:
            assert pd.api.types.is_numeric_dtype(df[col]), col
    assert pd.api.types.is_integer_dtype(df["Total Time (ns)"])
    assert pd.api.types.is_float_dtype(df["Time (%)"])


def test_parse_keeps_quoted_names():
    kern = parse_stats_csv((DATA / "cuda_gpu_kern_sum.csv").read_text(), "cuda_gpu_kern_sum")
    assert kern["Instances"].sum() == 4
    assert kern.loc[2, "Name"].startswith(
        "void at::native::<unnamed>::distribution_elementwise_grid_stride_kernel<float, (int)4,")
    nvtx = parse_stats_csv((DATA / "nvtx_sum.csv").read_text(), "nvtx_sum")
    assert list(nvtx["Range"]) == [":step", ":forward, pass 1", 'softmax "fused"']


def test_parse_console_text_with_banners_and_skipped_reports():
    text = (DATA / "stats_console_2024.txt").read_text()
    assert list(split_stats_output(text)) == ["nvtx_sum", "cuda_gpu_kern_sum", "cuda_api_sum", "cuda_gpu_mem_time_sum"]
    kern = parse_stats_csv(text, "cuda_gpu_kern_sum")
    assert len(kern) == 3 and kern["Total Time (ns)"].sum() == 1167773 + 96384 + 82144
    api = parse_stats_csv(text, "cuda_api_sum")
    assert len(api) == 8 and "cudaLaunchKernel" in set(api["Name"])
    for name in ("nvtx_sum", "cuda_gpu_mem_time_sum"):
        empty = parse_stats_csv(text, name)
        assert empty.empty and tuple(empty.columns) == STATS_COLUMNS[name]
        assert empty.attrs["note"].startswith("SKIPPED:")
    one = parse_stats_csv((DATA / "stats_kern_2025.txt").read_text(), "cuda_gpu_kern_sum")
    assert one.equals(kern)


def test_parse_skipped_only_and_errors():
    df = parse_stats_csv("Generating SQLite file r.sqlite from r.nsys-rep\nProcessing [r.sqlite] with "
                         "[/x/reports/cuda_gpu_kern_sum.py]... \n"
                         "SKIPPED: r.sqlite does not contain CUDA kernel data.\n", "cuda_gpu_kern_sum")
    assert df.empty and "CUDA kernel data" in df.attrs["note"]
    with pytest.raises(ValueError, match="could not be found"):
        parse_stats_csv("\nERROR: Report 'nope' could not be found.\n\n", "nope")


def test_parse_unknown_report_shape_and_thousands():
    text = ('Time (%),Total Time (ns),Num Calls,Name\n55.0,"1,234,567",3,read\n'
            '45.0,"1,010,101",2,"write, sync"\n\nafter\n')
    df = parse_stats_csv(text, "osrt_sum")
    assert list(df["Total Time (ns)"]) == [1234567, 1010101] and list(df["Name"]) == ["read", "write, sync"]


# ----------------------------------------------------------------- nsys stats / export via the fake


@pytest.fixture(scope="module")
def made_report(tmp_path_factory):
    """One fake nsys run for the tests that only read its report (each reads its own copy: `report`)."""
    folder = tmp_path_factory.mktemp("nsys-made")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("NSIGHTWRAP_NSYS", str(FAKE_NSYS))
        mp.setenv(RUNTIME_VAR, str(tmp_path_factory.mktemp("nsys-made-runtime")))  # before own_places: not /tmp's
        for knob in ("HANG", "WEDGED", "IMPORTER_FAILS", "PRETEND_EXISTS", "NO_KERNELS", "STATS_TITLES"):
            mp.delenv(f"FAKE_NSYS_{knob}", raising=False)
        run = profile_nsys(PY_OK, NsysOptions(output=str(folder / "torch")), config(folder))
    assert run.ok, run.describe()
    return run.report


@pytest.fixture
def report(tmp_path, nsys_env, made_report):
    """A copy of the module's report in this test's folder (an export writes beside it)."""
    copy = tmp_path / made_report.name
    shutil.copy2(made_report, copy)
    return copy


def test_nsys_stats_via_fake(report):
    tables = nsys_stats(report)
    assert list(tables) == list(DEFAULT_STATS_REPORTS)
    for name, df in tables.items():
        assert tuple(df.columns) == STATS_COLUMNS[name] and len(df) > 0
        assert "Processing [" in df.attrs["raw"]
    assert tables["cuda_gpu_kern_sum"]["Instances"].sum() == 4


def test_nsys_stats_titles_style_and_no_kernels(tmp_path, nsys_env, monkeypatch):
    monkeypatch.setenv("FAKE_NSYS_NO_KERNELS", "1")
    monkeypatch.setenv("FAKE_NSYS_STATS_TITLES", "1")
    run = profile_nsys(PY_OK, NsysOptions(output=str(tmp_path / "nk"), trace=("cuda", "osrt")), config(tmp_path))
    tables = nsys_stats(run.report, ("cuda_gpu_kern_sum", "nvtx_sum", "cuda_api_sum"))
    assert tables["cuda_gpu_kern_sum"].empty and "CUDA kernel data" in tables["cuda_gpu_kern_sum"].attrs["note"]
    assert tables["nvtx_sum"].empty and "NVTX" in tables["nvtx_sum"].attrs["note"]
    assert " ** CUDA API Summary" in tables["cuda_api_sum"].attrs["raw"] and len(tables["cuda_api_sum"]) == 8


def test_nsys_stats_unknown_report(report):
    with pytest.raises(ToolError, match="help-reports"):
        nsys_stats(report, ("cuda_gpu_kern_sum", "no_such_report"))


def test_nsys_stats_refuses_a_qdstrm(tmp_path, nsys_env):
    q = tmp_path / "x.qdstrm"
    q.write_bytes(b"raw")
    with pytest.raises(NsightwrapError, match="QdstrmImporter"):
        nsys_stats(q)


def test_export_and_kernel_rows(report):
    db = nsys_export_sqlite(report)
    assert db == report.with_name("torch.sqlite") and db.exists()
    df = kernel_rows(db)
    assert tuple(df.columns) == KERNEL_COLUMNS and len(df) == 4
    assert list(df["start"]) == sorted(df["start"])
    assert list(df["duration_ns"]) == [41216, 40928, 1167773, 96384]
    assert df.loc[3, "name"].startswith("void at::native::<unnamed>::cunn_SoftMaxForward<")
    assert df.loc[3, "short_name"] == "cunn_SoftMaxForward"
    assert tuple(df.loc[2, ["gridX", "gridY", "gridZ", "blockX"]]) == (16, 16, 1, 128)
    assert set(df["stream"]) == {7} and set(df["device"]) == {0}
    assert pd.api.types.is_integer_dtype(df["duration_ns"]) and df.attrs["missing"] == []
    # the fake's summary agrees with the rows
    kern = nsys_stats(report, ("cuda_gpu_kern_sum",))["cuda_gpu_kern_sum"]
    assert kern["Total Time (ns)"].sum() == df["duration_ns"].sum()


def test_kernel_rows_other_schema_and_no_kernels(tmp_path):
    old = tmp_path / "old.sqlite"
    con = sqlite3.connect(old)
    con.execute("CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT)")
    con.execute("INSERT INTO StringIds VALUES (5, 'k2'), (6, 'k1')")
    con.execute("CREATE TABLE cupti_activity_kind_kernel (start INT, end INT, deviceId INT, shortName INT, "
                "gridX INT, gridY INT, gridZ INT, blockX INT, blockY INT, blockZ INT, correlationId INT)")
    con.execute("INSERT INTO cupti_activity_kind_kernel VALUES (200, 260, 1, 5, 1, 1, 1, 32, 1, 1, 9), "
                "(100, 150, 1, 6, 2, 1, 1, 64, 1, 1, 8)")
    con.commit()
    con.close()
    df = kernel_rows(old)
    assert list(df["name"]) == ["k1", "k2"] and list(df["duration_ns"]) == [50, 60]
    assert df["stream"].isna().all() and "stream" in df.attrs["missing"]
    empty = tmp_path / "empty.sqlite"
    sqlite3.connect(empty).execute("CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT)").connection.close()
    df = kernel_rows(empty)
    assert df.empty and tuple(df.columns) == KERNEL_COLUMNS and "no CUDA kernel data" in df.attrs["note"]
    with pytest.raises(NsightwrapError):
        kernel_rows(tmp_path / "missing.sqlite")


# ----------------------------------------------------------------- CLI


def test_cli_profile_and_find(tmp_path, nsys_env, capsys):
    """`python -m nsightwrap nsys ...` (it replaced `python -m nsightwrap.nsys`)."""
    assert main(["nsys", "profile", "-o", str(tmp_path / "cli"), "--", *PY_OK]) == 0
    out = capsys.readouterr().out
    assert '"status": "ok"' in out and (tmp_path / "cli.nsys-rep").exists()
    assert main(["nsys", "find"]) == 0 and capsys.readouterr().out.strip() == str(FAKE_NSYS)
    assert main(["nsys", "stats", str(tmp_path / "missing.nsys-rep")]) == 2
    assert "no such report" in capsys.readouterr().err


def test_cli_stats_and_kernels(report, tmp_path, capsys):
    assert main(["nsys", "stats", str(report), "--report", "cuda_gpu_kern_sum", "--save-dir", str(tmp_path / "s")]) == 0
    out = capsys.readouterr().out
    assert "== cuda_gpu_kern_sum: 3 rows" in out
    assert "Processing [" in (tmp_path / "s" / "cuda_gpu_kern_sum.txt").read_text()
    saved = parse_stats_csv((tmp_path / "s" / "cuda_gpu_kern_sum.csv").read_text(), "cuda_gpu_kern_sum")
    assert saved["Instances"].sum() == 4
    assert main(["nsys", "export", str(report)]) == 0
    db = capsys.readouterr().out.strip()
    assert main(["nsys", "kernels", db, "--csv", str(tmp_path / "k.csv")]) == 0
    assert len(pd.read_csv(tmp_path / "k.csv")) == 4


# --- real output from the GPU machine (tests/data/nsys/real/README.md) --------------------------

REAL = DATA / "real"


def test_real_sqlite_export_gives_kernel_rows():
    rows = kernel_rows(REAL / "torch.sqlite")
    assert list(rows["short_name"]) == ["distribution_elementwise_grid_stride_kernel"] * 2 + [
        "Kernel2", "softmax_warp_forward"]
    assert (rows["duration_ns"] == rows["end"] - rows["start"]).all() and (rows["duration_ns"] > 0).all()
    assert list(rows[["gridX", "blockX"]].iloc[2]) == [128, 256]
    assert rows["name"].str.startswith("void ").all()
    on_gpu = pd.read_csv(REAL / "torch.kernels.csv")  # kernel_rows of the same file, on the GPU machine
    assert list(on_gpu["duration_ns"]) == list(rows["duration_ns"])
    assert list(on_gpu["short_name"]) == list(rows["short_name"])


def test_real_stats_outputs_parse():
    kern = parse_stats_table((REAL / "stats_cuda_gpu_kern_sum.txt").read_text(), "cuda_gpu_kern_sum").to_dataframe()
    assert kern["Instances"].sum() == 4 and len(kern) == 3
    assert kern["Name"].str.contains("Kernel2").iloc[0] and kern["Total Time (ns)"].iloc[0] == 343302
    assert kern["Name"].str.contains("softmax_warp_forward").any()
    api = parse_stats_table((REAL / "stats_cuda_api_sum.txt").read_text(), "cuda_api_sum").to_dataframe()
    assert api.set_index("Name").loc["cudaLaunchKernel", "Num Calls"] == 3
    for name in ("nvtx_sum", "cuda_gpu_mem_time_sum"):  # the program has no NVTX ranges and no copies
        table = parse_stats_table((REAL / f"stats_{name}.txt").read_text(), name)
        assert table.rows == () and "does not contain" in table.note


def test_real_existing_output_message_names_where_nsys_wrote_instead(tmp_path):
    # nsys 2025.3.1 on the GPU machine, `-o` naming an existing file: it refuses, profiles anyway into
    # a name of its own, and exits 0 (devtools/gpu-runs/2026-11-26-h100-nsys.log).
    elsewhere = tmp_path / "nsys-report-0a72.nsys-rep"
    elsewhere.write_bytes(b"x")
    log = (f"Failed to create '{tmp_path}/exists_probe.nsys-rep': File exists.\n"
           "Use `--force-overwrite true` to overwrite existing files.\nCollecting data...\n"
           f"Generating '/tmp/nsys-report-7141.qdstrm'\nGenerated:\n\t{elsewhere}\n")
    status, reason, _ = classify_nsys(log, 0, tmp_path / "exists_probe.nsys-rep")
    assert status == "error" and "would not overwrite" in reason and str(elsewhere) in reason


def test_api_calls_of_a_real_export_say_whether_the_program_marks_ranges(tmp_path):
    from nsightwrap.calibrate.measure import marks_ranges
    from nsightwrap.reports.nsys.sqlite import api_calls

    calls = api_calls(REAL / "torch.sqlite")  # nsys 2025 on the GPU machine: runtime and driver calls
    assert {"cudaLaunchKernel_v7000", "cuLaunchKernel", "cudaMalloc_v3020"} <= calls
    assert marks_ranges(calls) is False
    assert marks_ranges(calls | {"cudaProfilerStart_v4000"}) is True
    assert marks_ranges(frozenset({"cuProfilerStart"})) is True and marks_ranges(None) is None
    import sqlite3

    bare = tmp_path / "bare.sqlite"
    sqlite3.connect(bare).execute("CREATE TABLE StringIds (id INTEGER, value TEXT)").connection.commit()
    assert api_calls(bare) is None  # CUDA not traced: not known
