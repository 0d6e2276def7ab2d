"""A hang store shared by a team (issue 22): the same store on SQLite and on a real PostgreSQL server.

Each test that takes ``store_setting`` runs on both backends (conftest: an SQLite file, and a fresh
database of the session's PostgreSQL server, tests/pg.py).
"""

from __future__ import annotations

import json

import pytest
import store_kills
from store_kills import check_written, write_with_kills

from nsightwrap.errors import StoreError
from nsightwrap.store import SCHEMA_VERSION, Environment, HangStore, ProfileKey, StoreLocation, resolve_store
from nsightwrap.store.location import POSTGRES_EXTRA

FULL = ProfileKey("full")
H200 = Environment("gpu-box", "NVIDIA H200", "580.159.04", "2025.3.1")
CALIBRATED = "from calibration (nsys)"


def test_the_setting_is_resolved_once_by_a_visible_precedence(tmp_path):
    env = {"NSIGHTWRAP_STORE": "postgresql://team:pw@db/hangs", "XDG_CACHE_HOME": str(tmp_path)}
    given = resolve_store(str(tmp_path / "mine.db"), env)                   # parameter (or --store) first
    assert (given.path, given.source) == (tmp_path / "mine.db", "parameter")
    from_env = resolve_store(None, env)                                      # then $NSIGHTWRAP_STORE
    assert from_env.is_database and from_env.source == "NSIGHTWRAP_STORE"
    assert str(from_env) == "postgresql://team:***@db/hangs" and "pw" not in repr(from_env)
    assert from_env.sqlalchemy_url().startswith("postgresql+psycopg://")
    default = resolve_store("", {"XDG_CACHE_HOME": str(tmp_path)})           # then the default file
    assert (default.path, default.source) == (tmp_path / "nsightwrap" / "hangs.db", "default")
    assert resolve_store(given) is given
    with pytest.raises(StoreError, match="mysql URL"):
        resolve_store("mysql://u:secret@h/db")


def test_records_round_trip_on_both_backends(store_setting):
    with HangStore(store_setting, user="ada") as store:
        assert store.schema_version == SCHEMA_VERSION and len(store) == 0
        rec = store.record("vec_add", FULL, "hang", env=H200, stall_s=2.5, command=["ncu", "./app"],
                           allowance_s=1.5, basis=CALIBRATED)
        assert (rec.host, rec.user, rec.gpu, rec.stall_s, rec.command) == ("gpu-box", "ada", "NVIDIA H200", 2.5,
                                                                           ("ncu", "./app"))
        assert len(rec.uid) == 32 and store.records() == [rec]
        assert store.known_hangs("vec_add", H200) == [rec] and store.hangs_for("vec_add", FULL, H200)
        assert store.kernels()[0][:3] == ("vec_add", 1, 1) and store.uncalibrated_hangs() == {}
        again = store.record("vec_add", FULL, "hang", env=H200, uid=rec.uid)   # a retried write: kept once
        assert again == rec and len(store) == 1
        assert store.forget(kernel="vec_add") == 1 and len(store) == 0
    with HangStore(store_setting, readonly=True) as store:                   # opens again, nothing to migrate
        assert store.records() == []


def test_a_record_applies_only_where_it_was_true(store_setting):
    """Same GPU model, driver, ncu version and job shape (processes; one rank or all in the key)."""
    with HangStore(store_setting) as store:
        store.record("k", FULL, "hang", env=H200, basis=CALIBRATED)
        assert store.hangs_for("k", FULL, H200)
        for other in (Environment("gpu-box", "NVIDIA H100", "580.159.04", "2025.3.1"),
                      Environment("gpu-box", "NVIDIA H200", "590.10", "2025.3.1"),
                      Environment("gpu-box", "NVIDIA H200", "580.159.04", "2026.1.0"),
                      Environment("gpu-box", "NVIDIA H200", "580.159.04", "2025.3.1", processes=2)):
            assert not store.hangs_for("k", FULL, other) and store.known_hangs("k", other) == []
        assert not store.hangs_for("k", ProfileKey("full", ranks="one"), H200)
        newer = Environment("gpu-box", "NVIDIA H200", "590.10", "2025.3.1")
        assert store.stale_records(newer) == {"k": 1} and store.stale_records(H200) == {}


