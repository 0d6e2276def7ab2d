"""xdist's workers forked from one process that imported their libraries once (issue 20).

Each of xdist's workers is a fresh `python -u -c BOOTSTRAP`: it imported pytest and its plugins, pandas, numpy,
SQLAlchemy, hypothesis and nsightwrap, ~1.7 s of CPU each, six at once while the suite had not started a test.
Here the controller starts one process, the zygote, which imports them once, freezes them (gc.freeze) and waits
on a Unix socket. The command xdist runs for a worker (execnet's `popen//python=CLIENT`) is the client: it hands
its stdin, stdout and stderr, its folder and its environment to the zygote, which forks the worker; the worker
runs execnet's bootstrap on those streams as `python -u -c` would, in the state of a fresh interpreter that had
imported those modules (signals as Python sets them, a `__main__` of its own). The client stays as xdist's process
of the worker: it passes SIGTERM and SIGHUP on, and exits with the worker's exit status.

Where the zygote is not there (it failed to start, or went away), the client runs the worker as before
(`python -u -c BOOTSTRAP`): slower, the same. A worker's parent is the zygote, not pytest; everything else of a
worker (its streams, folder, environment, process group) is what xdist gave the client.
"""

from __future__ import annotations

import atexit
import gc
import io
import json
import os
import select
import shlex
import signal
import socket
import struct
import sys
import threading
import traceback
import types

#: What a worker imports (pytest's plugins and the libraries of the tests) beside every nsightwrap module.
LIBRARIES = ("pytest", "xdist.plugin", "xdist.remote", "execnet", "hypothesis", "_hypothesis_pytestplugin",
             "pytest_benchmark.plugin", "pandas", "numpy", "sqlalchemy", "sqlalchemy.dialects.sqlite",
             "sqlalchemy.dialects.postgresql", "psycopg", "yaml", "rich.console", "rich.live", "psutil", "tenacity",
             "submitit", "ncu_report")
#: The top-level packages pytest marks for assert rewriting (their distributions install a pytest plugin): those
#: imported here say PYTEST_DONT_REWRITE, pytest's own marker, else each worker warns that it cannot rewrite them.
#: The suite rewrites only its tests (conftest._rewrite_tests_only).
PLUGIN_PACKAGES = ("nsightwrap", "hypothesis", "_hypothesis_pytestplugin", "_hypothesis_globals",
                   "_hypothesis_ftz_detector", "xdist", "pytest_benchmark")
_HEADER = struct.Struct("!I")
_ZYGOTES_STREAMS: list = []


