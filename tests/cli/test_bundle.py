"""Issue 21 item 2: `hangs bundle KERNEL -o FILE` writes one archive about a hanging kernel that someone else can
act on: README index, versions, exact commands, each run's ncu log with times, the stall's nvidia-smi -q and
host stacks, the debug log, calibrations, the smallest hanging section set, triage results when present.

The runs are made by the CLI on the fake ncu, with run evidence kept in tmp_path (NSIGHTWRAP_EVIDENCE) and fake
nvidia-smi -q, py-spy and gdb on PATH (tests/watch/test_stall_evidence.py tests the evidence itself).
"""

from __future__ import annotations

import json
import re
import tarfile
import zipfile
from pathlib import Path

import pytest
from helpers import FAKE_SMI_DIR, ROOT, STALL_S, app, cli_main, run_cli

from nsightwrap.cli.bundle import hang_bundle
from nsightwrap.store import Environment, HangStore, ProfileKey
from nsightwrap.store.triage import TriageRecord, record_triage

H200 = Environment("gpu-box", "NVIDIA H200", "580.159.04", "2025.3.1")
STAMP = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z \+ *\d+\.\d{3}s \[(tool|out)\] ")


def tools_on_path(tmp_path: Path, extra: str = "") -> Path:
    """nvidia-smi (-q answered here, the rest by the tests' fake), py-spy and gdb that print a stack."""
    folder = tmp_path / "tools"
    folder.mkdir()
    scripts = {
        "nvidia-smi": f'case "$1" in -q) echo "==============NVSMI LOG=============="; echo "Attached GPUs : 1";'
                      f' echo "    Product Name : NVIDIA H200";; *) exec "{FAKE_SMI_DIR / "nvidia-smi"}" "$@";; esac',
        "py-spy": f'echo "Process $3: python"; echo "Thread 1 (idle): MainThread"; echo "    wait (app.py:12)"{extra}',
        "gdb": f'echo "Thread 1 (LWP $4):"; echo "#0  0x0 in nanosleep () from libc.so.6"{extra}',
    }
    for name, body in scripts.items():
        (folder / name).write_text(f"#!/bin/sh\n{body}\n")
        (folder / name).chmod(0o755)
    return folder


@pytest.fixture
def bundle_env(fake_env, tmp_path, monkeypatch):
    """The store, the run evidence and the tools, in this process's environment too (for main(argv) here), and
    its working folder tmp_path."""
    env = dict(fake_env, NSIGHTWRAP_STORE=str(tmp_path / "hangs.db"), NSIGHTWRAP_EVIDENCE=str(tmp_path / "runs"),
               PYTHONPATH=str(ROOT))
    env["PATH"] = f"{tools_on_path(tmp_path)}:{env['PATH']}"
    for name in ("NSIGHTWRAP_STORE", "NSIGHTWRAP_EVIDENCE", "PATH"):
        monkeypatch.setenv(name, env[name])
    monkeypatch.chdir(tmp_path)
    return env


def members(archive: Path) -> dict[str, str]:
    """name (without the top folder) -> text, of a .tar.gz or .zip."""
    if archive.name.endswith(".zip"):
        with zipfile.ZipFile(archive) as z:
            return {n.split("/", 1)[1]: z.read(n).decode() for n in z.namelist()}
    with tarfile.open(archive) as tar:
        return {m.name.split("/", 1)[1]: tar.extractfile(m).read().decode() for m in tar.getmembers()}


