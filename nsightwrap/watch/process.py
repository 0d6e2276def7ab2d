"""Start, watch and stop a profiler's whole process tree.

On the GPU machine ncu's tree was `ncu` (a shell script) -> `ncu` (the real
front end) -> `TreeLauncherSubreaper` -> target. SIGINT or SIGTERM to the
started pid did nothing useful; SIGINT to the inner front end made it shut
the target down, finish the report and exit within half a second. And a
target left alive kept its kernel spinning and made every later run hang.
So every process we start carries a cookie in its environment, the stop
goes to the real front end first, and then every process that carries the
cookie or descends from the started one is terminated, killed, and
checked gone.
"""

from __future__ import annotations

import codecs
import os
import selectors
import signal
import subprocess
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, Optional, Sequence

import psutil

from nsightwrap.watch.rules import RunState, Verdict, WatchRule

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


class PlainObserver:
    """For programs whose output means nothing to the watchdog: only its timing."""

    def __init__(self, now: float):
        self.state = RunState(started_at=now, last_output_at=now)

    def feed(self, text: str, now: float) -> list:
        return []

    def close(self, now: float) -> list:
        return []


#: Makes the object that reads a run's output: called with the start time,
#: it returns something with `.state`, `feed(text, now) -> events` and
#: `close(now) -> events` (nsightwrap.ncu.progress.NcuObserver for ncu).
ObserverFactory = Callable[[float], Any]


@dataclass
class RunOutcome:
    """The raw record of one watched process tree (turned into an Attempt)."""

    argv: list[str]
    cookie: str
    returncode: Optional[int]
    events: list[tuple[float, Any]]
    log: str
    state: RunState
    elapsed_s: float
    started_wall: float
    verdict: Optional[Verdict] = None
    interrupted: bool = False
    exception: Optional[BaseException] = None
    stop: Optional[StopRecord] = None
    pids: list[int] = field(default_factory=list)


def _describe(p: psutil.Process) -> str:
    try:
        return f"{p.pid} ({p.name()})"
    except psutil.Error:
        return str(p.pid)


def _alive(p: psutil.Process) -> bool:
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _looks_like(p: psutil.Process, names: Sequence[str]) -> bool:
    try:
        if p.name() in names:
            return True
        cmd = p.cmdline()[:2]
    except psutil.Error:
        return False
    return any(os.path.basename(c) in names for c in cmd)


def processes_with(var: str, value: Optional[str] = None) -> list[tuple[psutil.Process, Mapping[str, str]]]:
    """Live processes whose environment sets `var` (to `value`, if given)."""
    found = []
    needle = f"{var}=".encode() + (value.encode() if value is not None else b"")
    for p in psutil.process_iter():
        try:
            with open(f"/proc/{p.pid}/environ", "rb") as f:
                raw = f.read()
        except OSError:
            try:
                env = p.environ()
            except psutil.Error:
                continue
            if var in env and (value is None or env[var] == value):
                found.append((p, env))
            continue
        if needle not in raw:
            continue
        env = dict(item.split(b"=", 1) for item in raw.split(b"\0") if b"=" in item) if raw else {}
        env = {k.decode(errors="replace"): v.decode(errors="replace") for k, v in env.items()}
        if var in env and (value is None or env[var] == value) and _alive(p):
            found.append((p, env))
    return found


def find_orphans() -> list[psutil.Process]:
    """Processes of earlier runs whose nsightwrap owner is gone (it was killed)."""
    orphans = []
    for p, env in processes_with(COOKIE_VAR):
        owner = env.get(OWNER_VAR, "")
        if owner.isdigit() and not psutil.pid_exists(int(owner)):
            orphans.append(p)
    return orphans


