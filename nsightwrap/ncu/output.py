"""Incremental parser of ncu's output into events.

ncu prints a kernel's progress without a newline until the kernel is done
(`==PROF== Profiling "k" - 0: 0%....50%....100% - 38 passes`), and a hung
kernel leaves that line open for good. This parser is a state machine fed
chunk by chunk: it emits each event as soon as the text that decides it is
complete, and gives the same events however the stream is split (up to how
a run of marks is cut into Progress events: one per run in a chunk, and one
per _MARK_RUN_MAX characters of a longer run).

It normally reads ncu's own channel (`--log-file`). It also reads ncu's
output merged with the program's (stdout, for an ncu that cannot log to a
file), where the program's writes fall between ncu's pieces (a header, a
mark, a whole line). A kernel whose line is cut by other text is kept open:
marks that start a later line continue it, and a line that ends in
`100% - N passes` finishes it, so every kernel whose end arrives is counted.

Choices where the format leaves room:
- A header `==PROF== Profiling "NAME" - ID: ` is complete at the first
  `" - ID: `. With a kernel-name filter ncu 2025.3.1 prints no ID
  (`"NAME": `); such kernels are numbered in order, from 0 in each process,
  as ncu numbers results (a name holding `": ` ends such a header early).
  After a header, a mark starts a progress line, `Application replay pass N`
  an application-replay line, and anything else is program text cutting
  into the kernel's line. A header left undecided at close() still gives its
  KernelStarted.
- Headers are recognised at the start of a line, or glued after program text.
- Lines are kept up to MAX_LINE characters; the rest is counted, not kept.
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

__all__ = ["MAX_LINE", "OutputParser", "parse_all"]

#: Characters of one line kept (a line longer than this is not ncu's).
MAX_LINE = 1 << 20

_PROFILING = '==PROF== Profiling "'
_REPORT_CREATION = "==PROF== Creating report from application replay data: "
_APP_REPLAY = "Application replay pass "
# End of a kernel header. The ID is capped so that a match has a bounded
# length and can be found across chunks by keeping only the last few chars.
# With --launch-count N, ncu numbers the launches it profiles: `"k" - 0 (1/1): ` (GPU machine,
# ncu 2025.3.1, 2026-11-26: `==PROF== Profiling "nsightwrap_probe" - 0 (1/1): 0%....50%....100% - 1 pass`).
_HEADER_END = re.compile(r'"(?: - (\d{1,18}))?(?: \(\d{1,18}/\d{1,18}\))?: ')
_HEADER_END_MAX = 64
_HEADER = re.compile(r'==PROF== Profiling "(.*?)"(?: - (\d+))?(?: \(\d+/\d+\))?: ', re.S)
_PASSES = re.compile(r"\s*-\s*(\d+)\s*pass(?:es)?\s*")
# What a ` - N passes` tail may look like before its newline.
_TAIL_PREFIX = re.compile(r"[ \t]*(?:-[ \t]*(?:\d+[ \t]*(?:p(?:a(?:s(?:s(?:e(?:s)?)?)?)?)?[ \t\r]*)?)?)?")
_TAIL_MAX = 40
# A line of program text that ends with the rest of a suspended kernel's progress.
_FINISHED = re.compile(r"(?:\.|\d{1,3}%)*100%\s*-\s*(\d+)\s*pass(?:es)?\s*$")
_FINISHED_WINDOW = 4096
# A run of progress marks, taken in one step of at most _MARK_RUN_MAX characters: the regex engine
# keeps state for each repetition of a group, about 150 bytes, so a megabyte of marks matched at once
# cost 150 MB (and 100 MB of dots parsed in one piece, 12 GB); `\.+` repeats without a group.
_MARK_RUN = re.compile(r"(?:\.+|\d{1,3}%)+")
_MARK_RUN_MAX = 64 * 1024
_DIGITS = "0123456789"
# ncu's line prefixes, which may follow program output on the same line.
_MARKER = re.compile("==PROF== |==WARNING==|==ERROR==")
_MARKER_MAX = len("==WARNING==") - 1
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

# Modes: an ordinary line; a complete header waiting to be decided;
# progress marks; the ` - N passes` tail of a kernel's progress line.
_LINE, _HEADER_DONE, _MARKS, _TAIL = range(4)
# What the current ordinary line may still be: (a prefix of) a header or not.
_UNKNOWN, _KERNEL_HEADER, _PLAIN = range(3)


def _line_event(text: str) -> Event:
    """The event of one complete, non-blank line."""
    if not text.startswith("=="):
        return Output(text)
    for pattern, make in _LINE_EVENTS:
        m = pattern.fullmatch(text)
        if m:
            return make(m)
    return Output(text)


def _last_mark(run: str) -> tuple[str, Optional[int]]:
    """The last mark of a run of marks, and its last percent (None without one)."""
    end = run.rfind("%")
    if end < 0:
        return ".", None
    start = end
    while start > 0 and run[start - 1] in _DIGITS:
        start -= 1
    return ("." if end < len(run) - 1 else run[start:]), int(run[start:end])


class OutputParser:
    """Turns ncu's output into events, chunk by chunk.

    Ordinary lines are buffered as a list of pieces and searched with
    str.find and compiled patterns from an index, so that megabytes without
    a newline, or with many ncu markers glued together, cost linear time;
    runs of progress marks are taken in one step each.
    """

    def __init__(self) -> None:
        self._unnumbered = 0  # kernels of this process whose header had no ID
        self._reset()

    def _reset(self) -> None:
        self._mode = _LINE
        self._new_line()
        self._start: Optional[Event] = None  # what the complete header starts
        self._start_unnumbered = False  # its kernel header had no ID (so _number counted it)
        self._decide = ""  # text after a complete header that may still be "Application replay pass "
        self._kernel: Optional[KernelStarted] = None
        self._percent = 0
        self._dots = 0
        self._digits = ""  # an unfinished percent mark: "5" may be "50%"
        # A kernel whose progress line was cut (by ncu's slow-launch warning,
        # or by program text) and may go on: marks that start a later line
        # continue it, a line ending in `100% - N passes` finishes it.
        self._cut: Optional[tuple[KernelStarted, int, int]] = None
        self._out: list[Event] = []
        self._nl_at = -1  # cached next newline of the chunk being fed

    def _new_line(self) -> None:
        self._parts: list[str] = []  # buffered text of the line (or the tail)
        self._line_len = 0  # characters of the current line so far (kept or not)
        self._tail = ""  # its last few characters: a marker may straddle two chunks
        self._kind = _UNKNOWN
        self._window = ""  # last scanned chars of a kernel header candidate

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
        return "".join(self._parts) + self._decide + self._digits

    def feed(self, chunk: str) -> list[Event]:
        """Parse a chunk; return the events it completes."""
        self._out = []
        self._nl_at = -1
        pos = 0
        while pos < len(chunk):
            if self._mode == _LINE:
                pos = self._read_line(chunk, pos)
            elif self._mode == _HEADER_DONE:
                pos = self._read_decision(chunk, pos)
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
            if self._decide and _APP_REPLAY.startswith(self._decide):
                self._parts.append(self._decide)
                self._finish_line()
            else:
                self._out.append(self._start)
        out = self._out
        self._reset()
        return out

    # -- ordinary lines -------------------------------------------------

    def _keep(self, text: str) -> None:
        """Add text to the current line: kept up to MAX_LINE, counted beyond."""
        room = MAX_LINE - self._line_len
        if room > 0:
            self._parts.append(text[:room])
        self._line_len += len(text)
        self._tail = (self._tail + text[-_MARKER_MAX:])[-_MARKER_MAX:]

    def _read_line(self, chunk: str, pos: int) -> int:
        if not self._line_len:
            if self._cut is None:
                bulk = self._bulk_lines(chunk, pos)
                if bulk > pos:
                    return bulk
            elif chunk[pos] in _MARK_START:
                self._kernel, self._percent, self._dots = self._cut
                self._cut = None
                self._mode = _MARKS
                return pos
        end = self._newline(chunk, pos)
        if self._kind != _PLAIN:
            stop = self._header_end(chunk, pos, end)
            if stop >= 0:
                return self._header_complete(chunk, pos, stop)
        if self._kind == _PLAIN:
            split = self._glued_marker(chunk, pos, end)
            if split is not None:
                return split
        self._keep(chunk[pos:end])
        if self._kind == _KERNEL_HEADER and self._line_len > MAX_LINE:
            self._kind = _PLAIN  # too long for a header: program text
        if end == len(chunk):
            return end
        self._finish_line()
        return end + 1

    def _newline(self, chunk: str, pos: int) -> int:
        """Index of the next newline at or after pos (len(chunk) if none), found once per chunk and line."""
        if self._nl_at < pos:
            nl = chunk.find("\n", pos)
            self._nl_at = len(chunk) if nl < 0 else nl
        return self._nl_at

    def _bulk_lines(self, chunk: str, pos: int) -> int:
        """Whole lines without `==` (no ncu marker) are program lines: one split for all of them."""
        stop = chunk.find("==", pos)
        end = chunk.rfind("\n", pos, len(chunk) if stop < 0 else stop)
        if end < 0:
            return pos
        for line in chunk[pos:end].split("\n"):
            line = line.removesuffix("\r")
            if line.strip():
                cut = len(line) - MAX_LINE
                self._out.append(Output(line if cut <= 0 else f"{line[:MAX_LINE]} [... {cut} more characters]"))
        return end + 1

    def _header_complete(self, chunk: str, pos: int, stop: int) -> int:
        self._parts.append(chunk[pos:stop])
        header = "".join(self._parts)
        self._start_unnumbered = False
        if header == _REPORT_CREATION:
            self._start = ReportCreation()
        else:
            m = _HEADER.fullmatch(header)
            self._start = KernelStarted(m[1], self._number(m[2]))
            self._start_unnumbered = m[2] is None
            self._cut = None
        self._parts = [header]
        self._decide = ""
        self._mode = _HEADER_DONE
        return stop

    def _glued_marker(self, chunk: str, pos: int, end: int) -> Optional[int]:
        """Where ncu's output starts inside a line of the program's (tqdm, print(end="")).

        The text before the marker is the program's line; the marker starts
        a new one. Only markers after the line's first character count.
        Returns where parsing resumes in the chunk, or None.
        """
        if self._tail:  # a marker that began in text already buffered
            hay = self._tail + chunk[pos:min(end, pos + _MARKER_MAX)]
            lo = max(0, len(self._tail) - self._line_len + 1)
            m = _MARKER.search(hay, lo)
            if m and m.start() < len(self._tail):
                carry = self._tail[m.start():]
                self._drop_last(len(carry))
                self._finish_line()
                self._keep(carry)
                return pos
        first = pos + 1 if self._line_len == 0 else pos
        m = _MARKER.search(chunk, first, end)
        if m is None:
            return None
        self._keep(chunk[pos:m.start()])
        self._finish_line()
        return m.start()

    def _drop_last(self, n: int) -> None:
        if self._line_len > MAX_LINE:
            return  # the line was cut: its last characters were counted, not kept
        self._line_len -= n
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
        edge = self._window + chunk[pos:min(end, pos + _HEADER_END_MAX)]
        m = _HEADER_END.search(edge)
        if m and m.start() < len(self._window):
            return pos + m.end() - len(self._window)
        m = _HEADER_END.search(chunk, pos, end)
        if m:
            return m.end()
        self._window = (self._window + chunk[max(pos, end - _HEADER_END_MAX):end])[-_HEADER_END_MAX:]
        return -1

    def _finish_line(self) -> None:
        text = "".join(self._parts).removesuffix("\r")
        cut = self._line_len - MAX_LINE
        self._new_line()
        if cut > 0:
            text += f" [... {cut} more characters]"
        if self._cut and self._finishes_cut(text):
            return
        if text.strip():
            event = _line_event(text)
            if isinstance(event, Connected):
                self._unnumbered = 0
            elif isinstance(event, ReplayPass) and event.kernel_id is None:
                event = ReplayPass(event.name, self._number(None), event.pass_number)
            self._out.append(event)

    def _finishes_cut(self, text: str) -> bool:
        """A line of program text that ends with the suspended kernel's `100% - N passes`."""
        window = text[-_FINISHED_WINDOW:]
        if "pass" not in window[-16:]:
            return False
        m = _FINISHED.search(window)
        if not m:
            return False
        before = text[:len(text) - len(window) + m.start()]
        if before.strip():
            self._out.append(Output(before))
        k = self._cut[0]
        self._out.append(KernelDone(k.name, k.kernel_id, int(m[1])))
        self._cut = None
        return True

    def _number(self, printed: Optional[str]) -> int:
        """The kernel's ID as printed, or its place among this process's unnumbered ones."""
        if printed is not None:
            return int(printed)
        self._unnumbered += 1
        return self._unnumbered - 1

    # -- after a header ---------------------------------------------------

    def _read_decision(self, chunk: str, pos: int) -> int:
        """A mark starts a progress line; `Application replay pass ` keeps an
        ordinary line; anything else is program text cutting into a kernel's line."""
        if not self._decide and chunk[pos] in _MARK_START:
            self._out.append(self._start)
            self._kernel = self._start if isinstance(self._start, KernelStarted) else None
            self._parts = []
            self._percent = self._dots = 0
            self._start = None
            self._mode = _MARKS
            return pos
        j, k = pos, len(self._decide)
        while j < len(chunk) and k < len(_APP_REPLAY) and chunk[j] == _APP_REPLAY[k]:
            j, k = j + 1, k + 1
        if k == len(_APP_REPLAY):
            return self._plain_line(self._decide + chunk[pos:j], j)  # an application-replay line
        if j == len(chunk):
            self._decide += chunk[pos:j]
            return j  # still undecided
        earlier, self._decide = self._decide, ""  # from earlier chunks; this chunk is read again
        if not isinstance(self._start, KernelStarted):
            return self._plain_line(earlier, pos)
        # Program text right after the header: the kernel started, its line is cut.
        self._out.append(self._start)
        self._cut = (self._start, 0, 0)
        self._start = None
        self._mode = _LINE
        self._new_line()
        self._keep(earlier)
        return pos

    def _plain_line(self, text: str, pos: int) -> int:
        """The header and `text` continue as an ordinary line."""
        if self._start_unnumbered:
            self._unnumbered -= 1  # not a kernel after all: the line's event numbers itself
        self._parts.append(text)
        self._line_len = sum(map(len, self._parts))
        self._tail = "".join(self._parts)[-_MARKER_MAX:]
        self._kind = _PLAIN
        self._mode = _LINE
        self._start = None
        self._decide = ""
        return pos

    # -- progress lines -------------------------------------------------

    def _read_marks(self, chunk: str, pos: int) -> int:
        kid = self._kernel.kernel_id if self._kernel else None
        i, n = pos, len(chunk)
        while i < n:
            c = chunk[i]
            if self._digits:
                if c in _DIGITS and len(self._digits) < 3:
                    self._digits += c
                    i += 1
                    continue
                if c == "%":
                    self._percent = int(self._digits)
                    self._out.append(Progress(kid, self._digits + "%", self._percent, self._dots))
                    self._digits = ""
                    i += 1
                    continue
                return self._not_progress(i)
            m = _MARK_RUN.match(chunk, i, min(n, i + _MARK_RUN_MAX))
            if m:
                run = m.group()
                self._dots += run.count(".")
                mark, percent = _last_mark(run)
                self._percent = self._percent if percent is None else percent
                self._out.append(Progress(kid, mark, self._percent, self._dots))
                i = m.end()
            elif c in _DIGITS:
                self._digits = c  # a percent mark that may end in the next chunk
                i += 1
            elif c == " ":
                self._mode = _TAIL
                return i
            elif c == "\n":
                self._end_progress()
                return i + 1
            else:
                return self._not_progress(i)
        return n

    def _not_progress(self, i: int) -> int:
        """Text that is not a mark: the kernel's line is cut, the text (with
        the digits of an unfinished mark) is read as an ordinary line."""
        digits = self._digits
        self._end_progress()
        self._keep(digits)
        return i

    def _read_tail(self, chunk: str, pos: int) -> int:
        """` - N passes` up to the newline closes a kernel (KernelDone)."""
        end = self._newline(chunk, pos)
        earlier = "".join(self._parts)  # from earlier chunks
        tail = earlier + chunk[pos:min(end, pos + _TAIL_MAX + 1)]
        if len(tail) > _TAIL_MAX or not _TAIL_PREFIX.fullmatch(tail):
            return self._not_a_tail(earlier, pos)
        if end == len(chunk):
            self._parts = [tail]
            return end
        m = _PASSES.fullmatch(tail.removesuffix("\r"))
        if not m:
            return self._not_a_tail(earlier, pos)
        if self._kernel:
            k = self._kernel
            self._out.append(KernelDone(k.name, k.kernel_id, int(m[1])))
        self._end_progress(done=True)
        return end + 1

    def _not_a_tail(self, earlier: str, pos: int) -> int:
        """What followed the marks was program text: the kernel's line is cut,
        the text is read again from `pos` as an ordinary line."""
        self._end_progress()
        self._keep(earlier)
        return pos

    def _end_progress(self, done: bool = False) -> None:
        """The progress line ends: with its kernel done, or cut (the kernel may go on)."""
        if self._kernel and not done:
            self._cut = (self._kernel, self._percent, self._dots)
        self._mode = _LINE
        self._new_line()
        self._kernel = None
        self._digits = ""


def parse_all(text: str) -> list[Event]:
    """Events of a whole output (feed it at once, then close)."""
    parser = OutputParser()
    return parser.feed(text) + parser.close()
