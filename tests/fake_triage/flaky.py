#!/usr/bin/env -S python3 -S
"""A fake CUDA program whose kernels fail in some runs only, decided by a seed: triage's test subject.

Each argument is one step (kernel launches go through the fake CUPTI tracer of tests/fake_ncu, so a
traced run sees them launched and finished, or in flight):
  NAME                 a kernel that finishes at once
  NAME@spin=S          ... that runs S seconds
  NAME@fault=KIND      a kernel that faults in a failing run (below): its trace record still comes (as the
                       real flaky_write's did), and the error is
                       reported at the next `sync` (asynchronously), or at its launch under
                       CUDA_LAUNCH_BLOCKING=1; KIND: illegal (an illegal memory access), misaligned, launch
                       (unspecified launch failure), assert, torch (PyTorch's RuntimeError form), driver
                       (CUDA_ERROR_ILLEGAL_ADDRESS), oom (out of memory: reported at once, synchronous)
  NAME@hang            a kernel that never finishes (the program hangs by itself)
  NAME@hang-sometimes  ... in a failing run only
  sync                 cudaDeviceSynchronize: a pending fault is reported here (exit 1)
A run fails when FAKE_TRIAGE_RATE (default 1) exceeds random.Random(f"{FAKE_TRIAGE_SEED}:{n}").random(),
n counting the runs in FAKE_TRIAGE_COUNTER (a file; without it every run is run 1): `failing(seed, rate, n)`.
"""
import os
import random
import signal
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fake_ncu"))
import faketracer  # noqa: E402

MESSAGES = {
    "illegal": "CUDA error at flaky.cu:42: an illegal memory access was encountered (cudaErrorIllegalAddress)",
    "misaligned": "CUDA error at flaky.cu:57: misaligned address",
    "launch": "flaky.cu:61: unspecified launch failure",
    "assert": "flaky.cu:70: block: [0,0,0], thread: [3,0,0] Assertion `idx < n` failed.\n"
              "CUDA error: device-side assert triggered",
    "torch": "RuntimeError: CUDA error: an illegal memory access was encountered\nCUDA kernel errors might be "
             "asynchronously reported at some other API call, so the stacktrace below might be incorrect.\n"
             "For debugging consider passing CUDA_LAUNCH_BLOCKING=1",
    "driver": "cuLaunchKernel failed: CUDA_ERROR_ILLEGAL_ADDRESS",
    "oom": "CUDA error: out of memory (cudaErrorMemoryAllocation)",
}


def failing(seed, rate, n):
    return random.Random(f"{seed}:{n}").random() < rate


def run_number():
    path = os.environ.get("FAKE_TRIAGE_COUNTER")
    if not path:
        return 1
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        import fcntl
        fcntl.flock(fd, fcntl.LOCK_EX)
        n = int(os.read(fd, 64) or b"0") + 1
        os.lseek(fd, 0, 0)
        os.ftruncate(fd, 0)
        os.write(fd, str(n).encode())
        return n
    finally:
        os.close(fd)


def report(kind):
    print(MESSAGES[kind], file=sys.stderr, flush=True)
    sys.stdout.flush()
    sys.exit(1)


def main(steps):
    bad = failing(os.environ.get("FAKE_TRIAGE_SEED", "0"), float(os.environ.get("FAKE_TRIAGE_RATE", "1")),
                  run_number())
    blocking = os.environ.get("CUDA_LAUNCH_BLOCKING") == "1"
    pending = None
    for step in steps:
        if step == "sync":
            if pending:
                report(pending)
            continue
        name, _, opt = step.partition("@")
        corr = faketracer.launch(name)
        if opt == "hang" or (opt == "hang-sometimes" and bad):
            while True:
                signal.pause()
        if opt.startswith("fault=") and bad:
            kind = opt[6:]
            if blocking or kind == "oom":
                report(kind)
            pending = pending or kind
            now = time.time_ns()
            faketracer.kernel(name, corr, now, now)  # the faulting kernel's record still comes (2x H200)
            continue
        start = time.time_ns()
        if opt.startswith("spin="):
            time.sleep(float(opt[5:]))
        faketracer.kernel(name, corr, start, time.time_ns())
    if pending:
        report(pending)
    print("flaky: no error", flush=True)


main(sys.argv[1:])
