"""A run's whole process tree: found by cookie and descent, stopped in steps.

On the GPU machine ncu's tree was `ncu` (a shell script) -> `ncu` (the real
front end) -> `TreeLauncherSubreaper` -> target. SIGINT or SIGTERM to the
started pid did nothing useful, killing its process group missed the inner
processes, and SIGINT to the inner front end made it shut the target down,
finish the report and exit within half a second. A target left alive kept
its kernel spinning and made every later run hang. So every process we
start carries a cookie in its environment; a stop sends SIGINT to the inner
front end first, then SIGTERM and SIGKILL to every member, and checks that
none is left. The watch loop, the guard (nsightwrap killed) and `cleanup`
all stop a tree with `stop_tree`.
"""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass, field
from typing import Callable, Iterable, Mapping, NamedTuple, Optional, Sequence

import psutil

COOKIE_VAR = "NSIGHTWRAP_RUN"
OWNER_VAR = "NSIGHTWRAP_OWNER"


@dataclass(frozen=True)
class StopPolicy:
    """How long each step of stopping a tree may take, in seconds."""

    grace: float = 5.0  # after SIGINT to the profiler front end: report written, tree exits
    term_wait: float = 2.0  # after SIGTERM to every member
    kill_wait: float = 3.0  # after SIGKILL to every member
    drain: float = 2.0  # after the started process exits, for the pipe to close


@dataclass
class StopRecord:
    """What stopping the tree took; `survivors` should always be empty."""

    reason: str
    steps: list[str] = field(default_factory=list)
    graceful: bool = False
    killed: list[str] = field(default_factory=list)
    survivors: list[str] = field(default_factory=list)
    duration_s: float = 0.0


def describe(p: psutil.Process) -> str:
    try:
        return f"{p.pid} ({p.name()})"
    except psutil.Error:
        return str(p.pid)


def alive(p: psutil.Process) -> bool:
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def start_time(pid: int) -> Optional[float]:
    """When `pid` started (psutil's create_time), or None if it is gone (or was never given: pid <= 0)."""
    if pid <= 0:
        return None
    try:
        return psutil.Process(pid).create_time()
    except psutil.Error:
        return None


def same_process(pid: int, started: Optional[float]) -> bool:
    """`pid` is alive and is still the process that started at `started` (not a reused pid)."""
    now = start_time(pid)
    return now is not None and started is not None and abs(now - started) < 0.05


def _looks_like(p: psutil.Process, names: Sequence[str]) -> bool:
    try:
        if p.name() in names:
            return True
        cmd = p.cmdline()[:2]
    except psutil.Error:
        return False
    return any(os.path.basename(c) in names for c in cmd)


def _carrying(var: str, value: Optional[str]) -> Callable[[bytes], bool]:
    """Whether a raw environment (/proc/PID/environ) sets `var` (to exactly `value`, if given)."""
    entry = b"\0" + f"{var}=".encode() + (value.encode() + b"\0" if value is not None else b"")
    return lambda raw: entry in b"\0" + raw + b"\0"  # the last entry may lack its NUL


def _read(path: str, once: Optional[int] = None) -> bytes:
    """A whole /proc file, with os.open and os.read (no file object: this runs for every process at every look);
    `once`: one read of at most that many bytes (a stat line), not a second to find the end."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        if once:
            return os.read(fd, once)
        parts = []
        while chunk := os.read(fd, 65536):
            parts.append(chunk)
        return b"".join(parts)
    finally:
        os.close(fd)


def _environ(pid: int | str) -> Optional[bytes]:
    """The raw environment of `pid`; None if it is gone, or another user's."""
    try:
        return _read(f"/proc/{pid}/environ")
    except OSError:
        return None


def _environs(carries: Callable[[bytes], bool]) -> dict[int, bytes]:
    """pid -> raw environment of every process whose environment `carries` (one read each; unreadable: left out)."""
    found = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            raw = _environ(name)
            if raw is not None and carries(raw):
                found[int(name)] = raw
    return found


def _parsed(raw: bytes) -> dict[str, str]:
    pairs = (item.split(b"=", 1) for item in raw.split(b"\0") if b"=" in item)
    return {k.decode(errors="replace"): v.decode(errors="replace") for k, v in pairs}


