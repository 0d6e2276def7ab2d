"""The hang store (SQLite) and its debug log; the `hangs` command is in test_hangs_cli.py,
where the store lives and who may read it in test_store_files.py."""

from __future__ import annotations

import csv
import io
import json
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time

import pytest
import yaml
from helpers import HERE, ROOT, failing_smi
from hypothesis import example, given, settings
from hypothesis import strategies as st

from nsightwrap.errors import NsightwrapError, StoreError
from nsightwrap.ncu.attempt import Attempt, KernelResult
from nsightwrap.ncu.names import normalize_kernel
from nsightwrap.ncu.options import ProfileOptions
from nsightwrap.ncu.progress import Stall
from nsightwrap.store import (
    COLUMNS,
    ENV_STORE,
    SCHEMA_VERSION,
    Environment,
    HangStore,
    ProfileKey,
    Record,
)
from nsightwrap.store.debuglog import debug_log, key_change

H200 = Environment("gpu-box", "NVIDIA H200", "580.159.04", "2025.3.1")
FULL, BASIC = ProfileKey("full"), ProfileKey("basic")
CMD_FULL = ("ncu", "--set", "full", "--kernel-name", "wait_for_host", "./app")
CMD_BASIC = ("ncu", "--set", "basic", "--kernel-name", "wait_for_host", "./app")


def make_attempt(status="ok", kernels=(), stall=None, foreign=(), cookie="c1", reason="why", notes=()):
    return Attempt(status=status, reason=reason, command=("ncu", "--set", "full", "./app"), returncode=0,
                   kernels=tuple(kernels), stall=stall, report=None, report_complete=False, elapsed_s=9.5,
                   stop=None, warnings=(), errors=(), notes=tuple(notes), log="",
                   started_at="2026-11-26T10:00:00+00:00", cookie=cookie, gpu_foreign_before=tuple(foreign))


def make_stall(kernel="wait_for_host", kernel_id=3, silent_s=12.5):
    return Stall(kernel, kernel_id, "0%..", silent_s, 10.0, 12.5, True, True)


# --- kernel names and keys ---------------------------------------------------

@pytest.mark.parametrize("name, pattern", [
    ("vec_add", "vec_add"),
    ("nvjet_sm90_tst_256x128_64x4_1...", "nvjet_sm#_tst_#x#_#x#_#"),
    ("nvjet_sm90_tst_128x128_64x4_2...", "nvjet_sm#_tst_#x#_#x#_#"),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, "
     "at::detail::Array<char*, 1>>(int, T2, T3)", "vectorized_elementwise_kernel"),
    ("vectorized_elementwise_kernel", "vectorized_elementwise_kernel"),
    ("void (anonymous namespace)::softmax<128>(float*)", "softmax"),
    ("block_reduce<float, 12", "block_reduce"),           # a template list cut by truncation
    ("  cunn_SoftMaxForwardReg  ", "cunn_SoftMaxForwardReg"),
    ("kernel_v2(float*)...", "kernel_v#"),
])
def test_normalize_kernel(name, pattern):
    assert normalize_kernel(name) == pattern


def test_normalize_kernel_keeps_different_kernels_apart():
    assert normalize_kernel("vec_add") != normalize_kernel("block_reduce")
    assert normalize_kernel("vec_add") != normalize_kernel("vec_add2")   # vec_add# is not vec_add


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="ab_19 <>():.,*{}", max_size=30))
@example("...<")  # found by hypothesis: "..." was kept, then stripped to nothing
@example("1..>.")  # found by hypothesis: dropping ">" left a trailing "..."
def test_normalize_kernel_is_idempotent(name):
    once = normalize_kernel(name)
    assert normalize_kernel(once) == once


