"""Who belongs to a run's tree (watch.tree.ProcessTree.members): its sessions count, even once their leader is gone.

The race this guards (test_cli_surface's SIGTERM during a sweep's probe, 4 failures in 15 runs under a CPU load of
6): the stop came while the fake ncu launched its target. The front end exited at once, the launcher died after
starting the target, and for a moment the target had neither a readable cookie (its exec under way) nor a living
parent: one empty look at the tree and the stop called the run gone, leaving the target running. The target was
still in the session the front end had started with setsid.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import psutil
import pytest

from nsightwrap.watch.tree import COOKIE_VAR, ProcessTree
from nsightwrap.watch.tree import _Stat as Stat

# Starts a child in a session of its own or not (ncu's front end starts one); once told (a line on stdin), that child
# starts a grandchild whose environment is empty (no cookie), prints its pid and its own and exits: the grandchild
# is left with no parent of the run, and was never seen while it had one.
_LEADER = """
import subprocess, sys
kid = subprocess.Popen([sys.executable, "-c", "import os, subprocess, sys; print('ready', flush=True); "
    "sys.stdin.readline(); p = subprocess.Popen(['sleep', '30'], env={}); print(p.pid, os.getpid(), flush=True)"],
    start_new_session=%s)
kid.wait()
"""


def _start(new_session: bool):
    cookie = uuid.uuid4().hex
    env = {"PATH": "/usr/bin:/bin", COOKIE_VAR: cookie}
    root = subprocess.Popen([sys.executable, "-c", _LEADER % new_session], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, env=env, start_new_session=True)
    assert root.stdout.readline() == b"ready\n"
    tree = ProcessTree(root.pid, cookie, root_running=lambda: root.poll() is None)
    assert len(tree.members()) == 2  # the root and its child, seen before the grandchild is started
    root.stdin.write(b"\n")
    root.stdin.close()
    orphan, parent = map(int, root.stdout.readline().split())
    return root, tree, orphan, parent


@pytest.mark.parametrize("new_session", [False, True], ids=["root's session", "a member's session"])
def test_a_process_without_cookie_or_parent_is_still_found_by_its_session(new_session):
    root, tree, orphan, parent = _start(new_session)  # parent: the child that started it (it may be gone already:
    try:  # reading the orphan's parent here found init once, and the wait below then lasted all its 10 s)
        root.wait(timeout=10)
        deadline = time.monotonic() + 10
        while psutil.Process(orphan).ppid() == parent and time.monotonic() < deadline:  # to init, or a subreaper
            time.sleep(0.02)
        # No cookie (an empty environment), no parent of the run, the root reaped: only the session says whose.
        assert orphan in {p.pid for p in tree.members()}
    finally:
        psutil.Process(orphan).kill()
        root.stdout.close()


def test_a_session_number_taken_by_another_process_is_not_the_runs():
    """The leader of a run's session is gone and its pid now belongs to another process: that session is not ours."""
    t = ProcessTree(999_999, uuid.uuid4().hex, root_running=lambda: False)
    t._seen[4242] = psutil.Process()  # the leader, met when it started at tick 100
    t._starts[4242] = 100
    t._sessions.add(4242)
    assert t._our_sessions({4242: Stat(1, 4242, False, 100)}, root_running=False) == {4242}
    # The leader has exited; a process is still in its session, so the number is still taken: still ours.
    assert t._our_sessions({5000: Stat(1, 4242, False, 150)}, root_running=False) == {4242}
    assert t._our_sessions({4242: Stat(1, 4242, False, 900)}, root_running=False) == set()  # pid taken again


def test_an_empty_session_is_forgotten_before_its_number_can_be_given_again():
    """No process left in it: a daemon may take the freed number at once (fork, setsid, fork, the leader exits);
    its processes must never become the run's (the review found this with a real process)."""
    t = ProcessTree(999_999, uuid.uuid4().hex, root_running=lambda: False)
    t._starts[4242] = 100
    t._sessions.add(4242)
    assert t._our_sessions({7: Stat(1, 7, False, 5)}, root_running=False) == set()
    # The number is taken by another session later: its processes are not the run's.
    assert t._our_sessions({6000: Stat(1, 4242, False, 950)}, root_running=False) == set()


def test_carrying_matches_whole_entries_the_last_one_without_its_nul_too():
    from nsightwrap.watch.tree import _carrying

    carries = _carrying("V", "ab")
    assert carries(b"V=ab") and carries(b"X=1\0V=ab\0") and carries(b"V=ab\0X=1\0")
    assert not carries(b"V=abc\0") and not carries(b"XV=ab\0") and not carries(b"A=V=ab\0")
    assert _carrying("V", None)(b"V=\0") and not _carrying("V", None)(b"XV=1\0")


def test_a_guard_whose_owner_died_before_naming_the_root_still_stops_by_cookie():
    """The owner sent the spec, then died before `root PID START` (root -1): the guard's tree is found by its
    cookie, not a ValueError from psutil about pid -1 (the review reproduced the guard exiting on it)."""
    from nsightwrap.watch.tree import same_process, start_time

    assert start_time(-1) is None and start_time(0) is None and not same_process(-1, None)
    assert ProcessTree(-1, uuid.uuid4().hex, root_running=lambda: same_process(-1, None)).members() == []


