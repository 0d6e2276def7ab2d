"""xdist's workers forked from one process that imported their libraries once (issue 20).

Each of xdist's workers was a fresh `python -u -c BOOTSTRAP`: it imported pytest and its plugins, pandas, numpy,
SQLAlchemy, hypothesis and nsightwrap, ~1.7 s of CPU each, six at once while the suite had not started a test.
Here xdist's controller (conftest.pytest_configure) starts one process, the zygote, which imports them once,
freezes them (gc.freeze) and listens on a Unix socket in a private folder. When it is ready, xdist's workers are
given as `popen//python=CLIENT`: the command execnet runs for a worker is the client, which hands its stdin,
stdout and stderr, its folder, its environment and its SIGINT disposition to the zygote. The zygote forks the
worker, which runs execnet's bootstrap on those streams as `python -u -c` would: signals as Python sets them,
`__main__` of its own, sys.argv and sys.path[0] of `-c`, threads joined and exit handlers run at its end, an
uncaught KeyboardInterrupt ending it by SIGINT. The client stays as xdist's process of the worker: it passes
SIGTERM and SIGHUP on and exits with the worker's status (dies by its signal). A worker whose client went away
(xdist SIGKILLs a worker that does not end) is killed by the zygote, and so are workers left when it closes.

What differs from a fresh `python -u -c`: the worker's parent is the zygote, not pytest (its process group is
pytest's: neither starts a session), and it dies with the zygote (PR_SET_PDEATHSIG); what Python reads at its start
(PYTHONHASHSEED, PYTHONIOENCODING, -B, sys.flags, sys.orig_argv) is the zygote's (numpy's global random state is
seeded again in each worker, as `random` reseeds itself at a fork); numpy's BLAS has one thread. A
zygote that is not ready (it failed, took over 30 s, or has a thread once it imported: the GPU machine's pandas
starts pyarrow's jemalloc thread) is stopped, and xdist starts its workers itself; a client that finds no zygote
runs python itself.
"""

from __future__ import annotations

import atexit
import gc
import io
import json
import os
import select
import shlex
import shutil
import signal
import socket
import struct
import sys
import threading
import traceback
import types

#: What a worker imports (pytest's plugins and the libraries of the tests) beside every nsightwrap module.
LIBRARIES = ("pytest", "xdist.plugin", "hypothesis", "_hypothesis_pytestplugin",
             "pytest_benchmark.plugin", "pandas", "numpy", "sqlalchemy", "sqlalchemy.dialects.sqlite",
             "sqlalchemy.dialects.postgresql", "psycopg", "yaml", "rich.console", "rich.live", "psutil", "tenacity",
             "submitit", "ncu_report")
#: The top-level packages pytest marks for assert rewriting (their distributions install a pytest plugin): those
#: imported here say PYTEST_DONT_REWRITE, pytest's own marker, else each worker warns that it cannot rewrite them.
#: The suite rewrites only its tests (conftest._rewrite_tests_only).
PLUGIN_PACKAGES = ("nsightwrap", "hypothesis", "_hypothesis_pytestplugin", "_hypothesis_globals",
                   "_hypothesis_ftz_detector", "xdist", "pytest_benchmark")
#: numpy's BLAS starts a thread per core as it is imported (OpenBLAS, OpenMP): one only, in the zygote. The workers'
#: numpy then uses one (it used two on the 2-core machine, beside five other workers).
BLAS_THREADS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")
_HEADER = struct.Struct("!I")


