"""Output that never blocks the writer: a thread of its own and a bounded buffer.

stderr may be a pipe that nobody reads, or a terminal stopped by Ctrl-S: a
plain write then blocks until someone reads, and with it the watch loop,
its timeout, its stall rule and its answer to Ctrl-C. `OutputWriter` hands
each write to a thread that does the (blocking) writing; the caller only
appends to a buffer. What does not fit in the buffer is dropped and
counted (`dropped`, in bytes), never waited for; after a broken pipe (the
reader went away, `| head`) everything is dropped and counted. A full
descriptor in non-blocking mode (EAGAIN) is waited for by the thread, never
taken for a broken one.

`TextOut` is the same writer as a text file object (for `print`, logging,
rich): str is encoded as UTF-8, and a str that carries the exact bytes it
was decoded from (`.raw`, see watch.channels.RawText) is written as those
bytes, so a program's output is passed through byte for byte.
"""

from __future__ import annotations

import os
import select
import threading
import time
from collections import deque
from typing import Any, Iterable, Optional

__all__ = ["BROKEN_PIPE_EXIT", "OutputWriter", "ReaderSafe", "TextOut", "lost_output", "silence"]

#: Exit code when the reader of stdout went away (128 + SIGPIPE), as for a program stopped by SIGPIPE;
#: after it, :func:`silence` the stream.
BROKEN_PIPE_EXIT = 141
#: Bytes waiting to be written at most; more is dropped and counted.
BUFFER_LIMIT = 1 << 20
#: On a full non-blocking descriptor (EAGAIN), how long the writer's thread waits before it tries again.
WAIT_WRITABLE_S = 0.05


class OutputWriter:
    """Writes bytes to a file descriptor from a daemon thread; `write` never waits."""

    def __init__(self, fd: int, limit: int = BUFFER_LIMIT) -> None:
        self.fd, self.limit = fd, limit
        self._pending: deque[bytes] = deque()
        self._size = 0  # bytes in _pending and in the write going on
        self._cond = threading.Condition()
        self._thread: Optional[threading.Thread] = None
        self._closed = False
        self.dropped = 0
        self.written = 0
        self.broken = False  # the reader went away (EPIPE) or the descriptor failed

    @property
    def pending(self) -> int:
        """Bytes handed over but not written yet."""
        return self._size

    def write(self, data: bytes) -> None:
        """Queue `data`, or drop and count it when the buffer is full, the reader gone, or closed."""
        if not data:
            return
        with self._cond:
            if self.broken or self._closed or self._size + len(data) > self.limit:
                self.dropped += len(data)
                return
            self._pending.append(bytes(data))
            self._size += len(data)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="nsightwrap-output", daemon=True)
                self._thread.start()
            self._cond.notify_all()

    def count_dropped(self, size: int) -> None:
        """Count output dropped before it reached the writer (a screen that showed only part of it)."""
        with self._cond:
            self.dropped += size

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._pending and not self._closed:
                    self._cond.wait()
                if not self._pending:
                    return
                data = self._pending.popleft()
            done = self._write_all(data)
            with self._cond:
                self._size -= len(data)
                self.written += done
                if done < len(data):
                    self.dropped += len(data) - done + sum(map(len, self._pending))
                    self._size -= sum(map(len, self._pending))
                    self._pending.clear()
                self._cond.notify_all()

    def _write_all(self, data: bytes) -> int:
        """Bytes written; fewer than len(data) when the descriptor failed (then `broken`) or the writer was
        closed while the descriptor was full.

        A descriptor in non-blocking mode (O_NONBLOCK, set by whoever shares it: a parent shell, a
        terminal multiplexer) that is full answers EAGAIN: that is no failure, this thread waits until it
        can write again and goes on (only this thread waits; `write` never does).
        """
        done = 0
        view = memoryview(data)
        while done < len(data):
            try:
                done += os.write(self.fd, view[done:])
            except BlockingIOError:  # EAGAIN: full for now
                if self._closed:
                    break
                self._wait_writable()
            except OSError:  # EPIPE (nobody reads any more), EBADF, EIO: nothing more can be written
                self.broken = True
                break
        return done

    def _wait_writable(self) -> None:
        try:
            select.select([], [self.fd], [], WAIT_WRITABLE_S)
        except (OSError, ValueError):  # a descriptor select cannot watch: wait a little, then try again
            time.sleep(WAIT_WRITABLE_S)

    def flush(self, timeout: float) -> bool:
        """Wait up to `timeout` seconds for what is queued to be written; True when it was."""
        end = time.monotonic() + timeout
        with self._cond:
            while self._size and not self.broken:
                left = end - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(left)
            return not self._size

    def close(self, timeout: float = 1.0) -> None:
        """Write what is queued for up to `timeout` seconds; what is left is dropped and counted."""
        self.flush(timeout)
        with self._cond:
            self._closed = True
            left = sum(map(len, self._pending))
            self.dropped += left
            self._size -= left
            self._pending.clear()
            self._cond.notify_all()