def _looks(monkeypatch, table: dict, environs: dict) -> list:
    """tree._stats answers `table` (pid -> Stat) and /proc/PID/environ `environs` (pid -> bytes, missing: gone); the
    list of environ paths read, appended to at each read."""
    from nsightwrap.watch import tree

    reads = []

    def read(path):
        pid = int(path.split("/")[2])
        if path.endswith("/environ"):
            reads.append(pid)
            if pid not in environs:
                raise FileNotFoundError(path)
            return environs[pid]
        raise FileNotFoundError(path)  # status: no uid to be found, so only cookie carriers count

    monkeypatch.setattr(tree, "_stats", lambda: dict(table))
    monkeypatch.setattr(tree, "_read", read)
    return reads


def test_an_environment_without_the_cookie_is_read_once_per_process(monkeypatch):
    """A stop looks at the tree every 50 ms: a process's environment is read at its first look only (issue 20), until
    an exec moves it (same pid and start; a child between fork and exec shows its parent's, without the cookie a
    spawner outside the run may then pass on: the review's case). A new process under the same pid (another start)
    is read again; an empty environment (an exec under way), an unreadable one and one whose place the stat line
    does not give are read at every look; a kernel thread's never."""
    cookie = uuid.uuid4().hex
    table = {10: Stat(1, 10, False, 100, environ=(1000, 1010)), 11: Stat(1, 11, False, 100, environ=(0, 0)),
             12: Stat(1, 12, False, 100, environ=(2000, 2050)), 13: Stat(1, 13, False, 100),
             14: Stat(1, 14, False, 100, environ=(3000, 3010)), 15: Stat(1, 15, False, 100),
             2: Stat(0, 0, False, 1, kernel=True)}
    environs = {10: b"PATH=/bin\0", 11: b"", 12: f"A=1\0{COOKIE_VAR}={cookie}\0".encode(), 14: b"PATH=/bin\0",
                15: b"PATH=/bin\0"}  # 13: another user's; 15: no place given
    reads = _looks(monkeypatch, table, environs)
    tree = _tree(monkeypatch, cookie)
    assert [p.pid for p in tree.members()] == [12]
    assert sorted(reads) == [10, 11, 12, 13, 14, 15]
    reads.clear()
    environs[11] = f"{COOKIE_VAR}={cookie}\0".encode()  # its exec is done: it carries the cookie now
    table[11] = Stat(1, 11, False, 100, environ=(4000, 4060))
    assert sorted(p.pid for p in tree.members()) == [11, 12]
    assert sorted(reads) == [11, 12, 13, 15]  # not 10 or 14: read once
    reads.clear()
    table[10] = Stat(1, 10, False, 500, environ=(1000, 1010))  # pid 10 given to another process, with the cookie
    environs[10] = f"{COOKIE_VAR}={cookie}\0".encode()
    table[14] = Stat(1, 14, False, 100, environ=(5000, 5060))  # 14 exec'd (same pid and start): the cookie now
    environs[14] = f"{COOKIE_VAR}={cookie}\0".encode()
    assert sorted(p.pid for p in tree.members()) == [10, 11, 12, 14] and sorted(reads) == [10, 11, 12, 13, 14, 15]


def test_the_processes_read_are_forgotten_once_gone(monkeypatch):
    cookie = uuid.uuid4().hex
    table = {pid: Stat(1, pid, False, 100, environ=(1000, 1010)) for pid in range(10, 20)}
    _looks(monkeypatch, table, {pid: b"PATH=/bin\0" for pid in table})
    tree = _tree(monkeypatch, cookie)
    tree.members()
    tree._bare |= {(pid, 100, (1000, 1010)) for pid in range(100, 200)}  # 100 processes read before, gone since
    tree.members()
    assert tree._bare == {(pid, 100, (1000, 1010)) for pid in table}


def _tree(monkeypatch, cookie: str) -> ProcessTree:
    """A tree of a root long gone, every process of this user, psutil's view of each a _Fake."""
    tree = ProcessTree(999_999, cookie, root_running=lambda: False, uid=None)
    tree._uid = lambda pid, st: tree.uid
    monkeypatch.setattr("psutil.Process", lambda pid: _Fake(pid))
    monkeypatch.setattr("nsightwrap.watch.tree._started_at", lambda st: 0.0)
    return tree


class _Fake:
    """A psutil.Process of a made-up pid: created at 0 (tree._started_at is 0 in the test), alive."""

    def __init__(self, pid):
        self.pid = pid

    def create_time(self):
        return 0.0


def test_kernel_threads_are_marked_in_the_stat_table_and_a_process_has_its_environments_place():
    from nsightwrap.watch.tree import _stats

    table = _stats()
    me = table[os.getpid()]
    assert not me.kernel and 0 < me.environ[0] < me.environ[1]
    try:
        kthreadd = Path("/proc/2/comm").read_text() == "kthreadd\n"
    except OSError:
        kthreadd = False
    if kthreadd:  # outside a pid namespace (in one, pid 2 may be any process)
        assert table[2].kernel and table[2].environ == (0, 0)
