"""tests/zygote.py: xdist's workers forked from one process that imported their libraries (issue 20). A forked
worker is what `python -u -c` gives xdist: its streams, folder, environment, arguments and exit status; without
the zygote the client runs python itself. These zygotes import one module; the suite's imports a list."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys

import psutil
import pytest
import zygote
from helpers import wait_until

WORKER = """
import gc, json, os, sys
gc.unfreeze(); gc.collect()  # nothing of the zygote's that is freed closes the worker's streams
print(json.dumps({"ppid": os.getppid(), "cwd": os.getcwd(), "var": os.environ.get("ZYGOTE_TEST"), "argv": sys.argv,
                  "main": __name__, "line": sys.stdin.readline(), "imported": "xml.dom.minidom" in sys.modules,
                  "path0": sys.path[0]}))
sys.exit(3)
"""

IMPORTED = ("xml.dom.minidom",)  # what no test's python -c imports


@pytest.fixture(scope="module")
def forks():
    started = zygote.Zygote(imports=IMPORTED)
    try:
        if not started.wait_ready() and "said 'threads" in started.why:  # a machine's libraries: xdist as before
            pytest.skip(f"no zygote on this machine: {started.why} as its libraries are imported")
        assert started.wait_ready(), started.why
        yield started
    finally:
        started.close()


def _worker(command, cwd):
    done = subprocess.run([*command, "-u", "-c", WORKER, "an-argument"], input="a line\n", capture_output=True,
                          text=True, cwd=cwd, env={**os.environ, "ZYGOTE_TEST": "given"}, timeout=60)
    assert done.returncode == 3, done.stderr
    seen = json.loads(done.stdout)
    assert (seen["cwd"], seen["var"], seen["argv"], seen["main"], seen["line"], seen["path0"]) == \
        (str(cwd), "given", ["-c", "an-argument"], "__main__", "a line\n", "")
    return seen


def test_a_forked_worker_runs_as_python_u_c_with_the_libraries_already_imported(forks, tmp_path):
    seen = _worker([forks.client], tmp_path)
    assert seen["ppid"] == forks.process.pid and seen["imported"]
    assert os.listdir(f"/proc/{forks.process.pid}/task") == [str(forks.process.pid)]  # it forks with no thread


def test_without_the_zygote_the_client_runs_the_worker_itself(tmp_path):
    client = [sys.executable, "-S", zygote.__file__, "client", str(tmp_path / "no.sock"), sys.executable]
    seen = _worker(client, tmp_path)
    assert seen["ppid"] == os.getpid() and not seen["imported"]  # the client became the worker: python as xdist runs it


@pytest.mark.parametrize("handled", [True, False], ids=["handled", "killed"])
def test_sigterm_to_the_client_reaches_the_worker_and_its_end_comes_back(forks, handled):
    code = "\n".join(("import signal, sys", "signal.signal(signal.SIGTERM, lambda *_: sys.exit(7))" if handled else "",
                      "print('waiting', flush=True)", "signal.pause()"))
    with subprocess.Popen([forks.client, "-u", "-c", code], stdout=subprocess.PIPE, text=True) as client:
        assert client.stdout.readline() == "waiting\n"
        client.send_signal(signal.SIGTERM)
        assert client.wait(60) == (7 if handled else -signal.SIGTERM)


def test_the_zygote_ends_when_pytest_closes_it_and_leaves_nothing():
    started = zygote.Zygote(imports=IMPORTED)
    try:
        if not started.wait_ready() and "said 'threads" in started.why:
            pytest.skip(f"no zygote on this machine: {started.why} as its libraries are imported")
        assert started.wait_ready() and os.path.exists(started.socket_path), started.why
    finally:
        started.close()
    assert started.process.returncode == 0 and not os.path.exists(started.folder)


@pytest.mark.parametrize(("ending", "status", "said"), [
    ("raise SystemExit('bye')", 1, "bye\n"),
    ("raise SystemExit(-1)", 255, ""),  # a code, not a signal
    ("raise KeyboardInterrupt", -signal.SIGINT, "KeyboardInterrupt\n"),  # Python's own end: by SIGINT
    ("import os, signal; os.kill(os.getpid(), signal.SIGKILL)", -signal.SIGKILL, ""),
], ids=["exit-message", "negative-code", "keyboard-interrupt", "sigkill"])
def test_the_client_ends_as_its_worker_did(forks, ending, status, said):
    done = subprocess.run([forks.client, "-u", "-c", ending], capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stderr[-len(said):] if said else done.stderr) == (status, said)


def test_a_worker_whose_client_is_killed_is_killed_and_the_zygote_serves_on(forks, tmp_path):
    with subprocess.Popen([forks.client, "-u", "-c", "import os, time; print(os.getpid(), flush=True); "
                           "time.sleep(60)"], stdout=subprocess.PIPE, text=True) as client:
        worker = psutil.Process(int(client.stdout.readline()))
        client.kill()  # as xdist does to a worker that does not end: no signal to pass on
    _, alive = psutil.wait_procs([worker], timeout=10)
    assert not alive, "the worker of a killed client still runs"
    held = sorted(os.listdir(f"/proc/{forks.process.pid}/fd"))
    # Clients that send nonsense (with their streams, or none), nothing, or a request without `-c`, and go away
    for request, streams in ((b"not a request", True), (b"\0\0\0\3[1]", True), (b"", False),
                             (b'\0\0\0\x0f{"argv": ["-c"]}', True)):
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as rogue, open(os.devnull, "rb") as null:
            rogue.connect(forks.socket_path)
            socket.send_fds(rogue, [request or b" "], [null.fileno()] * 3 if streams else [])
    _worker([forks.client], tmp_path)
    wait_until(lambda: sorted(os.listdir(f"/proc/{forks.process.pid}/fd")) == held,
               "the zygote kept a rejected client's streams or connection", 10)


def test_each_worker_draws_numpys_random_numbers_of_its_own(tmp_path):
    """numpy's global random state is seeded again in each forked worker, as in a fresh python (a fork copied the
    zygote's: every worker drew the same numbers)."""
    numpy_zygote = zygote.Zygote(imports=("numpy.random",))  # numpy 2 loads it on first use
    try:
        if not numpy_zygote.wait_ready():
            pytest.skip(f"no zygote on this machine: {numpy_zygote.why}")
        draw = "import numpy; print(numpy.random.randint(1 << 62))"
        draws = [subprocess.run([numpy_zygote.client, "-u", "-c", draw], capture_output=True, text=True, cwd=tmp_path,
                                timeout=60).stdout for _ in range(2)]
        assert all(d.strip().isdigit() for d in draws) and draws[0] != draws[1], draws
    finally:
        numpy_zygote.close()
