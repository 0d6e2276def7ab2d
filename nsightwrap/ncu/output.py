"""Incremental parser of ncu's merged stdout/stderr into events.

ncu prints a kernel's progress without a newline until the kernel is done
(`==PROF== Profiling "k" - 0: 0%....50%....100% - 38 passes`), and a hung
kernel leaves that line open for good, so a line-based reader would see
nothing of it. This parser is a small state machine fed chunk by chunk: it
emits each event as soon as the text that decides it is complete, and so
gives the same events however the stream happens to be split.

Choices where the format leaves room:
- A header `==PROF== Profiling "NAME" - ID: ` is complete at the first
  `" - ID: `. With a kernel-name filter, ncu 2025.3.1 prints no ID
  (`==PROF== Profiling "NAME": `, seen on the GPU machine); such headers are
  numbered here in order of appearance, starting again at each new process
  (ncu numbers the results of each process from 0). A kernel name holding
  `": ` would end such a header early. Whether it starts a progress line (KernelStarted) or is an
  application-replay line (`Application replay pass N`, a ReplayPass) is
  decided by the next character, so KernelStarted waits for that character.
  A header left undecided at close() still gives its KernelStarted.
- Headers are recognised only at the start of a line.
- A character that cannot continue a progress line ends it (no KernelDone);
  the text from there to the newline is read as an ordinary line (so plain
  text gives Output, and nothing is lost). Marks that start a later line
  continue the kernel, as after the slow-launch warning: in a multi-process
  program another rank connects or prints in the middle of a progress line.
"""

from __future__ import annotations

import re
from typing import Optional

from nsightwrap.ncu.events import (
    Connected,
    Disconnected,
    Event,
    KernelDone,
    KernelStarted,
    NcuError,
    NcuWarning,
    Output,
    ProfNote,
    Progress,
    ReplayPass,
    ReportCreation,
    ReportWritten,
)

__all__ = ["OutputParser", "parse_all"]

_PROFILING = '==PROF== Profiling "'
_REPORT_CREATION = "==PROF== Creating report from application replay data: "
# End of a kernel header. The ID is capped so that a match has a bounded
# length and can be found across chunks by keeping only the last few chars.
_HEADER_END = re.compile(r'"(?: - (\d{1,18}))?: ')
_HEADER_END_MAX = 24
_HEADER = re.compile(r'==PROF== Profiling "(.*?)"(?: - (\d+))?: ', re.S)
_PASSES = re.compile(r"\s*-\s*(\d+)\s*pass(?:es)?\s*")
_DIGITS = "0123456789"
# ncu's line prefixes, which may follow program output on the same line.
_MARKERS = ("==PROF== ", "==WARNING==", "==ERROR==")
_MARKER_MAX = max(map(len, _MARKERS)) - 1
_MARK_START = _DIGITS + "."

_LINE_EVENTS = [
    (re.compile(r"==PROF== Connected to process (\d+) \((.*)\)\s*", re.S),
     lambda m: Connected(int(m[1]), m[2])),
    (re.compile(r"==PROF== Disconnected from process (\d+)\s*"),
     lambda m: Disconnected(int(m[1]))),
    (re.compile(r"==PROF== Report: (.*\S)\s*", re.S),
     lambda m: ReportWritten(m[1])),
    (re.compile(r'==PROF== Profiling "(.*?)"(?: - (\d+))?: Application replay pass (\d+)\s*', re.S),
     lambda m: ReplayPass(m[1], None if m[2] is None else int(m[2]), int(m[3]))),
    (re.compile(r"==WARNING==(.*)", re.S), lambda m: NcuWarning(m[1].strip())),
    (re.compile(r"==ERROR==(.*)", re.S), lambda m: NcuError(m[1].strip())),
    (re.compile(r"==PROF==(.*)", re.S), lambda m: ProfNote(m[1].strip())),
]

# Modes: an ordinary line; a complete header waiting for its next char;
# progress marks; the ` - N passes` tail of a kernel's progress line.
_LINE, _HEADER_DONE, _MARKS, _TAIL = range(4)
# What the current ordinary line may still be: (a prefix of) a header or not.
_UNKNOWN, _KERNEL_HEADER, _PLAIN = range(3)


def _line_event(text: str) -> Event:
    """The event of one complete, non-blank line."""
    for pattern, make in _LINE_EVENTS:
        m = pattern.fullmatch(text)
        if m:
            return make(m)
    return Output(text)


