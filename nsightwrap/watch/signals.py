"""Ctrl-C, SIGTERM and SIGHUP as data while processes are ours to stop.

A KeyboardInterrupt raised at a random point (between starting a tree and
recording it, or in the middle of a stop) leaves processes behind or aborts
the stop with a traceback. So a watched run *holds* these signals: they are
counted, and the watch loop reads the count at its next turn (within 0.1
s). Around a whole command, `interruptible()` turns SIGTERM and SIGHUP into
the same KeyboardInterrupt as Ctrl-C, raises it once, and only counts the
signals that follow while the command unwinds; `critical()` holds them
until a block ends.

Usage, for a caller that runs several watched attempts (a ladder walk):

    with interruptible():                  # SIGTERM/SIGHUP = Ctrl-C; later ones are counted
        for rung in ladder:
            attempt = profile_command(...) # stops its own tree; raises ProfileInterrupted
            with critical():               # a Ctrl-C here waits for the block to end
                store.record(attempt)
            time.sleep(backoff)            # a Ctrl-C here raises KeyboardInterrupt at once

Handlers are only installed from the main thread, and only over Python's
defaults: a handler the program set itself (or SIG_IGN from nohup) is left
alone. Handlers are put back when the block ends.

Python drops an exception raised where it cannot propagate one (a weakref
callback, `__del__`): it prints "Exception ignored in ..." and carries on.
A signal that comes while such code runs (importlib's module-lock callback
runs in every import, and a command imports for its first second) raises its
KeyboardInterrupt there, and the command went on as if nothing came: a
SIGTERM 0.01 s after the start ran the whole program and exited 0. A scope
that raises therefore also owns `sys.unraisablehook`: a KeyboardInterrupt
dropped that way is kept as `dropped`, and `raise_if_dropped()` raises it
again where the command goes on to start something (a command, a watched
run). Not at once from the hook (`_thread.interrupt_main`): Python runs a
signal's handler at its next step, which is still in the hook, and there it
would be dropped again.
"""

from __future__ import annotations

import signal
import sys
import threading
from contextlib import contextmanager
from typing import Callable, Iterator, Optional

#: The signals that mean "stop what you are doing" to nsightwrap.
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
_DEFAULTS = (signal.SIG_DFL, signal.default_int_handler)


def _scope_of(handler) -> Optional["Interrupts"]:
    owner = getattr(handler, "__self__", None)
    return owner if isinstance(owner, Interrupts) else None


class Interrupts:
    """Owns the stop signals for one block of the main thread.

    raise_first: the first signal raises KeyboardInterrupt (unless held by
    `critical()`); later ones, and all of them when False, are only counted
    in `received`. When a block ends, what it received is handed to the
    enclosing Interrupts (if any), which then knows an interrupt is on its
    way up and only counts further signals.
    """

    def __init__(self, *, raise_first: bool):
        self.raise_first = raise_first
        self.received: list[int] = []
        self.delivered = False  # a KeyboardInterrupt for these signals went (or goes) up
        self.dropped = False  # ... but Python dropped it (raised in a weakref callback or __del__)
        self._previous: dict[int, object] = {}
        self._previous_hook = None
        self._hooked = False

    @property
    def count(self) -> int:
        return len(self.received)

    @property
    def outer(self) -> Optional["Interrupts"]:
        return next((s for s in map(_scope_of, self._previous.values()) if s is not None), None)

    def _handle(self, signum, frame) -> None:
        self.received.append(signum)
        if self.raise_first and not self.delivered:
            self.delivered = True
            raise KeyboardInterrupt(f"{signal.Signals(signum).name} received")

    def _unraisable(self, unraisable) -> None:
        """sys.unraisablehook while this scope raises: a KeyboardInterrupt that Python dropped is kept, not
        printed; anything else goes to the hook that was there before."""
        if self._hooked and self.delivered and self.received and isinstance(unraisable.exc_value, KeyboardInterrupt):
            self.dropped = True
        else:
            self._previous_hook(unraisable)

    def __enter__(self) -> "Interrupts":
        if threading.current_thread() is not threading.main_thread():
            return self  # only the main thread may set handlers; signals go to it anyway
        try:
            if self.raise_first:
                self._hooked = True  # first: a signal right after the swap still finds the hook to put back
                self._previous_hook, sys.unraisablehook = sys.unraisablehook, self._unraisable
            for sig in STOP_SIGNALS:
                current = signal.getsignal(sig)
                if current in _DEFAULTS or _scope_of(current) is not None:
                    self._previous[sig] = signal.signal(sig, self._handle)
        except BaseException:  # a signal while installing: put back what was replaced
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *exc) -> None:
        outer = self.outer
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous = {}
        if self._hooked and sys.unraisablehook == self._unraisable:
            sys.unraisablehook = self._previous_hook
        self._hooked = False  # a hook set meanwhile that still calls this one: everything goes on to the previous
        if outer is not None and self.received:
            outer.received.extend(self.received)
            outer.delivered = True
            outer.dropped = outer.dropped or self.dropped


