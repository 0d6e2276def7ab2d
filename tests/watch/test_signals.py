"""Ctrl-C, SIGTERM and SIGHUP as data (nsightwrap.watch.signals), in this process.

The signals are sent to the test process itself; the handlers run in the
main thread before the next bytecode, so each assertion right after
os.kill sees their effect.
"""

from __future__ import annotations

import os
import signal
import sys
import weakref

import pytest

from nsightwrap.watch.run import watch
from nsightwrap.watch.signals import Interrupts, critical, interruptible, raise_if_dropped


def send(sig: int) -> None:
    os.kill(os.getpid(), sig)


@pytest.fixture(autouse=True)
def default_handlers():
    saved = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGHUP, signal.SIG_DFL)
    yield
    for s, h in saved.items():
        signal.signal(s, h)


def test_sigterm_and_sighup_raise_like_ctrl_c_once_then_are_counted():
    with interruptible() as scope:
        with pytest.raises(KeyboardInterrupt, match="SIGTERM"):
            send(signal.SIGTERM)
        send(signal.SIGINT)  # the command is unwinding: counted, not raised
        send(signal.SIGHUP)
    assert scope.received == [signal.SIGTERM, signal.SIGINT, signal.SIGHUP]
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_a_held_block_counts_and_tells_the_enclosing_scope():
    """What a watched run does: signals become a count its loop reads; the caller raises."""
    with interruptible() as scope:
        with Interrupts(raise_first=False) as held:
            for _ in range(5):
                send(signal.SIGINT)
            assert held.count == 5
        assert scope.delivered  # the run's owner raises ProfileInterrupted: later ones are only counted
        send(signal.SIGTERM)
    assert scope.count == 6


def test_critical_holds_until_the_block_ends_then_raises_once():
    done = []
    with pytest.raises(KeyboardInterrupt, match="held until a critical section ended"):
        with critical():
            send(signal.SIGINT)
            send(signal.SIGTERM)
            done.append("the whole block ran")
    assert done == ["the whole block ran"]
    with critical() as quiet:
        pass
    assert quiet.count == 0


def test_critical_inside_an_unwinding_command_raises_nothing_more():
    with interruptible() as scope:
        with pytest.raises(KeyboardInterrupt):
            send(signal.SIGINT)
        with critical():  # e.g. writing the store after the interrupt
            send(signal.SIGINT)
    assert scope.count == 2


def test_a_handler_the_program_set_or_nohup_is_left_alone():
    seen = []
    signal.signal(signal.SIGTERM, lambda s, f: seen.append(s))
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    with Interrupts(raise_first=False) as held:
        send(signal.SIGTERM)
        send(signal.SIGHUP)
        send(signal.SIGINT)
    assert seen == [signal.SIGTERM] and held.received == [signal.SIGINT]
    assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN


def test_outside_the_main_thread_nothing_is_installed():
    import threading

    result = {}

    def run():
        with Interrupts(raise_first=False) as held:
            result["handler"] = signal.getsignal(signal.SIGINT)
            result["count"] = held.count

    t = threading.Thread(target=run)
    t.start()
    t.join()
    assert result == {"handler": signal.default_int_handler, "count": 0}


class Thing:
    pass


def die_with(callback) -> None:
    """A weakref callback runs `callback` as an object dies: Python drops what it raises ("Exception ignored")."""
    thing = Thing()
    ref = weakref.ref(thing, lambda _: callback())  # noqa: F841 - alive until the object dies
    del thing


def test_a_signal_whose_keyboard_interrupt_python_drops_is_raised_again_once():
    hook = sys.unraisablehook
    with interruptible() as scope:
        die_with(lambda: (send(signal.SIGTERM), [0 for _ in range(3)]))  # the handler raises inside the callback
        assert scope.dropped and scope.received == [signal.SIGTERM]
        with pytest.raises(KeyboardInterrupt, match="SIGTERM received .raised again"):
            raise_if_dropped()
        raise_if_dropped()  # once
        send(signal.SIGINT)  # the command unwinds: only counted
    assert scope.received == [signal.SIGTERM, signal.SIGINT]
    assert sys.unraisablehook is hook


def test_what_else_python_drops_still_reaches_the_hook_that_was_there(monkeypatch):
    seen = []
    monkeypatch.setattr(sys, "unraisablehook", seen.append)

    def fail():
        raise ValueError("a callback's own error")
    with interruptible() as scope:
        die_with(fail)
        with Interrupts(raise_first=False):  # a held scope (a watched run) leaves the hook alone
            die_with(fail)
    assert [type(u.exc_value) for u in seen] == [ValueError, ValueError]
    assert not scope.dropped and sys.unraisablehook == seen.append
    raise_if_dropped()  # nothing was dropped: nothing raised


def test_a_watched_run_after_a_dropped_signal_starts_nothing(tmp_path):
    """The signal came while the command loaded (the store, the ladder): the run answers it before it starts."""
    marker = tmp_path / "started"
    with interruptible():
        die_with(lambda: (send(signal.SIGINT), [0 for _ in range(3)]))
        with pytest.raises(KeyboardInterrupt, match="SIGINT received .raised again"):
            watch([sys.executable, "-c", f"open({str(marker)!r}, 'w')"], None, guard=False)
    assert not marker.exists()


def test_a_hook_that_outlives_the_scope_still_reaches_the_one_before(monkeypatch):
    """A hook set inside the scope that calls the scope's and is put back only after the scope ended: what it
    passes on reaches the hook that was there before the scope."""
    seen = []
    monkeypatch.setattr(sys, "unraisablehook", seen.append)
    with interruptible():
        inner = sys.unraisablehook
        monkeypatch.setattr(sys, "unraisablehook", lambda u: inner(u))
    die_with(lambda: 1 / 0)
    assert [type(u.exc_value) for u in seen] == [ZeroDivisionError]


def test_a_dropped_signal_of_an_inner_scope_is_raised_by_the_outer_one():
    with interruptible() as outer:
        with interruptible():
            die_with(lambda: (send(signal.SIGHUP), [0 for _ in range(3)]))
        assert outer.dropped
        with pytest.raises(KeyboardInterrupt, match="SIGHUP received .raised again"):
            raise_if_dropped()