class OutputParser:
    """Turns ncu's merged output into events, chunk by chunk.

    Ordinary lines are buffered as a list of pieces and searched with
    str.find, so that megabytes without a newline cost linear time; only
    progress marks, which are short, are read one character at a time.
    """

    def __init__(self) -> None:
        self._unnumbered = 0  # kernels of this process whose header had no ID
        self._reset()

    def _reset(self) -> None:
        self._mode = _LINE
        self._parts: list[str] = []  # buffered text of the line or tail
        self._line_len = 0  # characters of the current ordinary line so far
        self._tail = ""  # its last few characters: a marker may straddle two chunks
        self._kind = _UNKNOWN
        self._window = ""  # last scanned chars of a kernel header candidate
        self._start: Optional[Event] = None  # what the complete header starts
        self._start_unnumbered = False  # its kernel header had no ID (so _number counted it)
        self._kernel: Optional[KernelStarted] = None
        self._percent = 0
        self._dots = 0
        self._digits = ""  # an unfinished percent mark: "5" may be "50%"
        # A progress line cut by a newline (ncu's slow-launch warning) whose
        # kernel may go on: marks that start a later line continue it.
        self._cut: Optional[tuple[KernelStarted, int, int]] = None
        self._out: list[Event] = []

    @property
    def in_progress(self) -> Optional[KernelStarted]:
        """The kernel whose progress line is open (emitted, not yet ended)."""
        return self._kernel

    @property
    def pending_header(self) -> Optional[KernelStarted]:
        """A complete kernel header whose first mark has not come yet.

        ncu prints `0%` about 0.1 s after the header, but a range or a first
        pass may take longer: the watchdog must know a kernel is in progress.
        """
        if self._mode == _HEADER_DONE and isinstance(self._start, KernelStarted):
            return self._start
        return None

    @property
    def pending(self) -> str:
        """Text buffered but not yet turned into events (for logs)."""
        return "".join(self._parts) + self._digits

    def feed(self, chunk: str) -> list[Event]:
        """Parse a chunk; return the events it completes."""
        self._out = []
        pos = 0
        while pos < len(chunk):
            if self._mode == _LINE:
                pos = self._read_line(chunk, pos)
            elif self._mode == _HEADER_DONE:
                pos = self._decide(chunk, pos)
            elif self._mode == _MARKS:
                pos = self._read_marks(chunk, pos)
            else:
                pos = self._read_tail(chunk, pos)
        return self._out

    def close(self) -> list[Event]:
        """End of stream: an unterminated line still gives its event, an
        unfinished progress line gives nothing more."""
        self._out = []
        if self._mode == _LINE and self._parts:
            self._finish_line()
        elif self._mode == _HEADER_DONE:
            self._out.append(self._start)
        out = self._out
        self._reset()
        return out

    # -- ordinary lines -------------------------------------------------

    def _read_line(self, chunk: str, pos: int) -> int:
        if self._cut and not self._parts and chunk[pos] in _MARK_START:
            self._kernel, self._percent, self._dots = self._cut
            self._cut = None
            self._mode = _MARKS
            return pos
        nl = chunk.find("\n", pos)
        end = len(chunk) if nl < 0 else nl
        if self._kind != _PLAIN:
            stop = self._header_end(chunk, pos, end)
            if stop >= 0:
                self._parts.append(chunk[pos:stop])
                header = "".join(self._parts)
                self._parts = [header]
                self._line_len = len(header)
                self._tail = header[-_MARKER_MAX:]
                self._start_unnumbered = False
                if header == _REPORT_CREATION:
                    self._start = ReportCreation()
                else:
                    m = _HEADER.fullmatch(header)
                    self._start = KernelStarted(m[1], self._number(m[2]))
                    self._start_unnumbered = m[2] is None
                self._cut = None
                self._mode = _HEADER_DONE
                return stop
        seg = chunk[pos:end]
        if self._kind == _PLAIN:
            split = self._glued_marker(seg, pos)
            if split is not None:
                return split
        self._parts.append(seg)
        self._line_len += len(seg)
        self._tail = (self._tail + seg)[-_MARKER_MAX:]
        if nl < 0:
            return end
        self._finish_line()
        return nl + 1

    def _glued_marker(self, seg: str, pos: int) -> Optional[int]:
        """Where ncu's output starts inside a line of the program's (no newline between).

        A program that prints without a newline (tqdm, print(end="")) glues
        ncu's next `==PROF==` line to its own text; unsplit, a kernel's
        header and progress would be lost. The text before the marker is the
        program's line; the marker starts a new line. Returns where parsing
        resumes in the chunk, or None.
        """
        hay = self._tail + seg
        # Only markers after the line's first character: a line that starts with one is ncu's own.
        lo = max(0, len(self._tail) - self._line_len + 1)
        found = [i for i in (hay.find(m, lo) for m in _MARKERS) if i >= 0]
        if not found:
            return None
        j = min(found)
        k = j - len(self._tail)
        carry = ""
        if k >= 0:
            self._parts.append(seg[:k])
        else:
            carry = self._tail[j:]  # the marker began in text already buffered
            self._drop_last(len(carry))
        self._finish_line()
        if carry:
            self._parts = [carry]
            self._line_len = len(carry)
            self._tail = carry
        return pos + max(k, 0)

    def _drop_last(self, n: int) -> None:
        while n > 0 and self._parts:
            last = self._parts.pop()
            if len(last) > n:
                self._parts.append(last[:-n])
                n = 0
            else:
                n -= len(last)

    def _header_end(self, chunk: str, pos: int, end: int) -> int:
        """Index in chunk where a header completes, or -1.

        Only the new text (plus a few chars kept from before) is searched,
        so a long line that merely starts like a header stays linear.
        """
        if self._kind == _UNKNOWN:
            before = "".join(self._parts)  # short: a prefix of a header
            head = before + chunk[pos:min(end, pos + len(_REPORT_CREATION))]
            if head.startswith(_REPORT_CREATION):
                return pos + len(_REPORT_CREATION) - len(before)
            if head.startswith(_PROFILING):
                self._kind = _KERNEL_HEADER
                pos += len(_PROFILING) - len(before)
            elif not (_PROFILING.startswith(head) or _REPORT_CREATION.startswith(head)):
                self._kind = _PLAIN
                return -1
            else:
                return -1
        window = self._window + chunk[pos:end]
        m = _HEADER_END.search(window)
        if m:
            return pos + m.end() - len(self._window)
        self._window = window[-_HEADER_END_MAX:]
        return -1

    def _finish_line(self) -> None:
        text = "".join(self._parts).removesuffix("\r")
        self._parts = []
        self._line_len = 0
        self._tail = ""
        self._kind = _UNKNOWN
        self._window = ""
        if text.strip():
            event = _line_event(text)
            if isinstance(event, Connected):
                self._unnumbered = 0
            elif isinstance(event, ReplayPass) and event.kernel_id is None:
                event = ReplayPass(event.name, self._number(None), event.pass_number)
            self._out.append(event)

    def _number(self, printed: Optional[str]) -> int:
        """The kernel's ID as printed, or its place among this process's unnumbered ones."""
        if printed is not None:
            return int(printed)
        self._unnumbered += 1
        return self._unnumbered - 1

    # -- progress lines -------------------------------------------------

    def _decide(self, chunk: str, pos: int) -> int:
        """After a complete header, a progress mark starts a progress line;
        anything else (`Application replay pass N`) keeps an ordinary line."""
        if chunk[pos] in _MARK_START:
            self._out.append(self._start)
            self._kernel = self._start if isinstance(self._start, KernelStarted) else None
            self._parts = []
            self._percent = self._dots = 0
            self._mode = _MARKS
        else:
            if self._start_unnumbered:
                self._unnumbered -= 1  # not a kernel after all: the line's event numbers itself
            self._kind = _PLAIN
            self._mode = _LINE
        self._start = None
        return pos

    def _read_marks(self, chunk: str, pos: int) -> int:
        kid = self._kernel.kernel_id if self._kernel else None
        for i in range(pos, len(chunk)):
            c = chunk[i]
            if c in _DIGITS and len(self._digits) < 3:
                self._digits += c
            elif c == "%" and self._digits:
                self._percent = int(self._digits)
                self._out.append(Progress(kid, self._digits + "%", self._percent, self._dots))
                self._digits = ""
            elif c == "." and not self._digits:
                self._dots += 1
                self._out.append(Progress(kid, ".", self._percent, self._dots))
            elif c == " " and not self._digits:
                self._mode = _TAIL
                return i
            elif c == "\n" and not self._digits:
                if self._kernel:
                    self._cut = (self._kernel, self._percent, self._dots)
                self._end_progress()
                return i + 1
            else:
                if not self._digits and self._kernel:
                    # Other text in the middle (another rank connecting, or printing):
                    # marks that start a later line continue this kernel.
                    self._cut = (self._kernel, self._percent, self._dots)
                # Not progress: read the rest as an ordinary line, keeping
                # the digits of an unfinished mark.
                self._parts = [self._digits] if self._digits else []
                self._line_len = len(self._digits)
                self._tail = self._digits
                self._end_progress()
                return i
        return len(chunk)

    def _read_tail(self, chunk: str, pos: int) -> int:
        """` - N passes` up to the newline closes a kernel (KernelDone)."""
        nl = chunk.find("\n", pos)
        if nl < 0:
            self._parts.append(chunk[pos:])
            return len(chunk)
        self._parts.append(chunk[pos:nl])
        tail = "".join(self._parts).removesuffix("\r")
        self._parts = []
        m = _PASSES.fullmatch(tail)
        if m and self._kernel:
            k = self._kernel
            self._out.append(KernelDone(k.name, k.kernel_id, int(m[1])))
        elif tail.strip():
            self._out.append(Output(tail))
        self._end_progress()
        return nl + 1

    def _end_progress(self) -> None:
        self._mode = _LINE
        self._kind = _UNKNOWN
        self._window = ""
        self._kernel = None
        self._digits = ""


def parse_all(text: str) -> list[Event]:
    """Events of a whole output (feed it at once, then close)."""
    parser = OutputParser()
    return parser.feed(text) + parser.close()
