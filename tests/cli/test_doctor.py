"""doctor as a preflight: each check a line with a remedy, with the fake ncu, nvidia-smi and nsys."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from conftest import app
from helpers import cli_main

from nsightwrap.cli.preflight import (
    FAIL,
    OK,
    SKIP,
    WARN,
    CounterProbe,
    Facts,
    check_gpu_processes,
    check_ncu_driver,
    check_nsys,
    check_store,
    driver_floor,
)
from nsightwrap.ncu.context import RunConfig, RunContext
from nsightwrap.store.hangstore import HangStore

HERE = Path(__file__).parents[1]
FAKE_SMI = HERE / "fake_nvidia_smi"
FAKE_NSYS = HERE / "fake_nsys" / "nsys"
ROOT = HERE.parent


@pytest.fixture
def gpu_box(fake_env, monkeypatch, tmp_path, probe_cache):
    """The fake ncu and a fake GPU (nvidia-smi), this test's processes only, a private store and cache
    (the counter probe caches its success beside the session's ncu probe). The private cache starts with the
    session's answers of the ncu probe (ncu-*.json; made here if no test made them yet): probing the fake ncu
    again in each test costs three starts of it, and its answer never changes."""
    RunContext.create(RunConfig(check_gpu=False))  # the session's probe cache (fake_env's), probed once
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    for answer in probe_cache.glob("ncu-*.json"):
        shutil.copy2(answer, cache / answer.name)
    monkeypatch.setenv("PATH", f"{FAKE_SMI}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_SMI_SCOPE", uuid.uuid4().hex)
    monkeypatch.setenv("NSIGHTWRAP_STORE", str(tmp_path / "store" / "hangs.db"))
    monkeypatch.setenv("NSIGHTWRAP_CACHE_DIR", str(cache))
    return tmp_path


def facts() -> Facts:
    return Facts.gather(lambda: RunContext.create(RunConfig()))


def doctor_cli(*args, env=None):
    env = dict(os.environ if env is None else env, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", "nsightwrap", "doctor", *args], capture_output=True, text=True,
                          env=env, timeout=120)


def test_doctor_on_a_working_box_says_ok_line_by_line(gpu_box, capsys):
    """The text through a real process; the JSON through main(argv) in this process."""
    done = doctor_cli()
    lines = {line[6:17].strip(): line[:5].strip() for line in done.stdout.splitlines() if line[:1] in "oFws"}
    assert lines["ncu"] == OK and lines["driver"] == OK and lines["ncu/driver"] == OK and lines["store"] == OK
    assert "driver 580.159.04" in done.stdout and "CUDA 13.0" in done.stdout
    # The default probe program needs libcuda.so.1, which is not here: inconclusive, never a FAIL.
    assert lines["counters"] in (OK, WARN)
    assert done.returncode == 0, done.stdout + done.stderr
    code, out, _ = cli_main(["doctor", "--json"], capsys)
    doc = json.loads(out)
    assert doc["status"] == "ok" and doc["exit_code"] == 0 and code == 0
    assert [c["name"] for c in doc["checks"]] == ["ncu", "driver", "ncu/driver", "counters", "gpu procs", "nsys",
                                                  "timing", "store"]
    assert all(set(c) == {"name", "status", "detail", "remedy"} for c in doc["checks"])


def test_counter_permission_refused_is_a_fail_with_the_fix(gpu_box, monkeypatch, capsys):
    monkeypatch.setenv("FAKE_NCU_CTRPERM", "1")
    check = CounterProbe(program=app("vec_add"))(facts())
    assert check.status == FAIL and "ERR_NVGPUCTRPERM" in check.detail
    assert "NVreg_RestrictProfilingToAdminUsers=0" in check.remedy and "root" in check.remedy
    code, out, err = cli_main(["doctor", "--json"], capsys)
    doc = json.loads(out)
    assert code == 2 and doc["status"] == "error"
    assert {c["name"]: c["status"] for c in doc["checks"]}["counters"] == FAIL
    assert "Traceback" not in err


def test_counter_permission_granted_is_cached(gpu_box):
    probe = CounterProbe(program=app("vec_add"))
    first = probe(facts())
    assert first.status == OK and "one kernel profiled" in first.detail
    again = probe(facts())
    assert again.status == OK and "checked before" in again.detail
    assert "one kernel profiled" in CounterProbe(program=app("vec_add"), use_cache=False)(facts()).detail


def test_a_refusal_is_never_cached(gpu_box, monkeypatch):
    probe = CounterProbe(program=app("vec_add"))
    monkeypatch.setenv("FAKE_NCU_CTRPERM", "1")
    assert probe(facts()).status == FAIL
    monkeypatch.delenv("FAKE_NCU_CTRPERM")  # the admin fixed it: seen at once
    assert probe(facts()).status == OK


def test_an_old_driver_for_this_ncu_is_a_warning_with_the_floor(gpu_box, monkeypatch):
    monkeypatch.setenv("FAKE_SMI_DRIVER", "570.86.15")
    check = check_ncu_driver(facts())
    assert check.status == WARN and "580.65.06" in check.detail and "CUDA 13.0" in check.detail
    assert "update the driver" in check.remedy
    assert driver_floor("2025.3.1.0") == ("13.0", "580.65.06") and driver_floor("2099.1.0") is None


def test_foreign_gpu_processes_are_a_warning(gpu_box):
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                             env=dict(os.environ, FAKE_GPU_USER="1"))
    try:
        check = check_gpu_processes(facts())
    finally:
        other.kill()
        other.wait()
    assert check.status == WARN and str(other.pid) in check.detail and "stop them" in check.remedy
    assert check_gpu_processes(facts()).status == OK


def test_store_checks(gpu_box, monkeypatch, tmp_path):
    store = tmp_path / "shared.db"
    store.write_text("")
    store.chmod(0o644)
    monkeypatch.setenv("NSIGHTWRAP_STORE", str(store))
    check = check_store(facts())
    assert check.status == WARN and "readable by others" in check.detail and "chmod 600" in check.remedy
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv("NSIGHTWRAP_STORE", str(blocker / "sub" / "hangs.db"))
    check = check_store(facts())
    assert check.status == FAIL and "NSIGHTWRAP_STORE" in check.remedy


def test_nsys_checks(gpu_box, monkeypatch, tmp_path):
    monkeypatch.setenv("NSIGHTWRAP_NSYS", str(tmp_path / "none" / "nsys"))
    assert check_nsys(facts()).status == SKIP
    root = tmp_path / "nsys-install"
    (root / "target-linux-x64").mkdir(parents=True)
    shutil.copy(FAKE_NSYS, root / "target-linux-x64" / "nsys")
    monkeypatch.setenv("NSIGHTWRAP_NSYS", str(root / "target-linux-x64" / "nsys"))
    lonely = check_nsys(facts())
    assert lonely.status == WARN and "no QdstrmImporter" in lonely.detail
    (root / "host-linux-x64").mkdir()
    importer = sys.executable if os.path.isfile(sys.executable) else "/bin/true"
    shutil.copy(importer, root / "host-linux-x64" / "QdstrmImporter")
    assert check_nsys(facts()).status == OK


def test_a_walk_stops_at_its_first_attempt_when_counters_are_refused(gpu_box, monkeypatch, capsys):
    """The preflight does not run the counter probe: the walk's first run of ncu is that probe."""
    monkeypatch.setenv("FAKE_NCU_CTRPERM", "1")
    from nsightwrap.cli.main import main

    rc = main(["run", "--json", "-q", "--profile", "quick", "--store", str(gpu_box / "s.db"), "--",
               *app("vec_add")])
    doc = json.loads(capsys.readouterr().out)
    assert rc == 5 and doc["status"] == "error" and "ERR_NVGPUCTRPERM" in doc["reason"]
    assert "NVreg_RestrictProfilingToAdminUsers=0" in doc["reason"]
    assert "preflight" not in doc and doc["attempt"]["status"] == "error"
    assert not any(r.hung for r in HangStore(gpu_box / "s.db").records())  # nothing recorded as a hang


def test_sweep_sections_leaves_its_store_to_the_preflight(gpu_box, capsys):
    """The sweep opens (creates) its store after the preflight: a store that cannot be made is the preflight's
    refusal, with its remedy, not an error of opening it first."""
    from nsightwrap.cli.main import main

    blocker = gpu_box / "a-file"
    blocker.write_text("")
    rc = main(["sweep-sections", "--json", "-q", "--section", "LaunchStats", "--store",
               str(blocker / "sub" / "hangs.db"), "--", *app("vec_add")])
    doc = json.loads(capsys.readouterr().out)
    assert rc == 2 and doc["status"] == "error" and doc["error"].startswith("preflight: store:")
    assert [c["status"] for c in doc["preflight"] if c["name"] == "store"] == ["FAIL"]