# --- the controller's side ------------------------------------------------------------------------------
class Zygote:
    """The zygote process of a session, started in a folder of its own: `client` is the command to give execnet as
    a worker's python once `wait_ready()`."""

    def __init__(self, python: str = sys.executable) -> None:
        import subprocess
        import tempfile

        self.folder = tempfile.mkdtemp(prefix="nsightwrap-zygote-")
        self.socket_path = os.path.join(self.folder, "zygote.sock")
        self.client = os.path.join(self.folder, "client")
        here, sock, py = (shlex.quote(p) for p in (os.path.abspath(__file__), self.socket_path, python))
        with open(self.client, "w") as f:
            f.write(f'#!/bin/sh\nexec {py} -S {here} client {sock} {py} "$@"\n')
        os.chmod(self.client, 0o755)
        self.process = subprocess.Popen([python, os.path.abspath(__file__), "serve", self.socket_path],
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        self._ready: bool | None = None

    def wait_ready(self, timeout: float = 30.0) -> bool:
        """Whether the zygote imported what it imports and listens (False: it failed, or took over `timeout`)."""
        if self._ready is None:
            ready, _, _ = select.select([self.process.stdout], [], [], timeout)
            self._ready = bool(ready) and self.process.stdout.readline().strip() == b"ready"
        return self._ready

    def close(self, timeout: float = 10.0) -> None:
        """The zygote ends once its stdin closes; the workers it forked are xdist's to end."""
        import shutil
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
def serve(path: str) -> None:
    sys.path[0] = ""  # as in a worker (python -c), not this file's folder (tests/, whose modules are the tests')
    _import_everything()
    if threading.active_count() != 1:  # forking a process with threads is not safe: the clients run workers
        return
    gc.collect()
    gc.freeze()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the workers and pytest; this one ends on EOF
    for stream in (sys.stdout, sys.stderr):  # nothing an import printed reaches a worker's streams
        stream.flush()
    os.write(1, b"ready\n")
    clients: dict[int, socket.socket] = {}
    while True:
        try:
            readable, _, _ = select.select([listener, 0, wake_r], [], [])
        except InterruptedError:
            continue
        if 0 in readable and not os.read(0, 4096):
            break  # pytest closed its end, or is gone
        if wake_r in readable:
            os.read(wake_r, 4096)
            _reap(clients)
        if listener in readable:
            conn, _ = listener.accept()
            pid = _fork_worker(conn, (listener, wake_r, wake_w, *clients.values()))
            if pid:
                clients[pid] = conn
    listener.close()
    os.unlink(path)


def _import_everything() -> None:
    import importlib
    import pkgutil

    for name in LIBRARIES:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 (a library not installed: the worker imports what it has, as before)
            pass
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


def _reap(clients: dict[int, socket.socket]) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if not pid:
            return
        conn = clients.pop(pid, None)
        if conn is not None:
            try:
                conn.sendall(b"%d\n" % os.waitstatus_to_exitcode(status))
            except OSError:
                pass
            conn.close()


def _fork_worker(conn: socket.socket, inherited: tuple) -> int:
    """The worker's pid (0 where the client's request could not be read: it runs the worker itself)."""
    try:
        data, fds, _, _ = socket.recv_fds(conn, 65536, 3)
        size = _HEADER.unpack_from(data)[0]
        while len(data) < _HEADER.size + size:
            more = conn.recv(65536)
            if not more:
                raise OSError("the client went away")
            data += more
        request = json.loads(data[_HEADER.size:])
    except (OSError, ValueError, struct.error):
        conn.close()
        return 0
    pid = os.fork()
    if pid == 0:
        try:
            _become_worker(request, fds, conn, inherited)
        finally:
            os._exit(70)
    for fd in fds:
        os.close(fd)
    conn.sendall(b"%d\n" % pid)
    return pid


def _become_worker(request: dict, fds: list[int], conn: socket.socket, inherited: tuple) -> None:
    signal.set_wakeup_fd(-1)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler if request["sigint_heard"] else signal.SIG_IGN)
    for thing in (*inherited, conn):
        thing.close() if hasattr(thing, "close") else os.close(thing)
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    # The streams of `python -u`: stdout and stderr written through, stdin buffered. The zygote's own stay
    # referenced: freed, they would close fds 0-2, now the worker's.
    _ZYGOTES_STREAMS.extend((sys.stdin, sys.stdout, sys.stderr, sys.__stdin__, sys.__stdout__, sys.__stderr__))
    sys.stdin = sys.__stdin__ = io.TextIOWrapper(io.BufferedReader(io.FileIO(0, "r", closefd=False)))
    sys.stdout = sys.__stdout__ = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), write_through=True)
    sys.stderr = sys.__stderr__ = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), write_through=True,
                                                   errors="backslashreplace")
    command = request["argv"][request["argv"].index("-c") + 1]
    sys.argv = ["-c", *request["argv"][request["argv"].index("-c") + 2:]]
    sys.path[0] = ""  # python -c's: the current folder
    main = types.ModuleType("__main__")
    sys.modules["__main__"] = main
    code = 0
    try:
        exec(compile(command, "<string>", "exec"), main.__dict__)
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except BaseException:  # noqa: BLE001 (what python -c prints)
        traceback.print_exc()
        code = 1
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)


# --- the client: the process xdist starts as a worker ----------------------------------------------------
def client(path: str, python: str, argv: list[str]) -> None:
    passed_on = {signal.SIGTERM, signal.SIGHUP}
    signal.pthread_sigmask(signal.SIG_BLOCK, passed_on)  # held until the worker's pid is known, then passed on
    try:
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        conn.connect(path)
        request = json.dumps({"argv": argv, "cwd": os.getcwd(), "env": dict(os.environ),
                              "sigint_heard": signal.getsignal(signal.SIGINT) is not signal.SIG_IGN}).encode()
        socket.send_fds(conn, [_HEADER.pack(len(request)) + request], [0, 1, 2])
        reader = conn.makefile("rb")
        pid = int(reader.readline())
    except (OSError, ValueError):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, passed_on)
        os.execv(python, [python, *argv])  # no zygote: the worker as xdist starts it
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the worker itself (the same process group)
    for sig in passed_on:
        signal.signal(sig, lambda number, _: os.kill(pid, number))
    signal.pthread_sigmask(signal.SIG_UNBLOCK, passed_on)
    try:
        code = int(reader.readline())
    except ValueError:  # the zygote went away before the worker ended
        os._exit(1)
    if code < 0:  # killed by a signal: so is the client, as xdist would have seen the worker end
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    os._exit(code & 0xFF)


if __name__ == "__main__":
    if sys.argv[1] == "serve":
        serve(sys.argv[2])
    else:
        client(sys.argv[2], sys.argv[3], sys.argv[4:])
