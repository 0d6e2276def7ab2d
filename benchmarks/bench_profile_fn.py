#!/usr/bin/env python3
"""profile(fn) against profiling by hand, side by side (issue 15).

One PyTorch step (a 2048 x 2048 matmul and a softmax; benchmarks/profile_fn_step.py),
the softmax kernel profiled with `--set basic`, two ways, alternating:

- by hand: `ncu --set basic -k regex:[Ss]oft[Mm]ax --profile-from-start off -o R
  python3 profile_fn_step.py hand 2048` (a warm-up call, then
  torch.cuda.profiler.start/stop around one call);
- `nsightwrap.profile(step, 2048, kernel="[Ss]oft[Mm]ax", set="basic")` in a
  fresh Python process (what a user's script pays, imports included).

Each is a whole process, timed from outside, under its own timeout; the whole
benchmark stays within --budget seconds. A first pair is run and shown but not
counted (ncu's probe cache, the page cache, the GPU's clocks). Then the
reports of both are read the same way and compared: the same kernels, and
gpu__time_duration.sum within 5 %.

    python benchmarks/bench_profile_fn.py                      # real ncu and GPU
    python benchmarks/bench_profile_fn.py --ncu /usr/local/cuda/bin/ncu --out /tmp/t.md
    python benchmarks/bench_profile_fn.py --fake               # the fake ncu of tests/, no GPU

Goal: profile(fn)'s median wall time <= 1.3x the hand-made run's. Exit 0 when
met with the same kernels and values, 1 when not, 2 when it could not run.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
for _p in (str(ROOT), str(HERE)):
    if _p not in sys.path:
        sys.path.insert(0, _p)

KERNEL = "[Ss]oft[Mm]ax"
SET = "basic"
GOAL = 1.3
TOLERANCE = 0.05
DURATION = "gpu__time_duration.sum"
BENCH_VAR = "NSIGHTWRAP_BENCH_RUN"
PROFILED = re.compile(r'==PROF== Profiling "([^"]+)"')


@dataclass
class Run:
    """One timed process: which side, its wall time, what ncu profiled, where the report is."""

    side: str  # "hand" or "fn"
    label: str
    wall_s: Optional[float] = None
    ok: bool = False
    note: str = ""
    kernels: list[str] = field(default_factory=list)  # from ncu's output
    reports: list[str] = field(default_factory=list)
    info: dict = field(default_factory=dict)  # what the profile(fn) process said about itself


# --- the profile(fn) process (run by the benchmark as `--profile-run OUT.json`) ----------------------


def profile_run(args: argparse.Namespace) -> int:
    t0 = time.perf_counter()
    from profile_fn_step import fake_step, step

    # profile loads pandas and the walk: counted as imports, not as the call
    from nsightwrap import RunConfig, profile

    config = RunConfig(ncu=args.ncu, report_dir=args.report_dir, cache_dir=args.cache_dir)
    t1 = time.perf_counter()
    r = profile(fake_step if args.fake else step, args.size, kernel=KERNEL, set=SET, timeout=args.run_timeout,
                config=config)
    t2 = time.perf_counter()
    info = {"import_s": t1 - t0, "profile_s": t2 - t1, "rows": len(r.df), "reports": r.report_paths,
            "kernels": [k.name for a in r.attempts for k in a.kernels], "statuses": [a.status for a in r.attempts],
            "calibration_s": r.calibration_s, "calibration_source": r.calibration_source,
            "stall_timeout": r.stall_timeout, "value": repr(r.value), "summary": r.summary()}
    Path(args.profile_run).write_text(json.dumps(info))
    return 0 if r.attempts and all(a.status == "ok" for a in r.attempts) else 1


# --- running one side, bounded ---------------------------------------------------------------------


def _stop(proc: subprocess.Popen, cookie: str) -> None:
    """SIGTERM (the profile(fn) process then stops its ncu tree), then SIGKILL whatever carries the cookie."""
    from nsightwrap.watch.tree import processes_with

    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        pass
    for p, _ in processes_with(BENCH_VAR, cookie):
        try:
            p.kill()
        except Exception:  # noqa: BLE001 - gone already
            pass
    if proc.poll() is None:
        proc.kill()
    proc.wait()


def run_bounded(argv: list[str], env: dict, cwd: Path, timeout: float, log: Path) -> tuple[float, int, bool]:
    """(wall time, exit code, timed out) of argv, its output in `log`; its whole tree stopped on timeout."""
    cookie = uuid.uuid4().hex
    with open(log, "wb") as out:
        t = time.perf_counter()
        proc = subprocess.Popen(argv, env=dict(env, **{BENCH_VAR: cookie}), cwd=cwd, stdin=subprocess.DEVNULL,
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            proc.wait(timeout=timeout)
            timed_out = False
        except subprocess.TimeoutExpired:
            _stop(proc, cookie)
            timed_out = True
        return time.perf_counter() - t, proc.returncode, timed_out


class Bench:
    """The two sides, their settings, and the time left."""

    def __init__(self, args: argparse.Namespace, ncu: str, env: dict, work: Path) -> None:
        self.args, self.ncu, self.env, self.work = args, ncu, env, work
        self.deadline = time.monotonic() + args.budget
        self.argv: dict[str, list[str]] = {}  # the last command of each side, for the note

    def _timeout(self) -> Optional[float]:
        left = self.deadline - time.monotonic()
        return None if left < 5 else min(self.args.run_timeout, left)

    def hand(self, label: str) -> Run:
        run = Run("hand", label)
        report = self.work / f"hand-{label}.ncu-rep"
        argv = [self.ncu, "--set", SET, "-k", f"regex:{KERNEL}", "--profile-from-start", "off", "-o", str(report),
                sys.executable, str(HERE / "profile_fn_step.py"), "hand", str(self.args.size)]
        argv += ["--fake"] if self.args.fake else []
        return self._finish(run, argv, lambda log: ([report] if report.exists() else [], PROFILED.findall(log), {}))

    def fn(self, label: str) -> Run:
        run = Run("fn", label)
        out = self.work / f"fn-{label}.json"
        timeout = max(5.0, (self._timeout() or 5.0) - 5.0)  # profile() gives up before the benchmark kills it
        argv = [sys.executable, str(Path(__file__).resolve()), "--profile-run", str(out), "--ncu", self.ncu,
                "--size", str(self.args.size), "--report-dir", str(self.work / f"fn-{label}"),
                "--cache-dir", str(self.work / "cache"), "--run-timeout", str(timeout)]
        argv += ["--fake"] if self.args.fake else []

        def outcome(log: str):
            info = json.loads(out.read_text()) if out.exists() else {}
            return [Path(p) for p in info.get("reports", [])], info.get("kernels", []), info

        return self._finish(run, argv, outcome)

    def _finish(self, run: Run, argv: list[str], outcome) -> Run:
        timeout = self._timeout()
        if timeout is None:
            run.note = "not run: out of time (--budget)"
            return run
        log = self.work / f"{run.side}-{run.label}.log"
        self.argv[run.side] = argv
        wall, rc, timed_out = run_bounded(argv, self.env, self.work, timeout, log)
        text = log.read_text(errors="replace")
        reports, run.kernels, run.info = outcome(text)
        run.reports = [str(p) for p in reports]
        run.wall_s = wall
        run.ok = rc == 0 and not timed_out and bool(reports)
        if not run.ok:
            run.note = (f"timed out after {timeout:.1f} s" if timed_out else f"exit {rc}") + "; last output: " \
                + text.strip()[-300:].replace("\n", " | ")
        return run


# --- what was profiled -------------------------------------------------------------------------------


def report_rows(paths: list[str]) -> tuple[list[str], list[float], str]:
    """(kernel names, durations, error) from reports, read the same way for both sides."""
    from nsightwrap import load_report

    names, durations = [], []
    try:
        for path in paths:
            df = load_report(path)
            names += [str(x) for x in df["function"]]
            durations += [float(x) for x in df[DURATION]] if DURATION in df else []
    except Exception as e:  # noqa: BLE001 - reported in the table, not fatal
        return names, durations, f"{type(e).__name__}: {e}"
    return names, durations, ""


def _same_everywhere(values: list[tuple], other: list[tuple]) -> bool:
    return len(set(values)) == 1 and set(values) == set(other)


def compare(hands: list[Run], fns: list[Run]) -> tuple[list[str], bool]:
    """Lines saying whether both sides profiled the same kernels with the same values; and whether they did."""
    hands, fns = [r for r in hands if r.ok], [r for r in fns if r.ok]
    seen = {"hand": [tuple(r.kernels) for r in hands], "fn": [tuple(r.kernels) for r in fns]}
    same = _same_everywhere(seen["hand"], seen["fn"])
    lines = [f"- kernels profiled (ncu's output): hand-made {sorted(set(seen['hand']))}, profile(fn) "
             f"{sorted(set(seen['fn']))}: {'same' if same else 'DIFFERENT'}"]
    read = {"hand": [report_rows(r.reports) for r in hands], "fn": [report_rows(r.reports) for r in fns]}
    errors = [e for got in read.values() for _, _, e in got if e]
    if errors:
        return lines + [f"- reports: not compared ({errors[0]})"], False
    names = {side: [tuple(n) for n, _, _ in got] for side, got in read.items()}
    agree = _same_everywhere(names["hand"], names["fn"])
    same &= agree
    lines.append(f"- kernels in the reports: hand-made {sorted(set(names['hand']))}, profile(fn) "
                 f"{sorted(set(names['fn']))}: {'same' if agree else 'DIFFERENT'}")
    medians = {side: [statistics.median(v) for v in zip(*[d for _, d, _ in got])] for side, got in read.items()}
    if not medians["hand"] or len(medians["hand"]) != len(medians["fn"]):
        return lines + [f"- {DURATION}: not in both reports"], False
    for i, (h, f) in enumerate(zip(medians["hand"], medians["fn"])):
        diff = (f - h) / h if h else float("inf")
        within = abs(diff) <= TOLERANCE
        same &= within
        lines.append(f"- {DURATION} of {names['hand'][0][i]}, median: hand-made {h:,.0f} ns, profile(fn) {f:,.0f} "
                     f"ns ({100 * diff:+.1f} %): {'within' if within else 'NOT within'} {100 * TOLERANCE:.0f} %")
    return lines, same


# --- the table ---------------------------------------------------------------------------------------


def _s(x: Optional[float]) -> str:
    return "-" if x is None else f"{x:.2f}"


def timing_table(pairs: list[tuple[str, Run, Run]]) -> tuple[list[str], Optional[float]]:
    """Markdown rows of every run, the medians of the counted ones, and the ratio of the medians."""
    lines = ["| run | first | hand-made (s) | profile(fn) process (s) | profile() call (s) | ratio |",
             "|---|---|---|---|---|---|"]
    for label, first, second in pairs:
        hand, fn = (first, second) if first.side == "hand" else (second, first)
        ratio = f"{fn.wall_s / hand.wall_s:.2f}x" if hand.ok and fn.ok else "-"
        lines.append(f"| {label} | {'hand-made' if first.side == 'hand' else 'profile(fn)'} | "
                     f"{_s(hand.wall_s) if hand.ok else 'failed'} | {_s(fn.wall_s) if fn.ok else 'failed'} | "
                     f"{_s(fn.info.get('profile_s'))} | {ratio if label != 'warm-up' else '(not counted)'} |")
    counted = [(f, s) for label, f, s in pairs if label != "warm-up"]
    hand = [r.wall_s for pair in counted for r in pair if r.side == "hand" and r.ok]
    fn = [r for pair in counted for r in pair if r.side == "fn" and r.ok]
    if not hand or not fn:
        return lines, None
    h, f = statistics.median(hand), statistics.median(r.wall_s for r in fn)
    call = statistics.median(r.info.get("profile_s", 0.0) for r in fn)
    lines.append(f"| median of {len(hand)} / {len(fn)} | | {h:.2f} | {f:.2f} | {call:.2f} | {f / h:.2f}x |")
    return lines, f / h


def report(args: argparse.Namespace, bench: "Bench", pairs, timing: list[str], ratio: Optional[float],
           values: list[str], where: str) -> str:
    """The whole note: settings, commands, the timing table, and what was compared."""
    fns = [r for _, a, b in pairs for r in (a, b) if r.side == "fn" and r.ok]
    sources = sorted({r.info.get("calibration_source") or "none" for r in fns})
    goal = "NOT MEASURED" if ratio is None else f"{'MET' if ratio <= GOAL else 'NOT MET'} ({ratio:.2f}x)"
    head = [f"# profile(fn) against profiling by hand ({time.strftime('%Y-%m-%d %H:%M')}, {socket.gethostname()})",
            "", f"- {where}; ncu {bench.ncu}" + (" (FAKE: tests/fake_ncu, no GPU)" if args.fake else ""),
            f"- hand-made: `{' '.join(bench.argv.get('hand', []))}`",
            f"- profile(fn): `{' '.join(bench.argv.get('fn', []))}`, which calls "
            f"`nsightwrap.profile({'fake_step' if args.fake else 'step'}, {args.size}, kernel=\"{KERNEL}\", "
            f"set=\"{SET}\")`", ""]
    tail = ["", f"- goal: profile(fn) <= {GOAL}x the hand-made run: {goal}", *values,
            f"- profile(fn)'s call time came from: {', '.join(sources) or '-'} (\"plain run\": a second process)",
            f"- profile(fn) process, median: imports {_med(fns, 'import_s')} s, profile() {_med(fns, 'profile_s')} s"]
    if args.fake:
        tail.append("- fake ncu: runs take under a second, so fixed costs dominate and the ratio means nothing; "
                    "both reports are copies of one recorded report")
    tail += [f"- {r.side} {r.label}: {r.note}" for _, a, b in pairs for r in (a, b) if r.note]
    return "\n".join(head + timing + tail) + "\n"


def _med(runs: list[Run], key: str) -> str:
    values = [r.info[key] for r in runs if r.info.get(key) is not None]
    return f"{statistics.median(values):.2f}" if values else "-"


# --- main --------------------------------------------------------------------------------------------


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ncu", help="the ncu to use (default: found as nsightwrap finds it)")
    ap.add_argument("--fake", action="store_true", help="the fake ncu and a fake step of tests/ (no GPU)")
    ap.add_argument("--runs", type=int, default=3, help="counted runs of each side (default 3)")
    ap.add_argument("--size", type=int, default=2048)
    ap.add_argument("--out", default="bench_profile_fn.md", help="where the table goes (default %(default)s)")
    ap.add_argument("--budget", type=float, default=290.0, help="seconds for everything (default %(default)s)")
    ap.add_argument("--run-timeout", type=float, default=120.0, help="seconds for one run (default %(default)s)")
    ap.add_argument("--work", help="folder for reports and logs (default: a new temporary one, kept)")
    ap.add_argument("--profile-run", help=argparse.SUPPRESS)
    ap.add_argument("--report-dir", help=argparse.SUPPRESS)
    ap.add_argument("--cache-dir", help=argparse.SUPPRESS)
    return ap.parse_args(argv)


def environment(args: argparse.Namespace) -> tuple[str, dict]:
    """The ncu to use and the environment both sides run in."""
    from nsightwrap import find_ncu

    env = dict(os.environ)
    paths = [str(ROOT), str(HERE)]
    if args.fake:
        env.update(FAKE_NCU_SCALE="1.0", NSIGHTWRAP_PROFILER_API="fakecuda:profiler_start:profiler_stop")
        paths.append(str(ROOT / "tests" / "fake_ncu"))
        args.ncu = str(ROOT / "tests" / "fake_ncu" / "ncu")
    env["PYTHONPATH"] = os.pathsep.join(paths + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    return find_ncu(args.ncu, env), env


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.profile_run:
        return profile_run(args)
    if args.runs < 1:
        sys.exit("--runs must be >= 1")
    ncu, env = environment(args)
    from nsightwrap import Environment

    here = Environment.detect()
    work = Path(args.work or tempfile.mkdtemp(prefix="nsightwrap-bench-fn-"))
    work.mkdir(parents=True, exist_ok=True)
    bench = Bench(args, ncu, env, work)
    pairs = []
    for i, label in enumerate(["warm-up"] + [str(n) for n in range(1, args.runs + 1)]):
        first, second = (bench.hand, bench.fn) if i % 2 == 0 else (bench.fn, bench.hand)
        a = first(label)
        pairs.append((label, a, second(label)))
        print(f"{label}: " + ", ".join(f"{r.side} {_s(r.wall_s)} s{'' if r.ok else ' FAILED'}" for r in pairs[-1][1:]),
              flush=True)
    ratio_lines, ratio = timing_table(pairs)
    counted = [p for p in pairs if p[0] != "warm-up"]
    value_lines, same = compare([r for p in counted for r in p[1:] if r.side == "hand"],
                                [r for p in counted for r in p[1:] if r.side == "fn"])
    text = report(args, bench, pairs, ratio_lines, ratio, value_lines,
                  f"GPU {here.gpu or 'none'} (driver {here.driver or '-'})")
    Path(args.out).write_text(text)
    print("\n" + text + f"\ntable written to {args.out}; reports and logs in {work}")
    if ratio is None:
        return 2
    return 0 if ratio <= GOAL and same else 1


if __name__ == "__main__":
    sys.exit(main())
