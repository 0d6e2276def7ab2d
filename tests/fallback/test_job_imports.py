"""What a probe's job imports before its attempt starts (issue 20: the suite runs dozens of submitit jobs, and the
GPU machine pays the same start-up for every probe): nsightwrap.fallback.probejob, which the job's unpickling of
run_probe imports, loads no YAML (only a walk's engine reads a profile; only `hangs export/import` YAML files), no
pandas or numpy (reports are read by the engine), and not the store's database library (run_probe opens the store
in a thread beside the attempt)."""

from __future__ import annotations

import subprocess
import sys

from helpers import ROOT

NOT_BEFORE_THE_ATTEMPT = ("yaml", "pandas", "numpy", "sqlalchemy")


def test_a_probes_job_imports_no_yaml_pandas_or_database_library_before_its_attempt():
    code = ("import sys\nimport nsightwrap.fallback.probejob\n"
            f"print([m for m in {NOT_BEFORE_THE_ATTEMPT!r} if m in sys.modules])\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)})
    assert done.stdout.splitlines()[-1:] == ["[]"], done.stdout + done.stderr
