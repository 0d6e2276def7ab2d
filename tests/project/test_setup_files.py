"""Set-up and files (issue 23, item 9): the README's commands on an externally managed python3, private folders.

`make run` / `make test` install into a virtual environment of their own
(devtools/make_venv.sh), since Debian's python3 refuses `pip install`; the
per-user folders are resolved in nsightwrap.paths, XDG honoured and created
0700; a temporary folder left by a killed nsightwrap is removed by the next
one made and by `cleanup`.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from helpers import FAKE_NCU, run_cli

from nsightwrap.ncu.catalog import probe_ncu
from nsightwrap.paths import cache_dir, host_mark, stale_work_dirs, tools_dir, work_dir
from nsightwrap.store.paths import default_store_path

ROOT = Path(__file__).resolve().parents[2]
MAKE_VENV = ROOT / "devtools" / "make_venv.sh"

#: A python3 whose `-m venv` is faked (a folder whose bin/python is the real base interpreter, with a pyvenv.cfg), or
#: fails as Debian's does without python3-venv; everything else is the real interpreter.
FAKE_PYTHON = """#!/bin/sh
if [ "$1" = "-m" ] && [ "$2" = "venv" ]; then
    if [ -n "${NO_VENV:-}" ]; then
        echo "The virtual environment was not created successfully because ensurepip is not available." >&2
        exit 1
    fi
    for venv; do :; done
    mkdir -p "$venv/bin" && ln -s BASE "$venv/bin/python" && echo "$*" >>"$MADE_LOG"
    [ -n "${NO_CFG:-}" ] ||
        printf 'home = %s\ninclude-system-site-packages = false\n' "$(dirname BASE)" >"$venv/pyvenv.cfg"
    exit 0
