"""A run made in a worker thread (a walk's line beside another, sweep --jobs) is stopped by its cancel event during
its calibration too, not only while ncu runs: the calibration's own run (tracer, nsys or plain) watches
RunConfig.cancel, so Ctrl-C in the main thread ends the attempt at once as `interrupted`, recording nothing."""

from __future__ import annotations

import threading
import time

import pytest
from helpers import app, no_leftovers, run_config

from nsightwrap.calibrate import Calibrator
from nsightwrap.errors import ProfileInterrupted
from nsightwrap.fallback.session import Session, Tag
from nsightwrap.ncu.options import ProfileOptions
from nsightwrap.status import INTERRUPTED
from nsightwrap.store.hangstore import HangStore

CALIBRATING = "timing the program without ncu"


@pytest.mark.parametrize("steps", [("vec_add", "k@always"), ("vec_add", "k@hang", "sleep:30")])
def test_the_cancel_event_stops_the_calibration_run_of_a_worker_thread(fake_env, tmp_path, steps):
    command = app(*steps)
    cancel = threading.Event()
    began: list[float] = []

    def say(text):
        if CALIBRATING in text:
            began.append(time.monotonic())
            threading.Timer(0.4, cancel.set).start()

    caught: list[BaseException] = []
    with HangStore(tmp_path / "h.db") as store:
        calibrator = Calibrator(command, store=store, say=say)
        session = Session.open(command, run_config(tmp_path, stall_timeout=0.6, env=fake_env, calibration_limit=60),
                               store=store, calibrator=calibrator)

        def work():
            try:
                session.attempt(ProfileOptions(set="basic"), Tag(), cancel=cancel)
            except BaseException as e:  # noqa: BLE001 - what the thread ended with is the test's answer
                caught.append(e)

        worker = threading.Thread(target=work)  # not the main thread: no signal reaches it
        worker.start()
        worker.join(timeout=30)
        assert not worker.is_alive()
        ended = time.monotonic()
        [e] = caught
        assert isinstance(e, ProfileInterrupted) and e.attempt.status == INTERRUPTED
        assert "calibrat" in e.attempt.reason and not e.attempt.program_fault
        assert began and ended - began[0] < 10  # stopped at once, not at the end of the 30 s run or the 60 s limit
        assert len(store) == 0 and calibrator.known() is None
        session.close()
    no_leftovers()
