"""Start a tree, watch it under rules, and stop all of it whatever happens.

One loop turn: read what the tool and the program wrote (a bounded amount),
feed the tool's text to the observer, pass everything to the caller, check
the rules. A turn takes at most about TURN_S, so the rules are checked at
least every TURN_S seconds however fast the program writes, and a signal
(held, see watch.signals) is acted on at the next turn.

The tool's own output can come on its own channel (`tool_log`, a file the
tool writes, e.g. `ncu --log-file`): then only that channel is parsed and
the program's stdout/stderr is passed through untouched, so a chatty
program cannot cut the tool's progress lines. Until that file exists the
merged stdout is parsed instead (a tool that cannot log to a file).
"""

from __future__ import annotations

import os
import subprocess
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Optional, Sequence

from nsightwrap.errors import NsightwrapError
from nsightwrap.paths import runtime_dir
from nsightwrap.status import HANG_OUTCOMES, INTERRUPTED
from nsightwrap.watch.channels import CHUNK, BoundedText, EventLog, FollowedFile, PipeReader
from nsightwrap.watch.evidence import StallEvidence
from nsightwrap.watch.guard import Guard
from nsightwrap.watch.records import RunRecord, remove_record, write_record
from nsightwrap.watch.rules import RunState, Verdict, WatchRule
from nsightwrap.watch.signals import Interrupts, child_signal_reset, raise_if_dropped
from nsightwrap.watch.tree import (
    COOKIE_VAR,
    OWNER_VAR,
    Enough,
    ProcessTree,
    StopPolicy,
    StopRecord,
    all_gone,
    start_time,
    stop_tree,
)

#: Rules are checked at least this often (seconds), whatever the output rate.
TURN_S = 0.1
#: Reading and parsing in one turn stops after this long (seconds) or this
#: many bytes from a channel, in pieces of CHUNK bytes.
READ_TIME_S = 0.03
READ_BUDGET = 1 << 20


class PlainObserver:
    """For programs whose output means nothing to the watchdog: only its timing."""

    def __init__(self, now: float):
        self.state = RunState(started_at=now, last_output_at=now)

    def feed(self, text: str, now: float) -> list:
        return []

    def close(self, now: float) -> list:
        return []


#: Makes the object that reads a run's output: called with the start time,
#: it returns something with `.state`, `feed(text, now) -> events`,
#: `close(now) -> events` and optionally `keep(event) -> bool` (which events
#: the outcome keeps, the first and last few of each type; all are counted)
#: and `summary` (what it folded from every event, exactly: the outcome's
#: `summary`). For ncu it is
#: nsightwrap.ncu.progress.NcuObserver.
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
    #: The observer's `summary` (None without one): counts and what verdicts need, from every event.
    summary: Any = None
    #: nsightwrap's own warnings about the run (not the tool's), e.g. a run record that could not be written.
    warnings: list[str] = field(default_factory=list)
    foreign: list[str] = field(default_factory=list)  # other users' processes of the run, not signalled

    @property
    def stopped_by_interrupt(self) -> bool:
        """Stopped by an interrupt: Ctrl-C or a signal here, or another thread's cancel event (the Cancelled
        rule's verdict, nsightwrap.watch.rules)."""
        return self.interrupted or (self.verdict is not None and self.verdict.status == INTERRUPTED)