class TextOut:
    """An OutputWriter as a text stream (write, flush, isatty, fileno); writing never blocks."""

    encoding = "utf-8"
    errors = "surrogateescape"

    def __init__(self, writer: OutputWriter) -> None:
        self.writer = writer

    def write(self, text: str) -> int:
        raw = getattr(text, "raw", None)
        if not isinstance(raw, bytes):
            try:
                raw = text.encode(self.encoding, self.errors)
            except UnicodeEncodeError:  # a lone surrogate that is no escaped byte
                raw = text.encode(self.encoding, "backslashreplace")
        self.writer.write(raw)
        return len(text)

    def writelines(self, lines: Iterable[str]) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        """Nothing to wait for: the writer's thread writes as soon as it can."""

    def isatty(self) -> bool:
        try:
            return os.isatty(self.writer.fd)
        except OSError:
            return False

    def fileno(self) -> int:
        return self.writer.fd

    def writable(self) -> bool:
        return True

    @property
    def closed(self) -> bool:
        return False


def lost_output(size: int) -> str:
    """What to say about output that a writer dropped."""
    return (f"{size} bytes of output (ncu's, the program's, nsightwrap's) could not be written to stderr "
            "(nobody read it, or more came than a terminal can show) and were dropped")


def silence(stream: Any) -> None:
    """After the reader went away: point the stream's descriptor at /dev/null, so that the flush at exit
    does not print a BrokenPipeError of its own (Python's documented idiom for SIGPIPE)."""
    try:
        fd = stream.fileno()
    except (AttributeError, OSError, ValueError):  # not a real file
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, fd)
    finally:
        os.close(devnull)


class ReaderSafe:
    """A text stream (stdout) whose reader may go away (`| head`, `| true`) without stopping the command.

    The first BrokenPipeError of a write or flush points the stream at /dev/null (:func:`silence`) and
    is swallowed: a command that prints before it acts (`cleanup`: "stopping run ...") still acts.
    `cut` says that output was lost before the command's answer; a reader that went away only at
    :meth:`answer` (the one JSON object) or at :meth:`finish` (the last flush) lost nothing it was told
    before the end, so that does not count as cut.
    """

    def __init__(self, stream: Any) -> None:
        self.stream = stream
        self.cut = False  # output was lost before the answer
        self.broken = False  # the reader went away (at any point)

    def write(self, text: str) -> int:
        try:
            return self.stream.write(text)
        except BrokenPipeError:
            self._gone(cut=True)
            return len(text)

    def writelines(self, lines: Iterable[str]) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        self._flush(cut=True)

    def answer(self, text: str) -> None:
        """Write the command's answer and flush it; a reader gone by now is no cut."""
        try:
            self.stream.write(text)
            self.stream.flush()
        except BrokenPipeError:
            self._gone(cut=False)

    def finish(self) -> None:
        """The last flush, once the command said everything: a reader gone by now cut nothing."""
        self._flush(cut=False)

    def _flush(self, cut: bool) -> None:
        try:
            self.stream.flush()
        except BrokenPipeError:
            self._gone(cut=cut)

    def _gone(self, cut: bool) -> None:
        self.cut = self.cut or cut
        if self.broken:
            return
        self.broken = True
        silence(self.stream)
        try:  # what the buffer still holds goes to /dev/null, not into a BrokenPipeError at exit
            self.stream.flush()
        except (OSError, ValueError):
            pass

    def __getattr__(self, name: str) -> Any:
        return getattr(self.stream, name)
