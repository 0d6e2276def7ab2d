"""Shared fixtures: the fake ncu, fake programs, and the gpu marker's skip (helpers: tests/helpers.py)."""

from __future__ import annotations

import atexit
import gc
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

import pytest
import rewrite_cache
import zygote
from helpers import (
    DATA,
    FAKE_APP,
    FAKE_DIR,
    FAKE_NCU,
    FAKE_SCALE,
    FAKE_SMI_DIR,
    HERE,
    STALL_S,
    app,
    attempt_rows,
    memory_folder,
    unavailable,
)

from nsightwrap.watch.records import RUNTIME_VAR
from nsightwrap.watch.tree import processes_with

# Older tests import these from conftest; new ones import from helpers.
__all__ = ["DATA", "FAKE_APP", "FAKE_DIR", "FAKE_NCU", "FAKE_SCALE", "HERE", "app"]


#: What tools make in the checkout on their own (caches, the venv): not a test's leftovers.
CHECKOUT_CACHES = {".pytest_cache", ".hypothesis", ".benchmarks", ".ruff_cache", ".venv", "__pycache__"}


def checkout_files(root: Path = HERE.parent) -> set[str]:
    """What is in the checkout's (`root`'s) top folder, tests/ and the default report folder (not caches)."""
    names = set()
    for sub in ("", "tests", "nsightwrap-reports"):  # os.listdir: run before and after every test (issue 20)
        try:
            prefix = f"{sub}/" if sub else ""  # not os.path.join: 140 names twice a test (issue 20)
            names.update(prefix + n for n in os.listdir(os.path.join(root, sub)) if n not in CHECKOUT_CACHES)
        except FileNotFoundError:
            pass
    return names


#: Where a user names their own store and cache folder: never used by the suite (pytest_configure).
USERS_OWN = ("NSIGHTWRAP_STORE", "NSIGHTWRAP_CACHE_DIR")
#: Set (to the folder of the tests' `python3`) once the session made its child processes start cheaply.
FAST_PYTHON_VAR = "NSIGHTWRAP_TEST_PYTHON_DIR"
#: Its subfolder where this interpreter's name runs it without site (helpers.app's interpreter).
NO_SITE = "no-site"
_SAVED_ENV = pytest.StashKey[dict]()
_ZYGOTE = pytest.StashKey[zygote.Zygote]()


def pytest_configure(config):
    """Child processes start cheaply (the suite starts thousands: issue 20). The fakes' `#!/usr/bin/env python3`
    finds this interpreter first on PATH (a two-line sh script), not a version manager's shim (pyenv's costs
    0.06 s of bash per start); the fake programs of helpers.app run it with -S (no site: 0.02 s less); numpy's
    BLAS starts no thread per core in the children that import it (zygote.BLAS_THREADS: their threads were 0.4 %
    of the suite's CPU, in ~40 short processes, perf record of a run on 2026-11-27); and
    children write and read bytecode as Python does by default: with PYTHONDONTWRITEBYTECODE=1 inherited,
    every `python -m nsightwrap` compiled its 110 modules again (0.13 s), so the tests' children write
    `__pycache__` folders (ignored by git) even where PYTHONDONTWRITEBYTECODE is set; the session's temporary
    files are in memory where the machine has room (_temporary_files_in_memory). Done once, in the first
    process (xdist's workers inherit it); undone at the end (a pytest killed by SIGKILL leaves the folder of
    wrappers, `nsightwrap-tests-python-*` in $TMPDIR).

    Nothing reaches the user's own nsightwrap folders either: $XDG_CACHE_HOME is a folder of the session's (the
    default hang store, the tools' probe cache, a built tracer), and a store or cache folder named in the user's
    environment (NSIGHTWRAP_STORE, NSIGHTWRAP_CACHE_DIR) is not used. Before, every suite run added ~50 probe-cache
    files to ~/.cache/nsightwrap/tools, and a CLI test without --store recorded in the user's hang store."""
    _one_final_collection(config)
    _rewrite_tests_only(config)
    _hear_ctrl_c()
    if not os.environ.get(FAST_PYTHON_VAR):
        _start_children_cheaply(config)
    tempfile.gettempdir()  # remembered now, not in a test: own_places sets TMPDIR to a folder it later removes
    workers = getattr(config.option, "numprocesses", None)
    if workers and not os.environ.get("PYTEST_XDIST_WORKER"):  # xdist's controller, before its workers start
        forks = _start_zygote(config)
        rewrite_cache.warm(config, HERE, workers)  # rewrite_cache.py, while the zygote imports
        if forks is not None and forks.wait_ready():
            config.option.tx = [forks.tx] * len(config.option.tx)