def _real_uid(pid: int) -> Optional[int]:
    """The real uid of `pid` (/proc/PID/status), None if it is gone."""
    try:
        status = _read(f"/proc/{pid}/status")
        return int(status[status.index(b"\nUid:") + 5:].split(None, 1)[0])
    except (OSError, IndexError, ValueError):
        return None


def processes_with(var: str, value: Optional[str] = None,
                   uid: Optional[int] = None) -> list[tuple[psutil.Process, Mapping[str, str]]]:
    """Live processes whose environment sets `var` (to `value`, if given), of user `uid` if given. Only the
    environments are read for every process (this runs in every wait of a stop, issue 20): the rest for those
    that match."""
    found = []
    for pid, raw in _environs(_carrying(var, value)).items():
        if uid is not None and _real_uid(pid) != uid:
            continue
        try:
            p = psutil.Process(pid)
        except psutil.Error:
            continue
        if alive(p):
            found.append((p, _parsed(raw)))
    return found


class _Stat(NamedTuple):
    """What /proc/PID/stat says of a process that matters here (a tuple: one is made per process per look)."""

    ppid: int
    sid: int
    zombie: bool
    start: int  # clock ticks after boot: with the pid, which process this is
    kernel: bool = False  # a kernel thread: no environment, never of a run
    environ: tuple[int, int] = (0, 0)  # where its environment is in its memory (env_start, env_end): an exec moves it


#: /proc/PID/stat's flag of a kernel thread (PF_KTHREAD, include/linux/sched.h).
_PF_KTHREAD = 0x00200000


def _stats() -> dict[int, _Stat]:
    """pid -> _Stat of every live process, from /proc/PID/stat (readable by all)."""
    table = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            fields = _read(f"/proc/{name}/stat", once=4096).rsplit(b")", 1)[1].split()  # one line of ~300 bytes
            environ = (int(fields[47]), int(fields[48])) if len(fields) > 48 else (0, 0)  # Linux >= 3.5
            table[int(name)] = _Stat(int(fields[1]), int(fields[3]), fields[0] == b"Z", int(fields[19]),
                                     bool(int(fields[6]) & _PF_KTHREAD), environ)
        except (OSError, IndexError, ValueError):
            continue  # gone meanwhile
    return table


def _environ_key(pid: int, st: _Stat) -> tuple[int, int, tuple[int, int]]:
    """Which process and which of its environments: the pid, its start, and where the environment is in memory."""
    return pid, st.start, st.environ


def _started_at(st: _Stat) -> float:
    """A _Stat's start as psutil's create_time gives it (seconds since the epoch)."""
    return psutil.boot_time() + st.start / os.sysconf("SC_CLK_TCK")


def _descendants(parents: Mapping[int, int], roots: Iterable[int]) -> set[int]:
    """Every descendant of `roots` in `parents` (pid -> parent pid)."""
    children: dict[int, list[int]] = {}
    for pid, ppid in parents.items():
        children.setdefault(ppid, []).append(pid)
    found, todo = set(), list(roots)
    while todo:
        for c in children.get(todo.pop(), ()):
            if c not in found:
                found.add(c)
                todo.append(c)
    return found


