"""The stop's grace (watch/tree.py `_grace`) waits for the front end it sent SIGINT. Only a launcher script that
was signalled in its front end's place makes it look for a front end started since (tests/ncu/
test_stop_before_the_front_end.py); a real front end's own fork, which has its name until it execs, is never taken
for a new front end (the second review of issue 20 found a version that then stopped waiting for the front end
that was writing its report)."""

from __future__ import annotations

import subprocess
import sys
import uuid

from nsightwrap.watch.tree import COOKIE_VAR, ProcessTree, StopPolicy, sleeping_wait, stop_tree

# A front end named ncu that, on SIGINT, forks a child (same name and command line: a fork not yet exec'd) which
# exits after 0.3 s, and itself finishes "its report" for 1 s before it exits.
_FRONT = """
import os, signal, sys, time
with open("/proc/self/comm", "w") as f:
    f.write("ncu")
def stop(*_):
    if os.fork() == 0:
        time.sleep(0.3)
        os._exit(0)
    time.sleep(1.0)
    os._exit(0)
signal.signal(signal.SIGINT, stop)
print("ready", flush=True)
time.sleep(60)
"""


def test_a_front_ends_fork_is_not_a_new_front_end_and_the_front_end_is_waited_for():
    cookie = uuid.uuid4().hex
    front = subprocess.Popen([sys.executable, "-S", "-c", _FRONT], stdout=subprocess.PIPE,
                             env={"PATH": "/usr/bin:/bin", COOKIE_VAR: cookie})
    try:
        assert front.stdout.readline() == b"ready\n"
        tree = ProcessTree(front.pid, cookie, root_running=lambda: front.poll() is None)
        rec = stop_tree(tree, StopPolicy(grace=5.0, term_wait=1.0, kill_wait=1.0), "test", sleeping_wait(tree))
        assert len(rec.steps) == 1 and rec.steps[0].startswith("SIGINT to profiler"), rec.steps
        assert rec.graceful and rec.duration_s >= 0.9, rec  # its whole second of "report", no SIGTERM
    finally:
        front.kill()
        front.wait()
        front.stdout.close()