def test_profile_key_canonical_and_describe():
    a = ProfileKey(None, ("SpeedOfLight", "MemoryWorkloadAnalysis"), (), "kernel")
    b = ProfileKey(None, ["MemoryWorkloadAnalysis", "SpeedOfLight", "SpeedOfLight"])
    assert a == b and a.canonical() == b.canonical()
    assert ProfileKey.parse(a.canonical()) == a
    assert FULL.describe() == "set full"
    assert a.describe() == "sections MemoryWorkloadAnalysis+SpeedOfLight, kernel replay"
    assert (ProfileKey(metrics=("gpu__time_duration.sum",), replay_mode="application").describe()
            == "metrics gpu__time_duration.sum, application replay")
    assert ProfileKey("full", replay_mode="range").describe() == "set full, range replay"
    assert FULL.canonical() != ProfileKey("full", replay_mode="range").canonical()
    assert ProfileKey.from_options(ProfileOptions(set="full", replay_mode="application")) == \
        ProfileKey("full", replay_mode="application")
    with pytest.raises(ValueError):
        ProfileKey(replay_mode="sideways")
    with pytest.raises(TypeError):
        ProfileKey(sections="SpeedOfLight")
    assert key_change(FULL, BASIC) == "replacing set full with set basic"
    assert key_change(FULL, ProfileKey(sections=("SpeedOfLight",))) == \
        "dropping set full and profiling only sections SpeedOfLight"


def test_environment_detect(tmp_path):
    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho 'NVIDIA H200, 580.159.04'\necho 'NVIDIA H100 80GB HBM3, 580.159.04'\n")
    smi.chmod(0o755)
    env = Environment.detect("2025.3.1", nvidia_smi=str(smi))
    assert (env.gpu, env.driver, env.ncu_version) == ("NVIDIA H200", "580.159.04", "2025.3.1")
    assert env.host
    missing = Environment.detect(nvidia_smi=str(tmp_path / "no-such-smi"))
    assert (missing.gpu, missing.driver, missing.ncu_version) == (None, None, None)
    failing = tmp_path / "failing"
    failing.mkdir()
    assert Environment.detect(nvidia_smi=str(failing_smi(failing))).gpu is None


# --- opening -----------------------------------------------------------------

def test_corrupt_file_gives_store_error_naming_it(tmp_path):
    bad = tmp_path / "hangs.db"
    bad.write_bytes(b"this is not sqlite at all\n" * 200)
    with pytest.raises(StoreError) as e:
        HangStore(bad)
    assert str(bad) in str(e.value) and ENV_STORE in str(e.value)
    assert "not a nsightwrap hang store" in str(e.value) and "delete" not in str(e.value) and e.value.path == bad
    assert isinstance(e.value, NsightwrapError)


def test_unwritable_folder_gives_store_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(StoreError, match=ENV_STORE):
        HangStore(blocker / "sub" / "hangs.db")


def test_newer_schema_is_refused(tmp_path):
    path = tmp_path / "h.db"
    HangStore(path).close()
    with sqlite3.connect(path) as c:
        c.execute("UPDATE schema_version SET version = 99")
    c.close()
    with pytest.raises(StoreError, match="newer"):
        HangStore(path)


# --- records and queries -----------------------------------------------------

def test_record_round_trip(store):
    r = store.record("wait_for_host", FULL, "hang", env=H200, stall_s=12.5, elapsed_s=15.0, command=CMD_FULL,
                     rung="1", ladder="default", note="stalled at 0%..")
    assert isinstance(r, Record) and r.id == 1
    assert r.kernel_pattern == "wait_for_host" and r.key == FULL.canonical() and r.profile_key == FULL
    assert r.time.endswith("+00:00")
    [back] = store.records()
    assert back == r
    assert back.command == CMD_FULL and back.trusted and back.passes_reached is None
    assert (back.gpu, back.driver, back.ncu_version, back.host) == ("NVIDIA H200", "580.159.04", "2025.3.1", "gpu-box")
    ok = store.record("vec_add", ProfileKey(None, ("B", "A"), ("m1",), "application"), "ok", env=H200, passes=38)
    assert store.records(limit=1) == [ok]                   # newest first
    assert store.records(kernel="vec_add")[0].sections == ("A", "B")
    assert len(store) == 2
    with pytest.raises(ValueError):
        store.record("k", FULL, "exploded", env=H200)
    with pytest.raises(ValueError):
        store.record("", FULL, "ok", env=H200)
    with pytest.raises(TypeError):
        store.record("k", FULL, "ok", env=H200, command="ncu --set full ./app")