class ProcessTree:
    """Every process of one run: by cookie, by descent from the root, or seen before.

    A cookie proves nothing about a process of another user (they may have
    read it from a process of the run that they own): processes of other
    users belong to the tree only by descent (children of the root or of a
    member, or members of the run's sessions, which no outsider can join:
    the root's and those its members started; see _our_sessions),
    and only when this user is root, since no one else may signal them.
    Those seen but not signalled are kept in `foreign`, for the notes.
    """

    def __init__(self, root_pid: int, cookie: str, frontend_names: Sequence[str] = ("ncu",),
                 root_running: Callable[[], bool] = lambda: True, uid: Optional[int] = None):
        self.root_pid = root_pid
        self.root_running = root_running  # once the root is reaped its pid may be reused: stop using it
        self.cookie = cookie
        self.frontend_names = tuple(frontend_names)
        self.uid = os.getuid() if uid is None else uid
        self._seen: dict[int, psutil.Process] = {}
        self._starts: dict[int, int] = {}  # pid -> start (ticks) of the process met under it
        self._uids: dict[tuple[int, int], Optional[int]] = {}  # (pid, start) -> real uid, during one look
        self._sessions: set[int] = set()  # the run's sessions, by their leader's pid (see _our_sessions)
        self._bare: set[tuple[int, int, tuple[int, int]]] = set()  # (pid, start, environ): read, no cookie
        self.foreign: dict[int, str] = {}  # other users' processes of the run that this user may not signal

    def members(self) -> list[psutil.Process]:
        """The live processes of the run, by cookie (this user's), by descent from the root or a member, by
        session (_our_sessions), or seen before and still the same process. /proc is read once for the stat lines
        and for the environments not read before (_carriers): a stop asks this every 50 ms (issue 20)."""
        table = _stats()
        self._uids.clear()  # read again at each look: a member may change its uid (su, a privilege drop)
        carriers = {pid for pid in self._carriers(table) if self._uid(pid, table[pid]) == self.uid}
        roots = set(carriers)
        running = self.root_running()
        if running:
            roots.add(self.root_pid)
            self._sessions.add(self.root_pid)  # started in a session of its own
        kin = roots | _descendants({pid: st.ppid for pid, st in table.items()}, roots)
        sessions = self._our_sessions(table, running)
        kin.update(pid for pid, st in table.items() if st.sid in sessions)
        kin.update(pid for pid in self._seen if self._same(pid, table))
        live = {}
        for pid in kin:
            st = table.get(pid)
            if st is None or st.zombie:
                continue
            p = self._process(pid, st)
            if p is not None and (pid in carriers or self._owned(p, st)):
                live[pid] = p
        self._seen.update(live)
        self._sessions.update(pid for pid in live if table[pid].sid == pid)  # a member's own session
        return list(live.values())

    def _carriers(self, table: Mapping[int, _Stat]) -> list[int]:
        """The processes of `table` whose environment carries the run's cookie. A process's environment is the one
        its exec gave it, at a place in its memory that the stat line gives (env_start, env_end) and that its next
        exec moves (same pid, same start): one read without the cookie stands for that process until the place
        changes. (A program may overwrite its environment in place, as setproctitle does: it then shows no cookie at
        any look, as before.) So each environment is read once, not at every look (a stop looks every 50 ms; on the
        2-core machine, with ~150 processes, a look read ~300 files: issue 20). A child between its fork and its
        exec shows its parent's environment, and its own once it has exec'd: read again then, with the cookie a
        spawner outside the run may have passed on. Not remembered: an empty environment (a zombie, an exec under
        way), one that could not be read, one whose place the stat line does not give (another user's process, a
        kernel before 3.5). A kernel thread has none to read."""
        if len(self._bare) > 2 * len(table) + 64:  # forget the processes gone since
            self._bare = {key for key in self._bare if key[0] in table and _environ_key(key[0], table[key[0]]) == key}
        carries = _carrying(COOKIE_VAR, self.cookie)
        found = []
        for pid, st in table.items():
            if st.kernel or _environ_key(pid, st) in self._bare:
                continue
            raw = _environ(pid)
            if raw is None:
                continue
            if carries(raw):
                found.append(pid)
            elif raw and st.environ[1]:
                self._bare.add(_environ_key(pid, st))
        return found

    def _same(self, pid: int, table: Mapping[int, _Stat]) -> bool:
        """`pid` is still the process seen under it (not gone, not another one given its number)."""
        return pid in table and table[pid].start == self._starts.get(pid)

    def _process(self, pid: int, st: _Stat) -> Optional[psutil.Process]:
        """The psutil object of the process `pid` started at `st.start`: the one seen before, else a new one."""
        if self._starts.get(pid) == st.start and pid in self._seen:
            return self._seen[pid]
        try:
            p = psutil.Process(pid)
            if abs(p.create_time() - _started_at(st)) > 0.05:
                return None  # the pid was given to another process after the look: seen at the next one
        except psutil.Error:
            return None
        self._seen.pop(pid, None)  # the pid now names another process
        self._starts[pid] = st.start
        return p

    def _uid(self, pid: int, st: _Stat) -> Optional[int]:
        """The real uid of the process `pid` started at `st.start`, read once per look."""
        key = (pid, st.start)
        if key not in self._uids:
            self._uids[key] = _real_uid(pid)
        return self._uids[key]

    def _our_sessions(self, table: Mapping[int, _Stat], root_running: bool) -> set[int]:
        """The sessions of the run (the root's, and those a member started with setsid, as ncu's front end does):
        a process in one is of the run even when its environment cannot be read and its parent is gone, as for
        a target whose exec is under way when its launcher dies (an empty environment, a dead parent: seen when
        a stop came while the fake ncu launched its target). A session's number stays taken while any process
        is in it, even once its leader has exited; once no process is in it, or a process other than the run's
        leader holds the number, it is not ours (a daemon's fork-setsid-fork may take a freed number at once)."""
        in_use = {st.sid for st in table.values()}  # zombies too: their session's number is still taken
        for sid in list(self._sessions):
            if sid == self.root_pid and root_running:
                continue
            if sid not in in_use or (sid in table and not self._same(sid, table)):
                self._sessions.discard(sid)  # empty: its number may be given to a new session from now on
        return self._sessions

    def _owned(self, p: psutil.Process, st: _Stat) -> bool:
        """Found by descent (cookie carriers were chosen by uid already): this user's, or anyone's for root."""
        uid = self._uid(p.pid, st)
        if uid is None:
            return False
        if uid == self.uid or self.uid == 0:
            return True
        self.foreign[p.pid] = f"{describe(p)} of uid {uid}"
        return False

    @property
    def seen_pids(self) -> list[int]:
        return sorted(self._seen)

    def frontend(self, members: Iterable[psutil.Process]) -> Optional[psutil.Process]:
        """The innermost profiler front end: the one that writes the report."""
        members = list(members)
        fronts = [p for p in members if _looks_like(p, self.frontend_names)]
        if not fronts:
            return None
        front_pids = {p.pid for p in fronts}

        def has_front_descendant(p):
            try:
                return any(c.pid in front_pids for c in p.children(recursive=True))
            except psutil.Error:
                return False

        inner = [p for p in fronts if not has_front_descendant(p)]
        return (inner or fronts)[-1]


