"""Who belongs to a run's tree (watch.tree.ProcessTree.members): its sessions count, even once their leader is gone.

The race this guards (test_cli_surface's SIGTERM during a sweep's probe, 4 failures in 15 runs under a CPU load of
6): the stop came while the fake ncu launched its target. The front end exited at once, the launcher died after
starting the target, and for a moment the target had neither a readable cookie (its exec under way) nor a living
parent: one empty look at the tree and the stop called the run gone, leaving the target running. The target was
still in the session the front end had started with setsid.
"""

from __future__ import annotations

import subprocess
import sys
import time
import uuid

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