def _start_children_cheaply(config) -> None:
    names = ("PATH", "PYTHONDONTWRITEBYTECODE", FAST_PYTHON_VAR, "XDG_CACHE_HOME", "TMPDIR", *USERS_OWN,
             *zygote.BLAS_THREADS)
    config.stash[_SAVED_ENV] = {name: os.environ.get(name) for name in names}
    _temporary_files_in_memory(config)
    folder = tempfile.mkdtemp(prefix="nsightwrap-tests-python-")
    for where, name, flags in (("", "python3", ""), (NO_SITE, Path(sys.executable).name, " -S")):
        script = Path(folder, where, name)
        script.parent.mkdir(exist_ok=True)
        script.write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)}{flags} "$@"\n')
        script.chmod(0o755)
    os.environ["PATH"] = folder + os.pathsep + os.environ.get("PATH", "")
    os.environ[FAST_PYTHON_VAR] = folder
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    os.mkdir(os.path.join(folder, "xdg-cache"))
    os.environ["XDG_CACHE_HOME"] = os.path.join(folder, "xdg-cache")
    for name in USERS_OWN:
        os.environ.pop(name, None)
    for name in zygote.BLAS_THREADS:  # a child that imports numpy (a submitit job) starts no BLAS thread per core
        os.environ.setdefault(name, "1")


def _temporary_files_in_memory(config) -> None:
    """The session's temporary files go to memory (helpers.memory_folder: /dev/shm with 2 GB free, programs allowed
    to run there): pytest's folders (tmp_path, own_places), the $TMPDIR of the workers and their children, the
    zygote's socket. A run makes ~8,000 folders and writes SQLite stores, reports and scripts; on the 2-core
    machine's ext4 disk a folder made and removed cost 0.12 ms on the quiet machine, 15 times what it costs in
    memory, and a removal alone 0.75 ms during a run (cProfile of the workers); the suite took 7 % longer (three
    alternated pairs, 2026-11-27: 73.3, 76.0, 77.8 s in memory against 83.3, 80.3, 80.2 s; 26.6 against 30.9 s of
    system CPU). pytest keeps the last three sessions' folders (~95 MB each).
    Where the user chose a place, it is used: --basetemp, PYTEST_DEBUG_TEMPROOT or TMPDIR set."""
    if config.option.basetemp or os.environ.get("PYTEST_DEBUG_TEMPROOT") or os.environ.get("TMPDIR"):
        return
    memory = memory_folder(room=2 << 30, programs=True)
    if memory:
        os.environ["TMPDIR"] = memory
        tempfile.tempdir = None  # gettempdir() looks again


def _start_zygote(config) -> "zygote.Zygote | None":
    """The workers of `-n N` (each `popen`) are forked from a zygote that imports their libraries once
    (tests/zygote.py), in the environment just set; workers given otherwise (--tx) start as xdist starts them."""
    tx = getattr(config.option, "tx", None)
    if not tx or tx != ["popen"] * len(tx):
        return None
    forks = config.stash[_ZYGOTE] = zygote.Zygote()
    return forks


def pytest_collection_finish(session):
    """What collection made (the imported modules, the tests) lives as long as the session: frozen, no full
    collection of the garbage collector scans it again (each worker made 4-8 of them, 0.7-2.6 s in a suite run;
    the workers' GC in all went from 10.8 to 5.2 s with helpers._package_trees; issue 20). Collected first, so that
    no garbage is frozen with it."""
    gc.collect()
    gc.freeze()


def _rewrite_tests_only(config) -> None:
    """pytest rewrites the asserts of the tests, and also of every package whose distribution installs a pytest
    plugin: nsightwrap itself (its `pytest11` fixtures), hypothesis, xdist, pytest-benchmark. Each worker then
    imported their ~200 modules through the rewriting hook, and on a clean checkout or a fresh venv rewrote each
    one again, six workers at once (`pytest -n 6 -k nothing-matches`: 13.7-14.9 s of CPU, 9.0-9.5 s without;
    issue 20). Only the tests' asserts are the suite's: the packages' names are unmarked before the collection
    imports them (the few modules the plugins imported as pytest loaded them stay rewritten). `_must_rewrite` is
    pytest's own set (not public API): another pytest without it rewrites as before."""
    marked = getattr(config.pluginmanager.rewrite_hook, "_must_rewrite", None)
    if isinstance(marked, set):
        marked.clear()


