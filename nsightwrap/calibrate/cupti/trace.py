"""Follow the CUPTI tracer's files while they grow: kernel times, launches in flight, dead processes.

The trace format (version 1; tracer.cpp beside this file writes it). The
tracer does nothing unless NSIGHTWRAP_TRACE_DIR is set; then each traced
process appends to its own ``$NSIGHTWRAP_TRACE_DIR/trace-<pid>.jsonl``
(0600) one JSON object a line, each line written whole with one write(2),
so the files are followed while they grow (a last line without a newline
is incomplete: kept for the next read)::

    {"ev":"init","pid":P,"mono_ns":M,"cupti_ns":C,"version":1}     first line
    {"ev":"launch","pid":P,"corr":N,"seq":K,"name":"DEMANGLED","mono_ns":M}
    {"ev":"graph","pid":P,"corr":N,"mono_ns":M}                    cuGraphLaunch
    {"ev":"kernel","pid":P,"corr":N,"name":"DEMANGLED","start_ns":S,"end_ns":E,"graph":0|1}
    {"ev":"range","pid":P,"api":"cuProfilerStart"|"cuProfilerStop","mono_ns":M}
    {"ev":"sync","pid":P,"corr":N,"mono_ns":M}                     a device-wide synchronize returned
    {"ev":"error","pid":P,"what":"TEXT"}
    {"ev":"note","pid":P,"what":"TEXT"}                            a CUPTI call failed that tracing does without
    {"ev":"exit","pid":P,"mono_ns":M}                              every record flushed before it

mono_ns is CLOCK_MONOTONIC (Python's time.monotonic_ns()); cupti_ns is
cuptiGetTimestamp() at the same moment, the clock of a kernel's start_ns and
end_ns (a kernel's time is end_ns - start_ns). "launch" comes when a kernel
launch API is entered (seq counts the process's launches from 0); "kernel"
when it finished on the GPU (within about 0.2 s, by the tracer's periodic
flush); a graph's kernels come with "graph":1 and the cuGraphLaunch's corr.
CUPTI hands over a finished kernel's record only once every record beside it
in its buffer is complete, so a kernel still running holds back the records of
kernels launched just before it (FACTS.md); a "sync" (cuCtxSynchronize
returned) says that every launch of the process with a smaller corr has
finished, record or not. A launch with no "kernel" yet and no later "sync" is
in flight (queued or running). An "error"
before any launch means the tracer could not set itself up and stays out of
the way; one later (CUPTI dropped records) is kept as a note. A process
whose file has no "exit" line and that is gone died (or was killed).

A TraceFollower reads the files incrementally (new per-process files are
picked up) and keeps bounded memory: per kernel name its longest duration
and count, and only the launches still in flight. Time is injected
(`clock`, seconds on the monotonic clock), so is whether a process is alive.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

import psutil

from nsightwrap.ncu.names import function_core, same_kernel
from nsightwrap.watch.tree import alive

__all__ = ["GRAPH_LAUNCH", "TRACE_DIR_VAR", "InFlight", "StalledKernel", "TraceFollower", "pid_alive"]

TRACE_DIR_VAR = "NSIGHTWRAP_TRACE_DIR"
#: How a cuGraphLaunch whose kernels have not come yet is named among the launches in flight.
GRAPH_LAUNCH = "cuGraphLaunch"
#: Bytes read from one file per poll: a flood of events cannot stall the watch loop.
READ_BUDGET = 4 << 20
#: Launches kept in flight per process. A GPU queues about a thousand launches before the launch API
#: blocks, so more means finished kernels are not coming (records lost): the newest are not kept.
MAX_IN_FLIGHT = 10_000


@dataclass(frozen=True)
class StalledKernel:
    """The kernel a calibration is for: its name as ncu printed it, and which launch of that kernel in the
    program it is (`ordinal`, 0 for its first), when that is known.

    ncu's own launch ID is no such thing: it numbers the launches ncu profiles, across processes, so with a
    kernel filter, a launch skip or several ranks it counts other launches than the program's. Without an
    ordinal the traced run is not stopped early (an earlier, shorter launch of the same kernel would end it
    with the wrong time); it runs to its end, or to the kernel limit.
    """

    name: str
    ordinal: Optional[int] = None

    def matches(self, name: str) -> bool:
        """Whether the tracer's (full) `name` is this kernel (nsightwrap.ncu.names.same_kernel)."""
        return same_kernel(name, self.name)