class ProcessTree:
    """Every process of one run: by cookie, by descent, or seen before."""

    def __init__(self, root_pid: int, cookie: str, frontend_names: Sequence[str] = ("ncu",),
                 root_running: Callable[[], bool] = lambda: True):
        self.root_pid = root_pid
        self.root_running = root_running  # once the root is reaped its pid may be reused: stop using it
        self.cookie = cookie
        self.frontend_names = tuple(frontend_names)
        self._seen: dict[int, psutil.Process] = {}

    def members(self) -> list[psutil.Process]:
        found: dict[int, psutil.Process] = {}
        for p, _ in processes_with(COOKIE_VAR, self.cookie):
            found[p.pid] = p
        if self.root_running():
            try:
                root = psutil.Process(self.root_pid)
                if _alive(root):
                    found[root.pid] = root
                for c in root.children(recursive=True):
                    found.setdefault(c.pid, c)
            except psutil.Error:
                pass
        for pid, p in list(self._seen.items()):
            if pid not in found and _alive(p):  # is_running() also checks the pid was not reused
                found[pid] = p
        alive = {pid: p for pid, p in found.items() if _alive(p)}
        self._seen.update(alive)
        return list(alive.values())

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


def _send(p: psutil.Process, sig: int) -> bool:
    try:
        p.send_signal(sig)
        return True
    except psutil.Error:
        return False