def _hear_ctrl_c() -> None:
    """A suite started in the background of a script (`make test &`) inherits SIGINT ignored, and so did
    every process it started: each test of a Ctrl-C then failed, waiting out its time limit (12 failures, the run
    twice as long). The tests start with Ctrl-C heard, as in a terminal; xdist's workers and the tests' children
    inherit it (what nsightwrap does when it starts with a stop signal ignored has tests of its own)."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def _one_final_collection(config):
    """pytest's unraisable-exception plugin collects garbage five times as it exits (a constant Trio found), in
    every xdist worker, each a walk of the worker's whole heap: the four after the first were 0.31 s of CPU in a
    process that had run 155 tests (issue 20). One collection still finds what a cycle left unraisable; the stash
    key is the one pytest's own pytester sets."""
    try:
        from _pytest.unraisableexception import gc_collect_iterations_key
    except ImportError:  # another pytest: its own count
        return
    config.stash[gc_collect_iterations_key] = 1


def pytest_unconfigure(config):
    if hasattr(config, "workerinput"):  # an xdist worker (its environment variable is inherited by a child pytest)
        atexit.register(_exit_without_teardown)  # the last handler registered: the first to run
    forks = config.stash.get(_ZYGOTE, None)
    if forks is not None:
        forks.close()
    saved = config.stash.get(_SAVED_ENV, None)
    if saved is None:
        return
    shutil.rmtree(os.environ[FAST_PYTHON_VAR], ignore_errors=True)
    for name, value in saved.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


def _exit_without_teardown() -> None:
    """An xdist worker's last act: the exit handlers registered before this one run, in their order, and the
    process ends without tearing down its interpreter. The teardown of a worker's heap (the ~220 tests it ran)
    took 0.3-0.6 s of CPU, all six workers at once when the controller sent them exit after the last test: the
    controller waited 1.3-3.6 s for them (issue 20). The worker has sent its results by then (workerfinished, in
    pytest_sessionfinish), and xdist ignores the exit code of a worker that finished; only memory is left."""
    atexit.unregister(_exit_without_teardown)
    zygote.end_process(0)


@pytest.fixture(autouse=True)
def own_places(tmp_path_factory, monkeypatch):
    """Each test runs in a folder of its own, with its own run records and $TMPDIR for the processes it starts:
    a report written to a relative path, or a temporary folder that a stopped process (a fake launcher killed
    by the tree stop) could not remove, stays in pytest's temporary folders, never in the checkout or $TMPDIR.
    (tempfile.mkdtemp there, not tmp_path_factory.mktemp: that numbers its folders by listing the ones made
    before, a list that grows with every test of the worker, and moves a symbolic link each time.) The cache
    folder is the session's (pytest_configure). The folders left empty are removed after the test (pytest removes
    the fourth-newest session's folders as it exits, a file at a time, while the suite waits)."""
    own = Path(tempfile.mkdtemp(prefix="own-", dir=tmp_path_factory.getbasetemp()))
    for name in ("cwd", "runtime", "tmp"):
        os.mkdir(own / name)
    monkeypatch.chdir(own / "cwd")
    monkeypatch.setenv(RUNTIME_VAR, str(own / "runtime"))
    monkeypatch.setenv("TMPDIR", str(own / "tmp"))
    monkeypatch.setenv("NSIGHTWRAP_EVIDENCE", "off")  # the CLI keeps no run evidence unless a test asks (bundle)
    yield
    for name in ("cwd", "runtime", "tmp", ""):  # the empty ones: pytest removed ~5,000 of them as the suite exited
        try:
            os.rmdir(own / name)
        except OSError:
            pass  # something is in it: kept, for a look after the test


@pytest.fixture(autouse=True)
def leaves_no_files_in_the_checkout():
    """A test writes in tmp_path (monkeypatch.chdir for a relative -o), never in the checkout (issue 23)."""
    before = checkout_files()
    yield
    left = sorted(checkout_files() - before)
    if left:
        pytest.fail(f"the test left {', '.join(left)} in the checkout: write in tmp_path (use monkeypatch.chdir"
                    "(tmp_path) for relative paths), and remove them", pytrace=False)


