"""An interrupt during calibration is an interrupt (issue 19, item 3): `interrupted`/130, nothing recorded.

Before, Ctrl-C while a stall was being calibrated ended the run as `hang` (3)
on its uncalibrated 3 s suspicion, and so did a program that hangs by itself
(NAME@always) interrupted during its calibration run. Here the signal is
sent while the calibration's plain run is going (the program hangs without
ncu too, so the run is surely in progress), through the CLI and the library.
"""

from __future__ import annotations

import json
import os
import signal
import threading

import pytest
from helpers import SUSPECT_SOON, app, no_leftovers, read_until, run_config, start_cli

from nsightwrap.calibrate import Calibrator
from nsightwrap.errors import ProfileInterrupted
from nsightwrap.fallback.ladder import ladder_from_dict
from nsightwrap.fallback.session import Session
from nsightwrap.fallback.walk import walk_ladder
from nsightwrap.ncu.context import RunContext
from nsightwrap.ncu.engine import profile_command
from nsightwrap.ncu.options import ProfileOptions
from nsightwrap.status import EXIT_CODES, INTERRUPTED
from nsightwrap.store.hangstore import HangStore
from nsightwrap.watch.signals import interruptible

CALIBRATING = b"timing the program without ncu"
BASIC = ProfileOptions(set="basic")
LADDER = ladder_from_dict({"name": "two", "rungs": [
    {"name": "requested", "requested": True}, {"name": "duration", "metrics": ["gpu__time_duration.sum"]}]})


def _store_is_empty(path):
    if path.exists():
        with HangStore(path) as store:
            assert len(store) == 0 and store.conn.execute("SELECT COUNT(*) FROM calibrations").fetchone()[0] == 0


# --- the command line ------------------------------------------------------------------------------

# Each path with one of the two signals (SIGINT and SIGTERM are one kind of interrupt to nsightwrap.watch.signals,
# tests/watch/test_signals.py); the library tests below take both as well.
@pytest.mark.parametrize("how, sig", [("run", signal.SIGINT), ("profile", signal.SIGTERM)])
def test_cli_interrupted_while_calibrating_is_interrupted(fake_env, tmp_path, how, sig):
    store = tmp_path / "h.db"
    extra = ["--profile", "quick", "--no-preflight"] if how == "profile" else []
    p = start_cli(["run", "--json", "--store", str(store), "--set", "basic", "--calibration-limit", "60", *extra,
                   "--", *app("vec_add", "k@always", "vec_add")], fake_env, main=("-c", SUSPECT_SOON))
    try:
        read_until(p, p.stderr, CALIBRATING, timeout=60)
        threading.Event().wait(0.5)  # the calibration's plain run is under way
        p.send_signal(sig)
        out, err = p.communicate(timeout=60)
    finally:
        p.kill()
    assert p.returncode == EXIT_CODES[INTERRUPTED], err.decode(errors="replace")[-2000:]
    [line] = out.decode().splitlines()  # exactly one JSON object
    doc = json.loads(line)
    assert doc["status"] == INTERRUPTED and doc["exit_code"] == 130
    attempt = doc.get("attempt", doc)
    assert attempt["status"] == INTERRUPTED and "calibrat" in attempt["reason"]
    assert b"Traceback" not in err
    _store_is_empty(store)
    no_leftovers()


# --- the library -----------------------------------------------------------------------------------

def _signal_when_calibrating(sig):
    """A `say` for the Calibrator that sends `sig` to this process 0.4 s after the calibration run starts."""
    def say(text):
        if CALIBRATING.decode() in text:
            threading.Timer(0.4, os.kill, (os.getpid(), sig)).start()
    return say


@pytest.mark.parametrize("steps", [("vec_add", "k@always"), ("vec_add", "k@hang", "sleep:30")])
def test_library_interrupted_while_calibrating_raises_profile_interrupted(fake_env, tmp_path, steps):
    """A program that hangs by itself, or one whose plain run simply takes long: either way an interrupt."""
    command = app(*steps)
    with HangStore(tmp_path / "h.db") as store:
        calibrator = Calibrator(command, store=store, say=_signal_when_calibrating(signal.SIGINT))
        context = RunContext.create(run_config(tmp_path, env=fake_env))
        with pytest.raises(ProfileInterrupted) as caught:
            calibrator.run(lambda ctx: profile_command(command, BASIC, ctx), context, BASIC)
        a = caught.value.attempt
        assert a.status == INTERRUPTED and a.exit_code == 130 and not a.program_fault
        assert "while calibrating" in a.reason and a.stall is not None  # what ncu saw is kept, as evidence
        assert len(store) == 0 and calibrator.known() is None
    no_leftovers()


def test_library_walk_interrupted_while_calibrating_records_nothing(fake_env, tmp_path):
    command = app("vec_add", "k@always", "vec_add")
    with HangStore(tmp_path / "h.db") as store:
        calibrator = Calibrator(command, store=store, say=_signal_when_calibrating(signal.SIGTERM))
        with interruptible(), pytest.raises(ProfileInterrupted) as caught:
            walk_ladder(Session.open(command, run_config(tmp_path, env=fake_env), store=store,
                                     calibrator=calibrator),
                        BASIC, LADDER, reader=lambda a: __import__("pandas").DataFrame())
        assert caught.value.attempt.status == INTERRUPTED
        assert len(store) == 0
    no_leftovers()
