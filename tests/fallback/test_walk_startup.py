"""A walk's start pays no pandas import (0.5-0.8 s on the GPU machine, issue 19): it loads in the walk's reads
thread while the first attempt runs, and before any report is read, so the report reader is chosen as before
(numpy loaded: ncu 2025.3.1's extras module passed over for the wheel)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from helpers import ROOT, app

MODULES = "nsightwrap.cli.main nsightwrap.cli.commands nsightwrap.cli.run nsightwrap.fallback.walk " \
          "nsightwrap.fallback.result nsightwrap.fallback.reads nsightwrap.fallback.session"

#: A walk through the command line, with choose_reader watched: was numpy loaded when a reader was chosen?
WALK = """
import json, sys
import nsightwrap.reports.ncu.module as module
import nsightwrap.reports.ncu.load as load
seen = []
chosen = module.choose_reader
def choose(ncu):
    seen.append("numpy" in sys.modules)
    return chosen(ncu)
load.choose_reader = choose
from nsightwrap.cli.main import main
code = main(sys.argv[1:])
print(json.dumps({"numpy_first": seen, "code": code}), file=sys.stderr)
"""


def python(code: str, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ if env is None else env, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, env=env,
                          timeout=120, cwd=ROOT)


def test_the_walks_modules_import_no_pandas():
    done = python(f"import importlib, sys\nfor m in {MODULES.split()!r}: importlib.import_module(m)\n"
                  "print(sorted(m for m in ('pandas', 'numpy') if m in sys.modules))")
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[0] == "[]"


def test_a_walks_reports_are_read_after_numpy_loaded_as_before(tmp_path, fake_env, tag):
    argv = ["run", "-q", "--json", "--store", str(tmp_path / "h.db"), "--profile", "default", "--set", "basic",
            "-o", str(tmp_path / "r"), "--", *app("vec_add", "vec_add")]
    done = python(WALK, *argv, env=fake_env)
    result = json.loads(done.stdout)
    watched = json.loads(done.stderr.strip().splitlines()[-1])
    assert result["status"] == "ok" and watched["code"] == 0, done.stderr
    assert [r["function"] for r in result["rows"]] and watched["numpy_first"] == [True]
