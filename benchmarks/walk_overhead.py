#!/usr/bin/env python3
"""What a walk costs beyond its attempts (issue 19): `run --profile default --set basic` on a 2-rank torchrun
job, its wall time against the sum of its attempts' own times (`elapsed_s`, ncu's runs as the watch saw them).

The difference is nsightwrap's own: the interpreter and its imports, the preflight (ncu probed, nvidia-smi),
the hang store, reading the reports, the JSON, the exit. On the GPU machine (two GPUs, PyTorch's torchrun):

    python3 benchmarks/walk_overhead.py --gpu --ncu /usr/local/cuda/bin/ncu --timeline -o /tmp/walk-overhead.txt

On any machine, against the fakes of tests/ (fake ncu at real-time speed, fake torchrun and nvidia-smi):

    python3 benchmarks/walk_overhead.py --timeline

--modes side-by-side,serial times both ways of a torchrun walk in one invocation (`--serial`: the collectives'
run after the main one, not beside it), each with a store and tool cache of its own, in the order A B B A (first
walks, then second walks), so that neither always runs on a warmer machine. With the runs beside each other, the
attempts' time is the union of their windows (from the trace: --timeline), not their sum.

Each run is the real command line in a process of its own. The first run starts with a fresh hang store and a
fresh tool cache (ncu's probe and the report reader's lookup not cached yet), the later ones reuse both, as the
"torchrun" step of bench_calibration.py does. --timeline runs the command line under a tracer (this file with
--traced: wrappers around the pieces, no other change) and prints, per run, where the time outside the
attempts went: before the first attempt (interpreter, imports, preflight, store), between attempts (recording,
reports), after the last one (reports, JSON) and the exit.
"""

from __future__ import annotations

import argparse
import functools
import importlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
TESTS = ROOT / "tests"
AR = "ncclDevKernel_AllReduce_Sum_f32_RING_LL@collective"
#: The fake job: per rank a matmul and a softmax around all-reduces, as tests/gpu/multi_allreduce.py does.
FAKE_STEPS = ["gemm", AR, "softmax", "gemm", AR, "softmax", AR]
TORCH_PY = "/opt/torch/.venv/bin/python3"
MULTI_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
TRACE_VAR = "NSIGHTWRAP_BENCH_TRACE"  # the file the traced command line writes its events to
SPAWN_VAR = "NSIGHTWRAP_BENCH_SPAWNED"  # time.time() when the benchmark started it

#: What the tracer times: (module, function or Class.method). Names that are gone are left out.
TRACED = (
    ("nsightwrap.cli.outcome", "preflight"), ("nsightwrap.ncu.catalog", "probe_ncu"),
    ("nsightwrap.watch.gpu", "gpus"), ("nsightwrap.watch.gpu", "compute_processes"),
    ("nsightwrap.store.opening", "open_store"), ("nsightwrap.fallback.walk", "walk_ladder"),
    ("nsightwrap.fallback.session", "Session.hanging_kernels"), ("nsightwrap.fallback.session", "Session.record"),
    ("nsightwrap.watch.run", "watch"), ("nsightwrap.fallback.walk", "report_rows"),
    ("nsightwrap.reports.ncu.module", "choose_reader"), ("nsightwrap.reports.ncu.module", "_traced_targets"),
    ("nsightwrap.fallback.result", "LadderResult.to_dict"), ("nsightwrap.cli.common", "print_json"),
)


# --- the traced command line (this file run with --traced) ------------------------------------------------


class Tracer:
    def __init__(self) -> None:
        self.t0 = time.time()
        self.events: list[tuple[float, str, str]] = []
        self.lock = threading.Lock()

    def add(self, what: str) -> None:
        with self.lock:
            self.events.append((time.time(), threading.current_thread().name, what))

    def wrap(self, module: str, qual: str) -> None:
        try:
            mod = importlib.import_module(module)
            owner, name = (getattr(mod, qual.split(".")[0]), qual.split(".")[1]) if "." in qual else (mod, qual)
            original = getattr(owner, name)
        except (ImportError, AttributeError):
            return
        label = f"{module.rsplit('.', 1)[-1]}.{qual}"

        @functools.wraps(original)
        def timed(*a: Any, **kw: Any) -> Any:
            self.add(f"> {label}")
            try:
                return original(*a, **kw)
            finally:
                self.add(f"< {label}")

        setattr(owner, name, timed)
        if owner is mod:  # `from M import f` elsewhere: those names too
            for other in list(sys.modules.values()):
                if getattr(other, "__name__", "").startswith("nsightwrap") and getattr(other, name, None) is original:
                    setattr(other, name, timed)

    def spawns(self) -> None:
        original = subprocess.Popen.__init__

        def init(popen: Any, args: Any, *a: Any, **kw: Any) -> None:
            argv = args if isinstance(args, (list, tuple)) else [args]
            self.add("spawn " + " ".join(os.path.basename(str(x)) if i == 0 else str(x)
                                         for i, x in enumerate(argv[:3]))[:100])
            original(popen, args, *a, **kw)

        subprocess.Popen.__init__ = init  # type: ignore[method-assign]

    def write(self, path: str) -> None:
        spawned = float(os.environ.get(SPAWN_VAR, self.t0))
        doc = {"spawned": spawned, "t0": self.t0, "events": self.events}
        Path(path).write_text(json.dumps(doc))


