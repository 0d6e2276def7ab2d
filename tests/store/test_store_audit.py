"""Issue 23, item 6: bad and read-only stores.

A read-only open leaves nothing beside the store (no 0400 -wal/-shm that stop
every later write), leftovers of older versions are repaired or explained,
`doctor` runs the very check the commands run, a file nsightwrap did not make
is never called damaged nor offered for deletion, and one bad row names its
table, id and fix.

Checks that need a user whom permissions stop run in a child: plainly for a
normal user; for root, with setpriv dropping the capabilities that let root
ignore file modes (skipped where setpriv cannot).
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest
from helpers import ROOT, cli_main, unavailable

from nsightwrap.cli.preflight import FAIL, OK, Facts, check_store
from nsightwrap.errors import StoreError
from nsightwrap.store import Environment, HangStore, ProfileKey
from nsightwrap.store.paths import sidecars

H200 = Environment("gpu-box", "NVIDIA H200", "580.159.04", "2025.3.1")
FULL = ProfileKey("full")


def _store(path: Path) -> Path:
    with HangStore(path) as s:
        s.record("spin", FULL, "hang", env=H200, stall_s=3.0, command=["ncu", "--set", "full", "./app"])
    return path


def _env() -> dict:
    return dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))


def _as_a_user(argv: list[str]) -> subprocess.CompletedProcess:
    """Run argv as a process that file modes stop (root loses CAP_DAC_OVERRIDE and friends)."""
    if os.geteuid() != 0:
        return subprocess.run(argv, capture_output=True, text=True, env=_env(), timeout=120)
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        unavailable("root, and no setpriv to drop the capabilities that ignore file modes")
    drop = [setpriv, "--bounding-set", "-dac_override,-dac_read_search,-fowner", "--inh-caps", "-all"]
    probe = subprocess.run([*drop, "true"], capture_output=True, text=True)
    if probe.returncode != 0:
        unavailable(f"root, and setpriv cannot drop capabilities here: {probe.stderr.strip()}")
    return subprocess.run([*drop, *argv], capture_output=True, text=True, env=_env(), timeout=120)


RECORD = textwrap.dedent("""
    import sys
    from nsightwrap.errors import StoreError
    from nsightwrap.store import Environment, HangStore, ProfileKey
    try:
        with HangStore(sys.argv[1]) as s:
            s.record("spin", ProfileKey("basic"), "ok", env=Environment())
        print("recorded")
    except StoreError as e:
        print(e)