def test_untrusted_and_uncalibrated_records_never_apply_on_another_host(store_setting):
    machine_b = Environment("machine-b", "NVIDIA H200", "580.159.04", "2025.3.1")
    with HangStore(store_setting, user="ada") as store:
        store.record("foreign", FULL, "hang", env=H200, trusted=False, basis=CALIBRATED)  # foreign GPU work
        store.record("slow", FULL, "hang", env=H200, basis="default (not calibrated)")
        store.record("real", FULL, "hang", env=H200, basis=CALIBRATED)
    with HangStore(store_setting, user="bob") as store:
        assert [r.kernel for r in store.known_hangs("foreign", machine_b)] == []
        assert not store.hangs_for("slow", FULL, machine_b) and store.hangs_for("slow", FULL, H200)
        assert store.hangs_for("real", FULL, machine_b)
        assert {(r.kernel, r.host, r.user) for r in store.records()} == {
            ("foreign", "gpu-box", "ada"), ("slow", "gpu-box", "ada"), ("real", "gpu-box", "ada")}


def test_writers_killed_at_random_lose_and_duplicate_nothing(store_setting, tmp_path):
    """Goal (small here; benchmarks/bench_store_concurrency.py runs 8 x 500): a record counts as written
    when record() returned; after random SIGKILLs (each writer started again, retrying its unconfirmed
    record with the same uid) every one is there once, and the writers' records are all there."""
    workers, n = 4, 40
    # No writer is done before the four kills are made (store_kills; under load, random kills alone sometimes came
    # after every writer was done), and they land on writers that are writing when any is. Pauses of 5-50 ms: the
    # writers' ~1 s. Until the kills are made, a writer writes 3 records more at each of the test's turns (leash):
    # a test process that the load ran late found every writer at its last record, no kill while writing.
    kills = write_with_kills(store_setting, tmp_path, workers, n, kills=4, forked=True, pause=(0.005, 0.05),
                             leash=3)
    with HangStore(store_setting, readonly=True) as store:
        recs = store.records()
    assert kills.made == 4 and kills.while_writing >= 1, kills
    assert check_written(recs, tmp_path, workers, n) == (0, 0)
    assert len(recs) == workers * n and len({r.uid for r in recs}) == len(recs)


def test_a_kill_test_run_late_still_kills_writers_while_they_write(tmp_path, monkeypatch):
    """The machine's load may run the kill test's process late: here its first pause lasts 1 s, not 5-50 ms. The
    leash keeps the writers from all reaching their last record meanwhile, so a kill still lands while one writes
    (without it: Kills(made=4, while_writing=0), as a loaded run of the suite once saw)."""
    pause, late = store_kills._pause, iter([1.0])
    monkeypatch.setattr(store_kills, "_pause", lambda s: pause(next(late, s)))
    kills = write_with_kills(str(tmp_path / "h.db"), tmp_path, 4, 40, kills=4, forked=True, pause=(0.005, 0.05),
                             leash=3)
    assert kills.made == 4 and kills.while_writing >= 1, kills


def test_a_database_url_without_its_driver_says_what_to_install(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "psycopg" else real(name, *a))
    with pytest.raises(StoreError) as e:
        HangStore("postgresql://team:hunter2@db.example/hangs")
    assert POSTGRES_EXTRA in str(e.value) and "hunter2" not in str(e.value)


def test_a_database_that_is_down_is_one_clear_line_with_no_password(pg_server):
    from nsightwrap.store.location import StoreUnreachable

    url = f"postgresql://team:Pa55-down@127.0.0.1:{_closed_port()}/nowhere"
    with pytest.raises(StoreUnreachable) as e:
        HangStore(url)
    text = str(e.value)
    assert "\n" not in text and "Pa55-down" not in text and "cannot reach the hang store" in text
    assert "postgresql://team:***@127.0.0.1" in text
    loc = StoreLocation(url=url)
    assert "Pa55-down" not in repr(loc) + str(loc) + loc.mask(f"password=Pa55-down {url}")


