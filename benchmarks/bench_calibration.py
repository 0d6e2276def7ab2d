#!/usr/bin/env python3
"""Calibrated verdicts (issue 10), measured side by side in one run, printed as one table.

On the GPU machine, with the programs of tests/gpu/kernels.cu built by nvcc:

    nvcc -O2 -arch=sm_90 -lineinfo -o /tmp/nsightwrap-bench/app tests/gpu/kernels.cu
    python3 benchmarks/bench_calibration.py --app /tmp/nsightwrap-bench/app -o /tmp/bench-calibration.txt \\
        --ncu /usr/local/cuda/bin/ncu --nsys /opt/nvidia/nsight-compute/2025.3.1/host/target-linux-x64/nsys

(the bundled nsys needs Debian's libdw1 unpacked and on LD_LIBRARY_PATH, see devtools/nsys_on_gpu.sh;
without a working nsys, calibration falls back to plain runs and the table says so). A dry run on a
machine without a GPU, against the fakes of tests/ at real-time speed:

    python3 benchmarks/bench_calibration.py --fake -o /tmp/bench-calibration-fake.txt

Steps (all by default; choose with --steps hang,spin,walk,sweep,overhead):
  hang      `app hang`: the first run (no calibration yet: today's 10 s rule, then confirmed by
            calibrating) and a second one (calibrated from the store): last progress mark to verdict <= 3 s
  spin      `app spin S` alone for 8, 14 and 30 s with one metric (--metrics gpu__time_duration.sum),
            and 2 s with --section SpeedOfLight (10 passes): none called hung with default settings
  walk      `run --profile default --set basic` on `app mixed`: <= 20 s the first time (calibration
            included), <= 6 s the second (same store)
  sweep     `sweep-sections --set basic` on `app hang`, every section hangs: <= 25 s
  overhead  a run that does not stall (`app ok`, --set basic) against raw ncu, alternating: <= 0.3 s;
            and the longest silence between two progress marks with --set full (what the floor covers)
Issue 19 (fast verdicts without nsys: the CUPTI tracer), run with no --nsys on the machine as it comes:
  torchhang tests/gpu/torch_then_hang.py (a PyTorch process of >= 10 s whose kernels take milliseconds, one
            hangs under ncu): first run, last mark to verdict including calibration <= plain time + 5 s;
            second run (calibration stored) <= 3 s
  selfhang  `app selfhang`: a kernel that hangs without ncu too: a program fault naming wait_forever within
            the stated limit (60 s after the stall by default), nothing recorded as an ncu hang
  varied    `app varied 0.1,8,0.2` (one templated, namespaced kernel, very different times) and
  graph     `app graph 8` (kernels launched inside a CUDA graph), one metric: not called hung
  torchrun  `run --profile default --set basic` on a 2-rank torchrun job with all-reduces (two GPUs):
            first walk <= 45 s, second <= 30 s; every other kernel of both ranks profiled, the collective on one

Each step is the real command line (python -m nsightwrap ...) in its own session under a timeout,
every step with a fresh hang store unless it says otherwise; the whole benchmark stops starting steps
when --budget seconds (default 480) are spent. After each step, processes of nsightwrap runs left
behind are killed and reported; the GPU is checked for compute processes at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from nsightwrap.ncu.locate import find_ncu  # noqa: E402
from nsightwrap.ncu.options import ProfileOptions, build_argv  # noqa: E402
from nsightwrap.watch import gpu  # noqa: E402
from nsightwrap.watch.orphans import find_orphans  # noqa: E402

FAKE_NCU = ROOT / "tests/fake_ncu/ncu"
FAKE_NSYS = ROOT / "tests/fake_nsys/nsys"
FAKE_APP = ROOT / "tests/fake_ncu/app.py"
ONE_METRIC = ["--metrics", "gpu__time_duration.sum"]
SPINS = ((8.0, ONE_METRIC), (14.0, ONE_METRIC), (30.0, ONE_METRIC), (2.0, ["--section", "SpeedOfLight"]))
STEPS = ("hang", "spin", "walk", "sweep", "overhead", "torchhang", "selfhang", "varied", "graph", "torchrun")
TORCH_PY = "/opt/torch/.venv/bin/python3"
MULTI_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}


def _step_text(step: dict) -> str:
    """`job@rung:status 4.3s` (the attempt's own seconds), or `job@rung:skipped`."""
    a = step["attempt"]
    head = f"{step['job']}@{step['rung']}"
    return f"{head}:skipped" if a is None else f"{head}:{a['status']} {a['elapsed_s']:.1f}s"


@dataclass
class Row:
    measure: str
    value: str
    goal: str = ""
    verdict: str = ""


@dataclass
class Done:
    """One command line's run: exit code (None: stopped at its timeout), output, wall seconds."""

    rc: Optional[int]
    out: str
    err: str
    seconds: float

    def json(self) -> dict[str, Any]:
        for text in (self.out, self.out.strip().splitlines()[-1] if self.out.strip() else ""):
            try:
                return json.loads(text)
            except ValueError:
                continue
        return {}


def met(ok: bool) -> str:
    return "met" if ok else "NOT MET"


class Bench:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.t0 = time.monotonic()
        self.work = Path(tempfile.mkdtemp(prefix="nsightwrap-bench-calibration-"))
        self.env = dict(os.environ)
        self.env.pop("NSIGHTWRAP_STORE", None)
        # The command lines run this checkout's nsightwrap, not whichever one is installed.
        self.env["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + [p for p in [self.env.get("PYTHONPATH")] if p])
        if args.fake:
            self.env.update(NSIGHTWRAP_NCU=str(FAKE_NCU), NSIGHTWRAP_NSYS=str(FAKE_NSYS), FAKE_NCU_SCALE="1.0")
        self.env["NSIGHTWRAP_CACHE_DIR"] = str(self.work / "cache")
        self.ncu = find_ncu(args.ncu, self.env)
        self.tools = (["--ncu", args.ncu] if args.ncu else []) + (["--nsys", args.nsys] if args.nsys else [])
        self.rows: list[Row] = []
        self.details: list[dict[str, Any]] = []
        self.leftovers: list[str] = []
        self.stores = 0

    # --- plumbing --------------------------------------------------------------------------
    def left(self) -> float:
        return self.args.budget - (time.monotonic() - self.t0)

    def app(self, mode: str, *more: str) -> list[str]:
        """The command of a kernels.cu mode, or its fake equivalent."""
        if not self.args.fake:
            return [self.args.app, mode, *more]
        fake = {"ok": ["vec_add"] * 3 + ["block_reduce", "vec_add", "block_reduce", "vec_add", "block_reduce"],
                "hang": ["wait_for_host@hang"],
                "mixed": ["vec_add"] * 3 + ["wait_for_host@hang", "vec_add", "vec_add"]}
        if mode == "spin":
            steps = [f"spin_cycles@spin={more[0]}"] * (int(more[1]) if len(more) > 1 else 1)
        else:
            steps = fake[mode]
        return [sys.executable, str(FAKE_APP), *steps]

    def store(self) -> str:
        self.stores += 1
        return str(self.work / f"store-{self.stores}.db")

    def cli(self, *argv: str, timeout: float, env: Optional[dict] = None) -> Done:
        """python -m nsightwrap ARGV in its own session; stopped (tree included) at `timeout`."""
        timeout = max(1.0, min(timeout, self.left()))
        cmd = [sys.executable, "-m", "nsightwrap", *argv]
        t = time.monotonic()
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env or self.env,
                                cwd=self.work, start_new_session=True, stdin=subprocess.DEVNULL)
        try:
            out, err = proc.communicate(timeout=timeout)
            rc: Optional[int] = proc.returncode
        except subprocess.TimeoutExpired:
            out, err = self._stop(proc)
            rc = None
        self.details.append({"command": cmd[3:], "rc": rc, "seconds": round(time.monotonic() - t, 2),
                             "stderr_tail": err[-1500:]})
        self._sweep_leftovers()
        return Done(rc, out, err, time.monotonic() - t)

    def _stop(self, proc: subprocess.Popen) -> tuple[str, str]:
        """SIGTERM first (nsightwrap then stops its own tree), SIGKILL to the session after 15 s."""
        for sig, wait in ((signal.SIGTERM, 15.0), (signal.SIGKILL, 5.0)):
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                pass
            try:
                return proc.communicate(timeout=wait)
            except subprocess.TimeoutExpired:
                continue
        return "", ""

    def _sweep_leftovers(self) -> None:
        for p in find_orphans():
            try:
                self.leftovers.append(f"{p.pid} ({p.name()})")
                p.kill()
            except Exception:  # noqa: BLE001 - report and go on
                pass

    def add(self, measure: str, value: str, goal: str = "", verdict: str = "") -> None:
        self.rows.append(Row(measure, value, goal, verdict))
        print(f"  {measure}: {value}  {goal} {verdict}", flush=True)

    # --- steps -----------------------------------------------------------------------------
    def step_hang(self) -> None:
        store = self.store()
        for label in ("first run, not calibrated yet", "second run, calibration from the store"):
            d = self.cli("run", "-q", "--json", "--store", store, *self.tools, "--set", "basic", "--",
                         *self.app("hang", "60"), timeout=120)
            a = d.json()
            silent = a.get("detection_s")
            if label.startswith("second"):
                self.add("hang: last progress mark to verdict, calibrated (s)", f"{silent}", "<= 3 s",
                         met(silent is not None and silent <= 3.0 and a.get("status") == "hang"))
            else:
                self.add("hang: last progress mark to verdict, first run (s)", f"{silent}",
                         "10 s rule, then confirmed", "")
            self.add(f"hang: {label}: status, whole command (s)", f"{a.get('status')}, {d.seconds:.1f}",
                     a.get("allowance_basis") or "", "")

    def step_spin(self) -> None:
        for seconds, opts in SPINS:
            if self.left() < 30:
                self.add(f"spin {seconds:g} s", "skipped (budget)")
                continue
            d = self.cli("run", "-q", "--json", "--store", self.store(), *self.tools, *opts, "--",
                         *self.app("spin", f"{seconds:g}"), timeout=60 + 6 * seconds)
            a = d.json()
            again = any("ran again" in n for n in a.get("notes", []))
            what = " ".join(opts).replace("--metrics ", "").replace("--section ", "")
            self.add(f"spin {seconds:g} s alone, {what}: status, whole command (s)",
                     f"{a.get('status', 'stopped' if d.rc is None else d.rc)}, {d.seconds:.1f}",
                     "not hang" + (" (ran again after calibrating)" if again else ""),
                     met(a.get("status") == "ok"))

    # --- issue 19 ------------------------------------------------------------------------------
    def torch_prog(self, *args: str) -> list[str]:
        if self.args.fake:
            return [sys.executable, str(FAKE_APP), "vec_add", "sleep:2", "wait_for_host@hang", "vec_add"]
        return [self.args.python, str(ROOT / "tests/gpu/torch_then_hang.py"), *args]

    def plain_time(self, command: list[str], timeout: float = 120.0) -> float:
        t = time.monotonic()
        subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL,
                       env=self.env, timeout=max(1.0, min(timeout, self.left())), check=False)
        return time.monotonic() - t

    def step_torchhang(self) -> None:
        prog = self.torch_prog("10", "60")
        plain = self.plain_time(prog)
        self.add("torch_then_hang alone (s)", f"{plain:.1f}", ">= 10 s")
        store = self.store()
        for label in ("first", "second"):
            d = self.cli("run", "-q", "--json", "--store", store, *self.tools, "--set", "basic", "--", *prog,
                         timeout=240)
            a = d.json()
            silent = (a.get("stall") or {}).get("silent_s")
            cal = a.get("calibration") or {}
            if label == "first":
                # The verdict comes at the command's end; the last mark came `silent` before ncu's run (elapsed_s)
                # ended: the calibration and the interpreter's start-up (~0.5 s) are inside this upper bound.
                span = None if silent is None or a.get("elapsed_s") is None else d.seconds - a["elapsed_s"] + silent
                goal, what = plain + 5.0, "last mark to verdict, calibration included (s)"
            else:
                span, goal, what = a.get("detection_s"), 3.0, "detection in the final attempt (s)"
            self.add(f"torch hang, {label} run: {what}", f"{span if span is None else round(span, 1)}",
                     f"<= {goal:.1f} s", met(a.get("status") == "hang" and span is not None and span <= goal))
            self.details.append({"torch hang": label, "elapsed_s": a.get("elapsed_s"), "silent_s": silent,
                                 "detection_s": a.get("detection_s"), "calibration": cal})
            self.add(f"torch hang, {label} run: status, whole command (s), calibration source",
                     f"{a.get('status')}, {d.seconds:.1f}, {cal.get('source')}", a.get("allowance_basis") or "")

    def step_selfhang(self) -> None:
        store = self.store()
        prog = ([sys.executable, str(FAKE_APP), "vec_add", "wait_forever@always"] if self.args.fake
                else self.app("selfhang", "150"))
        d = self.cli("run", "-q", "--json", "--store", store, *self.tools, "--set", "basic", "--", *prog,
                     timeout=200)
        a = d.json()
        fault = json.dumps(a.get("program_fault") or "")
        named = "wait_forever" in fault or "wait_forever" in (a.get("reason") or "")
        self.add("hangs by itself: status, program fault names the kernel",
                 f"{a.get('status')}, {named}", "timeout, True", met(a.get("status") == "timeout" and named))
        self.add("hangs by itself: whole command (s)", f"{d.seconds:.1f}", "<= 60 s after the stall + start-up",
                 met(d.rc is not None and d.seconds <= 75.0))
        listed = self.cli("hangs", "list", "--json", "--store", store, timeout=30).json()
        hangs = listed.get("kernels", listed.get("records", [])) if isinstance(listed, dict) else listed
        self.add("hangs by itself: hangs recorded", f"{len(hangs or [])}", "0", met(not hangs))
        self.details.append({"selfhang": a.get("reason"), "program_fault": a.get("program_fault")})

    def _one_metric(self, label: str, prog: list[str]) -> None:
        d = self.cli("run", "-q", "--json", "--store", self.store(), *self.tools, *ONE_METRIC, "--", *prog,
                     timeout=180)
        a = d.json()
        cal = a.get("calibration") or {}
        self.add(f"{label}: status, whole command (s), calibration source",
                 f"{a.get('status', 'stopped' if d.rc is None else d.rc)}, {d.seconds:.1f}, {cal.get('source')}",
                 "not hang", met(a.get("status") == "ok"))

    def step_varied(self) -> None:
        prog = ([sys.executable, str(FAKE_APP), "tmpl_spin@spin=0.1", "tmpl_spin@spin=8", "tmpl_spin@spin=0.2"]
                if self.args.fake else self.app("varied", "0.1,8,0.2"))
        self._one_metric("nsw::detail::tmpl_spin<float, 4> of 0.1, 8 and 0.2 s", prog)

    def step_graph(self) -> None:
        prog = ([sys.executable, str(FAKE_APP), "vec_add", "spin_cycles@spin=8", "block_reduce"] if self.args.fake
                else self.app("graph", "8"))
        self._one_metric("CUDA graph with an 8 s kernel", prog)

    def step_torchrun(self) -> None:
        env = dict(self.env, **MULTI_ENV, NSIGHTWRAP_CACHE_DIR=str(self.work / "tool-cache-torchrun"))
        if self.args.fake:
            ar = "ncclDevKernel_AllReduce_Sum_f32_RING_LL@collective"
            job = [str(ROOT / "tests/fake_dist/torchrun"), "--nproc-per-node", "2", str(FAKE_APP), "gemm", ar, "gemm"]
        else:
            torchrun = str(Path(self.args.python).with_name("torchrun"))
            job = [torchrun, "--nproc-per-node", "2", str(ROOT / "tests/gpu/multi_allreduce.py")]
        self.add("torchrun job alone (s)", f"{self.plain_time(job):.1f}")
        store = self.store()
        for label, goal in (("first", 45.0), ("second", 30.0)):
            d = self.cli("run", "-q", "--json", "--store", store, *self.tools, "--profile", "default", "--set",
                         "basic", "--", *job, timeout=300, env=env)
            w = d.json()
            steps = w.get("steps", [])
            self.add(f"torchrun walk, {label} time (s)", f"{d.seconds:.1f}", f"<= {goal:g} s",
                     met(d.rc is not None and d.seconds <= goal and w.get("status") == "ok"))
            self.add(f"torchrun walk, {label}: status, attempts", f"{w.get('status')}, "
                     f"{sum(s['attempt'] is not None for s in steps)}",
                     "; ".join(_step_text(s) for s in steps if s["attempt"] is not None))
            keep = ("status", "hangs", "kernels")
            self.details.append({"torchrun walk": label, "result": {k: w.get(k) for k in keep}})

    def step_walk(self) -> None:
        """The first walk knows nothing: a fresh hang store, and a fresh tool cache (ncu is probed inside it)."""
        store = self.store()
        env = dict(self.env, NSIGHTWRAP_CACHE_DIR=str(self.work / "tool-cache-walk"))
        for label, goal in (("first", 20.0), ("second", 6.0)):
            d = self.cli("run", "-q", "--json", "--store", store, *self.tools, "--profile", "default", "--set",
                         "basic", "--", *self.app("mixed", "60"), timeout=240 if label == "first" else 60, env=env)
            w = d.json()
            steps = w.get("steps", [])
            summary = ", ".join(_step_text(s) for s in steps)
            attempts = sum(s["attempt"] is not None for s in steps)
            self.add(f"walk on mixed, {label} time (s)", f"{d.seconds:.1f}", f"<= {goal:g} s",
                     met(d.rc is not None and d.seconds <= goal))
            self.add(f"walk on mixed, {label} time: attempts", str(attempts),
                     "; ".join(_step_text(s) for s in steps if s["attempt"] is not None))
            self.details.append({"walk": label, "steps": summary, "hangs": w.get("hangs")})

    def step_sweep(self) -> None:
        d = self.cli("sweep-sections", "-q", "--json", "--store", self.store(), *self.tools, "--set", "basic", "--",
                     *self.app("hang", "60"), timeout=180)
        r = d.json()
        kernels = r.get("kernels", [])
        probes = ", ".join(f"{k['kernel']}: {k['probes_run']} probes (naive {k['naive_probes']})" for k in kernels)
        self.add("sweep-sections --set basic on hang (s)", f"{d.seconds:.1f}", "<= 25 s",
                 met(d.rc == 0 and d.seconds <= 25.0))
        self.add("sweep: probes", probes or f"status {r.get('status')}", "<= one at a time",
                 met(bool(kernels) and all(k["probes_run"] <= k["naive_probes"] for k in kernels)))

    def step_overhead(self) -> None:
        store = self.store()
        Path(store).touch()  # a store that exists: the run reads it up front, as a user's would
        raws, runs = [], []

        def raw(i: int) -> float:
            argv = build_argv(self.ncu, ProfileOptions(set="basic", export=str(self.work / f"raw{i}.ncu-rep")),
                              self.app("ok"))
            t = time.monotonic()
            subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL,
                           env=self.env, timeout=max(1.0, min(120.0, self.left())), check=False)
            return time.monotonic() - t

        def run(i: int) -> float:
            d = self.cli("run", "-q", "--store", store, *self.tools, "--set", "basic", "-o",
                         str(self.work / f"run{i}.ncu-rep"), "--", *self.app("ok"), timeout=120)
            return d.seconds

        def api(i: int) -> float:
            """What `run` does after the interpreter started: the stored calibration looked up, one watched run."""
            from nsightwrap.calibrate import Calibrator
            from nsightwrap.ncu.context import RunConfig, RunContext
            from nsightwrap.ncu.engine import profile_command
            from nsightwrap.store.hangstore import HangStore

            options = ProfileOptions(set="basic", export=str(self.work / f"api{i}.ncu-rep"))
            t = time.monotonic()
            config = RunConfig(ncu=self.ncu, env=self.env, report_dir=str(self.work),
                               timeout=max(1.0, min(120.0, self.left())))
            with HangStore(store) as hangs:
                a = Calibrator(self.app("ok"), store=hangs).run(
                    lambda ctx: profile_command(self.app("ok"), options, ctx), RunContext.create(config),
                    options)
            took = time.monotonic() - t
            if a.status != "ok":
                self.details.append({"overhead run": a.status, "reason": a.reason})
            return took

        apis: list[float] = []
        raw(-1), run(-1), api(-1)  # warm-up: page cache, the GPU's clocks
        for i in range(self.args.repeat):
            order = [(raws, raw), (apis, api), (runs, run)]
            for bucket, fn in (order if i % 2 == 0 else order[::-1]):
                bucket.append(fn(i))
        r, p, w = statistics.median(raws), statistics.median(apis), statistics.median(runs)
        self.add(f"raw ncu, median of {len(raws)} (s)", f"{r:.3f}")
        self.add(f"watched (Python: Calibrator.run + profile_command), median of {len(apis)} (s)", f"{p:.3f}")
        self.add("overhead, no stall (s)", f"{p - r:+.3f}", "<= 0.3 s", met(p - r <= 0.3))
        self.add(f"python -m nsightwrap run, median of {len(runs)} (s)", f"{w:.3f}",
                 f"{w - r:+.3f} s over raw ncu, the interpreter's start included")
        self.details.append({"raw": raws, "api": apis, "run": runs})
        self.longest_gap()

    def longest_gap(self) -> None:
        """The longest silence between two progress marks of one kernel, --set full on `app ok`."""
        from nsightwrap.ncu.context import RunConfig
        from nsightwrap.ncu.engine import profile_command
        from nsightwrap.ncu.events import KernelStarted, Progress

        marks: dict[Any, float] = {}
        gaps: list[float] = []

        def on_event(ev: Any) -> None:
            now = time.monotonic()
            if isinstance(ev, KernelStarted):
                marks[ev.kernel_id] = now
            elif isinstance(ev, Progress) and ev.kernel_id in marks:
                gaps.append(now - marks[ev.kernel_id])
                marks[ev.kernel_id] = now

        config = RunConfig(ncu=self.ncu, env=self.env, report_dir=str(self.work), stall_timeout=60.0,
                           stall_timeout_given=True, timeout=max(1.0, min(120.0, self.left())))
        a = profile_command(self.app("ok"), ProfileOptions(set="full"), config, on_event=on_event)
        self.add("longest silence between marks, ok --set full (s)", f"{max(gaps, default=0):.2f}",
                 f"floor 2.5 s covers it ({a.status})", met(max(gaps, default=0) < 2.5))