def send(p: psutil.Process, sig: int) -> bool:
    try:
        p.send_signal(sig)
        return True
    except psutil.Error:
        return False


#: wait_gone(seconds, hurry, enough) -> the members still alive when they are all gone,
#: `enough(members)` says so (the ones waited for are gone), the time is up, or
#: (hurry=True) the wait was cut short: a second Ctrl-C moves the stop to its
#: next step. The wait after SIGKILL is never cut.
WaitGone = Callable[..., list]
Enough = Callable[[list], bool]

#: After the process that was sent SIGINT has exited, the others get this long (seconds) to follow
#: (ncu's front end shuts its target down as it exits); then the stop moves on, not waiting its grace.
SETTLE_S = 0.5


def all_gone(left: list) -> bool:
    return not left


def sleeping_wait(tree: ProcessTree, clock: Callable[[], float] = time.monotonic,
                  sleep: Callable[[float], None] = time.sleep, poll: float = 0.05) -> WaitGone:
    """A WaitGone for callers with nothing else to do meanwhile (the guard, cleanup)."""

    def wait_gone(seconds: float, hurry: bool = True, enough: Enough = all_gone) -> list:
        end = clock() + seconds
        while True:
            left = tree.members()
            if enough(left) or clock() >= end:
                return left
            sleep(min(poll, max(0.0, end - clock())))

    return wait_gone


def signal_and_resume(p: psutil.Process, sig: int) -> bool:
    """`sig`, then SIGCONT: a stopped process (SIGSTOP, a debugger let go) acts on `sig` at once
    instead of holding it until SIGKILL."""
    sent = send(p, sig)
    if sent:
        send(p, signal.SIGCONT)
    return sent


#: A launcher script's interpreter: ncu's launcher is a shell script that runs the front end as a child (FACTS.md).
_SHELLS = frozenset({"sh", "dash", "bash", "ksh", "zsh"})


def _shell(p: psutil.Process) -> bool:
    try:
        return os.path.basename(p.exe()) in _SHELLS
    except (psutil.Error, OSError):
        return False