def traced_main(argv: list[str]) -> int:
    tracer = Tracer()
    tracer.spawns()
    import nsightwrap.cli.main as cli_main

    tracer.add("nsightwrap.cli.main imported")
    for module in ("nsightwrap.cli.run", "nsightwrap.fallback.walk", "nsightwrap.store.database"):  # run --profile's
        importlib.import_module(module)
    tracer.add("the walk's modules imported")
    for module, qual in TRACED:
        tracer.wrap(module, qual)
    sys.argv = [sys.argv[0], *argv]
    try:
        return cli_main.main()  # as the shell's entry runs it (its exit included)
    finally:
        tracer.add("main returned")
        tracer.write(os.environ[TRACE_VAR])


# --- the benchmark -----------------------------------------------------------------------------------------


def job(args: argparse.Namespace) -> list[str]:
    if args.gpu:
        torchrun = str(Path(args.python).with_name("torchrun"))
        return [torchrun, "--nproc-per-node", "2", str(TESTS / "gpu" / "multi_allreduce.py")]
    return [str(TESTS / "fake_dist" / "torchrun"), "--nproc-per-node", "2", str(TESTS / "fake_ncu" / "app.py"),
            *FAKE_STEPS]


def environment(args: argparse.Namespace, work: Path) -> dict[str, str]:
    env = dict(os.environ, NSIGHTWRAP_CACHE_DIR=str(work / "tool-cache"))
    env.pop("NSIGHTWRAP_STORE", None)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + [p for p in [env.get("PYTHONPATH")] if p])
    if args.gpu:
        env.update(MULTI_ENV)
    else:
        env.update(NSIGHTWRAP_NCU=str(TESTS / "fake_ncu" / "ncu"), FAKE_NCU_SCALE="1.0", NSIGHTWRAP_TRACER="off",
                   FAKE_SMI_SCOPE=uuid.uuid4().hex, PATH=f"{TESTS / 'fake_nvidia_smi'}{os.pathsep}{env['PATH']}")
    return env


def one_run(args: argparse.Namespace, work: Path, env: dict[str, str], n: int, mode: str = "side-by-side"
            ) -> dict[str, Any]:
    argv = ["run", "-q", "--json", "--store", str(work / "store.db"), *(["--ncu", args.ncu] if args.ncu else []),
            "--profile", "default", "--set", "basic", *(["--serial"] if mode == "serial" else []), "--", *job(args)]
    trace = work / f"trace-{n}.json"
    head = [sys.executable, __file__, "--traced"] if args.timeline else [sys.executable, "-m", "nsightwrap"]
    t = time.time()
    done = subprocess.run([*head, *argv], capture_output=True, text=True, cwd=work, timeout=args.timeout,
                          env=dict(env, **{TRACE_VAR: str(trace), SPAWN_VAR: repr(t)}), stdin=subprocess.DEVNULL)
    end = time.time()
    try:
        doc = json.loads(done.stdout)
    except ValueError:
        doc = {"status": f"no JSON (rc {done.returncode}): {done.stderr[-400:]}"}
    attempts = [s["attempt"]["elapsed_s"] for s in doc.get("steps", []) if s.get("attempt")]
    run = {"run": n, "mode": mode, "status": doc.get("status"), "wall_s": end - t, "attempts_s": attempts,
           "outside_s": end - t - sum(attempts), "why": doc.get("error") or doc.get("reason") or doc.get("stopped")}
    if args.timeline and trace.exists():
        run["phases"] = phases(json.loads(trace.read_text()), end)
        run["outside_s"] = end - t - run["phases"]["attempts (the union of their windows), in all"]
    return run