def _raise_interrupt(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")


def terminate_as_interrupt() -> Callable[[], None]:
    """While a tree is watched, SIGTERM and SIGHUP stop it like Ctrl-C.

    Without this, a script killed by `timeout` or a cancelled CI job dies
    at once and leaves ncu and its target running (a kernel spinning on the
    GPU). Only default handlers are replaced, only in the main thread, and
    they are put back when the watch ends.
    """
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    replaced = {}
    for sig in (signal.SIGTERM, signal.SIGHUP):
        if signal.getsignal(sig) is signal.SIG_DFL:
            replaced[sig] = signal.signal(sig, _raise_interrupt)

    def restore():
        for sig, handler in replaced.items():
            signal.signal(sig, handler)

    return restore


class _Watch:
    """One watched process tree: the pipe, the parser, the rules, the stop."""

    def __init__(self, argv, rules, policy, env, cwd, clock, on_output, on_event, frontend_names, observer):
        self.argv = list(argv)
        self.rules = rules
        self.policy = policy
        self.clock = clock
        self.on_output = on_output
        self.on_event = on_event
        self.cookie = uuid.uuid4().hex
        full_env = dict(os.environ if env is None else env)
        full_env[COOKIE_VAR] = self.cookie
        full_env[OWNER_VAR] = str(os.getpid())
        self.t0 = clock()
        self.started_wall = time.time()
        self.proc = subprocess.Popen(
            self.argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            env=full_env, cwd=cwd, start_new_session=True, close_fds=True)
        self.tree = ProcessTree(self.proc.pid, self.cookie, frontend_names,
                                root_running=lambda: self.proc.returncode is None)
        self.fd = self.proc.stdout.fileno()
        os.set_blocking(self.fd, False)
        self.selector = selectors.DefaultSelector()
        self.selector.register(self.fd, selectors.EVENT_READ)
        self.decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self.observer = observer(self.t0)
        self.state = self.observer.state
        self.events: list[tuple[float, Any]] = []
        self.log: list[str] = []
        self.eof = False

    def now(self) -> float:
        return self.clock()

    def pump(self, timeout: float) -> None:
        """Read what the tree printed within `timeout` seconds and parse it."""
        if self.eof:
            if timeout > 0:
                time.sleep(min(timeout, 0.05))
            return
        if not self.selector.select(max(0.0, timeout)):
            return
        while True:
            try:
                data = os.read(self.fd, 65536)
            except BlockingIOError:
                return
            except OSError:
                data = b""
            if not data:
                self._feed(self.decoder.decode(b"", final=True), final=True)
                self.eof = True
                self.selector.unregister(self.fd)
                return
            self._feed(self.decoder.decode(data))

    def _feed(self, text: str, final: bool = False) -> None:
        """Record first, then call back: a callback that raises loses nothing."""
        now = self.now()
        if text:
            self.log.append(text)
            self.state.last_output_at = now
        events = self.observer.feed(text, now) if text else []
        if final:
            events += self.observer.close(now)
        self.events.extend((now - self.t0, ev) for ev in events)
        if text and self.on_output:
            self.on_output(text)
        if self.on_event:
            for ev in events:
                self.on_event(ev)

    def watch(self) -> Optional[Verdict]:
        """Until the tree ends or a rule says stop."""
        exited_at = None
        while True:
            now = self.now()
            verdict = self.rules(self.state, now) if self.rules is not None else None
            if verdict is not None:
                return verdict
            if self.proc.poll() is not None:
                if self.eof:
                    return None
                exited_at = exited_at if exited_at is not None else now
                if now - exited_at >= self.policy.drain:
                    return None  # escaped children hold the pipe; cleanup stops them
            deadline = self.rules.deadline(self.state) if self.rules is not None else float("inf")
            self.pump(min(0.1, max(0.0, deadline - now)))

    def _wait_gone(self, seconds: float) -> list[psutil.Process]:
        end = self.now() + seconds
        while True:
            self.proc.poll()
            left = self.tree.members()
            if not left or self.now() >= end:
                return left
            self.pump(min(0.05, max(0.0, end - self.now())))

    def stop(self, reason: str) -> StopRecord:
        """SIGINT to the front end, then SIGTERM and SIGKILL to every member."""
        t = self.now()
        rec = StopRecord(reason)
        members = self.tree.members()
        if members:
            front = self.tree.frontend(members)
            target = front or next((p for p in members if p.pid == self.proc.pid), members[0])
            if _send(target, signal.SIGINT):
                rec.steps.append(f"SIGINT to {'profiler ' if front else ''}{_describe(target)} at {t - self.t0:.2f} s")
            left = self._wait_gone(self.policy.grace)
            rec.graceful = not left
            for sig, wait in ((signal.SIGTERM, self.policy.term_wait), (signal.SIGKILL, self.policy.kill_wait)):
                if not left:
                    break
                names = [_describe(p) for p in left]
                for p in left:
                    _send(p, sig)
                rec.steps.append(f"{signal.Signals(sig).name} to {', '.join(names)} at {self.now() - self.t0:.2f} s")
                rec.killed.extend(names)
                left = self._wait_gone(wait)
            rec.survivors = [_describe(p) for p in left]
        self._finish_output()
        rec.duration_s = self.now() - t
        return rec

    def _finish_output(self) -> None:
        """Reap the started process and read what is left in the pipe."""
        try:
            self.proc.wait(timeout=self.policy.kill_wait)
        except subprocess.TimeoutExpired:
            pass
        end = self.now() + 0.5
        while not self.eof and self.now() < end:
            self.pump(0.05)
        if not self.eof:
            self._feed(self.decoder.decode(b"", final=True), final=True)

    def close(self) -> None:
        try:
            self.selector.close()
        finally:
            self.proc.stdout.close()


def watch(
    argv: Sequence[str],
    rules: Optional[WatchRule],
    *,
    policy: StopPolicy = StopPolicy(),
    env: Optional[Mapping[str, str]] = None,
    cwd: Optional[str] = None,
    clock: Callable[[], float] = time.monotonic,
    on_output: Optional[Callable[[str], None]] = None,
    on_event: Optional[Callable[[Any], None]] = None,
    frontend_names: Sequence[str] = ("ncu",),
    observer: ObserverFactory = PlainObserver,
) -> RunOutcome:
    """Run argv in a new session under `rules`; whatever happens, stop the whole tree.

    Ctrl-C (KeyboardInterrupt) and any exception stop the tree too; the
    outcome then says interrupted / carries the exception, and the caller
    decides whether to re-raise.
    """
    w = _Watch(argv, rules, policy, env, cwd, clock, on_output, on_event, frontend_names, observer)
    verdict, interrupted, error, stop = None, False, None, None
    restore = terminate_as_interrupt()
    try:
        try:
            verdict = w.watch()
        except KeyboardInterrupt:
            interrupted = True
        except Exception as e:  # noqa: BLE001 - any failure of ours must still stop the tree
            error = e
        reason = verdict.status if verdict else "interrupted" if interrupted else "exception" if error else None
        if reason:
            stop = w.stop(reason)
        else:
            w._finish_output()
            if w.tree.members():  # the program ended but left processes behind
                stop = w.stop("leftovers")
    except KeyboardInterrupt:
        # A second Ctrl-C while stopping: stop harder, but still stop.
        interrupted = True
        stop = w.stop("interrupted")
    finally:
        restore()
        w.close()
    return RunOutcome(
        argv=w.argv, cookie=w.cookie, returncode=w.proc.returncode, events=w.events, log="".join(w.log),
        state=w.state, elapsed_s=w.now() - w.t0, started_wall=w.started_wall, verdict=verdict,
        interrupted=interrupted, exception=error, stop=stop, pids=w.tree.seen_pids)
