"""A writer for the store's concurrency tests and benchmark: `python store_writer.py STORE WORKER N DONE_FILE GATE`.

Records N records (kernel ``w{WORKER}``, uid derived from (WORKER, i)) and, after each record() returned,
appends i to DONE_FILE: a record counts as written once its line is there. Started again after a SIGKILL,
it goes on from the first index not in DONE_FILE, retrying that one with the same uid (it may have been
committed before the kill): the store must keep it once. Its last record waits for the file GATE to exist:
no writer is done before the test has made its kills (tests/store_kills.py). Where the folder of GATE holds a
file LEASH (a number), a writer writes record i only once that number is above i, until GATE exists: the test
lets each writer go a few records further at each of its turns, so that its kills find the writers writing
however late the machine's load lets the test run (store_kills.write_with_kills, `leash`).

`python store_writer.py --serve STORE` imports the store once and forks each writer when asked (its
protocol: serve_forks); tests/store_kills.py starts the writers of the kill test so.
"""

from __future__ import annotations

import os
import sys
import time
import uuid

from nsightwrap.store.hangstore import HangStore
from nsightwrap.store.keys import Environment, ProfileKey

NAMESPACE = uuid.UUID("6e736967-6874-7772-6170-000000000022")
ENV = Environment("writer-host", "NVIDIA H200", "580.159.04", "2025.3.1")


def uid(worker: int, i: int) -> str:
    return uuid.uuid5(NAMESPACE, f"{worker}:{i}").hex


def main(store: str, worker: int, n: int, done_file: str, gate: str) -> None:
    starter = os.getppid()
    try:
        with open(done_file) as f:
            start = len(f.read().split())
    except FileNotFoundError:
        start = 0
    fd = os.open(done_file, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    leash = os.path.join(os.path.dirname(gate), LEASH)
    with HangStore(store, busy_timeout=60) as s:
        for i in range(start, n):
            if i == n - 1:
                _wait_for(gate, starter)  # the last record: once the kills are made
            elif os.path.exists(leash):
                _wait_for(gate, starter, leash, i)
            s.record(f"w{worker}", ProfileKey("full"), "hang" if i % 3 == 0 else "ok", env=ENV,
                     note=f"{worker}:{i}", uid=uid(worker, i))
            os.write(fd, f"{i}\n".encode())
    os.close(fd)


#: How long a writer waits for the gate before it gives up (exit status 3): the kills take a second or two.
GATE_WAIT_S = 120
#: The file beside the gate that holds how many records each writer may have written so far (absent: no limit).
LEASH = "leash"


def _allowed(leash: str) -> int:
    try:
        with open(leash) as f:
            return int(f.read() or 0)
    except (FileNotFoundError, ValueError):
        return 0


def _wait_for(gate: str, starter: int, leash: str = "", record: int = 0) -> None:
    """Until the file `gate` exists, or the file `leash` lets this writer write `record`; exit (status 3) once
    GATE_WAIT_S have passed or `starter`, the process that started this writer, is gone (a test or fork server
    killed), never left waiting with the store open."""
    deadline = time.monotonic() + GATE_WAIT_S
    while not os.path.exists(gate):
        if os.getppid() != starter or time.monotonic() > deadline:
            sys.stderr.write(f"store_writer: no {gate} within {GATE_WAIT_S} s, or its starter is gone\n")
            os._exit(3)
        if leash and _allowed(leash) > record:
            return
        time.sleep(0.005)


def write_plainly(store: str, worker: int, n: int) -> None:
    """N records (kernel ``kernel_{WORKER}``, hang and ok in turn, passes and note ``WORKER:i``) through a store
    opened with its defaults: test_concurrent_writers_lose_nothing's writer, here so that its processes import
    only the store (a target in the test module made each import pytest, hypothesis and the test helpers)."""
    env = Environment(f"host{worker}", "NVIDIA H200", "580", "2025.3.1")
    with HangStore(store) as s:
        for i in range(n):
            s.record(f"kernel_{worker}", ProfileKey("full"), "hang" if i % 2 else "ok", env=env, passes=i,
                     note=f"{worker}:{i}")


def fork_plain_writers(store: str, workers: int, n: int) -> list[int]:
    """write_plainly(store, w, n) for each w in its own process, all at once: forked from this one, which has
    imported the store (SQLAlchemy) once for them all (each writer a fresh interpreter cost ~0.45 s of CPU, most
    of test_concurrent_writers_lose_nothing's 3.4 s). Nothing is opened before the fork: each writer opens the
    store itself. The writers' exit statuses, in order (1 where one raised; its traceback on stderr)."""
    _import_the_store(store)
    pids = [_fork(write_plainly, store, w, n) for w in range(workers)]
    return [os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) for pid in pids]


def _import_the_store(store: str) -> None:
    """What HangStore imports when it opens `store` (SQLAlchemy; its PostgreSQL dialect and driver for a URL),
    imported without opening it: the forked writers still race to create its tables."""
    import nsightwrap.store.check  # noqa: F401
    import nsightwrap.store.database  # noqa: F401
    import nsightwrap.store.migrate  # noqa: F401
    import nsightwrap.store.queries  # noqa: F401

    if "://" in store:
        import sqlalchemy.dialects.postgresql.psycopg  # noqa: F401


def _fork(target, *args) -> int:
    """target(*args) in a child process (exit status 0, or 1 where it raised, its traceback on stderr)."""
    pid = os.fork()
    if pid:
        return pid
    code = 1
    try:
        target(*args)
        code = 0
    except BaseException:
        import traceback

        traceback.print_exc()
    finally:
        os._exit(code)  # never the parent's buffers or atexit handlers


def serve_forks(store: str) -> None:
    """Answer one line on stdout for each line on stdin: `start WORKER N DONE_FILE GATE` forks main(store, ...)
    and answers its pid; `poll PID` answers `running` or its exit status (negative: the signal that ended it),
    `wait PID` its exit status once it ended. Its writers are its children: only it can wait for them."""
    _import_the_store(store)
    for line in sys.stdin:
        verb, *args = line.split()
        if verb == "start":
            answer = str(_fork(main, store, int(args[0]), int(args[1]), args[2], args[3]))
        else:
            pid, status = os.waitpid(int(args[0]), os.WNOHANG if verb == "poll" else 0)
            answer = "running" if pid == 0 else str(os.waitstatus_to_exitcode(status))
        print(answer, flush=True)


if __name__ == "__main__":
    if sys.argv[1] == "--serve":
        serve_forks(sys.argv[2])
    else:
        main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5])
