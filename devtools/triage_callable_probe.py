#!/usr/bin/env python3
"""What nsightwrap.triage says of a callable that raises a CUDA error message, printed whole: the probe behind
tests/diagnose/test_triage.py::test_nsightwrap_triage_takes_a_callable_and_stays_the_package where it failed, on the
GPU machine (2026-11-27: the run failed but named no CUDA error).

    python3 devtools/triage_callable_probe.py [--fake-tracer]
"""

import json
import os
import shutil
import sys
import tempfile

folder = tempfile.mkdtemp(prefix="triage-probe-")
try:
    with open(os.path.join(folder, "triage_subject.py"), "w") as f:
        f.write("def step(n):\n    raise RuntimeError('CUDA error: misaligned address')\n")
    sys.path.insert(0, folder)
    if "--fake-tracer" in sys.argv:  # as the test's triage_env: any file as the tracer library
        lib = os.path.join(folder, "libfake_tracer.so")
        open(lib, "w").close()
        os.environ["NSIGHTWRAP_TRACER"] = lib
    import triage_subject

    import nsightwrap

    r = nsightwrap.triage(triage_subject.step, 3, runs=1, tools=(), store=False)
    print(json.dumps(r.to_dict(), indent=1, default=str)[:6000])
finally:
    shutil.rmtree(folder, ignore_errors=True)  # the subject's module and the fake tracer