# --- the controller's side ------------------------------------------------------------------------------
class Zygote:
    """The zygote process of a session, started in a folder of its own: `client` is the command to give execnet as
    a worker's python once `wait_ready()`."""

    def __init__(self, python: str = sys.executable, imports: tuple[str, ...] = ()) -> None:
        """`imports`: the modules the zygote imports; none named, what the suite's workers import."""
        import subprocess
        import tempfile

        self.folder = tempfile.mkdtemp(prefix="nsightwrap-zygote-")
        self.socket_path = os.path.join(self.folder, "zygote.sock")
        self.client = os.path.join(self.folder, "client")
        here, sock, py = (shlex.quote(p) for p in (os.path.abspath(__file__), self.socket_path, python))
        with open(self.client, "w") as f:
            f.write(f'#!/bin/sh\nexec {py} -S {here} client {sock} {py} "$@"\n')
        os.chmod(self.client, 0o755)
        self.process = subprocess.Popen([python, os.path.abspath(__file__), "serve", self.socket_path, *imports],
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        self.why: str | None = None  #: why it is not ready ("": it is; None: not asked yet)

    def wait_ready(self, timeout: float = 30.0) -> bool:
        """Whether the zygote imported what it imports and listens. False where it failed, took over `timeout`
        (then it is stopped: it would slow the workers started without it), or its paths cannot be used (a
        socket's path is at most 107 bytes; execnet splits its spec at "//")."""
        if self.why is None:
            ready, _, _ = select.select([self.process.stdout], [], [], timeout)
            said = self.process.stdout.readline().decode(errors="replace").strip() if ready else ""
            self.why = ("" if said == "ready" else f"the zygote said {said!r}" if said else
                        "the zygote ended before it was ready" if ready else f"not ready in {timeout} s")
            if len(os.fsencode(self.socket_path)) >= 100 or "//" in self.client:
                self.why = f"{self.folder} cannot hold a socket or be named in --tx"
            if self.why:
                self.process.kill()
        return not self.why

    @property
    def tx(self) -> str:
        """The spec of one worker for xdist's --tx."""
        return f"popen//python={shlex.quote(self.client)}"

    def close(self, timeout: float = 10.0) -> None:
        """The zygote ends once its stdin closes, and kills what is left of its workers (xdist ended them)."""
        import subprocess

        self.process.stdin.close()
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.process.stdout.close()
        shutil.rmtree(self.folder, ignore_errors=True)


# --- the zygote ------------------------------------------------------------------------------------------
def serve(path: str, imports: list[str]) -> None:
    sys.path[0] = ""  # python -c's first entry (the current folder), not this file's folder (tests/)
    said = os.dup(1)  # "ready" (or why not) goes there alone: what an import prints goes to stderr
    os.dup2(2, 1)
    for name in BLAS_THREADS:  # numpy's BLAS without its threads: a process with threads must not fork
        os.environ[name] = "1"
    gc.disable()  # imports make long-lived objects, little garbage: 1.5 -> 1.3 s of CPU before the first worker
    try:
        _import_everything(imports)
    finally:
        gc.enable()  # before the fork: the workers collect as python does
    threads = [_comm(task) for task in os.listdir("/proc/self/task") if task != str(os.getpid())]
    if threads:  # a library's thread (native too: pyarrow's jemalloc, under pandas) would be lost in each fork
        os.write(said, f"threads {' '.join(threads)}\n".encode())  # not ready: xdist starts its workers itself
        return
    gc.collect()
    gc.freeze()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    try:
        _Forks(listener, said).run()
    finally:
        listener.close()
        shutil.rmtree(os.path.dirname(path), ignore_errors=True)  # its folder: also where pytest was SIGKILLed


def _comm(task: str) -> str:
    try:
        with open(f"/proc/self/task/{task}/comm") as f:
            return f.read().strip()
    except OSError:
        return task


def _import_everything(imports: list[str]) -> None:
    import importlib
    import pkgutil

    for name in imports or LIBRARIES:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 (a library not installed: the worker imports what it has, as before)
            pass
    if imports:
        return
    import nsightwrap

    for info in pkgutil.walk_packages(nsightwrap.__path__, "nsightwrap."):
        if info.name.endswith(".__main__"):  # a command line, run as it is imported
            continue
        try:
            importlib.import_module(info.name)
        except Exception:  # noqa: BLE001
            pass
    for name in PLUGIN_PACKAGES:
        module = sys.modules.get(name)
        if module is not None:
            module.__doc__ = (module.__doc__ or "") + "\nPYTEST_DONT_REWRITE (tests/zygote.py)"
    _read_local_constants()


def _read_local_constants() -> None:
    """hypothesis reads the constants of the project's modules (nsightwrap's, its "local constants") as each
    worker's collection ends: 0.15 of a worker's 1.25 s (cProfile), six workers at once before the first test.
    Read here once, each worker reads only the modules it imports later (hypothesis notes which modules it read).
    Not public API: another hypothesis without it reads them in each worker, as before."""
    import warnings

    try:
        from hypothesis.internal.conjecture.providers import _get_local_constants
    except ImportError:
        return
    with warnings.catch_warnings():  # "slow code in plugin": it is, once, here
        warnings.simplefilter("ignore")
        try:
            _get_local_constants()
        except Exception:  # noqa: BLE001 (another hypothesis: the workers read them, as before)
            pass


class _Forks:
    """The zygote's loop: a worker forked for each client; its exit status sent to its client; a worker whose
    client went away (xdist kills a worker that does not end: SIGKILL, which the client cannot pass on) killed;
    the workers left when pytest closes the zygote (or is gone) killed. No client can stop the loop."""

    def __init__(self, listener: socket.socket, said: int) -> None:
        self.listener, self.said = listener, said
        self.wake_r, self.wake_w = os.pipe()
        os.set_blocking(self.wake_w, False)
        self.workers: dict[int, socket.socket | None] = {}  # pid: its client's connection, None once it is gone

    def run(self) -> None:
        signal.set_wakeup_fd(self.wake_w)
        signal.signal(signal.SIGCHLD, lambda *_: None)
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the workers and pytest; this ends on EOF
        for stream in (sys.stdout, sys.stderr):  # nothing an import printed reaches a worker's streams
            stream.flush()
        os.write(self.said, b"ready\n")
        try:
            while self._turn():
                pass
        finally:
            for pid in self.workers:
                _kill(pid)
            for pid in list(self.workers):
                os.waitpid(pid, 0)

    def _turn(self) -> bool:
        clients = {conn: pid for pid, conn in self.workers.items() if conn is not None}
        try:
            readable, _, _ = select.select([self.listener, 0, self.wake_r, *clients], [], [])
        except InterruptedError:
            return True
        if 0 in readable and not os.read(0, 4096):
            return False  # pytest closed its end, or is gone
        if self.wake_r in readable:
            os.read(self.wake_r, 4096)
            self._reap()
        for conn in set(readable) & set(clients):
            pid = clients[conn]
            if self.workers.get(pid) is conn and not _received(conn):  # the client went away: so does its worker
                self._forget(pid)
                _kill(pid)
        if self.listener in readable:
            self._fork()
        return True

    def _reap(self) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if not pid:
                return
            conn = self.workers.pop(pid, None)
            if conn is not None:
                _send(conn, b"%d\n" % os.waitstatus_to_exitcode(status))
                conn.close()

    def _forget(self, pid: int) -> None:
        conn, self.workers[pid] = self.workers[pid], None
        if conn is not None:
            conn.close()

    def _fork(self) -> None:
        try:
            conn, _ = self.listener.accept()
        except OSError:  # out of descriptors, a client gone already: the next turn
            return
        conn.settimeout(10.0)  # a client that stalls cannot hold the others
        fds: list[int] = []
        live = [c for c in self.workers.values() if c is not None]
        try:
            request = _read_request(conn, fds)
            pid = os.fork()
        except Exception:  # noqa: BLE001 (any request, or a fork the system refused, ends only that client)
            for fd in fds:
                os.close(fd)
            conn.close()  # the client exits: xdist sees a worker that failed to start
            return
        if pid == 0:
            try:
                _become_worker(request, fds, (self.listener, self.said, self.wake_r, self.wake_w, conn, *live))
            finally:
                os._exit(70)
        for fd in fds:
            os.close(fd)
        self.workers[pid] = conn
        if not _send(conn, b"%d\n" % pid):
            self._forget(pid)
            _kill(pid)


def _read_request(conn: socket.socket, fds: list[int]) -> dict:
    data, received, _, _ = socket.recv_fds(conn, 65536, 3)
    fds.extend(received)
    size = _HEADER.unpack_from(data)[0]
    while len(data) < _HEADER.size + size:
        more = conn.recv(65536)
        if not more:
            raise OSError("the client went away")
        data += more
    if len(fds) != 3:
        raise OSError("the client's streams did not come")
    request = json.loads(data[_HEADER.size:])
    argv = request["argv"]
    request["command"], *request["args"] = argv[argv.index("-c") + 1:]  # python -c COMMAND ARGS
    return request


def _received(conn: socket.socket) -> bool:
    """Whether a client's connection still holds its client (it sends nothing after its request: EOF or an
    error says it is gone)."""
    try:
        return bool(conn.recv(1))
    except OSError:
        return False


def _send(conn: socket.socket, data: bytes) -> bool:
    try:
        conn.sendall(data)
        return True
    except OSError:
        return False


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _become_worker(request: dict, fds: list[int], inherited: tuple) -> None:
    import ctypes

    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG: a zygote killed takes its workers
    signal.set_wakeup_fd(-1)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler if request["sigint_heard"] else signal.SIG_IGN)
    for thing in inherited:
        thing.close() if hasattr(thing, "close") else os.close(thing)
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    # The streams of `python -u`: stdout and stderr written through, stdin buffered.
    sys.stdin = sys.__stdin__ = io.TextIOWrapper(io.BufferedReader(io.FileIO(0, "r", closefd=False)))
    sys.stdout = sys.__stdout__ = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), write_through=True)
    sys.stderr = sys.__stderr__ = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), write_through=True,
                                                   errors="backslashreplace")
    sys.argv = ["-c", *request["args"]]
    sys.path[0] = ""
    _fresh_random_state()
    _exit_as_python(*_run_as_main(request["command"]))


