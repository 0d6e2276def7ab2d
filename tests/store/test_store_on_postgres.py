"""tests/test_store.py's tests of a store, run again on a real PostgreSQL database (issue 22: the store's
test suite on both backends). Each test of test_store.py that takes the ``store`` fixture is collected here
too, with ``store`` a HangStore on a fresh database of the session's server (tests/pg.py); the tests that
open files themselves (SQLite internals, paths, permissions) stay SQLite's."""

from __future__ import annotations

import inspect

import pytest
import test_store

from nsightwrap.store.hangstore import HangStore

for _name, _test in vars(test_store).items():
    if _name.startswith("test_") and callable(_test) and "store" in inspect.signature(_test).parameters:
        globals()[_name] = _test


@pytest.fixture
def store(pg_server):
    """A hang store on a database of its own, closed after the test."""
    with HangStore(pg_server.url(pg_server.new_database())) as s:
        yield s
