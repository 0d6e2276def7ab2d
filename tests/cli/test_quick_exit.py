"""The command line's process and the garbage collector. It exits without the interpreter's final walk over every
object (issue 19: 0.15-0.3 s of a walk's time after its answer, with pandas, SQLAlchemy and ncu_report loaded): its
garbage is collected once, then every object frozen; what needs a finalizer still gets it (the hang store's WAL is
checkpointed away). It loads its modules with the collector paused, and runs its command with it on (issue 20);
main(argv) called by a library leaves the caller's collector as it was."""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys

import pytest
from helpers import ROOT, app

from nsightwrap.cli.main import main

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


#: The shell's entry point, with the collector's state seen as the command's parser is made, as its function is
#: loaded and as it runs (cli.main.CollectorPause).
WATCHED = """
import gc, json, sys
import nsightwrap.cli.commands as commands
real, seen = commands._command_part, {}
def part(name, which):
    seen["loading parser" if which == 0 else "loading command"] = gc.isenabled()
    found = real(name, which)
    if which == 0:
        return found
    def run(args):
        seen["running"] = gc.isenabled()
        return found(args)
    return run
commands._command_part = part
from nsightwrap.cli.main import main
code = main()
print(json.dumps(dict(seen, code=code)), file=sys.stderr)
"""


def test_the_collector_is_paused_while_the_command_loads_and_on_while_it_runs(fake_env, tmp_path):
    done = subprocess.run([sys.executable, "-c", WATCHED, "hangs", "list", "--store", str(tmp_path / "h.db")],
                          capture_output=True, text=True, timeout=60, env=dict(fake_env, PYTHONPATH=str(ROOT)),
                          cwd=ROOT)
    seen = json.loads(done.stderr.strip().splitlines()[-1])
    assert seen == {"loading parser": False, "loading command": False, "running": True, "code": 0}, done.stderr


@pytest.mark.parametrize("enabled", [True, False])
def test_main_called_by_a_library_leaves_its_collector_as_it_was(enabled, tmp_path, capsys):
    frozen = gc.get_freeze_count()
    if not enabled:
        gc.disable()
    try:
        assert main(["hangs", "list", "--store", str(tmp_path / "h.db")]) == 0
        assert gc.isenabled() is enabled and gc.get_freeze_count() == frozen
    finally:
        gc.enable()
