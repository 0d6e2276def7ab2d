"""Where a watched run's output comes from, read in bounded amounts, kept in bounded memory.

A program that writes as fast as it can must not keep the watch loop from
checking its rules, nor grow nsightwrap's memory: every read takes at most
a budget of bytes and time, the log keeps its head and a tail, and events
are counted, with the first and last few of each type kept.
"""

from __future__ import annotations

import codecs
import os
import select
import time
from collections import Counter, deque
from typing import Any, Callable, Iterator, Optional

CHUNK = 64 * 1024


def _decoder():
    return codecs.getincrementaldecoder("utf-8")(errors="replace")


class RawText(str):
    """Text decoded with errors="replace" that keeps the exact bytes it came from in `.raw`.

    A callback that gets one (`on_output`) can use it as any str; the
    command line writes `.raw` instead, so a program's output is passed
    through byte for byte (see watch.writer.TextOut). Joined in order, the
    `.raw` of the pieces are the bytes read; a piece's text and bytes may
    differ by a character cut in two between pieces.
    """

    raw: bytes

    def __new__(cls, text: str, raw: bytes) -> "RawText":
        piece = super().__new__(cls, text)
        piece.raw = raw
        return piece


class PipeReader:
    """The read end of a child's stdout, non-blocking; reads give RawText."""

    def __init__(self, fd: int):
        self.fd = fd
        os.set_blocking(fd, False)
        self.decoder = _decoder()
        self.eof = False
        self._held = b""  # bytes read whose text the decoder still holds (a character cut in two)

    def wait(self, timeout: float) -> None:
        """Until there is something to read, or `timeout` seconds."""
        if self.eof:
            if timeout > 0:
                time.sleep(timeout)
            return
        select.select([self.fd], [], [], max(0.0, timeout))

    def read(self, budget: int = CHUNK) -> str:
        """What is there now, at most `budget` bytes; "" when nothing is (or at the end)."""
        if self.eof:
            return ""
        try:
            data = os.read(self.fd, budget)
        except BlockingIOError:
            return ""
        except OSError:
            data = b""
        if not data:
            self.eof = True
            return self._text(self.decoder.decode(b"", final=True), b"")
        return self._text(self.decoder.decode(data), data)

    def _text(self, text: str, data: bytes) -> str:
        """The text with its bytes; bytes without text yet wait for the piece that completes them."""
        raw, self._held = self._held + data, b""
        if not text and raw and not self.eof:
            self._held = raw
            return ""
        return RawText(text, raw)


class FollowedFile:
    """A regular file the tool writes its own output to, read as it grows.

    The tool never waits for us (unlike a FIFO, which blocks the writer
    without a reader): if nsightwrap is slow, the text waits in the file.
    The file is opened once it exists; if it shrinks (the tool truncated
    it), reading starts again from the beginning.
    """

    def __init__(self, path: str):
        self.path = path
        self.fd: Optional[int] = None
        self.offset = 0
        self.decoder = _decoder()

    @property
    def opened(self) -> bool:
        if self.fd is None:
            try:
                self.fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
            except OSError:
                return False
        return True

    def _pull(self, budget: int) -> bytes:
        if not self.opened:
            return b""
        try:
            if os.fstat(self.fd).st_size < self.offset:
                self.offset, self.decoder = 0, _decoder()
            data = os.pread(self.fd, budget, self.offset)
        except OSError:
            return b""
        self.offset += len(data)
        return data

    def read(self, budget: int) -> str:
        """What was written since the last read, at most `budget` bytes."""
        return self.decoder.decode(self._pull(budget))

    def pieces(self, budget: int) -> Iterator[str]:
        """Everything left (the writer is gone), decoded `budget` bytes at a time, then the decoder's end
        (an unfinished character): a long log left unread is never held whole."""
        while True:
            data = self._pull(budget)
            if not data:
                break
            yield self.decoder.decode(data)
        yield self.decoder.decode(b"", final=True)

    def read_all(self, budget: int) -> str:
        """Everything left (the writer is gone), in one string."""
        return "".join(self.pieces(budget))

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


class BoundedText:
    """The first `head` characters and the last `tail` or so of a text; the middle is counted."""

    def __init__(self, head: int = 64 * 1024, tail: int = 4 << 20):
        self.head_limit, self.tail_limit = head, tail
        self.head: list[str] = []
        self.head_len = 0
        self.tail: deque[str] = deque()
        self.tail_len = 0
        self.dropped = 0

    def append(self, text: str) -> None:
        if self.head_len < self.head_limit:
            room = self.head_limit - self.head_len
            self.head.append(text[:room])
            self.head_len += min(room, len(text))
            text = text[room:]
        if not text:
            return
        self.tail.append(text)
        self.tail_len += len(text)
        while self.tail and self.tail_len - len(self.tail[0]) >= self.tail_limit:
            gone = self.tail.popleft()
            self.tail_len -= len(gone)
            self.dropped += len(gone)

    def text(self) -> str:
        cut = (f"\n[... nsightwrap kept no more than this: {self.dropped} characters not kept ...]\n"
               if self.dropped else "")
        return "".join(self.head) + cut + "".join(self.tail)


class FirstLast:
    """The first `first` and the last `last` items added, and how many were added in all."""

    def __init__(self, first: int = 1000, last: int = 1000):
        self.first_limit = first
        self.head: list = []
        self.tail: deque = deque(maxlen=last)
        self.count = 0

    def add(self, item: Any) -> None:
        self.count += 1
        if len(self.head) < self.first_limit:
            self.head.append(item)
        elif self.tail.maxlen:
            self.tail.append(item)

    @property
    def not_kept(self) -> int:
        """How many items between the first and the last were counted, not kept."""
        return self.count - len(self.head) - len(self.tail)

    def items(self) -> list:
        return [*self.head, *self.tail]


class EventLog:
    """Events with their times: of each type that `keep` wants, the first and the last `limit`; all counted.

    However long the run, memory stays bounded (at most 2 x limit events a
    type) and the counts stay exact; what a verdict needs from every event
    is folded by the observer (its `summary`), not read back from here.
    """

    def __init__(self, keep: Callable[[Any], bool] = lambda ev: True, limit: int = 1000):
        self.keep = keep
        self.limit = limit
        self.kept: dict[str, FirstLast] = {}
        self.counts: Counter[str] = Counter()
        self.seq = 0  # arrival order, to merge the types back

    def add(self, t: float, events: list) -> None:
        """Events received at time t."""
        for e in events:
            name = type(e).__name__
            self.counts[name] += 1
            if self.keep(e):
                kept = self.kept.get(name)
                if kept is None:
                    kept = self.kept[name] = FirstLast(self.limit, self.limit)
                self.seq += 1
                kept.add((self.seq, t, e))

    @property
    def dropped(self) -> int:
        """Events `keep` wanted that were counted, not kept."""
        return sum(k.not_kept for k in self.kept.values())

    @property
    def events(self) -> list[tuple[float, Any]]:
        """The kept events, in the order they came."""
        merged = sorted(item for k in self.kept.values() for item in k.items())
        return [(t, e) for _, t, e in merged]