@pytest.fixture(scope="session")
def probe_cache(tmp_path_factory):
    """One probe cache for the session: probing the fake ncu starts it three times (0.2 s), and its answer never
    changes. Tests of the cache itself use their own folder."""
    return tmp_path_factory.mktemp("ncu-probe-cache")


@pytest.fixture
def fake_env(tmp_path, monkeypatch, probe_cache):
    """Environment in which nsightwrap finds the fake ncu (probed once per session)."""
    monkeypatch.setenv("NSIGHTWRAP_NCU", str(FAKE_NCU))
    monkeypatch.setenv("NSIGHTWRAP_CACHE_DIR", str(probe_cache))
    monkeypatch.setenv("FAKE_NCU_SCALE", FAKE_SCALE)
    monkeypatch.delenv("FAKE_NCU_WEDGED", raising=False)
    monkeypatch.setenv("NSIGHTWRAP_TRACER", "off")  # the tests of the CUPTI tracer give their fake one
    # No nsys but the fake a test names: the machine's own is not looked for (on the GPU machine the real nsys that
    # Nsight Compute ships was found whatever PATH said, and timed these tests' fake programs: session 17, call 2).
    monkeypatch.setenv("NSIGHTWRAP_NSYS", str(tmp_path / "no-nsys" / "nsys"))
    return dict(os.environ)


def _gpu_available() -> str | None:
    """None when a GPU and ncu are usable, else why not."""
    smi = shutil.which("nvidia-smi")
    if not smi:
        return "no NVIDIA driver (nvidia-smi not found)"
    try:
        if subprocess.run([smi, "-L"], capture_output=True, timeout=20).returncode != 0:
            return "nvidia-smi -L failed: no usable GPU"
    except (OSError, subprocess.TimeoutExpired):
        return "nvidia-smi did not answer"
    from nsightwrap.errors import ToolNotFound
    from nsightwrap.ncu.locate import find_ncu

    try:
        find_ncu(env={k: v for k, v in os.environ.items() if k != "NSIGHTWRAP_NCU"})
    except ToolNotFound:
        return "ncu not found"
    return None


def _nvcc() -> str | None:
    nvcc = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
    return nvcc if os.path.exists(nvcc) else None


def _gpu_needs(item, gpus: int) -> str | None:
    """What the item's gpu markers ask beyond a GPU and ncu (`tools=` nvcc, compute-sanitizer; `gpus=N`) and this
    machine lacks, else None."""
    tools = {t for m in item.iter_markers("gpu") for t in m.kwargs.get("tools", ())}
    wanted = max((m.kwargs.get("gpus", 1) for m in item.iter_markers("gpu")), default=1)
    if "nvcc" in tools and _nvcc() is None:
        return "nvcc not found (the CUDA toolkit builds its programs)"
    if "compute-sanitizer" in tools:
        from nsightwrap.diagnose.sanitizer import find_sanitizer
        from nsightwrap.errors import ToolNotFound

        try:
            find_sanitizer()
        except ToolNotFound as e:
            return str(e)
    if gpus < wanted:
        return f"needs {wanted} GPUs, this machine has {gpus}"
    return None


def pytest_collection_modifyitems(config, items):
    """gpu tests run only where a GPU, ncu and what their marker asks for are: else skipped, saying why (the gpu
    marker is the one place a test says what it needs of the machine)."""
    gpu_items = [i for i in items if "gpu" in i.keywords]
    if not gpu_items:
        return
    why = _gpu_available()
    gpus = 0 if why else _gpu_count()
    for item in gpu_items:
        reason = why or _gpu_needs(item, gpus)
        if reason:
            item.add_marker(pytest.mark.skip(reason=f"gpu test: {reason}"))


def _gpu_count() -> int:
    done = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=20)
    return sum(line.startswith("GPU ") for line in done.stdout.splitlines())


@pytest.fixture
def ncu_lookups(monkeypatch):
    """Counts how often ncu is located and probed (every run context does both through nsightwrap.ncu.context)."""
    import nsightwrap.ncu.context as context

    counts = {"find_ncu": 0, "probe_ncu": 0}

    def counted(name, real):
        def call(*args, **kwargs):
            counts[name] += 1
            return real(*args, **kwargs)
        return call

    monkeypatch.setattr(context, "find_ncu", counted("find_ncu", context.find_ncu))
    monkeypatch.setattr(context, "probe_ncu", counted("probe_ncu", context.probe_ncu))
    return counts


