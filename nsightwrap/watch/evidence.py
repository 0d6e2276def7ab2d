"""What a stalled run looked like, kept for someone else to act on (`nsightwrap hangs bundle`).

A hang verdict stops the tree, and with it everything that could show
where it was stuck. :class:`StallEvidence` is called once by the watch
loop when a rule calls a hang or a timeout, *before* the tree is stopped,
and writes into the run's folder (``FOLDER/COOKIE/stall/``; the cookie is
the run's, which the hang store keeps as ``run_id``):

- ``nvidia-smi-q.txt``: ``nvidia-smi -q`` at the stall;
- ``stack-PID.txt``: the host stacks of each stuck process, with
  ``py-spy dump`` for a Python process, else ``gdb -batch -p PID -ex
  "thread apply all bt"``, else ``eu-stack -p PID``; a tool that is absent
  is skipped (and said);
- ``processes.json``: each process of the tree (pid, parent, name, state,
  the kernel function it waits in, its command line masked) and, per tool,
  its command, exit code, time and whether it was cut short.

The tools run side by side, each cut short (its process group killed, so
no gdb is ever left attached: the kernel detaches a killed tracer's
tracees) after ``tool_s``, and all of them within ``budget_s`` (2.5 s);
those cut are killed together, then reaped within one shared second
(_REAP_S): the verdict is delayed by at most about ``budget_s`` + 1 s.

Beside it, a run keeps its tool log and a timestamped :class:`Transcript`
of everything it printed (``ncu.log``, ``transcript.log``; see
nsightwrap.ncu.engine), so that a bundle holds each run's log with times.
The folder keeps the newest ``keep_runs`` runs. Its files are masked as
everything nsightwrap writes (nsightwrap.secrets).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping, Optional, Sequence

import psutil

from nsightwrap.paths import ENV_EVIDENCE, make_private_dirs, runs_dir
from nsightwrap.secrets import mask_argv, mask_text

__all__ = ["STALL_DIR", "TOOL_LOG", "TRANSCRIPT", "StallEvidence", "Transcript", "stack_command"]

STALL_DIR = "stall"
TOOL_LOG = "ncu.log"
TRANSCRIPT = "transcript.log"
_COOKIE = re.compile(r"[0-9a-f]{32}")
#: A transcript line longer than this (characters) is cut: output that never ends its lines stays bounded.
_LONGEST_LINE = 64 * 1024
#: After the tools still running are killed: one shared wait (seconds) for all of them to be reaped.
_REAP_S = 1.0


def _which(name: str) -> Optional[str]:
    return shutil.which(name)


def _is_python(p: psutil.Process) -> bool:
    try:
        return os.path.basename(p.exe() or p.name()).startswith("python")
    except psutil.Error:
        return False


def stack_command(pid: int, python: bool, which: Callable[[str], Optional[str]]) -> Optional[list[str]]:
    """The command that prints `pid`'s host stacks with the best tool present, or None when none is."""
    spy = which("py-spy") if python else None
    if spy:
        return [spy, "dump", "--pid", str(pid)]
    gdb = which("gdb")
    if gdb:
        return [gdb, "-batch", "-nx", "-p", str(pid), "-ex", "thread apply all bt"]
    eu = which("eu-stack")
    return [eu, "-p", str(pid)] if eu else None


def _describe(p: psutil.Process) -> dict:
    info: dict = {"pid": p.pid}
    for key, get in (("ppid", p.ppid), ("name", p.name), ("state", p.status), ("threads", p.num_threads),
                     ("cmdline", lambda: [mask_text(a) for a in mask_argv(p.cmdline())])):
        try:
            info[key] = get()
        except psutil.Error:
            info[key] = None
    try:
        info["wchan"] = Path(f"/proc/{p.pid}/wchan").read_text().strip() or None
    except OSError:
        info["wchan"] = None
    return info


@dataclass
class _Tool:
    name: str
    argv: list[str]
    out: Path
    proc: Optional[subprocess.Popen] = None
    started: float = 0.0
    seconds: Optional[float] = None
    cut: bool = False
    error: str = ""

    def record(self) -> dict:
        return {"file": self.out.name, "command": mask_argv(self.argv), "seconds": self.seconds, "cut_short": self.cut,
                "returncode": None if self.proc is None else self.proc.returncode, "error": self.error}


