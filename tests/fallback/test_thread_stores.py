"""The stores a session's worker threads open: with the main store's settings, and closed by Session.close()
(at the end of every sweep), not leaked (a database connection each)."""

from __future__ import annotations

import threading

from helpers import app, run_config

import nsightwrap.fallback.sweep as sweep_module
from nsightwrap.fallback.session import Session
from nsightwrap.store.hangstore import HangStore


def _in_a_thread(session: Session) -> HangStore:
    got = []
    t = threading.Thread(target=lambda: got.append(session.thread_store()))
    t.start()
    t.join(30)
    return got[0]


def test_a_worker_threads_store_has_the_main_stores_settings_and_is_closed_with_the_session(tmp_path, fake_env):
    with HangStore(tmp_path / "h.db", busy_timeout=7.5, user="ada", now=lambda: "2026-01-01T00:00:00") as main:
        session = Session(app("vec_add"), None, store=main)
        worker = _in_a_thread(session)
        assert worker is not main and session.thread_store() is main
        assert (worker.busy_timeout, worker.user, worker._now(), worker.readonly) == (7.5, "ada",
                                                                                       "2026-01-01T00:00:00", False)
        session.close()
        assert worker._db is None and main._db is not None  # the caller's store stays open


def test_a_sweep_closes_the_stores_of_its_worker_threads(tmp_path, fake_env, monkeypatch):
    opened = []

    def sweep(runner, *_):
        opened.append(_in_a_thread(runner.session))
    monkeypatch.setattr(sweep_module, "_sweep", sweep)
    with HangStore(tmp_path / "h.db") as main:
        session = Session.open(app("vec_add"), run_config(tmp_path, env=fake_env), store=main)
        sweep_module.sweep_sections(session, sections=["LaunchStats"])
        assert opened and opened[0]._db is None and main._db is not None
