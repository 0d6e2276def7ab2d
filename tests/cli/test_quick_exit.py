"""The command line's process exits without the interpreter's final walk over every object (issue 19: 0.15-0.3 s
of a walk's time after its answer, with pandas, SQLAlchemy and ncu_report loaded): its garbage is collected once,
then every object frozen; what needs a finalizer still gets it (the hang store's WAL is checkpointed away)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from helpers import ROOT, app

#: The shell's entry point (main() with no argv), and what the collector holds afterwards.
ENTRY = """
import gc, json, sys
from nsightwrap.cli.main import main
code = main()
print(json.dumps({"code": code, "frozen": gc.get_freeze_count()}), file=sys.stderr)
"""


def entry(argv: list[str], env: dict) -> tuple[subprocess.CompletedProcess, dict]:
    done = subprocess.run([sys.executable, "-c", ENTRY, *argv], capture_output=True, text=True, timeout=120,
                          env=dict(env, PYTHONPATH=str(ROOT)), cwd=ROOT)
    return done, json.loads(done.stderr.strip().splitlines()[-1])


def test_the_shell_entry_freezes_what_is_left_before_exiting(fake_env):
    done, seen = entry(["run"], fake_env)  # a usage error: answered, exit 2
    assert seen["code"] == 2 and "give the command to profile" in done.stderr
    assert seen["frozen"] > 0  # the old exit left the interpreter to walk them all


def test_a_walks_store_is_closed_before_the_exit(tmp_path, fake_env, tag):
    store = tmp_path / "h.db"
    done, seen = entry(["run", "-q", "--json", "--store", str(store), "--profile", "default", "--set", "basic",
                        "-o", str(tmp_path / "r"), "--", *app("vec_add")], fake_env)
    assert seen["code"] == 0 and json.loads(done.stdout)["status"] == "ok", done.stderr
    assert seen["frozen"] > 0
    assert sorted(os.listdir(tmp_path)) == ["h.db", "r.ncu-rep"]  # no h.db-wal, h.db-shm left: the connection closed


def test_a_library_call_of_main_freezes_nothing(capsys):
    import gc

    from nsightwrap.cli.main import main

    before = gc.get_freeze_count()
    assert main(["run"]) == 2 and gc.get_freeze_count() == before