@pytest.fixture
def store(tmp_path):
    """A hang store of this test, closed after it."""
    from nsightwrap.store.hangstore import HangStore

    with HangStore(tmp_path / "hangs.db") as s:
        yield s


@pytest.fixture
def fake_rows(monkeypatch):
    """Walks take their rows from the attempts: the fake's reports are copies of real ones, not the program's."""
    import nsightwrap.fallback.walk

    monkeypatch.setattr(nsightwrap.fallback.walk, "report_rows", attempt_rows)


@pytest.fixture
def tag(monkeypatch):
    """Every process of the test carries FAKE_TEST_TAG, so that leftovers can be looked for."""
    value = uuid.uuid4().hex
    monkeypatch.setenv("FAKE_TEST_TAG", value)
    yield value
    assert processes_with("FAKE_TEST_TAG", value) == [], "processes of this test were left behind"


@pytest.fixture(scope="session")
def pg_server():
    """A real PostgreSQL server for this session (one per xdist worker, ~1.5 s to start; see tests/pg.py),
    stopped and removed at the end. Where it cannot be started the tests that need it skip, saying why, unless
    NSIGHTWRAP_TEST_STRICT=1 (CI's .ci/run): then they fail (helpers.unavailable)."""
    import pg

    why = pg.missing()
    if why:
        unavailable(f"no PostgreSQL server: {why}")
    server = pg.start_server(template=_pg_template())
    try:
        yield server
    finally:
        server.stop()


def _pg_template() -> Path | None:
    """The session's folder where the first worker to start a server runs initdb, and the others copy its data
    folder (tests/pg.py): in the folder pytest_configure made (removed at the end), the server's user's
    (nobody, when we are root: the folder above lets it through). None outside such a session."""
    folder = os.environ.get(FAST_PYTHON_VAR)
    if not folder or not os.path.isdir(folder):
        return None
    template = Path(folder, "pg-template")
    template.mkdir(exist_ok=True)
    if os.geteuid() == 0:
        import pwd

        nobody = pwd.getpwnam("nobody")
        os.chown(template, nobody.pw_uid, nobody.pw_gid)
        os.chmod(folder, 0o711)
    return template


@pytest.fixture(params=["sqlite", "postgresql"])
def store_setting(request, tmp_path) -> str:
    """What --store / NSIGHTWRAP_STORE / store= is given, once for each backend: an SQLite file, and the URL
    (with the team's password) of a fresh database on the session's PostgreSQL server."""
    if request.param == "sqlite":
        return str(tmp_path / "hangs.db")
    server = request.getfixturevalue("pg_server")
    return server.url(server.new_database())


@pytest.fixture
def triage_env(tmp_path, monkeypatch):
    """For the triage tests (tests/diagnose): the fake tracer (any file as the library), a run counter (absent
    until a run is made), a seed; the fake sanitizer's fast clock; no CUDA_LAUNCH_BLOCKING from outside."""
    lib = tmp_path / "libfake_tracer.so"
    lib.write_text("")
    monkeypatch.setenv("NSIGHTWRAP_TRACER", str(lib))
    monkeypatch.setenv("FAKE_TRIAGE_COUNTER", str(tmp_path / "counter"))
    monkeypatch.setenv("FAKE_TRIAGE_SEED", "11")
    monkeypatch.setenv("FAKE_SAN_SCALE", "0.1")
    monkeypatch.delenv("CUDA_LAUNCH_BLOCKING", raising=False)
    return dict(os.environ)


@pytest.fixture
def fake_gpus(fake_env, monkeypatch, tmp_path):
    """The fake nvidia-smi first on PATH with two GPUs (FAKE_SMI_GPUS: a test may set it again) and a scope of this
    test's own (FAKE_SMI_SCOPE: only its processes are listed); the fake target runs as on a GPU. The engine's
    tests (tests/fallback) start from it."""
    monkeypatch.setenv("PATH", f"{FAKE_SMI_DIR}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_GPU_TARGET", "1")
    monkeypatch.setenv("FAKE_SMI_SCOPE", uuid.uuid4().hex)
    monkeypatch.setenv("FAKE_SMI_GPUS", "2")
    return tmp_path


@pytest.fixture
def quick_suspicion(monkeypatch):
    """For main(argv) in this process: helpers.SUSPECT_SOON's change (and its reason), undone after the test."""
    from nsightwrap.calibrate import confirm

    monkeypatch.setattr(confirm, "SUSPECT_AFTER_S", STALL_S)