@dataclass(frozen=True)
class InFlight:
    """A launch with no finished kernel yet: queued or running since `since` (monotonic seconds)."""

    pid: int
    corr: int
    name: str
    seq: Optional[int]
    since: float

    def seconds(self, now: float) -> float:
        return max(0.0, now - self.since)


@dataclass
class _Process:
    """One traced process's file and what it has said so far."""

    path: Path
    pid: Optional[int] = None
    offset: int = 0
    partial: bytes = b""
    offset_s: Optional[float] = None  # CUPTI time -> monotonic seconds: add this
    exited: bool = False
    error: str = ""  # the tracer could not set itself up (an error before any launch)
    trouble: str = ""  # the last error once it traced (CUPTI dropped records)
    events: int = 0  # launches, graphs and kernels seen
    launches: dict[int, InFlight] = field(default_factory=dict)
    #: Launches a device-wide synchronize has shown finished, whose record has not come yet (their seq kept
    #: for when it comes): no longer in flight.
    synced: set[int] = field(default_factory=set)


@dataclass
class _Kernel:
    longest_s: float = 0.0
    count: int = 0


def pid_alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie does not: watch.tree.alive)."""
    try:
        return alive(psutil.Process(pid))
    except psutil.Error:
        return False


class TraceFollower:
    """What the trace files of one traced run say so far; `poll()` reads what was added."""

    def __init__(self, folder: Path, *, clock: Callable[[], float] = time.monotonic,
                 alive: Callable[[int], bool] = pid_alive):
        self.folder = Path(folder)
        self.clock = clock
        self._alive = alive
        self._procs: dict[str, _Process] = {}
        self._kernels: dict[str, _Kernel] = {}  # by the tracer's (demangled) name
        self._done: dict[str, int] = {}  # function_core -> launches of it finished (graph kernels included)
        self.ranges = False
        self.bad_lines = 0
        self.not_kept = 0  # launches not kept in flight (MAX_IN_FLIGHT)
        #: The kernel launched last (any process): where an asynchronous error most likely came from when
        #: nothing is in flight any more (a faulting kernel's record still arrives, 2x H200).
        self.last_launch: Optional[str] = None

    # --- reading ---------------------------------------------------------------
    def poll(self) -> int:
        """Read what every trace file gained since the last poll (new files included), at most READ_BUDGET
        bytes a file; the bytes read."""
        try:
            names = sorted(p.name for p in self.folder.glob("trace-*.jsonl"))
        except OSError:
            return 0
        read = 0
        for name in names:
            proc = self._procs.setdefault(name, _Process(self.folder / name))
            before = proc.offset
            self._read(proc)
            read += proc.offset - before
        return read

    def drain(self) -> None:
        """Read every file to its end (once the run is over: the watch loop's turns poll within a budget)."""
        while self.poll():
            pass

    def _read(self, proc: _Process) -> None:
        try:
            with open(proc.path, "rb") as f:
                f.seek(proc.offset)
                data = f.read(READ_BUDGET)
        except OSError:
            return
        proc.offset += len(data)
        *lines, proc.partial = (proc.partial + data).split(b"\n")
        for line in lines:
            if line.strip():
                self._take(proc, line)

    def _take(self, proc: _Process, line: bytes) -> None:
        try:
            ev = json.loads(line)
            kind = ev["ev"]
        except (ValueError, TypeError, KeyError):
            self.bad_lines += 1
            return
        if proc.pid is None and isinstance(ev.get("pid"), int):
            proc.pid = ev["pid"]
        handler = getattr(self, f"_on_{kind}", None) if isinstance(kind, str) else None
        if kind in ("launch", "graph", "kernel"):
            proc.events += 1
        if handler is not None:
            try:
                handler(proc, ev)
            except (KeyError, TypeError, ValueError):
                self.bad_lines += 1

    def _on_init(self, proc: _Process, ev: dict) -> None:
        proc.offset_s = (int(ev["mono_ns"]) - int(ev["cupti_ns"])) / 1e9

    def _on_launch(self, proc: _Process, ev: dict) -> None:
        corr = int(ev["corr"])
        self.last_launch = str(ev["name"])
        if len(proc.launches) >= MAX_IN_FLIGHT:
            self.not_kept += 1
            return
        proc.launches[corr] = InFlight(proc.pid or 0, corr, str(ev["name"]), int(ev["seq"]), ev["mono_ns"] / 1e9)

    def _on_graph(self, proc: _Process, ev: dict) -> None:
        corr = int(ev["corr"])
        proc.launches[corr] = InFlight(proc.pid or 0, corr, GRAPH_LAUNCH, None, ev["mono_ns"] / 1e9)

    def _on_kernel(self, proc: _Process, ev: dict) -> None:
        name = str(ev["name"])
        seconds = max(0, int(ev["end_ns"]) - int(ev["start_ns"])) / 1e9
        k = self._kernels.setdefault(name, _Kernel())
        k.longest_s, k.count = max(k.longest_s, seconds), k.count + 1
        corr = int(ev["corr"])
        known = proc.launches.pop(corr, None) is not None or corr in proc.synced
        proc.synced.discard(corr)
        if not known and not ev.get("graph"):  # a correlation id the launch line did not carry:
            self._oldest(proc, name)  # its oldest launch of that name goes, so none stays in flight forever
        core = function_core(name)
        self._done[core] = self._done.get(core, 0) + 1

    @staticmethod
    def _oldest(proc: _Process, name: str) -> Optional[InFlight]:
        same = [f for f in proc.launches.values() if f.name == name]
        first = min(same, key=lambda f: f.since, default=None)
        return proc.launches.pop(first.corr) if first is not None else None

    def _on_sync(self, proc: _Process, ev: dict) -> None:
        """A device-wide synchronize returned: the launches made before it are no longer in flight."""
        corr = int(ev["corr"])
        for c in [c for c in proc.launches if c < corr]:
            if len(proc.synced) < MAX_IN_FLIGHT:
                proc.synced.add(c)
            del proc.launches[c]

    def _on_range(self, proc: _Process, ev: dict) -> None:
        if ev["api"] == "cuProfilerStart":
            self.ranges = True

    def _on_note(self, proc: _Process, ev: dict) -> None:
        """A CUPTI call that failed without stopping the tracer (it traces on): kept as trouble."""
        proc.trouble = str(ev.get("what", "unknown"))

    def _on_error(self, proc: _Process, ev: dict) -> None:
        what = str(ev.get("what", "unknown error"))
        if proc.events:
            proc.trouble = what
        else:
            proc.error = what

    def _on_exit(self, proc: _Process, ev: dict) -> None:
        proc.exited = True

    # --- answers ---------------------------------------------------------------
    @property
    def traced(self) -> bool:
        """Whether the tracer works in at least one process (an init line and no error)."""
        return any(p.offset_s is not None and not p.error for p in self._procs.values())

    def errors(self) -> list[str]:
        """The tracer's own set-up failures, one line per process."""
        return [f"process {p.pid}: {p.error}" for p in self._procs.values() if p.error]

    def troubles(self) -> list[str]:
        """What went wrong once a process was traced (its last such error), one line per process."""
        return [f"process {p.pid}: {p.trouble}" for p in self._procs.values() if p.trouble]

    def kernel_times(self) -> dict[str, float]:
        """name -> longest seconds of the kernels finished so far (Calibration.from_kernels)."""
        return {name: k.longest_s for name, k in self._kernels.items()}

    def launch_count(self) -> int:
        return sum(k.count for k in self._kernels.values())

    def in_flight(self) -> list[InFlight]:
        """Launches with no finished kernel yet, oldest first."""
        return sorted((f for p in self._procs.values() for f in p.launches.values()), key=lambda f: f.since)

    def ages(self, now: Optional[float] = None) -> list[tuple[str, float]]:
        """(kernel, seconds it has been in flight) for each launch in flight, oldest first."""
        now = self.clock() if now is None else now
        return [(f.name, f.seconds(now)) for f in self.in_flight()]

    def finished(self, kernel: StalledKernel) -> bool:
        """Whether the launch of `kernel` it names has finished: more launches of it (by function_core) than
        its ordinal have. False when its ordinal is not known (see StalledKernel)."""
        if kernel.ordinal is None:
            return False
        return sum(n for core, n in self._done.items() if kernel.matches(core)) > kernel.ordinal

    def running(self, kernel: StalledKernel) -> list[InFlight]:
        """The launches of `kernel` (by function_core) in flight, oldest first."""
        mine = (f for p in self._procs.values() for f in p.launches.values() if kernel.matches(f.name))
        return sorted(mine, key=lambda f: f.since)

    def died(self) -> list[int]:
        """Processes whose file has no "exit" line and that are gone: they died or were killed."""
        return [p.pid for p in self._procs.values() if p.pid is not None and not p.exited and not self._alive(p.pid)]

    def files(self) -> int:
        return len(self._procs)
