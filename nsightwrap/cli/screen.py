"""What the command line shows on stderr while it works: ncu's output, stages, live progress, a summary.

Two screens with one face: `PlainScreen` (stderr is not a terminal, or -q)
writes ncu's output and one line per stage as they come; `LiveScreen` (a
terminal) keeps a live status line under ncu's output, through rich: the
stage (rung or sweep probe), the kernel being profiled, its pass progress,
the seconds of silence against the stall allowance, and at the end a
summary of kernels, reports and hangs. Both are RunListeners, handed down
in the run context; neither ever writes to stdout (the --json object).
"""

from __future__ import annotations

import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, TextIO

from nsightwrap.ncu.attempt import Attempt
from nsightwrap.ncu.listen import CalibrationProgress, RunListener
from nsightwrap.ncu.progress import WatchState
from nsightwrap.status import HANG
from nsightwrap.watch.rules import WatchRule

__all__ = ["LiveScreen", "PlainScreen", "Tally", "calibration_line", "open_screen", "progress_line"]

#: The most lines and characters of one piece of output that the live screen shows (the last ones).
LIVE_LINES, LIVE_CHARS = 200, 16 * 1024


@dataclass
class Tally:
    """What the command did so far, for the closing summary."""

    attempts: int = 0
    kernels: int = 0
    reports: list[str] = field(default_factory=list)
    hangs: list[str] = field(default_factory=list)

    def add(self, attempt: Attempt, stage: str = "") -> None:
        self.attempts += 1
        self.kernels += attempt.finished_count
        if attempt.report is not None and attempt.report.exists() and str(attempt.report) not in self.reports:
            self.reports.append(str(attempt.report))
        if attempt.status == HANG:
            self.hangs.append(f"{attempt.stalled_kernel}" + (f" ({stage})" if stage else ""))

    def summary(self) -> str:
        text = (f"nsightwrap: {self.attempts} attempt(s), {self.kernels} kernel(s) profiled, "
                f"{len(self.reports)} report(s) written, {len(self.hangs)} hang(s)")
        return text + (": " + "; ".join(self.hangs) if self.hangs else "")


def _allowance(rule: Optional[WatchRule], state: WatchState) -> Optional[float]:
    """The stall allowance now, from the first rule (of those combined in it) that gives one now."""
    for r in getattr(rule, "rules", (rule,)):
        allowance = getattr(r, "allowance", None)
        seconds = allowance(state) if callable(allowance) else None
        if seconds is not None:  # a known cause's rule gives one only for the kernels it judges
            return seconds
    return None


def progress_line(stage: str, state: Optional[WatchState], rule: Optional[WatchRule], now: float) -> str:
    """One line: stage, kernel and its progress, silence against the allowance. Pure, for tests."""
    parts = [f"[{stage}]"] if stage else []
    if state is None:
        parts.append("starting ...")
        return "  ".join(parts)
    cur = state.current
    if cur is None:
        parts.append(f"{state.kernels_done} kernel(s) done; no kernel in progress "
                     f"({now - state.last_output_at:.0f} s since ncu last printed)")
        return "  ".join(parts)
    kid = "" if cur.kernel_id is None else f" #{cur.kernel_id}"
    parts.append(f'kernel "{cur.name}"{kid}: {cur.where()}')
    allowance = _allowance(rule, state)
    silent = now - cur.last_mark_at
    parts.append(f"silent {silent:.0f} s" + (f" of {allowance:.3g}" if allowance is not None else ""))
    parts.append(f"{state.kernels_done} done")
    return "  ".join(parts)


def calibration_line(stage: str, progress: CalibrationProgress, now: float) -> str:
    """The live line while a calibration runs the program without ncu. Pure, for tests."""
    return "  ".join(([f"[{stage}]"] if stage else []) + [progress.line(now)])


class PlainScreen(RunListener):
    """stderr that is not a terminal: ncu's output as it comes and one line per stage (nothing with -q)."""

    def __init__(self, err: TextIO, quiet: bool = False) -> None:
        self.err = err
        self.quiet = quiet
        self.tally = Tally()
        self._stage = threading.local()
        self._lock = threading.Lock()

    def __enter__(self) -> "PlainScreen":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        """Nothing to take down; the summary is for the live screen."""

    def output(self, text: str) -> None:
        """Output of ncu and the program, byte for byte where it carries its bytes (a RawText)."""
        if not self.quiet:
            with self._lock:
                raw, buffer = getattr(text, "raw", None), getattr(self.err, "buffer", None)
                if isinstance(raw, bytes) and buffer is not None:  # a plain binary stream under the text
                    self.err.flush()
                    buffer.write(raw)
                    buffer.flush()
                else:  # a TextOut writes a RawText's bytes itself
                    self.err.write(text)
                    self.err.flush()

    def line(self, text: str) -> None:
        """A progress message of nsightwrap's own, on a line of its own (not with -q)."""
        if not self.quiet:
            self.say(text)

    def say(self, text: str) -> None:
        """A line asked for explicitly (--verbose's log): printed even with -q."""
        with self._lock:
            self.err.write(text.rstrip("\n") + "\n")
            self.err.flush()

    def stage(self, text: str) -> None:
        self._stage.text = text
        self.line(f"\n[nsightwrap] {text}")

    def finished(self, attempt: Attempt) -> None:
        with self._lock:
            self.tally.add(attempt, getattr(self._stage, "text", ""))

    @property
    def on_output(self) -> Optional[Callable[[str], None]]:
        return None if self.quiet else self.output