def _grace(tree: ProcessTree, wait_gone: WaitGone, policy: StopPolicy, target: psutil.Process,
           clock: Callable[[], float], said: Callable[[psutil.Process], None]) -> list:
    """Wait for the process sent SIGINT, at most `grace`; once it is gone, the rest get SETTLE_S.

    A target that is a launcher script does nothing with SIGINT: a stop that came while ncu's launcher was still
    starting its front end signalled only the script, and waited its whole grace (5 s from the command line). So
    while the target is a shell, the first front end that appears (exec'd: not a shell itself) gets SIGINT too
    (`said`), and the wait is for both. A real front end's own children (a fork not yet exec'd has its name) are
    never looked at, and the wait is one call of `wait_gone`, so a second Ctrl-C still hurries it."""
    end = clock() + policy.grace
    signalled = {target.pid}
    looking = _shell(target)

    def gone(left: list) -> bool:
        return not any(p.pid in signalled for p in left)

    def enough(left: list) -> bool:
        nonlocal looking
        front = tree.frontend(left) if looking else None
        if front is not None and front.pid not in signalled and not _shell(front):
            looking = False
            signalled.add(front.pid)
            if signal_and_resume(front, signal.SIGINT):
                said(front)
        return gone(left)

    left = wait_gone(policy.grace, True, enough)
    if left and gone(left):
        left = wait_gone(max(0.0, min(SETTLE_S, end - clock())), True)
    return left


def stop_tree(tree: ProcessTree, policy: StopPolicy, reason: str, wait_gone: WaitGone,
              clock: Callable[[], float] = time.monotonic, t0: Optional[float] = None) -> StopRecord:
    """SIGINT to the front end (grace), then SIGTERM and SIGKILL to every member.

    ncu shuts its target down and finishes the report on SIGINT; the later
    steps are for a front end that does not. Each signal but SIGKILL comes
    with a SIGCONT (a stopped ncu finishes its report too), and no wait
    lasts longer than it takes the processes waited for to exit. `t0` is
    what step times are counted from (the run's start).
    """
    start = clock()
    t0 = start if t0 is None else t0
    rec = StopRecord(reason)
    members = tree.members()
    if members:
        front = tree.frontend(members)
        target = front or next((p for p in members if p.pid == tree.root_pid), members[0])
        if signal_and_resume(target, signal.SIGINT):
            rec.steps.append(f"SIGINT to {'profiler ' if front else ''}{describe(target)} at {start - t0:.2f} s")
        left = _grace(tree, wait_gone, policy, target, clock, lambda p: rec.steps.append(
            f"SIGINT to profiler {describe(p)}, started since, at {clock() - t0:.2f} s"))
        rec.graceful = not left
        for sig, wait in ((signal.SIGTERM, policy.term_wait), (signal.SIGKILL, policy.kill_wait)):
            if not left:
                break
            names = [describe(p) for p in left]
            for p in left:
                signal_and_resume(p, sig)
            rec.steps.append(f"{signal.Signals(sig).name} to {', '.join(names)} at {clock() - t0:.2f} s")
            rec.killed.extend(names)
            left = wait_gone(wait, sig != signal.SIGKILL)
        rec.survivors = [describe(p) for p in left]
    rec.duration_s = clock() - start
    return rec


def ignores(pid: int, sig: int) -> bool:
    """Process `pid` ignores `sig` (its /proc status's SigIgn mask); False when that cannot be read."""
    try:
        with open(f"/proc/{pid}/status") as f:
            mask = next((line.split()[1] for line in f if line.startswith("SigIgn:")), "0")
        return bool(int(mask, 16) >> (sig - 1) & 1)
    except (OSError, ValueError, IndexError):
        return False


def descendants_of(pids: Iterable[int]) -> set[int]:
    """Every live descendant of `pids` (by parent pid)."""
    return _descendants({pid: st.ppid for pid, st in _stats().items()}, pids)


def stop_processes(find: Callable[[], list], policy: StopPolicy, clock: Callable[[], float] = time.monotonic,
                   sleep: Callable[[float], None] = time.sleep, poll: float = 0.05) -> list[str]:
    """Every process `find()` returns stopped as stop_tree stops a tree whose front end is unknown: SIGINT
    (grace), SIGTERM, then SIGKILL to those still found, each with SIGCONT; the survivors described (should be
    none). `find` is asked again after each wait, so a process that appears meanwhile gets the next signal."""
    left = find()
    for sig, wait in ((signal.SIGINT, policy.grace), (signal.SIGTERM, policy.term_wait),
                      (signal.SIGKILL, policy.kill_wait)):
        if not left:
            break
        for p in left:
            signal_and_resume(p, sig)
        end = clock() + wait
        while True:
            left = find()
            if not left or clock() >= end:
                break
            sleep(min(poll, max(0.0, end - clock())))
    return [describe(p) for p in left]