def test_known_hangs_match_pattern_gpu_and_ncu_version(store):
    store.record("nvjet_sm90_tst_256x128_64x4_1...", FULL, "hang", env=H200, stall_s=11)
    store.record("nvjet_sm90_tst_256x128_64x4_1...", BASIC, "ok", env=H200, passes=10)
    store.record("nvjet_sm90_tst_256x128_64x4_1...", FULL, "hang",
                 env=Environment("h", "NVIDIA H100", "580.159.04", "2025.3.1"))
    store.record("nvjet_sm90_tst_256x128_64x4_1...", FULL, "hang",
                 env=Environment("h", "NVIDIA H200", "580.159.04", "2024.1.0"))
    new_driver = Environment("other", "NVIDIA H200", "590.1", "2025.3.1")
    store.record("nvjet_sm90_tst_64x64_64x4_3...", ProfileKey("detailed"), "timeout", env=new_driver)
    other_host = Environment("other", "NVIDIA H200", "580.159.04", "2025.3.1")
    store.record("nvjet_sm90_tst_64x64_64x4_3...", ProfileKey("detailed"), "timeout", env=other_host,
                 basis="from calibration (nsys)")
    store.record("nvjet_sm90_tst_64x64_64x4_9...", ProfileKey("detailed"), "timeout", env=other_host)
    store.record("vec_add", FULL, "hang", env=H200)

    found = store.known_hangs("nvjet_sm90_tst_128x128_64x4_2...", H200)
    # Issue 22: the driver must match too (a newer driver's record is stale here), and another host's
    # hang counts only when calibrated (an uncalibrated one may be a slow kernel there).
    assert [(r.kernel, r.outcome, r.host) for r in found] == [
        ("nvjet_sm90_tst_64x64_64x4_3...", "timeout", "other"),
        ("nvjet_sm90_tst_256x128_64x4_1...", "hang", "gpu-box")]
    assert store.known_hangs("block_reduce", H200) == []
    a100 = Environment(gpu="NVIDIA A100", ncu_version="2025.3.1")
    assert store.known_hangs("nvjet_sm90_tst_1x1_1x1_1...", a100) == []

    assert store.hangs_for("nvjet_sm90_tst_128x128_64x4_2...", FULL, H200)
    assert store.hangs_for("nvjet_sm90_tst_256x128_64x4_1...", ProfileOptions(set="full"), H200)
    assert not store.hangs_for("nvjet_sm90_tst_256x128_64x4_1...", BASIC, H200)
    assert not store.hangs_for("nvjet_sm90_tst_256x128_64x4_1...", ProfileKey("full", replay_mode="range"), H200)
    assert store.records(pattern="nvjet_sm90_tst_1x2_3x4_5...")[1].kernel == "nvjet_sm90_tst_64x64_64x4_3..."


def test_untrusted_records_never_count(store):
    store.record("wait_for_host", FULL, "hang", env=H200, trusted=False)
    store.record("wait_for_host", BASIC, "timeout", env=H200, trusted=False)
    assert store.known_hangs("wait_for_host", H200) == []
    assert not store.hangs_for("wait_for_host", FULL, H200)
    assert [r.trusted for r in store.records()] == [False, False]
    assert store.kernels()[0][:3] == ("wait_for_host", 2, 0)


def test_a_later_ok_of_the_same_kernel_lifts_a_hang(store):
    store.record("vec_add", FULL, "hang", env=H200)
    assert store.hangs_for("vec_add", FULL, H200)
    store.record("vec_add_2", FULL, "ok", env=H200, passes=38)         # another kernel of the pattern
    assert store.hangs_for("vec_add", FULL, H200)
    assert not store.hangs_for("vec_add_2", FULL, H200)                 # known to work itself
    store.record("vec_add", FULL, "ok", env=H200, passes=38, trusted=False)
    assert store.hangs_for("vec_add", FULL, H200)                       # an untrusted ok proves nothing
    store.record("vec_add", FULL, "ok", env=H200, passes=38)
    assert not store.hangs_for("vec_add", FULL, H200)