fi
exec REAL "$@"
"""


@pytest.fixture
def fake_python(tmp_path):
    path = tmp_path / "python3"
    path.write_text(FAKE_PYTHON.replace("REAL", sys.executable).replace("BASE", sys._base_executable))
    path.chmod(0o755)
    return path


def make_venv(python: Path, venv: Path, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(["sh", str(MAKE_VENV), str(python), str(venv)], capture_output=True, text=True,
                          env={**os.environ, "MADE_LOG": str(venv.parent / "made.log"), **env}, timeout=60)


def test_the_venv_is_made_once_seeing_the_pythons_packages_then_reused(fake_python, tmp_path):
    """PYTHON's packages are seen through a .pth file of plain folders: their own .pth hooks are not run at every
    start of Python, as --system-site-packages would (issue 20)."""
    venv = tmp_path / ".venv"
    for _ in range(2):
        r = make_venv(fake_python, venv)
        assert r.returncode == 0, r.stderr
    assert (tmp_path / "made.log").read_text().splitlines() == [f"-m venv {venv}"]
    assert (venv / ".made-by-nsightwrap").read_text().split()[0] == sys.version.split()[0]
    folders = subprocess.run([sys.executable, "-c", "import site; print(*site.getsitepackages(), sep='\\n')"],
                             capture_output=True, text=True, check=True).stdout.split()
    pth = list(venv.glob("lib/python3*/site-packages/_nsightwrap_python_packages.pth"))
    assert len(pth) == 1
    lines = pth[0].read_text().splitlines()  # PYTHON's folders, then what their .pth files add; no import line
    assert [line for line in lines if line in folders] == [f for f in folders if os.path.isdir(f)]
    assert all(os.path.isdir(line) and not line.startswith("import") for line in lines)
    seen = subprocess.run([str(venv / "bin" / "python"), "-c", "import sys; print(*sys.path, sep='\\n')"],
                          capture_output=True, text=True, check=True).stdout.split()
    # And so pandas, psutil, ... of PYTHON import in the venv (Debian's python names folders that need not exist).
    assert {f for f in folders if os.path.isdir(f)} <= set(seen)


def test_a_venv_made_by_another_python_is_made_again(fake_python, tmp_path):
    venv = tmp_path / ".venv"
    assert make_venv(fake_python, venv).returncode == 0
    (venv / ".made-by-nsightwrap").write_text("3.9.0 /elsewhere\n")
    r = make_venv(fake_python, venv)
    assert r.returncode == 0 and "made by another Python" in r.stdout
    assert len((tmp_path / "made.log").read_text().splitlines()) == 2


def test_a_venv_that_fails_half_made_is_removed_not_reused_later(fake_python, tmp_path):
    """Its python does not run as a venv's (no pyvenv.cfg): nothing is written into PYTHON's own folders, and the
    half-made folder goes (without a marker it would be taken for the user's own venv next time)."""
    venv = tmp_path / ".venv"
    r = make_venv(fake_python, venv, NO_CFG="1")
    assert r.returncode == 1 and "does not run in the virtual environment" in r.stderr
    assert not venv.exists()


def test_no_venv_module_says_which_package_to_install(fake_python, tmp_path):
    venv = tmp_path / ".venv"
    r = make_venv(fake_python, venv, NO_VENV="1")
    version = "{}.{}".format(*sys.version_info[:2])
    assert r.returncode == 1
    assert f"sudo apt install python{version}-venv" in r.stderr and "PYTHON=" in r.stderr
    assert not venv.exists()


def test_a_folder_it_did_not_make_is_never_removed(fake_python, tmp_path):
    venv = tmp_path / ".venv"
    venv.mkdir()
    (venv / "precious").write_text("mine")
    r = make_venv(fake_python, venv)
    assert r.returncode == 1 and "VENV=" in r.stderr
    assert (venv / "precious").read_text() == "mine"


def test_a_missing_python_is_named(tmp_path):
    r = make_venv(tmp_path / "no-such-python", tmp_path / ".venv")
    assert r.returncode == 1 and "no-such-python" in r.stderr and "Python >= 3.10" in r.stderr


def make_dry(*args: str) -> list[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}  # under make test
    r = subprocess.run(["make", "-n", "-C", str(ROOT), *args], capture_output=True, text=True, timeout=60, env=env)
    assert r.returncode == 0, r.stderr
    return r.stdout.splitlines()


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_make_test_uses_its_venv_unless_python_already_runs_in_one(tmp_path):
    system = tmp_path / "system-python3"  # says it runs in no virtual environment, as Debian's python3
    system.write_text("#!/bin/sh\necho 0\n")
    system.chmod(0o755)
    lines = make_dry("test", f"PYTHON={system}")
    assert any("make_venv.sh" in line for line in lines)
    assert ".venv/bin/python -m ruff check ." in lines
    assert ".venv/bin/python -m pytest -q -n 6 --dist worksteal" in lines

    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(tmp_path / "own")], check=True, timeout=60)
    own = tmp_path / "own" / "bin" / "python"
    lines = make_dry("test", f"PYTHON={own}")
    assert not any("make_venv.sh" in line for line in lines)
    assert f"{own} -m pytest -q -n 6 --dist worksteal" in lines


def test_ci_runs_the_readme_command_and_git_ignores_the_venv():
    assert (ROOT / ".ci" / "run").read_text().splitlines()[-1] == "make test"
    assert "/.venv/" in (ROOT / ".gitignore").read_text().splitlines()


# -- per-user folders ------------------------------------------------------------------------------


def test_every_cache_honours_xdg_cache_home(tmp_path):
    env = {"XDG_CACHE_HOME": str(tmp_path / "xdg"), "HOME": str(tmp_path / "home")}
    assert cache_dir(env) == tmp_path / "xdg" / "nsightwrap"
    assert tools_dir(env) == tmp_path / "xdg" / "nsightwrap" / "tools"
    assert default_store_path(env) == tmp_path / "xdg" / "nsightwrap" / "hangs.db"
    assert cache_dir({"XDG_CACHE_HOME": "relative"}) == Path("~/.cache/nsightwrap").expanduser()


