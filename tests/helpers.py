"""What the tests share: the fakes, run configs on the tests' fast clock, and checks that a tree is gone.

Tests import from here (`from helpers import app, run_config`), not from
conftest: a test that runs pytest inside pytest brings a conftest of its own.

Time in tests: the fake ncu multiplies its delays by FAKE_NCU_SCALE
(TIME_SCALE, set by the `fake_env` fixture), so a kernel takes milliseconds
and the slow-launch warning comes after 0.3 s instead of 3 s; the stall
timeouts of the runs are scaled alike (`scaled_ladder` for the built-in
ladders). Pure logic is tested with injected time instead (rules, state).
"""

from __future__ import annotations

import ast
import concurrent.futures
import contextlib
import functools
import gc
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Callable, Iterator, Optional, Sequence

from nsightwrap.fallback.ladder import Ladder, load_ladder
from nsightwrap.ncu.allowance import AllowancePolicy
from nsightwrap.ncu.attempt import Attempt
from nsightwrap.ncu.context import RunConfig
from nsightwrap.watch.tree import COOKIE_VAR, OWNER_VAR, StopPolicy, processes_with

HERE = Path(__file__).parent
ROOT = HERE.parent
FAKE_DIR = HERE / "fake_ncu"
FAKE_NCU = FAKE_DIR / "ncu"
FAKE_APP = FAKE_DIR / "app.py"
FAKE_NSYS = HERE / "fake_nsys" / "nsys"
FAKE_SMI_DIR = HERE / "fake_nvidia_smi"
FAKE_SANITIZER = HERE / "fake_sanitizer" / "compute-sanitizer"
SAN_APP = HERE / "fake_sanitizer" / "app.py"  # the fake sanitizer's CUDA program with planted bugs
FLAKY = HERE / "fake_triage" / "flaky.py"  # triage's seeded intermittent program
DATA = HERE / "data"

#: The tests' clock against the real tool's: the fakes' delays and the
#: built-in ladders' stall timeouts are multiplied by this.
TIME_SCALE = 0.1
FAKE_SCALE = str(TIME_SCALE)
#: A stall timeout that a fake kernel's progress never reaches: its marks come
#: milliseconds apart, and the watch loop read them at most 0.12 s apart with
#: four busy loops beside it on this 2-core machine.
STALL_S = 0.4
#: Calibrated allowances on the tests' clock: a fifth of the real floor (2.5 s), as the fakes' kernels take
#: milliseconds, and a margin of 0.25 instead of 4: a fake program's calibrated time (a plain run) is mostly
#: the interpreter's start (0.2-0.4 s), which a margin of 4 made a 4.7 s allowance for a 38-pass probe and a
#: margin of 1 still 2.4 s, waited out by every calibrated hang of a walk or a sweep. 0.25 gives 0.6 s (10
#: passes) to 1 s (38): both stay above any silence of a fake kernel that does not hang (milliseconds) and
#: above STALL_S.
FAST_ALLOWANCE = AllowancePolicy(margin=0.25, floor_s=0.5)


def memory_folder(room: int = 1 << 30, programs: bool = False) -> Optional[str]:
    """/dev/shm where it is a writable folder with `room` bytes free (and, with `programs`, not mounted noexec), else
    None. It is a tmpfs on most Linux machines (this project's both): what the tests write there never reaches a disk
    (no journal, an fsync is free)."""
    try:
        fs = os.statvfs("/dev/shm")
        if not os.access("/dev/shm", os.W_OK | os.X_OK) or fs.f_bavail * fs.f_frsize < room:
            return None
        if programs and fs.f_flag & getattr(os, "ST_NOEXEC", 0):
            return None
    except OSError:
        return None
    return "/dev/shm"


def parsed(path: Path) -> ast.Module:
    """The syntax tree of a Python file. The package's modules are parsed once a session: tests/project's scans of
    the package (layers, imports, environment variables, dependencies) share them (its 138 modules take ~0.5 s to
    parse); another file (a test, a benchmark: the shim check reads them) is parsed at each call."""
    path = Path(path).resolve()
    return _package_trees().get(path) or _parse(path)


