#!/usr/bin/env python3
"""`nsightwrap triage` (issue 21): one line per case with its verdict and timing; triage's own overhead <= 1 s.

Triage's overhead is its wall time minus the wall time of the runs it makes (each run without ncu, each
sanitizer run, the walk's attempts): the tracer's trace read, the CUDA error parsed, the store written, the
verdict. Measured side by side on each case, in this process (nsightwrap.diagnose.triage_command).

Without a GPU, against the fakes of tests/ (the seeded flaky program, the fake CUPTI tracer, the fake
compute-sanitizer at a tenth of real time):

    python3 benchmarks/bench_triage.py

On the GPU machine, with the kernels of tests/gpu/triage_kernels.cu (built here with nvcc -lineinfo, or --exe):

    python3 benchmarks/bench_triage.py --gpu [--exe BUILD/triage_kernels] [--ncu /usr/local/cuda/bin/ncu] \\
        [--sanitizer /usr/local/cuda/bin/compute-sanitizer] [--app BUILD/kernels] \\
        [--cases oob,race,uninit,flaky,selfhang,ncuhang,ncupasses,clean]

Cases: clean (nothing to find: ok), oob (memcheck names oob_write and its line), race (racecheck: reduce_race),
uninit (initcheck: read_uninit), flaky (fails in some of 20 runs: the rate), selfhang (hangs without ncu:
wait_forever, called within the calibration limit), ncuhang (fine alone, hangs under ncu with every setting:
profiler-induced, no setting works; --walk), ncupasses (kernels.cu `passes 1`: hangs only when ncu replays it,
profiler-induced, with the settings that work; --walk). Exit 1 when a case's overhead exceeds 1 s; the GPU is
checked for compute processes left at the end.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from nsightwrap.diagnose.run import TriageOptions, triage_command  # noqa: E402
from nsightwrap.diagnose.sanitizer import TOOLS  # noqa: E402
from nsightwrap.ncu.context import RunConfig  # noqa: E402
from nsightwrap.store.hangstore import HangStore  # noqa: E402

LIMIT_S = 1.0
TESTS = ROOT / "tests"
ALL = ("clean", "oob", "race", "uninit", "flaky", "selfhang", "ncuhang", "ncupasses")


def fake_cases(work: Path) -> dict[str, tuple[list[str], TriageOptions, RunConfig, dict[str, str]]]:
    """The cases on the fakes: (command, options, config, environment added)."""
    flaky, san_app, ncu_app = TESTS / "fake_triage" / "flaky.py", TESTS / "fake_sanitizer" / "app.py", \
        TESTS / "fake_ncu" / "app.py"
    py = sys.executable
    sanitizer = str(TESTS / "fake_sanitizer" / "compute-sanitizer")
    every = TriageOptions(runs=5, sanitizer=sanitizer)
    plain = RunConfig()
    return {
        "clean": ([py, str(san_app), "a", "b"], every, plain, {}),
        "oob": ([py, str(san_app), "a", "oob_write@oob=32"], every, plain, {}),
        "race": ([py, str(san_app), "a", "reduce_race@race"], every, plain, {}),
        "uninit": ([py, str(san_app), "read_uninit@uninit=4096"], every, plain, {}),
        "flaky": ([py, str(flaky), "a", "flaky_write@fault=illegal", "sync"],
                  TriageOptions(runs=20, tools=("memcheck",), sanitizer=sanitizer), plain,
                  {"FAKE_TRIAGE_RATE": "0.3", "FAKE_TRIAGE_SEED": "5", "FAKE_TRIAGE_COUNTER": str(work / "n")}),
        "selfhang": ([py, str(flaky), "a", "wait_forever@hang"], TriageOptions(runs=2, tools=()),
                     RunConfig(calibration_limit=2.0), {}),
        "ncuhang": ([py, str(ncu_app), "a", "wait_for_host@hang-if=MemoryWorkloadAnalysis"],
                    TriageOptions(runs=2, tools=(), walk=True, set="full"),
                    RunConfig(stall_timeout=0.5, stall_timeout_given=True),
                    {"NSIGHTWRAP_NCU": str(TESTS / "fake_ncu" / "ncu"), "FAKE_NCU_SCALE": "0.1"}),
        # Hangs only when ncu needs many replay passes: the walk finds a setting that works.
        "ncupasses": ([py, str(ncu_app), "a", "wait_for_count@hang-if=SpeedOfLight"],
                      TriageOptions(runs=2, tools=(), walk=True, set="full"),
                      RunConfig(stall_timeout=0.5, stall_timeout_given=True),
                      {"NSIGHTWRAP_NCU": str(TESTS / "fake_ncu" / "ncu"), "FAKE_NCU_SCALE": "0.1"}),
    }


def gpu_cases(exe: str, app: str, sanitizer: str | None, ncu: str | None
              ) -> dict[str, tuple[list[str], TriageOptions, RunConfig, dict[str, str]]]:
    every = TriageOptions(runs=5, sanitizer=sanitizer)
    plain = RunConfig(ncu=ncu)
    return {
        "clean": ([exe, "clean"], every, plain, {}),
        "oob": ([exe, "oob"], every, plain, {}),
        "race": ([exe, "race"], every, plain, {}),
        "uninit": ([exe, "uninit"], every, plain, {}),
        "flaky": ([exe, "flaky", "0.3"], TriageOptions(runs=20, tools=("memcheck",), sanitizer=sanitizer), plain, {}),
        "selfhang": ([exe, "selfhang", "90"], TriageOptions(runs=2, tools=("memcheck",), sanitizer=sanitizer),
                     RunConfig(ncu=ncu, calibration_limit=10.0), {}),
        "ncuhang": ([exe, "ncuhang", "60"], TriageOptions(runs=3, tools=(), walk=True, set="full"),
                    RunConfig(ncu=ncu, calibration_limit=20.0), {}),
        # tests/gpu/kernels.cu `passes 1`: wait_for_count is answered once per run, so it is fine alone and under
        # one-pass collections and hangs when ncu replays it (FACTS.md): profiler-induced, with settings that work.
        "ncupasses": ([app, "passes", "1", "60"], TriageOptions(runs=3, tools=(), walk=True, set="full"),
                      RunConfig(ncu=ncu, calibration_limit=20.0), {}),
    }


def build(work: Path, name: str) -> str:
    """tests/gpu/NAME.cu built with nvcc -lineinfo into WORK."""
    nvcc = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
    exe = work / name
    subprocess.run([nvcc, "-O2", "-arch=sm_90", "-lineinfo", "-o", str(exe), str(TESTS / "gpu" / f"{name}.cu")],
                   check=True)
    return str(exe)


def one(name: str, case: tuple[list[str], TriageOptions, RunConfig, dict[str, str]], store: HangStore) -> Any:
    command, options, config, extra = case
    old = {k: os.environ.get(k) for k in extra}
    os.environ.update(extra)
    try:
        started = time.monotonic()
        result = triage_command(command, options, config, store=store)
        wall = time.monotonic() - started
    finally:
        for k, v in old.items():
            os.environ.pop(k, None) if v is None else os.environ.__setitem__(k, v)
    print(f"{name:9s} {result.status:17s} wall {wall:7.1f} s  runs {result.runs_s:7.1f} s  "
          f"overhead {result.overhead_s:5.2f} s  | {result.verdict}", flush=True)
    return result


def gpu_left() -> str:
    try:
        out = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,process_name", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return "nvidia-smi not available"
    return out or "none"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpu", action="store_true", help="the real kernels of tests/gpu/triage_kernels.cu")
    ap.add_argument("--exe", help="triage_kernels already built (else nvcc builds it)")
    ap.add_argument("--app", help="tests/gpu/kernels.cu already built, for ncupasses (else nvcc builds it)")
    ap.add_argument("--ncu"), ap.add_argument("--sanitizer")
    ap.add_argument("--cases", default=",".join(ALL))
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-triage-") as tmp:
        work = Path(tmp)
        if args.gpu:
            app = args.app or (build(work, "kernels") if "ncupasses" in args.cases else "")
            cases = gpu_cases(args.exe or build(work, "triage_kernels"), app, args.sanitizer, args.ncu)
        else:
            os.environ.setdefault("NSIGHTWRAP_TRACER", str(work / "libfake_tracer.so"))
            (work / "libfake_tracer.so").write_text("")
            os.environ.setdefault("FAKE_SAN_SCALE", "0.1")
        cases = cases if args.gpu else fake_cases(work)
        print(f"# bench_triage ({'GPU' if args.gpu else 'fakes'}): tools {','.join(TOOLS)}; "
              f"overhead = wall - the runs' own wall time, limit {LIMIT_S:g} s", flush=True)
        over = []
        with HangStore(work / "hangs.db") as store:
            for name in args.cases.split(","):
                result = one(name, cases[name], store)
                if result.overhead_s > LIMIT_S:
                    over.append(name)
        print(f"# GPU compute processes left: {gpu_left()}")
    if over:
        print(f"# overhead over {LIMIT_S:g} s: {', '.join(over)}")
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