def test_the_ncu_catalog_cache_is_private(tmp_path):
    env = {"XDG_CACHE_HOME": str(tmp_path / "xdg"), "FAKE_NCU_SCALE": "0.1", "PATH": os.environ["PATH"]}
    info = probe_ncu(str(FAKE_NCU), env=env)
    assert info.version
    for folder in (tmp_path / "xdg", tmp_path / "xdg" / "nsightwrap", tmp_path / "xdg" / "nsightwrap" / "tools"):
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700, folder
    assert list((tmp_path / "xdg" / "nsightwrap" / "tools").glob("ncu-*.json"))


@pytest.fixture
def private_tmp(tmp_path, monkeypatch):
    """tempfile's folder for this test (gettempdir() caches its answer: set it, not only TMPDIR)."""
    folder = tmp_path / "tmp"
    folder.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    monkeypatch.setenv("TMPDIR", str(folder))
    return folder


def killed_work_dir(private_tmp: Path, kind: str) -> Path:
    """What a nsightwrap killed with SIGKILL in the middle of a calibration leaves."""
    code = (f"import os, signal; from nsightwrap.paths import work_dir; w = work_dir({kind!r}); "
            "(w / 'calibration.nsys-rep').write_bytes(b'x'); print(w, flush=True); os.kill(os.getpid(), 9)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                       env={**os.environ, "PYTHONPATH": str(ROOT), "TMPDIR": str(private_tmp)})
    assert r.returncode == -9
    left = Path(r.stdout.strip())
    assert left.parent == private_tmp and left.is_dir()
    return left


def test_work_folders_are_private_and_a_killed_owners_one_goes_with_the_next(private_tmp):
    left = killed_work_dir(private_tmp, "calibrate")
    assert stat.S_IMODE(left.stat().st_mode) == 0o700
    assert stale_work_dirs() == [left]
    mine = work_dir("calibrate")
    try:
        assert not left.exists()
        assert stale_work_dirs() == []  # this process is alive: its folder stays
        assert mine.name.startswith(f"nsightwrap-calibrate-{os.getpid()}.") and f".{host_mark()}." in mine.name
    finally:
        shutil.rmtree(mine)


def _unshare_works() -> bool:
    try:
        return subprocess.run(["unshare", "--user", "--pid", "--fork", "--mount-proc", "true"], capture_output=True,
                              timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


@pytest.mark.skipif(sys.platform != "linux" or shutil.which("unshare") is None or not _unshare_works(),
                    reason="needs unshare --user --pid (a pid namespace of its own)")
def test_a_live_runs_folder_in_another_pid_namespace_is_left_alone(private_tmp):
    """$TMPDIR shared with a container (docker -v /tmp:/tmp): its nsightwrap's PID is no process here, or
    another one, yet its folder is in use and must stay."""
    code = ("import sys; from nsightwrap.paths import work_dir; w = work_dir('calibrate'); "
            "print(w, flush=True); sys.stdin.read()")
    there = subprocess.Popen(["unshare", "--user", "--pid", "--fork", "--mount-proc", sys.executable, "-c", code],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                             env={**os.environ, "PYTHONPATH": str(ROOT), "TMPDIR": str(private_tmp)})
    try:
        theirs = Path(there.stdout.readline().strip())
        assert theirs.parent == private_tmp and theirs.is_dir()
        assert stale_work_dirs() == []
        mine = work_dir("calibrate")  # removes the stale ones first
        shutil.rmtree(mine)
        assert theirs.is_dir()
        assert host_mark() not in theirs.name and f".{host_mark()}." in mine.name
    finally:
        there.communicate("", timeout=30)


def test_only_folders_of_this_host_and_namespace_are_judged(private_tmp):
    left = killed_work_dir(private_tmp, "calibrate")
    pid, start, mark, rest = left.name.split("-")[-1].split(".")
    assert mark == host_mark()
    elsewhere = left.rename(left.with_name(f"nsightwrap-calibrate-{pid}.{start}.{'0' * 8}.{rest}"))
    assert stale_work_dirs() == []  # another host's PID says nothing here
    here = elsewhere.rename(left)
    assert stale_work_dirs() == [here]


def test_a_folder_without_a_host_mark_is_never_judged(private_tmp):
    """No nsightwrap writes that (old) form any more: whose it is cannot be told, however old it is."""
    left = killed_work_dir(private_tmp, "calibrate")
    pid, start = left.name.split("-")[-1].split(".")[:2]
    old = left.rename(left.with_name(f"nsightwrap-calibrate-{pid}.{start}.abcdefgh"))  # no host mark: whose?
    day_old = time.time() - 24 * 3600 - 60
    os.utime(old, (day_old, day_old))
    assert stale_work_dirs() == []


def test_the_host_mark_is_short_and_says_where_even_without_proc(tmp_path):
    mark = host_mark()
    assert re.fullmatch(r"[0-9a-f]{8}", mark) and host_mark() == mark
    bare = host_mark(str(tmp_path))  # no boot id, no pid namespace to read: the host name still counts
    assert re.fullmatch(r"[0-9a-f]{8}", bare) and bare != mark


def test_other_folders_in_tmp_are_left_alone(private_tmp):
    (private_tmp / "nsightwrap-calibrate-abc").mkdir()  # not named after an owner
    (private_tmp / "nsightwrap-calibrate-1.2.x").write_text("a file")
    (private_tmp / "other-1.2.x").mkdir()
    assert stale_work_dirs() == []


@pytest.mark.skipif(os.getuid() != 0, reason="needs root, to make a folder of another user")
def test_another_users_folder_is_left_alone(private_tmp):
    theirs = private_tmp / f"nsightwrap-calibrate-1.2.{host_mark()}.abcdefgh"
    theirs.mkdir()
    os.chown(theirs, 65534, 65534)
    assert stale_work_dirs() == []


def test_cleanup_removes_what_a_killed_calibration_left(private_tmp, tmp_path):
    left = killed_work_dir(private_tmp, "calibrate")
    env = {**os.environ, "NSIGHTWRAP_RUNTIME_DIR": str(tmp_path / "runtime")}
    dry = run_cli(["cleanup", "--dry-run"], env)
    assert dry.returncode == 0 and "would remove 1 temporary folder(s)" in dry.stdout and left.exists()
    r = run_cli(["cleanup"], env)
    assert r.returncode == 0 and str(left) in r.stdout and not left.exists()


# -- the tests' own files --------------------------------------------------------------------------


def test_the_checkout_check_sees_a_file_a_test_left(tmp_path):
    """Probed on a copy of the checkout's layout: a file made in the real one would be seen by the check of a
    test that another worker runs meanwhile."""
    from conftest import CHECKOUT_CACHES, checkout_files

    root = tmp_path / "checkout"
    (root / "tests").mkdir(parents=True)
    for name in ("README.md", "tests/conftest.py"):
        shutil.copy(ROOT / name, root / name)
    (root / ".ruff_cache").mkdir()
    before = checkout_files(root)
    assert before == {"README.md", "tests", "tests/conftest.py"} and not CHECKOUT_CACHES & before
    probe = root / "nsightwrap-reports" / "leak-probe.ncu-rep"
    probe.parent.mkdir()
    probe.write_text("x")
    assert checkout_files(root) - before == {"nsightwrap-reports", "nsightwrap-reports/leak-probe.ncu-rep"}


def test_each_test_runs_in_its_own_folder_with_its_own_records_and_tmpdir(tmp_path):
    from nsightwrap.watch.records import RUNTIME_VAR

    assert not Path.cwd().is_relative_to(ROOT)
    for var in (RUNTIME_VAR, "TMPDIR"):
        assert not Path(os.environ[var]).is_relative_to(ROOT) and Path(os.environ[var]).is_dir()
    (Path.cwd() / "nsightwrap-reports").mkdir()  # where a run without -o writes: not the checkout