@contextmanager
def interruptible() -> Iterator[Interrupts]:
    """For a whole command: SIGTERM and SIGHUP raise KeyboardInterrupt like Ctrl-C.

    Without this, a script killed by `timeout` or a cancelled CI job dies at
    once and leaves ncu and its target running. Only the first signal
    raises; the ones that follow are counted while the command unwinds, so
    a burst of Ctrl-C never prints a traceback.
    """
    with Interrupts(raise_first=True) as scope:
        raise_if_dropped()
        yield scope


@contextmanager
def critical() -> Iterator[Interrupts]:
    """Hold the stop signals until the block ends, then raise one KeyboardInterrupt.

    No KeyboardInterrupt is raised when the enclosing `interruptible()` has
    already raised one (the command is unwinding).
    """
    held = Interrupts(raise_first=False)
    with held:
        outer = held.outer
        already = outer is not None and outer.delivered
        yield held
    if held.received and not already:
        raise KeyboardInterrupt(f"{signal.Signals(held.received[0]).name} received (held until a critical "
                                "section ended)")


def raise_if_dropped() -> None:
    """Where a command goes on to start something: a stop signal whose KeyboardInterrupt Python dropped (see the
    module's docstring) raises it again, once, so the command answers `interrupted` instead of starting."""
    scope = next(filter(None, (_scope_of(signal.getsignal(sig)) for sig in STOP_SIGNALS)), None)  # the innermost
    while scope is not None:
        if scope.dropped:
            scope.dropped = False
            raise KeyboardInterrupt(f"{signal.Signals(scope.received[0]).name} received (raised again: "
                                    "Python dropped it where it came)")
        scope = scope.outer


def ignore_stop_signals() -> None:
    """For a command line that was interrupted and is exiting: later signals change nothing.

    The tree is stopped and the record printed; a late Ctrl-C must not turn
    the exit into a traceback, nor a late SIGTERM the exit code into -15.
    """
    if threading.current_thread() is threading.main_thread():
        for sig in STOP_SIGNALS:
            signal.signal(sig, signal.SIG_IGN)


def settle() -> None:
    """The answer is given (a command printed its result): from now on every Interrupts block only counts
    the stop signals, so a late one changes neither the answer nor the exit code."""
    for sig in STOP_SIGNALS:
        scope = _scope_of(signal.getsignal(sig))
        while scope is not None:
            scope.delivered = True
            scope = scope.outer


def hear_interrupts() -> None:
    """In a process started with SIGINT ignored (a job that submitit started for an nsightwrap that ignored it,
    `nsightwrap ... &` in a script): Ctrl-C raises KeyboardInterrupt again, so the SIGINT that cancels the job
    stops its probe. Only from the main thread; a handler other than SIG_IGN is left alone."""
    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def _stop_signals_at_default() -> None:
    """In a child between fork and exec: the stop signals at their defaults."""
    for sig in STOP_SIGNALS:
        signal.signal(sig, signal.SIG_DFL)


def child_signal_reset() -> Optional[Callable[[], None]]:
    """A preexec_fn for a child nsightwrap must be able to stop, or None when none is needed.

    A process started with a stop signal ignored (`cmd &` in a script ignores SIGINT, nohup SIGHUP) passes
    SIG_IGN on through exec, while handlers are reset there. nsightwrap leaves its own disposition alone, but
    its children must hear the SIGINT of a graceful stop (ncu writes its report on it), so for them the
    ignored signals go back to default. Only then is a preexec_fn used (it makes Popen fork instead of
    spawn)."""
    if all(signal.getsignal(sig) is not signal.SIG_IGN for sig in STOP_SIGNALS):
        return None
    return _stop_signals_at_default