def test_what_walks_and_sweeps_ask_matches_every_field_as_they_did(store):
    """hanging_kernels and newest_verdict answer in SQL what the walk and the sweep filtered in Python:
    exact names, trusted only, this exact key, GPU, ncu version and job size, newest first."""
    two_ranks = Environment("gpu-box", "NVIDIA H200", "580.159.04", "2025.3.1", processes=2)
    program = ("./app", "1024")
    ncu = ("ncu", "--set", "full", *program)
    store.record("k1", FULL, "hang", env=H200, command=ncu)
    store.record("k2", FULL, "timeout", env=H200, command=ncu)
    store.record("k1", FULL, "hang", env=H200, command=ncu)                    # k1 again: named once
    store.record("k3", FULL, "hang", env=H200, command=ncu, trusted=False)
    store.record("k4", BASIC, "hang", env=H200, command=ncu)
    store.record("k5", FULL, "hang", env=Environment("h", "NVIDIA H100", "580.159.04", "2025.3.1"), command=ncu)
    store.record("k6", FULL, "hang", env=Environment("h", "NVIDIA H200", "580.159.04", "2024.1.0"), command=ncu)
    store.record("k7", FULL, "hang", env=two_ranks, command=ncu)
    store.record("k8", FULL, "hang", env=H200, command=("ncu", "--set", "full", "./other", "1024"))
    store.record("*", FULL, "hang", env=H200, command=ncu)
    store.record("k9", FULL, "ok", env=H200, command=ncu)
    store.record("k10", FULL, "hang", env=Environment("other-host", "NVIDIA H200", "580.159.04", "2025.3.1"),
                 command=ncu, basis="from calibration (nsys)")                 # the host may differ (calibrated)
    store.record("k11", FULL, "hang", env=Environment("other-host", "NVIDIA H200", "590.1", "2025.3.1"),
                 command=ncu, basis="from calibration (nsys)")                 # the driver may not (issue 22)
    store.record("k12", FULL, "hang", env=Environment("other-host", "NVIDIA H200", "580.159.04", "2025.3.1"),
                 command=ncu)                                 # nor an uncalibrated hang of another host

    def walk_did(key, env, command):  # the walk's filter before the store had the method
        names = []
        for r in store.records():
            if (r.hung and r.trusted and r.key == key.canonical() and r.gpu == env.gpu
                    and r.ncu_version == env.ncu_version and r.processes == env.processes and r.driver == env.driver
                    and (r.host == env.host or r.calibrated)
                    and list(r.command[-len(command):]) == list(command) and r.kernel not in names
                    and r.kernel != "*"):
                names.append(r.kernel)
        return names

    def sweep_did(kernel, key, env):  # the sweep's
        for r in store.records(kernel=kernel):
            if (r.trusted and r.key == key.canonical() and r.gpu == env.gpu and r.ncu_version == env.ncu_version
                    and r.processes == env.processes and r.driver == env.driver
                    and (r.host == env.host or r.calibrated or not r.hung)):
                return r
        return None

    assert store.hanging_kernels(FULL, H200, program) == ["k10", "k1", "k2"]
    for key in (FULL, BASIC, ProfileKey("full", ranks="one")):
        for env in (H200, two_ranks, Environment()):
            for command in (program, ("1024",), ("./other", "1024"), ()):
                assert store.hanging_kernels(key, env, command) == walk_did(key, env, command)
            for kernel in ("k1", "k3", "k7", "k9", "*", "k", "K1"):
                assert store.newest_verdict(kernel, key, env) == sweep_did(kernel, key, env)
    assert store.newest_verdict("k9", ProfileOptions(set="full"), H200).outcome == "ok"