class _Watch:
    """One watched process tree: its channels, observer, rules, guard and stop."""

    def __init__(self, argv, rules, policy, env, cwd, clock, on_output, on_event, frontend_names, observer,
                 tool_log, signals: Interrupts, guard: bool):
        self.argv, self.rules, self.policy, self.clock = list(argv), rules, policy, clock
        self.on_output, self.on_event = on_output, on_event
        self.env, self.cwd, self.frontend_names = env, cwd, tuple(frontend_names)
        self.signals, self.use_guard = signals, guard
        self.cookie = uuid.uuid4().hex
        self.t0 = clock()
        self.started_wall = time.time()
        self.observer = observer(self.t0)
        self.state = self.observer.state
        self.events = EventLog(getattr(self.observer, "keep", lambda ev: True))
        self.log = BoundedText()
        self.tool = FollowedFile(tool_log) if tool_log else None
        self.proc: Optional[subprocess.Popen] = None
        self.out: Optional[PipeReader] = None
        self.guard: Optional[Guard] = None
        self.record: Optional[Path] = None
        self.tree: Optional[ProcessTree] = None
        self.verdict: Optional[Verdict] = None
        self.interrupted = False
        self.exception: Optional[BaseException] = None
        self.stopping = False
        self.closed = False
        self.warnings: list[str] = []

    # -- starting ---------------------------------------------------------

    def start(self) -> None:
        """Guard first (so nothing started is ever unguarded), then the tree, then its record."""
        env = dict(os.environ if self.env is None else self.env)
        env[COOKIE_VAR] = self.cookie
        env[OWNER_VAR] = str(os.getpid())
        tool_log = self.tool.path if self.tool else None
        if self.use_guard:
            self.guard = Guard(self.cookie, self.policy, self.frontend_names, tool_log=tool_log)
        self.proc = subprocess.Popen(
            self.argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            env=env, cwd=self.cwd, start_new_session=True, close_fds=True, preexec_fn=child_signal_reset())
        self.out = PipeReader(self.proc.stdout.fileno())
        self.tree = ProcessTree(self.proc.pid, self.cookie, self.frontend_names,
                                root_running=lambda: self.proc.returncode is None)
        root_start = start_time(self.proc.pid)
        if self.guard:
            self.guard.root(self.proc.pid, root_start)
        try:
            record = RunRecord(self.cookie, os.getpid(), start_time(os.getpid()), self.proc.pid, root_start,
                               self.argv, list(self.frontend_names), self.started_wall, tool_log)
            self.record = write_record(runtime_dir(env), record)
        except (OSError, NsightwrapError) as e:
            self.record = None  # the guard still covers this run; only `cleanup` could not
            self.warnings.append(f"no run record was written ({e}): `nsightwrap cleanup` will not know this run "
                                 "if nsightwrap and its guard are both killed")
        if self.guard and self.record:
            self.guard.record(self.record)

    # -- reading ----------------------------------------------------------

    @property
    def _tool_channel(self) -> bool:
        """The tool writes to its own channel (so stdout is the program's alone)."""
        return self.tool is not None and self.tool.opened

    def pump(self, timeout: float) -> None:
        """Wait up to `timeout` for output, then read and handle a bounded amount of each channel."""
        self.out.wait(timeout)
        end = time.monotonic() + READ_TIME_S
        if self.tool is not None:
            got = 0
            while got < READ_BUDGET:
                text = self.tool.read(CHUNK)
                if not text:
                    break
                got += len(text)
                self._take(text, parse=True)
                if time.monotonic() >= end:
                    break
        tool_channel = self._tool_channel  # once per call: until ncu creates its log, each try is a failed open
        got = 0
        while got < READ_BUDGET:
            text = self.out.read(CHUNK)
            if not text and not self.out.eof:
                break
            got += len(text)
            self._take(text, parse=not tool_channel, final=self.out.eof and not tool_channel)
            if self.out.eof or time.monotonic() >= end:
                break

    def _take(self, text: str, parse: bool, final: bool = False) -> None:
        """Record first, then call back: a callback that raises loses nothing."""
        if self.closed:
            return
        now = self.clock()
        if text:
            self.log.append(str(text))  # the text alone, not the bytes RawText carries too
            self.state.last_output_at = now
        events = self.observer.feed(text, now) if parse and text else []
        if final:
            events += self.observer.close(now)
            self.closed = True
        if events:
            self.events.add(now - self.t0, events)
        self._call_back(text, events)

    def _call_back(self, text: str, events: list) -> None:
        try:
            if text and self.on_output:
                self.on_output(text)
            if self.on_event:
                for ev in events:
                    self.on_event(ev)
        except BaseException:
            if not self.stopping:
                raise
            self.on_output = self.on_event = None  # a callback that fails while we stop is not called again

    # -- watching ---------------------------------------------------------

    def watch(self) -> Optional[Verdict]:
        """Until the tree ends, a rule says stop, or a signal came."""
        exited_at = None
        while not self.signals.count:
            now = self.clock()
            verdict = self.rules(self.state, now) if self.rules is not None else None
            if verdict is not None:
                return verdict
            if self.proc.poll() is not None:
                if self.out.eof:
                    return None
                exited_at = exited_at if exited_at is not None else now
                if now - exited_at >= self.policy.drain:
                    return None  # escaped children hold the pipe; the stop of leftovers ends them
            deadline = self.rules.deadline(self.state) if self.rules is not None else float("inf")
            self.pump(min(TURN_S, max(0.0, deadline - now)))
        return None

    # -- stopping ---------------------------------------------------------

    def _wait_gone(self, seconds: float, hurry: bool, enough: Enough = all_gone) -> list:
        end = self.clock() + seconds
        seen = self.signals.count
        while True:
            self.proc.poll()
            left = self.tree.members()
            if enough(left) or self.clock() >= end or (hurry and self.signals.count > seen):
                return left
            self.pump(min(0.05, max(0.0, end - self.clock())))

    def stop(self, reason: str) -> StopRecord:
        """The whole tree, in steps; more signals meanwhile only make it go faster."""
        self.stopping = True
        before = self.signals.count
        policy = self.policy
        for _ in range(3):
            try:
                rec = stop_tree(self.tree, policy, reason, self._wait_gone, self.clock, self.t0)
                break
            except KeyboardInterrupt:  # from a handler the program installed itself: stop harder
                self.interrupted = True
                policy = StopPolicy(grace=0.0, term_wait=policy.term_wait, kill_wait=policy.kill_wait)
        else:
            rec = stop_tree(self.tree, policy, reason, self._wait_gone, self.clock, self.t0)
        more = self.signals.count - before
        if more:
            rec.steps.append(f"{more} more interrupt(s) during the stop, each moving it to its next step")
        self.finish_output()
        return rec

    def finish_output(self) -> None:
        """Reap the started process, then read what is left of both channels."""
        self.stopping = True
        try:
            self.proc.wait(timeout=self.policy.kill_wait)
        except subprocess.TimeoutExpired:
            pass
        end = self.clock() + 0.5
        while not self.out.eof and self.clock() < end:
            self.pump(0.05)
        if self.tool is not None:
            for rest in self.tool.pieces(READ_BUDGET):  # in bounded pieces, never the whole log at once
                self._take(rest, parse=True)
        if not self.closed:
            self._take("", parse=True, final=True)

    def end(self) -> Optional[StopRecord]:
        """Whatever happened, stop what is left of the tree."""
        if self.proc is None:
            return None
        if self.signals.count:
            self.interrupted = True
        reason = (self.verdict.status if self.verdict else INTERRUPTED if self.interrupted
                  else "exception" if self.exception else None)
        if reason:
            return self.stop(reason)
        self.finish_output()
        if self.tree.members():  # the program ended but left processes behind
            return self.stop("leftovers")
        return None

    def close(self) -> None:
        if self.guard:
            self.guard.release()
        remove_record(self.record)
        if self.tool is not None:
            self.tool.close()
        if self.proc is not None and self.proc.stdout:
            self.proc.stdout.close()

    def outcome(self, stop: Optional[StopRecord]) -> RunOutcome:
        return RunOutcome(
            argv=self.argv, cookie=self.cookie, returncode=None if self.proc is None else self.proc.returncode,
            events=self.events.events, log=self.log.text(), state=self.state, elapsed_s=self.clock() - self.t0,
            started_wall=self.started_wall, verdict=self.verdict,
            interrupted=self.interrupted or bool(self.signals.count), exception=self.exception, stop=stop,
            pids=self.tree.seen_pids if self.tree else [], summary=getattr(self.observer, "summary", None),
            warnings=list(self.warnings), foreign=sorted(self.tree.foreign.values()) if self.tree else [])


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
    tool_log: Optional[str] = None,
    guard: bool = True,
    evidence: Optional[StallEvidence] = None,
) -> RunOutcome:
    """Run argv in a new session under `rules`; whatever happens, stop the whole tree.

    Ctrl-C, SIGTERM and SIGHUP (held while the tree is ours, see
    watch.signals) and any exception stop the tree too; the outcome then
    says interrupted / carries the exception, and the caller decides whether
    to raise. tool_log: a file the tool writes its own output to (parsed
    instead of stdout once it exists). guard: a guard process stops the tree
    if this process is killed. on_output gets each piece of output as text
    (decoded with errors="replace"); a piece of stdout is a RawText whose
    `.raw` holds its exact bytes (see watch.channels); on_output should not
    block (the command line writes through watch.writer). The outcome's log keeps the first 64 Ki
    characters of the output and about its last 4 Mi (BoundedText's defaults). evidence: on a hang or
    timeout verdict, takes what the stuck tree looks like (watch.evidence) before it is stopped.
    """
    raise_if_dropped()  # nothing started yet: a Ctrl-C that Python dropped is answered here, as one a moment later
    with Interrupts(raise_first=False) as signals:
        w = _Watch(argv, rules, policy, env, cwd, clock, on_output, on_event, frontend_names, observer,
                   tool_log, signals, guard)
        stop = None
        try:
            try:
                w.start()
                w.verdict = w.watch()
                if evidence is not None and w.verdict is not None and w.verdict.status in HANG_OUTCOMES:
                    w.warnings += evidence.take(w.cookie, w.tree.members(), w.verdict.reason)  # before the stop
            except KeyboardInterrupt:
                w.interrupted = True
            except BaseException as e:  # noqa: BLE001 - any failure of ours must still stop the tree
                w.exception = e
            stop = w.end()
        finally:
            w.close()
    return w.outcome(stop)  # after the handlers are back: a signal while restoring them still counts