class LiveScreen(PlainScreen):
    """A terminal: ncu's complete lines scroll above one live status line per running attempt."""

    def __init__(self, console: Any, clock: Callable[[], float] = time.monotonic, refresh: float = 4.0) -> None:
        from rich.live import Live

        super().__init__(console.file)
        self.console = console
        self.clock = clock
        self._runs: dict[int, tuple[str, Optional[WatchState], Optional[WatchRule]]] = {}
        self._calibrating: dict[int, CalibrationProgress] = {}
        self._partial = ""
        self._live = Live(self, console=console, refresh_per_second=refresh, transient=True,
                          redirect_stdout=False, redirect_stderr=False)

    def __enter__(self) -> "LiveScreen":
        self._live.start()
        return self

    def close(self) -> None:
        if self._live.is_started:
            self.output("\n" if self._partial else "")
            self._live.stop()
            self.console.print(self.tally.summary(), markup=False, highlight=False)

    # --- what the run says ---------------------------------------------------------
    def output(self, text: str) -> None:
        """ncu's output: complete lines above the status line; an open progress line lives in the status.

        At most LIVE_LINES lines and LIVE_CHARS characters of a piece are shown (the last ones): rich
        takes about 10 us a line, and a flood must not hold the watch loop. The rest is dropped and
        counted with what stderr's writer dropped (the lost-output warning says it), a line cut short
        and the start of an open line longer than LIVE_CHARS included.
        """
        with self._lock:
            text = self._partial + text
            done, _, partial = text.rpartition("\n")
            self._partial = partial[-LIVE_CHARS:]
        if len(partial) > LIVE_CHARS:  # an open line longer than the screen keeps: its start is lost
            self._dropped(_size(partial[:-LIVE_CHARS]))
        if not (done or text.endswith("\n")):
            return
        lines = done.split("\n")
        shown = "\n".join(lines[-LIVE_LINES:])
        block = shown[-LIVE_CHARS:]
        whole = block.count("\n") + 1  # lines of the block, the first perhaps cut at its start
        cut = len(block) < len(shown) and shown[-len(block) - 1] != "\n"
        hidden = len(lines) - whole + (1 if cut else 0)  # lines not shown, or not shown whole
        if hidden > 0:
            self._dropped(_size(done) - _size(block))
            self.console.print(f"[nsightwrap: {hidden} line(s) of output not shown{' or cut short' if cut else ''} "
                               f"({_size(done) - _size(block)} bytes): more than a terminal can show]",
                               markup=False, highlight=False, soft_wrap=True)
        self.console.print(block, markup=False, highlight=False, soft_wrap=True)

    def _dropped(self, chars: int) -> None:
        writer = getattr(self.console.file, "writer", None)  # a watch.writer.TextOut, from cli.main
        if writer is not None:
            writer.count_dropped(chars)

    def line(self, text: str) -> None:
        self.console.print(text.rstrip("\n"), markup=False, highlight=False, soft_wrap=True)

    say = line

    def stage(self, text: str) -> None:
        me = threading.get_ident()
        with self._lock:
            self._runs[me] = (text, None, None)
            self._stage.text = text
        self.line(f"[nsightwrap] {text}")

    def started(self, state: WatchState, rule: WatchRule) -> None:
        me = threading.get_ident()
        with self._lock:
            stage = self._runs.get(me, ("", None, None))[0]
            self._runs[me] = (stage, state, rule)

    def finished(self, attempt: Attempt) -> None:
        me = threading.get_ident()
        with self._lock:
            stage = self._runs.pop(me, ("", None, None))[0]
            self.tally.add(attempt, stage)

    def calibrating(self, progress: CalibrationProgress) -> None:
        """The kernel running without ncu, while a calibration runs (in place of its attempt's line)."""
        me = threading.get_ident()
        with self._lock:
            if progress.done:
                self._calibrating.pop(me, None)
            else:
                self._calibrating[me] = progress

    # --- what rich draws, several times a second ------------------------------------
    def __rich__(self) -> Any:
        from rich.text import Text

        now = self.clock()
        with self._lock:
            runs = [(me, *run) for me, run in self._runs.items()]
            calibrating = dict(self._calibrating)
            tally = self.tally
        lines = [calibration_line(stage, calibrating[me], now) if me in calibrating
                 else progress_line(stage, state, rule, now) for me, stage, state, rule in runs]
        shown = {run[0] for run in runs}
        lines += [calibration_line("", c, now) for me, c in calibrating.items() if me not in shown]
        lines = lines or ["working ..."]
        lines.append(f"{tally.attempts} attempt(s) so far: {tally.kernels} kernel(s), "
                     f"{len(tally.reports)} report(s), {len(tally.hangs)} hang(s)")
        return Text("\n".join(lines), style="bold", no_wrap=True, overflow="ellipsis")

    @property
    def on_output(self) -> Optional[Callable[[str], None]]:
        return self.output


def _size(text: str) -> int:
    """The bytes `text` takes on stderr (what stderr's writer counts)."""
    try:
        return len(text.encode("utf-8", "surrogateescape"))  # the bytes a RawText was decoded from
    except UnicodeEncodeError:
        return len(text.encode("utf-8", "replace"))


def open_screen(quiet: bool, err: Optional[TextIO] = None) -> PlainScreen:
    """A live screen where stderr is a terminal (and not -q), else a plain one."""
    err = err or sys.stderr
    if not quiet and err.isatty():
        from rich.console import Console

        console = Console(file=err, stderr=err is sys.stderr)
        if console.is_terminal and not console.is_dumb_terminal:
            return LiveScreen(console)
    return PlainScreen(err, quiet)
