"""A guard process that stops the tree when nsightwrap itself dies.

SIGKILL of nsightwrap (or a crash of its Python) runs no `finally`: before
this guard, ncu, its inner front end, the launcher and a hung target stayed
alive, and a kernel left spinning makes every later run on that GPU hang.
The guard is a small process in its own session that holds the read end of
a pipe from its owner and blocks on it: the owner writes `spec JSON` (the
run's cookie and stop policy) first, `root PID START` once the tree is
started and `done` when the run has ended. The cookie travels through the
pipe, never in argv: argv is world-readable in `ps`, and a cookie known to
another user would let them pose as the run. End of file
without `done` means the owner died: the guard then stops the tree by its
cookie (SIGINT to the inner front end, grace, SIGTERM, SIGKILL) and removes
the run record and the tool's log.

Cheap by design: the guard is a shell started without waiting for it; it
blocks on its pipe, and starts Python (and imports nsightwrap) only when it
has work to do.
PR_SET_PDEATHSIG does not fit here (it would kill only the started
launcher, without the grace that lets ncu finish its report), nor does a
child subreaper (it would change how the caller's process reaps).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Optional, Sequence

from nsightwrap.watch.records import forget_run
from nsightwrap.watch.tree import ProcessTree, StopPolicy, same_process, sleeping_wait, stop_tree

# The guard is /bin/sh (one starts with every watched run: sh starts in 1 ms of CPU, `python -S` in 12). It
# reads the owner's lines on its stdin until end of file; when the last is not `done`, it hands them to Python
# on its stdin, a here-document (never argv, nor printf, which is not built into every sh), and Python loads
# nsightwrap and stops the tree. A line the owner did not finish is dropped.
_BOOT = """\
got= last=
while IFS= read -r line; do
    got="$got$line
"
    last=$line
done
[ "$last" = done ] && exit 0
"$1" -S -c "$2" "$3" <<NSIGHTWRAP_GUARD
$got
NSIGHTWRAP_GUARD
"""

# Python's part, once the owner is gone: site-packages (psutil), then the stop. The owner's lines are decoded
# as it encoded them (UTF-8; surrogateescape for a path that is not UTF-8), whatever the locale's encoding.
_OWNER_DIED = """\
import site, sys
site.main()
sys.path.insert(0, sys.argv[1])
from nsightwrap.watch.guard import owner_died
owner_died(sys.stdin.buffer.read().decode("utf-8", "surrogateescape"))
"""

_PACKAGE_PARENT = str(Path(__file__).resolve().parents[2])


class Guard:
    """The owner's end: start the guard, tell it the root, release it when the run ends."""

    def __init__(self, cookie: str, policy: StopPolicy, frontend_names: Sequence[str],
                 tool_log: Optional[str] = None):
        spec = {"cookie": cookie, "policy": asdict(policy), "frontend_names": list(frontend_names),
                "tool_log": tool_log}
        read_end, self._write_end = os.pipe()
        try:
            self.proc: Optional[subprocess.Popen] = subprocess.Popen(
                ["/bin/sh", "-c", _BOOT, "nsightwrap-guard", sys.executable, _OWNER_DIED, _PACKAGE_PARENT],
                stdin=read_end, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        except OSError:
            self.proc = None  # no guard: `cleanup` remains (the run record is kept until the run ends)
        finally:
            os.close(read_end)
        self._say(f"spec {json.dumps(spec)}\n")  # a pipe, not argv: the cookie stays secret

    def _say(self, line: str) -> None:
        if self._write_end is None:
            return
        try:
            os.write(self._write_end, line.encode("utf-8", "surrogateescape"))  # any path, whatever the locale
        except OSError:
            pass  # the guard is gone: nothing to tell

    def root(self, pid: int, started: Optional[float]) -> None:
        self._say(f"root {pid} {started!r}\n")

    def record(self, path: Path) -> None:
        self._say(f"record {path}\n")

    def release(self, wait: float = 0.2) -> None:
        """The run ended and its tree is stopped: the guard exits without doing anything."""
        self._say("done\n")
        if self._write_end is not None:
            os.close(self._write_end)
            self._write_end = None
        if self.proc is not None:
            try:
                self.proc.wait(timeout=wait)
            except subprocess.TimeoutExpired:
                pass  # still starting; subprocess reaps it later


def _parse(messages: str) -> tuple[dict, int, Optional[float], Optional[str]]:
    spec, root_pid, root_start, record = {}, -1, None, None
    for line in messages.splitlines():
        word, _, rest = line.partition(" ")
        if word == "spec":
            spec = json.loads(rest)
        elif word == "root":
            pid, _, started = rest.partition(" ")
            root_pid = int(pid)
            root_start = None if started in ("", "None") else float(started)
        elif word == "record":
            record = rest
    return spec, root_pid, root_start, record


def owner_died(messages: str) -> None:
    """In the guard: stop the orphaned tree, then remove what the run left on disk."""
    spec, root_pid, root_start, record = _parse(messages)
    if not spec:
        return  # the owner died before it said what to guard: nothing was started
    tree = ProcessTree(root_pid, spec["cookie"], spec["frontend_names"],
                       root_running=lambda: same_process(root_pid, root_start), uid=os.getuid())
    stop_tree(tree, StopPolicy(**spec["policy"]), "owner died", sleeping_wait(tree))
    forget_run(Path(record) if record else None, spec.get("tool_log"))