def _mask_file(src: Path, dest: Path) -> None:
    """`src` copied to `dest` with secret values masked (nsightwrap.secrets), as everything nsightwrap writes."""
    dest.write_text(mask_text(src.read_text(encoding="utf-8", errors="replace")), encoding="utf-8")


def _start(tool: _Tool, now: float) -> None:
    tool.started = now
    try:
        with open(tool.out, "wb") as f:
            tool.proc = subprocess.Popen(tool.argv, stdin=subprocess.DEVNULL, stdout=f, stderr=subprocess.STDOUT,
                                         start_new_session=True, close_fds=True)
    except OSError as e:
        tool.error = str(e)


def _cut(tools: Sequence[_Tool]) -> None:
    """Kill each tool's whole group (a gdb and what it started), all of them first, then reap them against
    one shared deadline (_REAP_S): cutting several tools costs that once, not once per tool."""
    for tool in tools:
        tool.cut = True
        try:
            os.killpg(tool.proc.pid, signal.SIGKILL)
        except OSError:
            pass
    deadline = time.monotonic() + _REAP_S
    for tool in tools:
        try:
            tool.proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            pass


def _run_all(tools: Sequence[_Tool], limit_s: float, clock: Callable[[], float]) -> None:
    """Start every tool, then wait until each has ended or run `limit_s`; cut those still running."""
    running: list[_Tool] = []
    try:
        for tool in tools:
            _start(tool, clock())
            if tool.proc is not None:
                running.append(tool)
        while running:
            now = clock()
            ended = [t for t in running if t.proc.poll() is not None or now - t.started >= limit_s]
            _cut([t for t in ended if t.proc.returncode is None])
            for tool in ended:
                tool.seconds = round(clock() - tool.started, 3)
                running.remove(tool)
            if running:
                time.sleep(0.02)
    finally:  # whatever happened (an interrupt too), no tool is left running, no gdb left attached
        _cut([t for t in running if t.proc.poll() is None])


@dataclass(frozen=True)
class StallEvidence:
    """Called by the watch loop on a hang or timeout verdict, before the stop; see the module."""

    folder: Path
    budget_s: float = 2.5
    tool_s: float = 2.0
    max_processes: int = 6
    keep_runs: int = 200
    which: Callable[[str], Optional[str]] = field(default=_which, repr=False)
    clock: Callable[[], float] = field(default=time.monotonic, repr=False)

    @classmethod
    def default(cls, env: Optional[Mapping[str, str]] = None) -> Optional["StallEvidence"]:
        """From ``$NSIGHTWRAP_EVIDENCE``: None for ``off``, that folder, else ``<cache>/runs``."""
        env = os.environ if env is None else env
        if env.get(ENV_EVIDENCE, "").lower() == "off":
            return None
        return cls(runs_dir(env))

    def run_folder(self, cookie: str) -> Path:
        return Path(self.folder) / cookie

    def _tools(self, members: Sequence[psutil.Process], out: Path) -> tuple[list[_Tool], list[str]]:
        tools, skipped = [], []
        smi = self.which("nvidia-smi")
        if smi:
            tools.append(_Tool("nvidia-smi -q", [smi, "-q"], out / "nvidia-smi-q.txt"))
        else:
            skipped.append("nvidia-smi -q: no nvidia-smi")
        for p in list(members)[: self.max_processes]:
            argv = stack_command(p.pid, _is_python(p), self.which)
            if argv:
                tools.append(_Tool(f"stack of {p.pid}", argv, out / f"stack-{p.pid}.txt"))
            else:
                skipped.append(f"stack of {p.pid}: no py-spy, gdb or eu-stack")
        return tools, skipped

    def take(self, cookie: str, members: Sequence[psutil.Process], reason: str) -> list[str]:
        """Write the evidence of a stall into the run's folder, within budget_s; returns problems (none:
        an empty list). Never raises: evidence must not cost the run its verdict or its stop."""
        try:
            t0 = self.clock()
            out = self.run_folder(cookie) / STALL_DIR
            make_private_dirs(out)
            processes = [_describe(p) for p in members]
            tools, skipped = self._tools(members, out)
            _run_all(tools, min(self.tool_s, self.budget_s), self.clock)
            for tool in tools:
                if tool.out.exists():
                    _mask_file(tool.out, tool.out)
            doc = {"cookie": cookie, "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                   "reason": mask_text(reason), "processes": processes, "tools": [t.record() for t in tools],
                   "skipped": skipped, "seconds": round(self.clock() - t0, 3)}
            (out / "processes.json").write_text(json.dumps(doc, indent=1))
            return []
        except Exception as e:  # noqa: BLE001 - the verdict and the stop come first
            return [f"the stall's evidence could not be written to {self.folder} ({e})"]

    def keep(self, cookie: str, files: Sequence[Path]) -> None:
        """Copy a finished run's logs into its folder, then drop the oldest runs beyond keep_runs."""
        try:
            kept = [f for f in files if f.is_file()]
            if not kept:
                return
            dest = self.run_folder(cookie)
            make_private_dirs(dest)
            for f in kept:
                _mask_file(f, dest / f.name)
            self._prune()
        except OSError:
            pass  # losing a log must not fail the run

    def _prune(self) -> None:
        runs = [p for p in Path(self.folder).iterdir() if _COOKIE.fullmatch(p.name) and p.is_dir()]
        runs.sort(key=lambda p: p.stat().st_mtime, reverse=True)
        for old in runs[self.keep_runs:]:
            shutil.rmtree(old, ignore_errors=True)