def test_bundle_of_a_swept_kernel_holds_everything_named_in_its_readme(bundle_env, tmp_path, capsys):
    """The sweep through main(argv) in this process (the evidence it keeps is the library's), the bundle through a
    real process."""
    code, _, err = cli_main(["sweep-sections", "-q", "--json", "--stall-timeout", str(STALL_S), "--section",
                             "SourceCounters", "--section", "Occupancy", "--section", "LaunchStats", "--",
                             *app("vec_add", "k@hang-if=SourceCounters")], capsys)
    assert code == 0, err
    out = tmp_path / "k-bundle.tar.gz"
    done = run_cli(["hangs", "bundle", "k", "-o", str(out), "--json"], bundle_env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert doc["status"] == "ok" and doc["records"] > 0 and doc["runs"] and not doc["runs_missing"]
    assert "read its README.md before sending it" in done.stderr
    files = members(out)
    readme = files["README.md"]
    for name in files:
        assert f"`{name}`" in readme, name                                  # the index names every file
    assert "## What is kept, and what is not" in readme
    assert files["debug-log.md"].startswith("# Debug log: k")
    commands = files["commands.sh"].splitlines()
    assert any(line.startswith(("ncu ", "/")) and "--section SourceCounters" in line and "app.py" in line
               for line in commands)
    assert json.loads(files["sweep.json"])["smallest"]["sections"] == ["SourceCounters"]
    versions = json.loads(files["versions.json"])
    assert versions["gpus"] == [{"name": "NVIDIA H200", "driver": "580.159.04"}]
    assert versions["ncu"]["path"] and versions["python"]["packages"]["psutil"]
    assert {"nsys", "compute_sanitizer", "os", "cuda", "doctor"} <= versions.keys()
    # Each run: ncu's log and the transcript with times; the hung ones: nvidia-smi -q and stacks at the stall.
    runs = {name.split("/")[1] for name in files if name.startswith("runs/")}
    assert runs == set(doc["runs"])
    logs = [files[n] for n in files if n.endswith("/transcript.log")]
    assert logs and all(STAMP.match(line) for log in logs for line in log.splitlines() if line)
    assert any("==PROF==" in files[n] for n in files if n.endswith("/ncu.log"))
    smi = [n for n in files if n.endswith("/stall/nvidia-smi-q.txt")]
    assert smi and all("NVSMI LOG" in files[n] for n in smi)
    stacks = [files[n] for n in files if re.search(r"/stall/stack-\d+\.txt$", n)]
    assert any("MainThread" in s for s in stacks) and any("nanosleep" in s for s in stacks)
    assert oct(out.stat().st_mode & 0o777) == "0o600"


def _store_with_a_hang(tmp_path: Path) -> Path:
    path = tmp_path / "hangs.db"
    with HangStore(path) as s:
        s.record("k", ProfileKey(set="full"), "hang", env=H200, stall_s=3.0, command=["ncu", "--set", "full", "./a"],
                 run_id="a" * 32)
        s.record_call_time(json.dumps(["./a"]), 0.25, H200, source="cupti", kernel="k")      # the program's calibration
        s.record_call_time(json.dumps(["./other"]), 9.0, H200, source="nsys")                 # another program's
    return path


def test_a_zip_and_the_triage_slot(tmp_path):
    store = _store_with_a_hang(tmp_path)
    with HangStore(store) as s:      # what `nsightwrap triage` leaves: one triage naming k, another naming other
        record_triage(s, [TriageRecord("t1", ("./a",), "plain", "finished"),
                          TriageRecord("t1", ("./a",), "racecheck", "findings", kernel="k", conclusion="12 hazards"),
                          TriageRecord("t1", ("./a",), "triage", "program-fault", conclusion="v"),
                          TriageRecord("t2", ("./b",), "memcheck", "findings", kernel="other")], H200)
    made = hang_bundle("k", tmp_path / "b.zip", store=store, runs_folder=tmp_path / "none", env={},
                       versions=lambda env: {"stub": True})
    assert made.status == "ok" and made.exit_code == 0 and made.runs_missing == ["a" * 32]
    files = members(tmp_path / "b.zip")
    triage = json.loads(files["triage.json"])["triage_runs"]      # the whole triage that named k, not the other
    assert [(r["triage_id"], r["tool"]) for r in triage] == [("t1", "plain"), ("t1", "racecheck"), ("t1", "triage")]
    assert "Runs without a folder" in files["README.md"] and json.loads(files["versions.json"]) == {"stub": True}
    assert "ncu --set full ./a" in files["commands.sh"]
    assert [(c["kernel"], c["seconds"], c["source"]) for c in json.loads(files["calibrations.json"])] == [
        ("k", 0.25, "cupti")]


def test_no_triage_file_without_triage_results(tmp_path):
    made = hang_bundle("k", tmp_path / "b.tar.gz", store=_store_with_a_hang(tmp_path), runs_folder=tmp_path,
                       env={}, versions=lambda env: {})
    assert "triage.json" not in made.files and made.to_dict()["status"] == "ok"


def test_refusals_write_nothing(bundle_env, tmp_path, capsys, monkeypatch):
    store = _store_with_a_hang(tmp_path)
    monkeypatch.setenv("NSIGHTWRAP_STORE", str(store))
    code, out, _ = cli_main(["hangs", "bundle", "nope", "-o", str(tmp_path / "x.tar.gz"), "--json"], capsys)
    assert code == 2 and "no records of nope" in json.loads(out)["error"]
    assert not (tmp_path / "x.tar.gz").exists()
    (tmp_path / "taken.tar.gz").write_text("mine")
    code, _, err = cli_main(["hangs", "bundle", "k", "-o", str(tmp_path / "taken.tar.gz")], capsys)
    assert code == 2 and "exists" in err and (tmp_path / "taken.tar.gz").read_text() == "mine"
    missing = hang_bundle("k", tmp_path / "y.tar.gz", store=tmp_path / "no.db", env={}, versions=lambda env: {})
    assert missing.exit_code == 2 and "no hang store" in missing.error
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith((".", "x", "y"))) == []
