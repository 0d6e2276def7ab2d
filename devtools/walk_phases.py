"""Where a walk's time goes before and between its attempts: `python -m nsightwrap ARGS` with the slow
steps (ncu probe, nvidia-smi, preflight checks, environment, calibration, attempts) timed. Diagnostics.

    python3 devtools/walk_phases.py run --profile default --set basic -- ./app mixed 60
"""
import functools
import sys
import time

T0 = time.monotonic()


def say(text):
    print(f"[phase {time.monotonic() - T0:7.2f}] {text}", file=sys.stderr, flush=True)


def timed(module, name, label=None):
    fn = getattr(module, name)

    @functools.wraps(fn)
    def wrapper(*a, **k):
        t = time.monotonic()
        say(f"{label or name} ...")
        try:
            return fn(*a, **k)
        finally:
            say(f"{label or name} took {time.monotonic() - t:.2f} s")

    setattr(module, name, wrapper)


say("interpreter up")
import nsightwrap.cli.main as main  # noqa: E402

say("nsightwrap.cli imported")
import pandas  # noqa: E402,F401

say("pandas imported")
import nsightwrap.calibrate.confirm as confirm  # noqa: E402
import nsightwrap.cli.outcome as outcome  # noqa: E402
import nsightwrap.cli.preflight as preflight  # noqa: E402
import nsightwrap.fallback.walk as walk  # noqa: E402
import nsightwrap.ncu.catalog as catalog  # noqa: E402
import nsightwrap.ncu.context as context  # noqa: E402
import nsightwrap.store.keys as keys  # noqa: E402
import nsightwrap.watch.gpu as gpu  # noqa: E402

say("walk imported")
timed(gpu, "_smi", "nvidia-smi")
timed(catalog, "_ask", "ncu question")
timed(context, "probe_ncu", "probe_ncu")
timed(outcome, "preflight", "preflight")
timed(preflight.CounterProbe, "__call__", "counter probe")
timed(keys.Environment, "detect", "Environment.detect")
timed(confirm.Calibrator, "calibrate", "calibration")
timed(walk, "profile_command", "attempt")
rc = main.main(sys.argv[1:])
say(f"exit {rc}")
sys.exit(rc)