def write_table(bench: Bench, path: Path, ran: list[str]) -> str:
    width = max([len(r.measure) for r in bench.rows] + [7])
    lines = [f"nsightwrap calibration benchmark ({'fake ncu and nsys' if bench.args.fake else 'real ncu'})",
             f"ncu: {bench.ncu}", f"nsys: {bench.args.nsys or bench.env.get('NSIGHTWRAP_NSYS') or '(searched)'}",
             f"app: {bench.args.app or FAKE_APP}", f"steps: {', '.join(ran)}; "
             f"{time.monotonic() - bench.t0:.0f} s in all", "",
             f"| {'measure'.ljust(width)} | {'value':<18} | goal / note | verdict",
             f"|{'-' * (width + 2)}|{'-' * 20}|-------------|--------"]
    lines += [f"| {r.measure.ljust(width)} | {r.value:<18} | {r.goal} | {r.verdict}" for r in bench.rows]
    on_gpu = gpu.compute_processes()
    lines += ["", "left behind by nsightwrap runs (killed): " + (", ".join(bench.leftovers) or "none"),
              "GPU compute processes at the end: " + ("unknown (no nvidia-smi)" if on_gpu is None else
                                                      ", ".join(f"{p.pid} ({p.name})" for p in on_gpu) or "none"),
              "", "details (one JSON object a line):"]
    lines += [json.dumps(d) for d in bench.details]
    text = "\n".join(lines) + "\n"
    path.write_text(text)
    return text


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-o", "--output", required=True, metavar="FILE", help="write the table here")
    ap.add_argument("--app", help="tests/gpu/kernels.cu built by nvcc")
    ap.add_argument("--fake", action="store_true", help="the fake ncu, nsys and programs of tests/ (no GPU)")
    ap.add_argument("--ncu", help="ncu to use (default: as nsightwrap finds it)")
    ap.add_argument("--nsys", help="nsys to calibrate with (default: as nsightwrap finds it)")
    ap.add_argument("--steps", default=",".join(STEPS), help=f"comma-separated, of {', '.join(STEPS)}")
    ap.add_argument("--budget", type=float, default=480.0, help="no step starts after this many seconds")
    ap.add_argument("--repeat", type=int, default=3, help="runs of each side in the overhead step")
    ap.add_argument("--python", default=TORCH_PY if os.path.exists(TORCH_PY) else sys.executable,
                    help="the Python with PyTorch (and CuPy) for torchhang and torchrun")
    ap.add_argument("--keep", action="store_true", help="keep the reports and hang stores made (a temporary folder)")
    args = ap.parse_args()
    if not args.fake and not args.app:
        ap.error("give --app (tests/gpu/kernels.cu built by nvcc), or --fake")
    steps = [s.strip() for s in args.steps.split(",") if s.strip()]
    unknown = [s for s in steps if s not in STEPS]
    if unknown:
        ap.error(f"unknown step(s) {', '.join(unknown)}; choose from {', '.join(STEPS)}")
    bench = Bench(args)
    ran = []
    try:
        for step in steps:
            if bench.left() <= 5:
                bench.add(step, "skipped (budget spent)")
                continue
            print(f"=== {step} ({bench.left():.0f} s of budget left)", flush=True)
            ran.append(step)
            getattr(bench, f"step_{step}")()
    finally:
        print("\n" + write_table(bench, Path(args.output), ran))
        if args.keep:
            print(f"reports and stores kept in {bench.work}")
        else:
            shutil.rmtree(bench.work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