def _closed_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_read_only_role_reads_and_is_refused_writes(pg_server):
    db = pg_server.new_database()
    with HangStore(pg_server.url(db)) as store:
        store.record("k", FULL, "hang", env=H200)
    import pg

    reader = pg_server.url(db, "reader", pg.READER_PASSWORD)
    with HangStore(reader, readonly=True) as store:
        assert [r.kernel for r in store.records()] == ["k"] and store.kernels()[0][:3] == ("k", 1, 1)
    with HangStore(reader) as store:                      # up to date: opening asks for no DDL
        with pytest.raises(StoreError) as e:
            store.record("k", FULL, "ok", env=H200)
    assert "permission denied" in str(e.value) and pg.READER_PASSWORD not in str(e.value)
    assert json.dumps(str(e.value))  # one plain message


def test_a_walk_on_machine_b_skips_the_hang_machine_a_recorded(pg_server, fake_env, tmp_path, monkeypatch):
    """Goal: a hang recorded by one machine is skipped on a second with the same keys (GPU, driver, ncu, job):
    machine B (another host name and HOME, a fresh process's view) runs what a second walk on machine A
    runs, and never probes the known hang."""
    import socket

    from helpers import app, attempt_rows, run_config

    from nsightwrap.fallback.session import Session
    from nsightwrap.fallback.walk import walk_ladder
    from nsightwrap.ncu.options import ProfileOptions

    url = pg_server.url(pg_server.new_database())
    program = app("vec_add", "k@hang-if=SourceCounters", "vec_add", "block_reduce")

    def walk(host: str):
        monkeypatch.setattr(socket, "gethostname", lambda: host)
        home = tmp_path / host
        env = dict(fake_env, HOME=str(home), XDG_CACHE_HOME=str(home / ".cache"))
        config = run_config(tmp_path, report_dir=str(home / "r"), env=env)      # calibrated allowances
        with HangStore(url) as store:
            return walk_ladder(Session.open(program, config, store=store), ProfileOptions(set="full"), "default",
                               reader=attempt_rows)

    first = walk("machine-a")
    second = walk("machine-b")
    assert len(first.attempts) == 5 and len(second.attempts) == 2  # main (k excluded) and k at basic
    assert [(s.job, s.rung.name) for s in second.steps if s.skipped] == [("k", "requested"), ("k", "detailed")]
    assert [a.status for a in second.attempts] == ["ok", "ok"]              # no stalled run: k never probed
    with HangStore(url, readonly=True) as store:
        hangs = [r for r in store.records(kernel="k") if r.hung]
    assert {r.host for r in hangs} == {"machine-a"} and all(r.calibrated for r in hangs)


def test_errors_of_a_database_store_name_it_masked_and_no_file(store_setting, tmp_path):
    with HangStore(store_setting) as store:
        store.record("k", FULL, "ok", env=H200)
        with pytest.raises(StoreError) as e:
            store.export_csv(tmp_path / "no such folder" / "x.csv")
    assert "cannot write the export" in str(e.value) and "T3am-s3cret" not in str(e.value) + repr(store)
    assert e.value.path == (None if store.is_database else tmp_path / "hangs.db")


def test_sqlalchemy_loads_with_the_first_store_opened_not_with_the_commands():
    """A run that records nothing (a plain `nsightwrap run`) pays nothing for SQLAlchemy's import."""
    import subprocess
    import sys

    code = ("import sys, nsightwrap.cli.main, nsightwrap.cli.run, nsightwrap.cli.sweep, nsightwrap.cli.hangs, "
            "nsightwrap.store, nsightwrap.calibrate.confirm; print('sqlalchemy' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.stdout.strip() == "False", done.stderr