class Transcript:
    """Everything a run printed, one line per line, each with its wall time, seconds since the start and its
    channel (``tool`` for the tool's own log, ``out`` for the program's stdout/stderr); at most `limit` bytes."""

    def __init__(self, path: Path, clock: Callable[[], float] = time.time, limit: int = 8 << 20) -> None:
        self.path, self.clock, self.limit = Path(path), clock, limit
        self.t0 = clock()
        self.written = self.dropped = 0
        self.partial = {"tool": "", "out": ""}
        try:
            self.file = open(self.path, "w", encoding="utf-8", errors="replace")
        except OSError:
            self.file = None

    def tap(self, on_output: Optional[Callable[[str], None]]) -> Callable[[str], None]:
        """An on_output that writes here, then calls `on_output`."""
        def both(text: str) -> None:
            self.add(text)
            if on_output is not None:
                on_output(text)
        return both

    def add(self, text: str) -> None:
        """One piece of output: its complete lines written with one time (they came together), masked at once;
        cheap once the limit is reached (the watch loop calls this for every piece)."""
        channel = "out" if hasattr(text, "raw") else "tool"
        if self.file is None or self.written >= self.limit:
            self.dropped += len(text)
            return
        lines = (self.partial[channel] + str(text)).split("\n")
        rest = lines.pop()
        if len(rest) > _LONGEST_LINE:  # output that never ends a line (a progress bar with \r) is cut into lines
            lines.append(rest)
            rest = ""
        self.partial[channel] = rest
        if lines:
            self._lines(channel, lines)

    def _lines(self, channel: str, lines: Sequence[str]) -> None:
        now = self.clock()
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now)) + f".{int(now % 1 * 1000):03d}Z"
        prefix = f"{stamp} +{now - self.t0:8.3f}s [{channel}] "
        entry = "".join(prefix + line + "\n" for line in mask_text("\n".join(lines)).split("\n"))
        if self.file is None or self.written + len(entry) > self.limit:
            self.dropped += len(entry)
            self.written = self.limit  # full: the rest is only counted (add's cheap path)
            return
        try:
            self.file.write(entry)
            self.written += len(entry)
        except OSError:
            self.dropped += len(entry)

    def close(self) -> None:
        for channel, rest in self.partial.items():
            if rest:
                self._lines(channel, [rest])
        self.partial = {"tool": "", "out": ""}
        if self.file is not None:
            if self.dropped:
                self.file.write(f"[{self.dropped} bytes more not kept: the transcript keeps {self.limit} bytes]\n")
            self.file.close()
            self.file = None