def _union(windows: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """Overlapping (start, end) windows merged, in order."""
    out: list[tuple[float, float]] = []
    for a, b in sorted(windows):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def _windows(events: list, start: str, end: str, thread: "str | None" = "MainThread") -> list[tuple[float, float]]:
    """(start, end) of each call of the traced function named by `start`/`end`, in `thread` (None: any)."""
    out, opened = [], {}
    for t, name, what in events:
        if thread is not None and name != thread:
            continue
        if what == start:
            opened[name] = t
        elif what == end and name in opened:
            out.append((opened.pop(name), t))
    return out


def _inside(events: list, name: str, lo: float, hi: float, thread: "str | None" = "MainThread") -> float:
    """Seconds `thread` (None: any) spent in the traced `name` between lo and hi."""
    calls = _windows(events, f"> {name}", f"< {name}", thread)
    return sum(min(b, hi) - max(a, lo) for a, b in calls if b > lo and a < hi)


def phases(trace: dict[str, Any], ended: float) -> dict[str, float]:
    """Where the time outside the attempts went (seconds), from the tracer's events."""
    ev = trace["events"]
    attempts = _union(_windows(ev, "> run.watch", "< run.watch", None))  # a line's attempts run in its thread
    at = {what: t for t, _, what in ev if not what.startswith((">", "<", "spawn"))}
    first = attempts[0][0] if attempts else at.get("main returned", ended)
    last = attempts[-1][1] if attempts else first
    out = {"interpreter start": trace["t0"] - trace["spawned"],
           "imports": at.get("the walk's modules imported", trace["t0"]) - trace["t0"]}
    imported = at.get("the walk's modules imported", trace["t0"])
    for name in ("outcome.preflight", "opening.open_store", "session.Session.hanging_kernels"):
        out[f"before attempt 1: {name}"] = _inside(ev, name, imported, first)
    out["before attempt 1 (after the imports), in all"] = first - imported
    out["attempts (the union of their windows), in all"] = sum(b - a for a, b in attempts)
    gaps = [(a[1], b[0]) for a, b in zip(attempts, attempts[1:])]
    out["between attempts, in all"] = sum(b - a for a, b in gaps)
    for name in ("walk.report_rows", "session.Session.record"):
        out[f"between attempts: {name}"] = sum(_inside(ev, name, a, b) for a, b in gaps)
    out["after the last attempt: reports"] = _inside(ev, "walk.report_rows", last, ended)
    out["reports read in any thread (overlapping attempts or not)"] = _inside(ev, "walk.report_rows", 0, ended, None)
    out["after the last attempt, to main's return"] = at.get("main returned", ended) - last
    out["exit (main returned -> process gone)"] = ended - at.get("main returned", ended)
    return out


def report(runs: list[dict[str, Any]], args: argparse.Namespace) -> str:
    lines = [f"walk overhead ({'GPU' if args.gpu else 'fakes'}): `run --profile default --set basic` on "
             + " ".join(job(args)[:3]) + " ...", ""]
    for r in runs:
        label = "first (fresh store and tool cache)" if r["run"] == 1 else f"run {r['run']} (cached)"
        label = f"{r['mode']}, {label}" if len(args.modes) > 1 else label
        lines.append(f"{label}: status {r['status']}, wall {r['wall_s']:.2f} s, attempts "
                     + " + ".join(f"{a:.2f}" for a in r["attempts_s"]) + f" s, outside the attempts "
                     f"{r['outside_s']:.2f} s" + ("" if r["status"] == "ok" else f" ({str(r['why'])[:300]})"))
        for name, seconds in r.get("phases", {}).items():
            lines.append(f"    {name:<58} {seconds:6.3f} s")
    return "\n".join(lines)


def main() -> int:
    if sys.argv[1:2] == ["--traced"]:
        sys.path.insert(0, str(ROOT))
        return traced_main(sys.argv[2:])
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gpu", action="store_true", help="the real job (tests/gpu/multi_allreduce.py, two GPUs)")
    ap.add_argument("--python", default=TORCH_PY, help="the Python whose torchrun runs the job (--gpu)")
    ap.add_argument("--ncu", help="ncu to use (default: nsightwrap's search; the fake one without --gpu)")
    ap.add_argument("--runs", type=int, default=2, help="walks in a row (the first with nothing cached)")
    ap.add_argument("--timeline", action="store_true", help="trace each run: where the time outside went")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds each run may take")
    ap.add_argument("--modes", default="side-by-side", type=lambda v: v.split(","),
                    help="side-by-side (the default walk), serial (run --serial), or both: side-by-side,serial")
    ap.add_argument("-o", "--output", help="also write the table here")
    args = ap.parse_args()
    if not args.modes or set(args.modes) - {"side-by-side", "serial"}:
        ap.error("--modes: side-by-side, serial, or both separated by a comma")
    work = Path(tempfile.mkdtemp(prefix="nsightwrap-walk-overhead-"))
    try:
        runs = []
        for n in range(1, args.runs + 1):
            order = args.modes if n % 2 else args.modes[::-1]  # A B, then B A: neither always on a warmer machine
            for mode in order:
                folder = work / mode
                folder.mkdir(exist_ok=True)
                runs.append(one_run(args, folder, environment(args, folder), n, mode))
                print(report(runs[-1:], args).splitlines()[2], flush=True)
        text = report(runs, args)
        print("\n" + text)
        if args.output:
            Path(args.output).write_text(text + "\n")
        return 0 if all(r["status"] == "ok" for r in runs) else 1
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