""")


def _facts(path: Path) -> Facts:
    return Facts(context=None, ncu_problem="", gpus=None, store=path, env={})


def run_cli(args: list[str], capsys) -> SimpleNamespace:
    """`nsightwrap ARGS` in this process (helpers.cli_main: what these tests read is the store's answer, not
    the process's; a child each cost ~0.3 s of CPU), as subprocess.run answers: returncode, stdout, stderr."""
    code, out, err = cli_main(args, capsys)
    return SimpleNamespace(returncode=code, stdout=out, stderr=err)


# --- read-only opens leave nothing ---------------------------------------------------------------------------

def test_a_read_only_open_leaves_no_wal_or_shm(tmp_path, capsys):
    path = _store(tmp_path / "h.db")
    assert not any(s.exists() for s in sidecars(path))
    path.chmod(0o400)
    assert run_cli(["hangs", "list", "--store", str(path)], capsys).returncode == 0
    with HangStore(path, readonly=True) as ro:
        assert [r.kernel for r in ro.records()] == ["spin"]
    assert not any(s.exists() for s in sidecars(path))


def test_after_hangs_list_of_a_0400_store_recording_works_once_it_is_writable(tmp_path):
    path = _store(tmp_path / "h.db")
    path.chmod(0o400)
    listed = _as_a_user([sys.executable, "-m", "nsightwrap", "hangs", "list", "--store", str(path)])
    assert listed.returncode == 0 and "spin" in listed.stdout, listed.stderr
    path.chmod(0o600)
    done = _as_a_user([sys.executable, "-c", RECORD, str(path)])
    assert done.stdout.strip() == "recorded", done.stdout + done.stderr


def _old_leftovers(path: Path) -> None:
    """What an older nsightwrap's `hangs list` of a 0400 store left: 0400 -wal and -shm files."""
    path.chmod(0o400)
    conn = sqlite3.connect(f"{path.absolute().as_uri()}?mode=ro", uri=True)
    conn.execute("SELECT COUNT(*) FROM records").fetchone()
    conn.close()
    assert all(s.exists() for s in sidecars(path))
    for s in sidecars(path):
        s.chmod(0o400)
    path.chmod(0o600)


def test_a_recording_command_repairs_its_own_read_only_leftovers(tmp_path):
    path = _store(tmp_path / "h.db")
    _old_leftovers(path)
    done = _as_a_user([sys.executable, "-c", RECORD, str(path)])
    assert done.stdout.strip() == "recorded", done.stdout + done.stderr
    with HangStore(path, readonly=True) as ro:
        assert len(ro) == 2


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give the leftovers to another user")
def test_leftovers_of_another_user_are_explained_and_doctor_says_so(tmp_path):
    path = _store(tmp_path / "h.db")
    _old_leftovers(path)
    for s in sidecars(path):
        os.chown(s, 65534, 65534)
    done = _as_a_user([sys.executable, "-c", RECORD, str(path)])
    assert "-wal" in done.stdout and "read-only" in done.stdout and "rm " in done.stdout, done.stdout + done.stderr
    doctor = _as_a_user([sys.executable, "-c", DOCTOR, str(path)])
    status, detail = json.loads(doctor.stdout)
    assert status == FAIL and detail == done.stdout.strip()


DOCTOR = textwrap.dedent("""
    import json, sys
    from pathlib import Path
    from nsightwrap.cli.preflight import Facts, check_store
    c = check_store(Facts(context=None, ncu_problem="", gpus=None, store=Path(sys.argv[1]), env={}))
    print(json.dumps([c.status, c.detail]))
""")


def test_hangs_list_reads_a_store_in_a_read_only_folder(tmp_path):
    path = _store(tmp_path / "ro" / "h.db")
    path.parent.chmod(0o555)
    try:
        done = _as_a_user([sys.executable, "-m", "nsightwrap", "hangs", "list", "--json", "--store", str(path)])
    finally:
        path.parent.chmod(0o755)
    assert done.returncode == 0, done.stderr
    assert [k["kernel"] for k in json.loads(done.stdout)["kernels"]] == ["spin"]


# --- doctor runs the commands' check -----------------------------------------------------------------------

def _future(path: Path) -> Path:
    _store(path)
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE schema_version SET version = 99")
    return path


def _dropped(path: Path) -> Path:
    _store(path)
    with sqlite3.connect(path) as conn:
        conn.execute("DROP TABLE calibrations")
    return path


def _dangling(path: Path) -> Path:
    path.symlink_to(path.parent / "gone" / "hangs.db")
    return path


def _folder(path: Path) -> Path:
    path.mkdir()
    return path


def _fifo(path: Path) -> Path:
    os.mkfifo(path)
    return path


@pytest.mark.parametrize("make, says", [(_future, "newer than this nsightwrap"),
                                        (_dropped, "lacks the table calibrations"),
                                        (_dangling, "which does not exist"),
                                        (_folder, "is a folder"),
                                        (_fifo, "is a FIFO")])
def test_doctor_fails_where_every_command_refuses(tmp_path, make, says, capsys):
    path = make(tmp_path / "hangs.db")
    with pytest.raises(StoreError) as writing:
        HangStore(path)
    with pytest.raises(StoreError) as reading:
        HangStore(path, readonly=True)
    check = check_store(_facts(path))
    assert check.status == FAIL and says in check.detail and check.detail == str(writing.value)
    assert says in str(reading.value)
    listed = run_cli(["hangs", "list", "--store", str(path)], capsys)
    assert listed.returncode == 2 and says in listed.stderr and "Traceback" not in listed.stderr
    assert "nothing recorded" not in listed.stderr + listed.stdout


def test_doctor_ok_for_a_good_store(tmp_path):
    path = _store(tmp_path / "hangs.db")
    assert check_store(_facts(path)).status == OK


# --- files nsightwrap did not make -------------------------------------------------------------------------

@pytest.mark.parametrize("content", [b"root:x:0:0:root:/root:/bin/bash\n" * 20,
                                     b"NVIDIA Nsight Compute report\x00\x01\x02" * 100], ids=["passwd", "report"])
def test_a_file_that_is_not_a_store_is_left_alone(tmp_path, content, capsys):
    other = tmp_path / "passwd"
    other.write_bytes(content)
    for argv in (["hangs", "list"], ["hangs", "forget", "--all"]):
        done = run_cli([*argv, "--store", str(other)], capsys)
        assert done.returncode == 2 and "not a nsightwrap hang store" in done.stderr
        assert "delete" not in done.stderr and "damaged" not in done.stderr and "Traceback" not in done.stderr
    with pytest.raises(StoreError, match="not a nsightwrap hang store"):
        HangStore(other)
    assert other.read_bytes() == content and not any(s.exists() for s in sidecars(other))
    assert check_store(_facts(other)).status == FAIL


def test_another_programs_database_is_left_alone(tmp_path):
    other = tmp_path / "app.db"
    with sqlite3.connect(other) as conn:
        conn.execute("CREATE TABLE users (name TEXT)")
    before = other.read_bytes()
    with pytest.raises(StoreError, match="not a nsightwrap hang store") as e:
        HangStore(other)
    assert "users" in str(e.value) and "delete" not in str(e.value)
    assert other.read_bytes() == before


def test_a_folder_given_as_store_is_refused_clearly(tmp_path, capsys):
    done = run_cli(["hangs", "list", "--json", "--store", str(tmp_path)], capsys)
    doc = json.loads(done.stdout)
    assert done.returncode == 2 and doc["status"] == "error" and "is a folder" in doc["error"]
    assert "nothing recorded" not in doc["error"]


# --- one bad row ---------------------------------------------------------------------------------------------

def test_a_bad_row_names_its_table_id_and_fix(tmp_path, capsys):
    path = _store(tmp_path / "hangs.db")
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE records SET command = 'not json' WHERE id = 1")
    done = run_cli(["hangs", "show", "spin", "--store", str(path)], capsys)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "row 1 of the table records" in done.stderr and "command" in done.stderr
    assert "hangs forget --id 1" in done.stderr
    assert run_cli(["hangs", "forget", "--id", "1", "--store", str(path)], capsys).returncode == 0
    assert run_cli(["hangs", "show", "spin", "--store", str(path)], capsys).returncode == 0


def test_a_bad_calibration_row_names_its_table_and_fix(tmp_path):
    from nsightwrap.ncu.allowance import Calibration

    path = tmp_path / "hangs.db"
    with HangStore(path) as s:
        s.record_calibration(Calibration.from_kernels({"k": 0.5}, program_s=1.0, source="plain run"), ["./app"], H200)
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE calibrations SET seconds = 'soon' WHERE kernel = 'k'")
    with HangStore(path) as s, pytest.raises(StoreError) as e:
        s.calibration_for(["./app"], H200)
    assert "table calibrations" in str(e.value) and "DELETE FROM calibrations" in str(e.value)
