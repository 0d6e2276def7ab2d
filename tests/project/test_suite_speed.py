"""What keeps the suite's thousands of process starts cheap (issue 20): the session's interpreter wrappers, bytecode
kept, fakes without site, and a command line that loads only the command given."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys

import psutil
import pytest
import rewrite_cache
from conftest import FAST_PYTHON_VAR
from helpers import FAKE_DIR, FAKE_NCU, HERE, app, read_until

from nsightwrap.cli.commands import COMMAND_TABLE, build_parser


def test_the_fakes_python3_is_this_interpreter_and_children_keep_bytecode():
    folder = os.environ[FAST_PYTHON_VAR]
    assert shutil.which("python3") == os.path.join(folder, "python3")  # not a version manager's shim
    assert "PYTHONDONTWRITEBYTECODE" not in os.environ
    done = subprocess.run(["python3", "-c", "import sys; print(sys.prefix, sys.flags.dont_write_bytecode)"],
                          capture_output=True, text=True, check=True)
    assert done.stdout.split() == [sys.prefix, "0"]


def test_a_fake_program_starts_without_site_but_keeps_its_command_line_shape():
    command = app("vec_add")
    assert os.path.basename(command[0]) == os.path.basename(sys.executable) and command[1].endswith("app.py")
    done = subprocess.run([command[0], "-c", "import sys; print(sys.flags.no_site, sys.executable)"],
                          capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["1", sys.executable]


def test_the_fake_ncu_front_end_is_named_ncu_as_the_real_binary(tag, fake_env, tmp_path):
    """It runs with -S (argv[1] is then no longer the script): nsightwrap's front-end lookup finds it by name."""
    p = subprocess.Popen([str(FAKE_NCU), "--export", str(tmp_path / "r"), *app("k@hang")], stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, env=fake_env)
    tree = []
    try:
        read_until(p, p.stdout, b"0%..")
        tree = psutil.Process(p.pid).children(recursive=True)  # the front end left the launcher's group (setsid)
        names = {c.name(): c.cmdline() for c in tree}
        assert "ncu" in names and "-S" in names["ncu"][:2] and names["ncu"][2].endswith("target/ncu")
    finally:
        for c in [psutil.Process(p.pid), *tree]:
            try:
                c.send_signal(signal.SIGKILL)
            except psutil.Error:
                pass
        psutil.wait_procs(tree, timeout=10)
        p.wait()


def _modules_after(argv: list[str], env: dict) -> set[str]:
    code = ("import sys, json\nfrom nsightwrap.cli.commands import run_command\ntry:\n    run_command(sys.argv[1:])\n"
            "finally:\n    print(json.dumps(sorted(sys.modules)), file=sys.__stderr__)")  # --help exits
    done = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, env=env, timeout=60)
    return set(json.loads(done.stderr.strip().splitlines()[-1]))


def test_the_command_line_loads_only_the_command_given(tmp_path):
    env = {**os.environ, "NSIGHTWRAP_STORE": str(tmp_path / "hangs.db")}
    loaded = _modules_after(["hangs", "list"], env)
    assert "nsightwrap.cli.hangs" in loaded
    for other in ("nsightwrap.cli.run", "nsightwrap.cli.sweep", "nsightwrap.cli.triage", "nsightwrap.fallback.sweep",
                  "sqlalchemy.dialects.postgresql"):  # an SQLite store needs no PostgreSQL dialect
        assert other not in loaded, other
    loaded = _modules_after(["run", "--help"], env)
    assert "nsightwrap.cli.run" in loaded and "nsightwrap.cli.triage" not in loaded


def test_help_and_unknown_commands_still_see_every_command():
    assert list(build_parser().commands) == list(COMMAND_TABLE)
    assert list(build_parser(only="hangs").commands) == ["hangs"]
    assert list(build_parser(only="no-such-command").commands) == list(COMMAND_TABLE)


def test_the_most_started_fakes_import_only_what_python_S_has_loaded():
    """The fake ncu's front end, the fake program and the fake torchrun start ~2,500 times a suite: json, re,
    subprocess, shutil, tempfile, threading, random and signal's enum cost ~20 ms of CPU a process, twice the
    interpreter's start, and are imported only on the paths that need them."""
    folders = [str(FAKE_DIR), str(HERE / "fake_dist")]
    code = f"import sys; sys.path[:0] = {folders!r}; import ncufront, fakeapp, launcher; print(*sorted(sys.modules))"
    env = {k: v for k, v in os.environ.items() if k != "FAKE_NCU_SESSION"}
    done = subprocess.run([sys.executable, "-S", "-c", code], capture_output=True, text=True, check=True, env=env)
    loaded = set(done.stdout.split())
    assert {"ncufront", "fakeapp", "fakecuda", "faketracer", "launcher"} <= loaded
    heavy = {"json", "re", "subprocess", "shutil", "tempfile", "threading", "random", "signal", "enum", "socket"}
    assert loaded & heavy == set()


@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning")  # 3.12+: execnet's thread
def test_the_controller_rewrites_each_test_module_once_for_every_worker(request, tmp_path):
    """tests/rewrite_cache.py: the pyc it writes, in two processes, is the one pytest's import reads (its cache
    folder, its header, the code pytest's rewriting makes); a current pyc is left as it is."""
    from _pytest.assertion.rewrite import PYC_TAIL, _read_pyc, _rewrite_test, get_cache_dir

    if request.config.getoption("assertmode") != "rewrite":
        pytest.skip("asserts are not rewritten in this session (--assert=plain): nothing to warm")
    tmp_path = tmp_path.resolve()
    sources = [tmp_path / f"test_m{i}.py" for i in range(3)]
    for i, path in enumerate(sources):
        path.write_text(f"def test_it():\n    x = {i}\n    assert x == {i}\n")
    (tmp_path / "helper.py").write_text("x = 1\n")
    assert rewrite_cache.warm(request.config, tmp_path, workers=2) == sources
    for path in sources:
        code = _read_pyc(path, get_cache_dir(path) / (path.name[:-3] + PYC_TAIL))
        assert code == _rewrite_test(path, request.config)[1]  # what pytest itself makes of the module
    assert sorted(os.listdir(get_cache_dir(sources[0]))) == sorted(p.name[:-3] + PYC_TAIL for p in sources)
    assert rewrite_cache.warm(request.config, tmp_path, workers=2) == []
    sources[1].write_text("def test_it():\n    assert 1\n\n")  # changed: written again
    assert rewrite_cache.warm(request.config, tmp_path, workers=2) == [sources[1]]
