#!/usr/bin/env -S python3 -S
"""A fake CUDA program with planted bugs, for the fake compute-sanitizer (and plain runs without it).

Each argument is one step:
  NAME                 a clean kernel
  NAME@oob[=N]         writes just past its buffer (N faulting threads, default 1): without memcheck the program
                       works (the write lands inside the allocation's granularity: the real oob_write passed
                       every plain run, FACTS.md); memcheck reports N findings and the launch failure it makes
                       ("CUDA error: unspecified launch failure (cudaErrorLaunchFailure) after NAME", exit 1)
  NAME@flaky=P         writes far out of bounds in a fraction P of runs only (random, seeded by FAKE_SAN_SEED when
                       set): without a tool "CUDA error: an illegal memory access was encountered
                       (cudaErrorIllegalAddress) after NAME", exit 1; memcheck as for oob
  NAME@race[=H]        a shared-memory race of H hazards (default 32768): racecheck reports it, the program works
  NAME@uninit[=N]      reads N uninitialised words (default 1): initcheck reports them, the program works
  NAME@sync            a divergent __syncthreads(): synccheck reports it, the program works
  NAME@spin=S          runs S seconds alone; under a tool that checks it, S x the tool's slowdown (FAKE_SAN_FACTOR,
                       else 20 memcheck, 40 racecheck, 50 initcheck, 10 synccheck), silently
  NAME@hang            never finishes (with or without a tool)
  print:TEXT   sleep:S   exit:N
Every delay is multiplied by FAKE_SAN_SCALE (the fake's clock). Under the fake compute-sanitizer the reports
go to the front end through the file descriptor FAKE_SAN_FD (one JSON line each), as the real tool's do.
"""
import json
import os
import random
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import santext  # noqa: E402

SCALE = float(os.environ.get("FAKE_SAN_SCALE", "1.0"))
FACTORS = {"memcheck": 20.0, "racecheck": 40.0, "initcheck": 50.0, "synccheck": 10.0}
TOOL = os.environ.get("FAKE_SAN_TOOL")  # None: a plain run
FILTER = os.environ.get("FAKE_SAN_FILTER") or ""
HAZARD_REPORT = os.environ.get("FAKE_SAN_REPORT") in ("hazard", "all")
_fd = os.environ.get("FAKE_SAN_FD")
REPORTS = os.fdopen(int(_fd), "w", buffering=1) if _fd else None
RNG = random.Random(os.environ.get("FAKE_SAN_SEED"))


def report(text, errors=0, warnings=0, shown=1):
    REPORTS.write(json.dumps({"text": text, "errors": errors, "warnings": warnings, "shown": shown}) + "\n")


EXCLUDE = os.environ.get("FAKE_SAN_EXCLUDE")


def checked(name):
    return TOOL is not None and FILTER in name and not (EXCLUDE and EXCLUDE in name)


def fail(name):
    if TOOL == "memcheck":
        report(santext.launch_failure(), errors=1)
        print(f"CUDA error: unspecified launch failure (cudaErrorLaunchFailure) after {name}", flush=True)
    else:
        print(f"CUDA error: an illegal memory access was encountered (cudaErrorIllegalAddress) after {name}",
              flush=True)
    sys.exit(1)


def kernel(name, bug, value):
    on = checked(name)
    if bug == "spin":
        time.sleep(float(value) * SCALE * (float(os.environ.get("FAKE_SAN_FACTOR", FACTORS[TOOL])) if on else 1))
    elif bug == "hang":
        while True:
            time.sleep(3600)
    elif bug in ("oob", "flaky"):
        if bug == "flaky" and RNG.random() >= float(value):
            return
        if on and TOOL == "memcheck":
            line = santext.LINES[bug]
            for t in range(int(value or 1) if bug == "oob" else 1):
                report(santext.oob(name, thread=t, line=line), errors=1)
        elif bug == "oob":  # just past the end: unnoticed without memcheck
            return
        fail(name)
    elif on and bug == "race" and TOOL == "racecheck":
        hazards = int(value or 32768)
        if HAZARD_REPORT:
            for b in range(min(hazards, 100)):
                report(santext.hazard(name, b), errors=1)
            if hazards > 100:  # counted, not written out one by one
                report("", errors=hazards - 100, shown=hazards - 100)
        else:
            report(santext.race(name, hazards), errors=1)
    elif on and bug == "uninit" and TOOL == "initcheck":
        for t in range(int(value or 1)):
            report(santext.uninit(name, thread=t), errors=1)
    elif on and bug == "sync" and TOOL == "synccheck":
        report(santext.barrier(name), errors=1)


def step(arg):
    kind, _, rest = arg.partition(":")
    if kind == "print" and rest:
        print(rest, flush=True)
    elif kind == "sleep" and rest:
        time.sleep(float(rest) * SCALE)
    elif kind == "exit" and rest:
        sys.exit(int(rest))
    else:
        name, _, bug = arg.partition("@")
        bug, _, value = bug.partition("=")
        kernel(name, bug, value)


if __name__ == "__main__":
    for a in sys.argv[1:]:
        step(a)