def _fresh_random_state() -> None:
    """numpy's global random state as a fresh `python` has it, seeded from the system's entropy: forked, every
    worker had the zygote's, the same numbers in each (`random` reseeds itself at a fork, numpy does not)."""
    random = sys.modules.get("numpy.random")  # not numpy.random: numpy 2 loads it on that first use
    if random is not None:
        random.seed()


def _run_as_main(command: str) -> tuple[int, int]:
    """Run `command` as `python -c` runs it, in a `__main__` of its own: its exit code, and the signal that ends
    the process (0: none; an uncaught KeyboardInterrupt: SIGINT, as Python does)."""
    main = types.ModuleType("__main__")
    sys.modules["__main__"] = main
    try:
        exec(compile(command, "<string>", "exec"), main.__dict__)
    except SystemExit as e:
        if e.code is None or isinstance(e.code, int):
            return e.code or 0, 0
        print(e.code, file=sys.stderr)
        return 1, 0
    except KeyboardInterrupt:
        traceback.print_exc()
        return 1, signal.SIGINT
    except BaseException:  # noqa: BLE001 (what python -c prints)
        traceback.print_exc()
        return 1, 0
    return 0, 0


def _exit_as_python(code: int, by_signal: int) -> None:
    """The end of an interpreter (threads joined, then the exit handlers; 3.11's order), without its teardown."""
    threading._shutdown()
    end_process(code, by_signal)