def test_record_attempt_hang_ok_and_other(store):
    hang = make_attempt("hang", kernels=[KernelResult("vec_add", 0, 38), KernelResult("vec_add", 1, 38),
                                         KernelResult("block_reduce", 2, 38)], stall=make_stall(), cookie="run-a")
    rows = store.record_attempt(hang, FULL, H200, rung="2", ladder="default")
    got = sorted((r.kernel, r.outcome, r.passes_reached, r.stall_s) for r in rows)
    assert got == [("block_reduce", "ok", 38, None), ("vec_add", "ok", 38, None),
                   ("wait_for_host", "hang", None, 12.5)]
    assert all(r.run_id == "run-a" and r.rung == "2" and r.ladder == "default" and r.trusted for r in rows)
    assert all(r.elapsed_s == 9.5 and r.time == "2026-11-26T10:00:00+00:00" for r in rows)
    assert "2 launches" in next(r for r in rows if r.kernel == "vec_add").note
    assert store.hangs_for("wait_for_host", FULL, H200) and not store.hangs_for("vec_add", FULL, H200)

    ok = make_attempt("ok", kernels=[KernelResult("vec_add", 0, 10)], cookie="run-b")
    assert [(r.kernel, r.outcome, r.passes_reached) for r in store.record_attempt(ok, BASIC, H200)] == [
        ("vec_add", "ok", 10)]
    err = make_attempt("error", reason="==ERROR== Option '--section X' did not match any section.", cookie="c")
    [e] = store.record_attempt(err, ProfileKey(sections=("X",)), H200)
    assert (e.kernel, e.outcome) == ("*", "error") and "did not match" in e.note
    [n] = store.record_attempt(make_attempt("no-kernels", cookie="d"), FULL, H200, kernel="vec_add")
    assert (n.kernel, n.outcome) == ("vec_add", "no-kernels")
    foreign = make_attempt("hang", stall=make_stall(kernel="spin"), foreign=("1234 python",), cookie="e")
    [f] = store.record_attempt(foreign, FULL, H200)
    assert (f.kernel, f.outcome, f.trusted) == ("spin", "hang", False)
    assert store.known_hangs("spin", H200) == []


def test_same_kernel_finished_then_hung_in_one_run_stays_hung(store):
    a = make_attempt("hang", kernels=[KernelResult("spin", 0, 38)], stall=make_stall("spin", 1))
    store.record_attempt(a, FULL, H200)
    assert store.hangs_for("spin", FULL, H200)
    log = debug_log(store, "spin")
    assert log.count("## Attempt") == 1 and "(another launch: ok, 38 passes)" in log


def test_kernels_and_forget(store):
    for _ in range(3):
        store.record("vec_add", FULL, "ok", env=H200, passes=38)
    hang = store.record("wait_for_host", FULL, "hang", env=H200)
    store.record("wait_for_host", BASIC, "ok", env=H200, passes=10)
    summary = store.kernels()
    assert [(k.kernel, k.n_records, k.n_hangs) for k in summary] == [("wait_for_host", 2, 1), ("vec_add", 3, 0)]
    kernel, n, hangs, last = summary[0]
    assert last.endswith("+00:00")
    assert store.forget(record_id=hang.id) == 1
    assert store.forget(record_id=hang.id) == 0
    assert store.forget(kernel="vec_add") == 3
    assert [r.kernel for r in store.records()] == ["wait_for_host"]
    assert store.forget(all=True) == 1 and store.records() == []
    with pytest.raises(ValueError):
        store.forget()
    with pytest.raises(ValueError):
        store.forget(kernel="a", all=True)


def test_export_csv_and_yaml_parse_back(store, tmp_path):
    store.record("wait_for_host", FULL, "hang", env=H200, stall_s=12.5, command=CMD_FULL, note="a, \"quoted\" note")
    store.record("vec_add", ProfileKey(None, ("A", "B"), ("m",)), "ok", env=Environment(), passes=10, trusted=False)
    out = tmp_path / "x.csv"
    assert store.export_csv(out) == 2
    rows = list(csv.DictReader(out.open(newline="")))
    assert tuple(rows[0]) == COLUMNS
    assert rows[0]["kernel"] == "wait_for_host" and rows[0]["outcome"] == "hang"          # oldest first
    assert json.loads(rows[0]["command"]) == list(CMD_FULL) and rows[0]["note"] == 'a, "quoted" note'
    assert float(rows[0]["stall_s"]) == 12.5 and rows[0]["passes_reached"] == ""
    assert json.loads(rows[1]["sections"]) == ["A", "B"] and rows[1]["trusted"] == "false"
    buf = io.StringIO()
    assert store.export_csv(buf, kernel="vec_add") == 1
    assert len(list(csv.DictReader(io.StringIO(buf.getvalue())))) == 1

    ypath = tmp_path / "x.yaml"
    assert store.export_yaml(ypath) == 2
    doc = yaml.safe_load(ypath.read_text())
    assert doc["schema_version"] == SCHEMA_VERSION
    first, second = doc["records"]
    assert Record(**{**first, "sections": tuple(first["sections"]), "metrics": tuple(first["metrics"]),
                     "command": tuple(first["command"])}) == store.records(kernel="wait_for_host")[0]
    assert second["trusted"] is False and second["gpu"] is None and second["metrics"] == ["m"]
    with pytest.raises(StoreError):
        store.export_yaml(tmp_path / "no" / "such" / "dir.yaml")