def _parse(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


@functools.cache
def _package_trees() -> dict[Path, ast.Module]:
    """Every module of the package parsed, then frozen (gc.freeze, after a collection: no garbage is frozen with
    them): ~450,000 objects kept for the session, which no later full collection scans (they made 2.2-2.6 s of one
    worker's GC in a suite run; issue 20)."""
    trees = {path.resolve(): _parse(path) for path in sorted((ROOT / "nsightwrap").rglob("*.py"))}
    gc.collect()
    gc.freeze()
    return trees


def fast_stop(**kw: float) -> StopPolicy:
    """A StopPolicy for the fakes, which shut down within milliseconds of SIGINT."""
    return StopPolicy(**{"grace": 2.0, "term_wait": 1.0, "kill_wait": 2.0, "drain": 1.0, **kw})


#: The known cause's grace on the tests' clock (1 s on the GPU machine), under dist_config's stall timeout.
KNOWN = AllowancePolicy(FAST_ALLOWANCE.margin, FAST_ALLOWANCE.floor_s, known_cause_s=0.1)


def dist_config(tmp_path: Path, env: dict, **kw: Any) -> RunConfig:
    """A RunConfig for a job of the fake torchrun: a stall timeout of 0.6 s, and a short stop grace (the ranks
    live on after ncu took SIGINT, waiting in the collective, so each stop goes on to SIGTERM them; how long it
    waits first is not what these tests look at)."""
    return run_config(tmp_path, **{"report_dir": str(tmp_path / "r"), "stall_timeout": 0.6, "env": env,
                                   "stop": fast_stop(grace=0.2), **kw})


def app(*steps: str) -> list[str]:
    """The command line of a fake CUDA program (see tests/fake_ncu/app.py). Its interpreter is this one without
    site (stdlib only; conftest.pytest_configure made it) where the session made one, so that app(...)[1:] is
    still the script and its steps (the fake launchers' tests pass that on)."""
    return [_no_site_python(), str(FAKE_APP), *steps]


def _no_site_python() -> str:
    folder = os.environ.get("NSIGHTWRAP_TEST_PYTHON_DIR")
    script = os.path.join(folder, "no-site", os.path.basename(sys.executable)) if folder else ""
    return script if os.path.exists(script) else sys.executable


def run_config(tmp_path: Path, **kw: Any) -> RunConfig:
    """A RunConfig for the fake ncu: reports under tmp_path, a short stall timeout (and floor of calibrated
    allowances), a fast stop, no GPU checks."""
    kw.setdefault("report_dir", str(tmp_path / "reports"))
    kw.setdefault("stall_timeout", STALL_S)
    kw.setdefault("allowance", FAST_ALLOWANCE)
    kw.setdefault("stop", fast_stop())
    kw.setdefault("check_gpu", False)
    return RunConfig(**kw)


def scaled_ladder(name: str, scale: float = TIME_SCALE) -> Ladder:
    """A built-in ladder with its rungs' stall timeouts on the tests' clock (quick: 8, 6, 6 s -> 0.8, 0.6, 0.6)."""
    ladder = load_ladder(name)
    rungs = tuple(replace(r, stall_timeout=r.stall_timeout * scale) if r.stall_timeout else r for r in ladder.rungs)
    return replace(ladder, rungs=rungs)


def attempt_rows(attempt: Attempt) -> Any:
    """Rows from the attempt's record: the fake's reports are copies of real ones, not this program's."""
    import pandas as pd

    return pd.DataFrame({"function": [k.name for k in attempt.kernels],
                         "passes": [k.passes for k in attempt.kernels]})


# --- processes ---------------------------------------------------------------------


def assert_tree_gone(cookie: str) -> None:
    """No process of the run with this cookie is left."""
    assert cookie
    assert processes_with(COOKIE_VAR, cookie) == []


def assert_clean(attempt: Attempt) -> None:
    """The attempt's tree is gone and its stop left no survivor."""
    assert_tree_gone(attempt.cookie)
    assert not (attempt.stop.survivors if attempt.stop else []), attempt.stop.survivors


def no_leftovers() -> None:
    """No process started by this test process (through the watchdog) is left."""
    mine = [p for p, env in processes_with(COOKIE_VAR) if env.get(OWNER_VAR) == str(os.getpid())]
    assert mine == []


def run_cli(args: Sequence[str], env: Optional[dict] = None, timeout: float = 120,
            cwd: Optional[Path] = None) -> subprocess.CompletedProcess:
    """`python -m nsightwrap ARGS`, its output captured as text."""
    return subprocess.run([sys.executable, "-m", "nsightwrap", *args], capture_output=True, text=True,
                          env=env, timeout=timeout, cwd=cwd)


#: `python -c` this, then the command line: an uncalibrated kernel is suspected after STALL_S (0.4 s, the library
#: runs' stall timeout) instead of 3 s, which the command line has no option for (--stall-timeout would skip the
#: calibration the tests of tests/calibrate are about; test_calibrate.py checks the 3 s itself). The same __main__,
#: its signal handling included, reached 2.6 s sooner. In this process: tests/calibrate's quick_suspicion.
SUSPECT_SOON = (f"import runpy, nsightwrap.calibrate.confirm as c; c.SUSPECT_AFTER_S = {STALL_S}; "
                "runpy.run_module('nsightwrap', run_name='__main__', alter_sys=True)")


def start_cli(args: Sequence[str], env: dict, cwd: Optional[Path] = None,
              main: Sequence[str] = ("-m", "nsightwrap")) -> subprocess.Popen:
    """`python -m nsightwrap ARGS` in the background (in `cwd`, else this one), stdout and stderr piped. main:
    what runs the command line instead of `-m nsightwrap` (`-c CODE` that sets something first)."""
    return subprocess.Popen([sys.executable, *main, *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=env, cwd=cwd)


def read_until(p: subprocess.Popen, stream: Any, needle: bytes, timeout: float = 30) -> bytes:
    """What `stream` of `p` printed until `needle` (failing if p ends or the time is up first)."""
    os.set_blocking(stream.fileno(), False)
    buf, end = b"", time.monotonic() + timeout
    while needle not in buf:
        assert time.monotonic() < end and p.poll() is None, buf.decode(errors="replace")
        time.sleep(0.02)
        buf += stream.read() or b""
    return buf


def sigint_when(p: subprocess.Popen, ready: Callable[[], Optional[bytes]], timeout: float = 60) -> dict:
    """SIGINT to the command line `p` once `ready()` returns (what it read of p's output, if anything); p must end
    with 130 and one JSON document on stdout, which is returned."""
    import json

    seen = b""
    try:
        seen = ready() or b""
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=timeout)
    finally:
        p.kill()
    assert p.returncode == 130, (seen + err).decode(errors="replace")
    return json.loads(out)


def ctrl_c_sweep(argv: Sequence[str], env: dict, settle_s: float = 0.0) -> dict:
    """`nsightwrap ARGV` (a sweep or walk on an executor): once a probe's job runs (and `settle_s` later), SIGINT;
    it must end interrupted (130, JSON status `interrupted`). Its JSON document."""
    p = start_cli(argv, env)

    def running() -> bytes:
        seen = read_until(p, p.stderr, b"1 running", timeout=60)
        time.sleep(settle_s)
        return seen

    doc = sigint_when(p, running)
    assert doc["status"] == "interrupted"
    return doc


def sigterm_once_hung(p: subprocess.Popen, stream: Any) -> tuple[bytes, bytes]:
    """Read `stream` until the fake kernel hangs at `0%..`, SIGTERM `p`; return (what was read, its stdout)."""
    try:
        buf = read_until(p, stream, b"0%..")
        p.send_signal(signal.SIGTERM)
        out, _ = p.communicate(timeout=30)
    finally:
        p.kill()
    return buf, out


# --- files this user cannot write, and stores of older schema versions ---------------------------------------------

def run_read_only(target: Path, argv: Sequence[str], env: dict) -> subprocess.CompletedProcess:
    """Run argv with `target` (a file or a folder) read-only: chmod for a user, a read-only bind mount for
    root (unavailable where neither works)."""
    if os.geteuid() != 0:
        before = target.stat().st_mode & 0o777
        target.chmod(before & ~0o222)
        try:
            return subprocess.run(list(argv), capture_output=True, text=True, env=env, timeout=120)
        finally:
            target.chmod(before)
    import shutil

    unshare = shutil.which("unshare")
    if unshare is None:
        unavailable("root, and no unshare to make a read-only mount")
    mount = 'mount --bind -o ro "$1" "$1" || exit 97; shift; exec "$@"'
    done = subprocess.run([unshare, "--mount", "--", "sh", "-c", mount, "sh", str(target), *argv],
                          capture_output=True, text=True, env=env, timeout=120)
    if done.returncode in (97, 1) and not done.stdout:
        unavailable(f"root, and a read-only bind mount is not allowed here: {done.stderr.strip()}")
    return done


def version_1_store(path: Path, insert_sql: str, params: Sequence[Any] = ()) -> Path:
    """A hang store as nsightwrap's first schema made it, with one row written by `insert_sql`."""
    import sqlite3

    from nsightwrap.store.schema import MIGRATIONS

    conn = sqlite3.connect(path)
    conn.executescript(MIGRATIONS[0] + "; CREATE TABLE schema_version (version INTEGER NOT NULL);"
                       "INSERT INTO schema_version VALUES (1);")
    conn.execute(insert_sql, tuple(params))
    conn.commit()
    conn.close()
    return path


class FakeContext:
    """What Calibrator needs of a RunContext: its config and replace(**changes)."""

    def __init__(self, config):
        self.config = config

    def replace(self, **changes):
        return FakeContext(self.config.replace(**changes))


# --- the command line in this process ------------------------------------------------------------------------


def cli_main(args: Sequence[str], capsys: Any) -> tuple[int, str, str]:
    """`nsightwrap ARGS` through `main(argv)` in this process (the environment and cwd are this process's: set
    them with monkeypatch): (exit code, stdout, stderr). For a test not about the process boundary (signals, a
    real exit, broken pipes and tracebacks on stderr stay real processes): it saves the interpreter's start and
    nsightwrap's import, ~0.25 s of CPU a run."""
    from nsightwrap.cli.main import main

    capsys.readouterr()
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


# --- an engine backend that runs each job at once, in the dispatcher's thread -----------------------------------


class InlineJob:
    """A job of InlineGpus: already done, its reply at hand."""

    def __init__(self, reply: dict):
        self.reply, self.job_id = reply, "inline"

    def done(self) -> bool:
        return True

    def result(self) -> dict:
        return self.reply

    def cancel(self, check: bool = True) -> None:
        pass


class GpuSlots:
    """The slots of a fake backend of the probe engine (fallback/executor.py): GPUs free or set aside; room,
    release, set_aside and exhausted as the engine asks them (every GPU set aside: no job can run again).
    A subclass adds submit."""

    def __init__(self, gpus: Sequence[str]) -> None:
        self.free, self.aside, self.count = list(gpus), [], len(gpus)

    def room(self) -> int:
        return len(self.free)

    def release(self, slot: str) -> None:
        self.free.append(slot)

    def set_aside(self, slot: str, job: Any, reply: Any) -> str:
        self.aside.append(slot)
        return f"GPU {slot}"

    def exhausted(self) -> Optional[str]:
        return "every GPU was set aside" if len(self.aside) >= self.count else None


class InlineGpus(GpuSlots):
    """The probe engine's backend (fallback/executor.py) over fake GPUs "0" and "1": each job is run_probe'd at once
    on its GPU. keeps(gpu, n) says whether the GPU keeps processes after the backend's n-th job (1, 2, ...): such a
    job's GPU is then set aside by the engine's rule. `log`: (kernel, rung, GPU) of every job."""

    def __init__(self, keeps=lambda gpu, n: False):
        super().__init__(["0", "1"])
        self.log, self.keeps = [], keeps

    def submit(self, tasks: Sequence[Any]) -> list:
        from nsightwrap.fallback.probejob import run_probe

        out = []
        for task in tasks:
            g = self.free.pop(0)
            reply = run_probe(replace(task, gpu=g))
            self.log.append((task.kernel, task.rung, g))
            if self.keeps(g, len(self.log)):
                reply["attempt"] = replace(reply["attempt"], gpu_left_after=("4242 app",))
            out.append((InlineJob(reply), g))
        return out



class ThreadJob:
    """A job of ThreadGpus: run_probe in a thread of its own, done when the thread is. The task and the reply are
    pickled on the way, as submitit does (nothing reaches the node or comes back by sharing an object)."""

    def __init__(self, task: Any):
        import pickle
        import threading

        from nsightwrap.fallback.probejob import run_probe

        def job() -> None:
            self.reply = pickle.loads(pickle.dumps(run_probe(pickle.loads(pickle.dumps(task)))))

        self.reply, self.job_id = None, "thread"
        self.thread = threading.Thread(target=job, daemon=True)
        self.thread.start()

    def done(self) -> bool:
        return not self.thread.is_alive()

    def result(self) -> dict:
        return self.reply

    def cancel(self, check: bool = True) -> None:
        pass


class ThreadGpus(InlineGpus):
    """InlineGpus whose jobs run at the same time, each run_probe'd in a thread of this process: two chains'
    jobs overlap as on submitit's local executor, without its processes (a job, its controller, their imports:
    ~1 s of CPU a job). For a test of the engine's or the walk's logic (no GPU keeps processes here); a job's
    cancel stops nothing (its thread runs its attempt to the end): a test of cancelling keeps submitit's jobs."""

    def submit(self, tasks: Sequence[Any]) -> list:
        out = []
        for task in tasks:
            g = self.free.pop(0)
            self.log.append((task.kernel, task.rung, g))
            out.append((ThreadJob(replace(task, gpu=g)), g))
        return out


def alive_in_scope(scope: str) -> list[int]:
    """Live processes of a test with FAKE_SMI_SCOPE=scope (the fake_gpus fixture): jobs, attempts, fake ncu and
    program; zombies left out."""
    found = []
    for d in filter(str.isdigit, os.listdir("/proc")):
        try:
            env = open(f"/proc/{d}/environ", "rb").read()
            state = open(f"/proc/{d}/stat").read().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if f"FAKE_SMI_SCOPE={scope}".encode() in env and state != "Z":
            found.append(int(d))
    return found


def walk_steps(result: Any) -> list[tuple]:
    """A LadderResult's steps as comparable tuples: (job, rung, skipped, the attempt's status and stalled kernel)."""
    return [(s.job, s.rung.name, s.skipped, s.attempt.status if s.attempt else None,
             s.attempt.stalled_kernel if s.attempt else None) for s in result.steps]


def store_records(path: Any) -> list[tuple]:
    """The hang store's records at `path`, sorted, as comparable tuples (kernel, rung, ladder, outcome, key)."""
    from nsightwrap.store.hangstore import HangStore

    with HangStore(path) as store:
        return sorted((r.kernel, r.rung or "", r.ladder or "", r.outcome, r.key) for r in store.records())


#: Set by .ci/run: a test whose environment lacks what it needs fails there instead of skipping.
STRICT_VAR = "NSIGHTWRAP_TEST_STRICT"


def unavailable(why: str) -> None:
    """This machine cannot give the test what it needs (root without unshare, no PostgreSQL server, ...): the test
    is skipped, saying why, where a developer's machine may lack it; under NSIGHTWRAP_TEST_STRICT=1 (CI, whose
    machine must have it) it fails, since a skip proves nothing."""
    import pytest

    if os.environ.get(STRICT_VAR) == "1":
        pytest.fail(f"{why} ({STRICT_VAR}=1: this machine must provide it)")
    pytest.skip(why)


def without_ncu_anywhere(path: str = "/usr/bin:/bin") -> None:
    """Skip a test whose subject is a machine with no ncu at all (its commands run with PATH `path`), on a machine
    where nsightwrap finds one all the same (/usr/local/cuda/bin, /opt/nvidia/nsight-compute/<version>: the GPU
    machine's is found there whatever PATH says; or in `path`): the suite ran there with 9 failures of such tests
    (2026-11-27). CI's machine has none."""
    import pytest

    from nsightwrap.errors import ToolNotFound
    from nsightwrap.ncu.locate import find_ncu

    try:
        found = find_ncu(env={"PATH": path})
    except ToolNotFound:
        return
    pytest.skip(f"this machine has ncu at {found}, which nsightwrap finds with PATH={path}: the test needs one without")


def failing_smi(folder: Path) -> Path:
    """`folder`/nvidia-smi, which fails as nvidia-smi does on a machine without an NVIDIA driver (exit 9)."""
    smi = folder / "nvidia-smi"
    smi.write_text('#!/bin/sh\necho "NVIDIA-SMI has failed because it couldn\'t communicate with the NVIDIA driver."\n'
                   "exit 9\n")
    smi.chmod(0o755)
    return smi


def no_driver_path(folder: Path) -> str:
    """A PATH of /usr/bin:/bin whose nvidia-smi fails, as on a machine without an NVIDIA driver: also on a GPU
    machine, whose nvidia-smi is /usr/bin's (a folder in `folder` with a failing_smi comes first)."""
    bin_dir = folder / "no-driver-bin"
    bin_dir.mkdir(exist_ok=True)
    failing_smi(bin_dir)
    return f"{bin_dir}{os.pathsep}/usr/bin{os.pathsep}/bin"


#: `python -m pytest` for a test of the pytest plugin or fixtures (a pytest session inside a test): without the
#: plugins the suite itself runs on (xdist, pytest-benchmark, hypothesis), which the inner session never uses and
#: which doubled its start (0.76 -> 0.40 s of CPU); nsightwrap's own plugin still loads from its entry point. Nor
#: the unraisable-exception plugin, which collects garbage five times at the session's end (~0.1 s each with
#: pandas loaded) to warn of exceptions in __del__: the outer test reads the inner session's pass count only.
INNER_PYTEST_PLUGINS = ("-p", "no:cacheprovider", "-p", "no:xdist", "-p", "no:benchmark", "-p", "no:hypothesispytest",
                        "-p", "no:unraisableexception")
INNER_PYTEST = (sys.executable, "-m", "pytest", "-q", *INNER_PYTEST_PLUGINS)


# --- a backend of the probe engine whose jobs end when the test says (tests/fallback) ---------------


@dataclass(frozen=True)
class ManualTask:
    """A task of the engine's tests: its options, and where its job announces (ProbeEngine sets it)."""

    options: str
    announce: Optional[str] = None


class ManualJob:
    """A job that ends when the test says (finished = True; failed = an exception its result raises) or is
    cancelled (cancels counts the cancels; deaf: a cancel does not end it)."""

    def __init__(self, task, slot):
        self.task, self.slot, self.finished, self.cancelled = task, slot, False, False
        self.failed, self.deaf, self.cancels = None, False, 0
        self.job_id = f"job-{task.options}"

    def done(self):
        return self.finished or self.failed is not None or (self.cancelled and not self.deaf)

    def result(self):
        if self.failed is not None:
            raise self.failed
        return {"host": "h", "gpu": self.slot, "options": self.task.options, "cancelled": self.cancelled,
                "attempt": SimpleNamespace(gpu_left_after=())}

    def cancel(self, check=True):
        self.cancelled, self.cancels = True, self.cancels + 1


class ManualGpus(GpuSlots):
    """The engine's backend over n fake GPUs whose jobs end when the test says: jobs in submission order."""

    def __init__(self, n):
        super().__init__([str(i) for i in range(n)])
        self.jobs = []
        self.refuse = None  # an exception submit() raises (sbatch refused)

    def submit(self, tasks):
        if self.refuse is not None:
            raise self.refuse
        out = []
        for t in tasks:
            job = ManualJob(t, self.free.pop(0))
            self.jobs.append(job)
            out.append((job, job.slot))
        return out

    def job(self, options):
        return next(j for j in self.jobs if j.task.options == options)


def wait_until(predicate, what, limit_s=5.0):
    """Wait (real time, at most limit_s) until predicate() holds; `what` is the failure's message."""
    deadline = time.monotonic() + limit_s
    while not predicate():
        assert time.monotonic() < deadline, what
        time.sleep(0.005)


# --- a pytest session inside the test's own process (tests of nsightwrap's pytest fixtures) ---------------


@dataclass
class InnerSession:
    """What inline_pytest's session did: its exit code and its tests' reports (skips and failures of any
    phase, the other outcomes of the call)."""

    code: int
    reports: list

    def count(self, outcome: str) -> int:
        return sum(r.outcome == outcome for r in self.reports)

    def text(self) -> str:
        """Each report's test, outcome and long text: an assertion's message."""
        return "\n".join(f"{r.nodeid} {r.when} {r.outcome}: {r.longreprtext}" for r in self.reports)


def inline_pytest(path, monkeypatch, *args: str) -> InnerSession:
    """`INNER_PYTEST path *args` run in this process, as pytester's inline_run does: no interpreter to start,
    and pytest, nsightwrap, its plugin and pandas are loaded already (~1 s of CPU less than the process). For
    what happens inside a session (the plugin's fixtures, their skips), not for a process's own behaviour.
    The session runs in `path`'s folder, whose test modules are forgotten after it; put no conftest.py there
    (the name is the outer session's): count in the outer test instead (monkeypatch, ncu_lookups)."""
    import importlib

    import pytest

    reports = []

    class Collect:
        @staticmethod
        def pytest_runtest_logreport(report):
            if report.when == "call" or report.outcome != "passed":
                reports.append(report)

    folder = Path(path).resolve()
    folder = folder if folder.is_dir() else folder.parent
    monkeypatch.chdir(folder)
    monkeypatch.delenv("PYTEST_ADDOPTS", raising=False)
    importlib.invalidate_caches()  # the test modules were just written
    modules, path_before = set(sys.modules), list(sys.path)
    current = os.environ.get("PYTEST_CURRENT_TEST")
    try:
        # INNER_PYTEST's plugins off, and the terminal's (its lines would reach this session's output: the
        # reports come back through Collect) and faulthandler's (it would re-enable itself on another stderr).
        code = pytest.main([str(path), *INNER_PYTEST_PLUGINS, "-p", "no:terminal", "-p", "no:faulthandler", *args],
                           plugins=[Collect()])
    finally:
        sys.path[:] = path_before
        for name in set(sys.modules) - modules:
            file = getattr(sys.modules[name], "__file__", None) or ""
            if file.startswith(str(folder) + os.sep):
                del sys.modules[name]
        if current is not None:
            os.environ["PYTEST_CURRENT_TEST"] = current  # the inner runner removed it
    return InnerSession(int(code), reports)


# --- two independent walks of one test at once (tests/fallback) ---------------


@contextlib.contextmanager
def beside(fn: Callable[..., Any], *args: Any) -> Iterator[concurrent.futures.Future]:
    """fn(*args) run in a thread of this process while the test goes on (the serial walk beside the engine's walk
    it is compared with: the two walks' stall timeouts are waited out at the same time, not one after the other).
    Yields its Future (result() waits for it and returns its answer or raises its exception); leaving the block
    waits for it too (a failed test leaves nothing running)."""
    with concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="beside") as pool:
        yield pool.submit(fn, *args)


class CountingMeasure:
    """The calibration's measure (nsightwrap.calibrate.measure), its calls counted: a walk or sweep whose cause is
    known, or that meets no hang, must never need one (tests/fallback/test_multi.py, tests/ncu/test_known_causes.py)."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, *args, **kwargs):
        from nsightwrap.calibrate.measure import measure

        self.calls += 1
        return measure(*args, **kwargs)