def end_process(code: int, by_signal: int = 0) -> None:
    """The exit handlers run, the streams flushed, and the process ended with `code` (or by the signal
    `by_signal`) without tearing its interpreter down (conftest._exit_without_teardown: an xdist worker's end)."""
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    if by_signal:
        _die_of(by_signal)
    os._exit(code & 0xFF)


# --- the client: the process xdist starts as a worker ----------------------------------------------------
def client(path: str, python: str, argv: list[str]) -> None:
    heard = signal.getsignal(signal.SIGINT) is not signal.SIG_IGN
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the worker itself (the same process group)
    passed_on = {signal.SIGTERM, signal.SIGHUP}
    signal.pthread_sigmask(signal.SIG_BLOCK, passed_on)  # held until the worker's pid is known, then passed on
    try:
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        conn.connect(path)
        request = json.dumps({"argv": argv, "cwd": os.getcwd(), "env": dict(os.environ),
                              "sigint_heard": heard}).encode()
        socket.send_fds(conn, [_HEADER.pack(len(request)) + request], [0, 1, 2])
    except OSError:  # no zygote, or it went away: the worker as xdist starts it
        signal.signal(signal.SIGINT, signal.SIG_DFL if heard else signal.SIG_IGN)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, passed_on)
        os.execv(python, [python, *argv])
    reader = conn.makefile("rb")
    try:  # the streams are the zygote's now: a failure ends the client, never a second worker on them
        pid = int(reader.readline())
    except (OSError, ValueError):
        os._exit(1)
    for sig in passed_on:
        signal.signal(sig, lambda number, _: _pass_on(pid, number))
    signal.pthread_sigmask(signal.SIG_UNBLOCK, passed_on)
    try:
        code = int(reader.readline())
    except (OSError, ValueError):  # the zygote went away before the worker ended
        os._exit(1)
    if code < 0:  # the worker was killed by a signal: so is the client, as xdist would have seen it end
        _die_of(-code)
    os._exit(code & 0xFF)


def _pass_on(pid: int, number: int) -> None:
    try:
        os.kill(pid, number)
    except ProcessLookupError:  # the worker ended: its status is on its way
        pass


def _die_of(number: int) -> None:
    import resource

    if number != signal.SIGKILL:
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # the worker's core, if any, is the only one
        signal.signal(number, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {number})
    os.kill(os.getpid(), number)
    os._exit(128 + number)


if __name__ == "__main__":
    if sys.argv[1] == "serve":
        serve(sys.argv[2], sys.argv[3:])
    else:
        client(sys.argv[2], sys.argv[3], sys.argv[4:])