# --- several processes -------------------------------------------------------

def test_concurrent_writers_lose_nothing(tmp_path):
    path = str(tmp_path / "shared.db")
    # Six writers at once, each a process with its own connection: forked by one interpreter that imported the
    # store once for them all (tests/store_writer.py), not six interpreters importing it each.
    code = "import json, sys, store_writer; print(json.dumps(store_writer.fork_plain_writers(sys.argv[1], 6, 50)))"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(HERE), str(ROOT), os.environ.get("PYTHONPATH", "")]))
    done = subprocess.run([sys.executable, "-c", code, path], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0 and json.loads(done.stdout) == [0] * 6, done.stderr  # no "database is locked"
    with HangStore(path) as s:
        recs = s.records()
        assert len(recs) == 300
        assert sorted(r.note for r in recs) == sorted(f"{w}:{i}" for w in range(6) for i in range(50))
        assert all(r.passes_reached == int(r.note.split(":")[1]) for r in recs)
        assert s.conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"


KILLED_WRITER = textwrap.dedent("""
    import sys
    from nsightwrap.store import Environment, HangStore, ProfileKey
    env = Environment("h", "NVIDIA H200", "580", "2025.3.1")
    with HangStore(sys.argv[1]) as s:
        i = 0
        while True:
            s.record("spin", ProfileKey("full", ("S%d" % i,)), "hang", env=env, passes=i, stall_s=i * 1.5,
                     command=["ncu", "--set", "full", str(i)], note="row %d " % i + "x" * (i % 300))
            i += 1
""")


def test_writer_killed_mid_write_leaves_a_sound_store(tmp_path):
    path = tmp_path / "killed.db"
    HangStore(path).close()
    child = subprocess.Popen([sys.executable, "-c", KILLED_WRITER, str(path)])
    try:
        with HangStore(path) as watch:
            deadline = time.monotonic() + 30
            while len(watch) < 200 and time.monotonic() < deadline and child.poll() is None:
                time.sleep(0.01)
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(10)
    assert child.returncode == -signal.SIGKILL
    with HangStore(path) as s:
        assert s.conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        recs = list(reversed(s.records()))
        assert len(recs) >= 200
        for n, r in enumerate(recs):                      # every committed row whole, none missing in between
            assert r.id == n + 1
            assert (r.passes_reached, r.stall_s, r.command[-1]) == (n, n * 1.5, str(n))
            assert r.note == f"row {n} " + "x" * (n % 300) and r.sections == (f"S{n}",)
        s.record("spin", BASIC, "ok", env=H200)           # and it takes new records
        assert len(s) == len(recs) + 1


# --- debug log ----------------------------------------------------------------

def test_debug_log_full_hangs_basic_works(store):
    store.record("wait_for_host", FULL, "hang", env=H200, stall_s=12.5, elapsed_s=15.2, command=CMD_FULL,
                 note="stalled at '0%..'")
    store.record("wait_for_host", FULL, "hang", env=H200, stall_s=3.0, elapsed_s=4.0, command=CMD_FULL,
                 trusted=False)
    store.record("wait_for_host", BASIC, "ok", env=H200, passes=10, elapsed_s=5.25, command=CMD_BASIC)
    log = debug_log(store, "wait_for_host", H200)
    assert log.startswith("# Debug log: wait_for_host on NVIDIA H200 (driver 580.159.04, ncu 2025.3.1)\n")
    assert "## Attempt 1: set full (hang)\n" in log
    assert "## Attempt 2: set full (hang) (untrusted: foreign GPU processes were present)" in log
    assert "## Attempt 3: set basic (ok)\n" in log
    assert "**Hypothesis:** set full profiles wait_for_host without hanging" in log
    assert "**Hypothesis:** replacing set full with set basic avoids the hang" in log
    assert "**What we did:** `ncu --set full --kernel-name wait_for_host ./app`" in log
    assert "**Result:** hang, no progress for 12.5 s (not calibrated), 15.2 s; stalled at '0%..'" in log
    assert "**Result:** ok, 10 passes, 5.2 s" in log
    assert "**Conclusion:** set full hangs on this kernel" in log
    assert "**Conclusion:** works: set basic profiles this kernel (10 passes)" in log
    assert "## Key differences between working and hanging settings" in log
    assert "| | working (set basic) | hanging (set full) |" in log
    assert "| set | **basic** | **full** |" in log
    assert "| passes | 10 | stalled after 12.5 s |" in log
    assert "| replay mode | kernel | kernel |" in log
    assert "| elapsed | 5.2 s | 15.2 s |" in log
    next_steps = log.split("## What to try next")[1]
    assert "python -m nsightwrap sweep-sections --kernel wait_for_host --set full" in next_steps
    assert "--replay-mode range" in next_steps
    assert "foreign processes held the GPU" in next_steps
    assert log.index("## Attempt 3") < log.index("## Key differences") < log.index("## What to try next")


def test_debug_log_when_everything_hangs_and_when_empty(store):
    store.record("spin", FULL, "hang", env=H200, stall_s=10)
    store.record("spin", BASIC, "hang", env=H200, stall_s=10)
    log = debug_log(store, "spin")
    assert "No trusted working settings recorded yet" in log
    assert "| | working (none yet) | hanging (set basic) |" in log
    steps = log.split("## What to try next")[1]
    assert "--metrics gpu__time_duration.sum" in steps and "--replay-mode range" in steps
    assert "waits for the host" in steps and "--set basic`" not in steps      # basic was tried already
    empty = debug_log(store, "never_seen")
    assert "No records of this kernel" in empty and "## What to try next" in empty


def test_range_replay_hang_is_recorded_for_the_kernel_it_was_tried_for(store):
    # ncu calls the stalled thing "range" in range replay (GPU machine, 2026-11-26); the walk
    # tries that rung for one kernel, and the next walk must skip it for that kernel.
    key = ProfileKey(sections=("SpeedOfLight",), replay_mode="range")
    a = make_attempt("hang", stall=make_stall("range", 0), cookie="r")
    [row] = store.record_attempt(a, key, H200, kernel="wait_for_host")
    assert (row.kernel, row.outcome) == ("wait_for_host", "hang") and "'range'" in row.note
    assert store.hangs_for("wait_for_host", key, H200)
    [plain] = store.record_attempt(make_attempt("hang", stall=make_stall("range", 0), cookie="s"), key, H200)
    assert plain.kernel == "range"


def test_a_rung_that_profiled_nothing_of_a_kernel_in_this_program_is_known(tmp_path):
    from nsightwrap.store.hangstore import HangStore
    from nsightwrap.store.keys import Environment, ProfileKey

    env = Environment("h", "NVIDIA H100", "580", "2025.3.1.0")
    key = ProfileKey(replay_mode="range")
    with HangStore(tmp_path / "s.db") as store:
        store.record("k", key, "no-kernels", env=env, command=["ncu", "--replay-mode", "range", "./app", "mixed"])
        assert store.profiled_nothing("k", key, env, ["./app", "mixed"])
        assert not store.profiled_nothing("k", key, env, ["./app", "third"])  # another program may mark ranges
        assert not store.profiled_nothing("other", key, env, ["./app", "mixed"])
        store.record("k", key, "ok", env=env, command=["ncu", "--replay-mode", "range", "./app", "mixed"])
        assert not store.profiled_nothing("k", key, env, ["./app", "mixed"])  # the newest outcome decides
