"""A watched child hears the stop signals even when nsightwrap was started with them ignored.

`cmd &` in a script starts cmd with SIGINT ignored (nohup: SIGHUP), and SIG_IGN survives exec: the child
would ignore the SIGINT of a graceful stop (ncu writes its partial report on it) and only die at the
SIGKILL step, report lost. nsightwrap's own disposition is left as it was.
"""

from __future__ import annotations

import signal
import sys

import pytest

from nsightwrap.watch.rules import TotalTimeout
from nsightwrap.watch.run import watch

SHOW = "import sys; print([l for l in open('/proc/self/status') if l.startswith('SigIgn')][0], flush=True)"


def ignored_in_child(tmp_path) -> int:
    out: list[str] = []
    outcome = watch([sys.executable, "-c", SHOW], TotalTimeout(30), on_output=out.append, frontend_names=())
    assert outcome.returncode == 0
    return int("".join(out).split()[1], 16)


def test_a_child_does_not_inherit_an_ignored_sigint(tmp_path):
    before = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        mask = ignored_in_child(tmp_path)
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN  # nsightwrap's own choice stays
    finally:
        signal.signal(signal.SIGINT, before)
    assert not mask & (1 << (signal.SIGINT - 1)) and not mask & (1 << (signal.SIGHUP - 1))


@pytest.fixture
def stop_signals_at_default():
    """The stop signals as in a terminal, whatever the suite was started with (nohup ignores SIGHUP)."""
    defaults = {signal.SIGINT: signal.default_int_handler, signal.SIGTERM: signal.SIG_DFL,
                signal.SIGHUP: signal.SIG_DFL}
    saved = {sig: signal.signal(sig, handler) for sig, handler in defaults.items()}
    yield
    for sig, handler in saved.items():
        signal.signal(sig, handler)


@pytest.mark.usefixtures("stop_signals_at_default")
def test_without_ignored_signals_children_start_as_before(tmp_path):
    from nsightwrap.watch.signals import child_signal_reset

    assert child_signal_reset() is None  # no preexec_fn: Popen may spawn
    assert not ignored_in_child(tmp_path) & (1 << (signal.SIGINT - 1))
