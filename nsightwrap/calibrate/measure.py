"""Time a program without ncu: per kernel with the CUPTI tracer, else nsys, else by its wall time.

Sources in order. The CUPTI tracer (nsightwrap.calibrate.cupti, injected
with CUDA_INJECTION64_PATH) times every kernel as it ends, so the run stops
as soon as the stalled kernel has finished (calibrate.traced). `nsys
profile --trace cuda` runs the program at full speed under nsightwrap's own
watchdog and its SQLite export gives every launch's duration. Where neither
works (no compiler or CUPTI headers; nsys missing, or the copy bundled with
Nsight Compute that lacks libdw, FACTS.md), a plain watched run's wall time
bounds every kernel in it. Each Calibration says its source, and its notes
say why the better ones were not used. A program that hangs or fails
without ncu is reported as such: a failed Calibration with its own status
and reason.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import replace
from typing import Callable, Mapping, Optional, Sequence

from nsightwrap.calibrate.cupti.build import find_tracer
from nsightwrap.calibrate.cupti.trace import StalledKernel
from nsightwrap.calibrate.traced import measure_traced
from nsightwrap.calibrate.verdict import program_verdict
from nsightwrap.errors import NsightwrapError, ToolNotFound
from nsightwrap.ncu.allowance import Calibration
from nsightwrap.ncu.context import DEFAULT_CALIBRATION_LIMIT_S, RunConfig
from nsightwrap.ncu.listen import SILENT, RunListener
from nsightwrap.nsys.locate import find_nsys
from nsightwrap.nsys.options import NsysOptions
from nsightwrap.nsys.run import profile_nsys
from nsightwrap.paths import work_dir
from nsightwrap.reports.nsys.sqlite import api_calls, kernel_records, nsys_export_sqlite
from nsightwrap.status import CRASHED, ERROR, HANG, OK, TIMEOUT
from nsightwrap.watch.rules import TotalTimeout
from nsightwrap.watch.run import watch

__all__ = [
    "NSYS",
    "PLAIN",
    "durations_by_kernel",
    "marks_ranges",
    "measure",
    "measure_plain",
    "measure_with_nsys",
]

NSYS, PLAIN = "nsys", "plain run"
#: What nsys is asked for: CUDA kernels only; no CPU sampling, context switches or backtraces. On an H100
#: `nsys profile` of a 0.3 s program took 1.95 s so, 2.52 s without the last two (gpu-runs,
#: h100-walk-timing-before-floor.log).
NSYS_OPTIONS = NsysOptions(trace=("cuda",), sample="none", extra_args=("--cpuctxsw=none", "--backtrace=none"))


def _run_env(config: RunConfig) -> dict[str, str]:
    """The environment the program runs in: config.env, else this process's."""
    return dict(os.environ if config.env is None else config.env)


def measure_plain(command: Sequence[str], config: RunConfig, limit_s: float,
                  on_output: Optional[Callable[[str], None]] = None, *,
                  env: Optional[Mapping[str, str]] = None) -> Calibration:
    """One plain watched run: its wall time bounds every kernel in it (run in `env`, else config's)."""
    env = _run_env(config) if env is None else dict(env)
    try:
        outcome = watch(list(command), config.stoppable(TotalTimeout(limit_s)), policy=config.stop, env=env,
                        cwd=config.cwd, on_output=on_output, frontend_names=())
    except OSError as e:
        return Calibration.failed(ERROR, f"the program could not be started without ncu: {e}", PLAIN)
    if outcome.stopped_by_interrupt:
        raise KeyboardInterrupt("calibration run interrupted; its process tree was stopped")
    if outcome.exception is not None:
        raise outcome.exception
    return program_verdict(timed_out=outcome.verdict is not None, returncode=outcome.returncode,
                           elapsed_s=outcome.elapsed_s, limit_s=limit_s, source=PLAIN, log_tail=outcome.log[-2000:])


def durations_by_kernel(rows: Sequence[Sequence], columns: Sequence[str]) -> dict[str, float]:
    """Longest launch (seconds) per kernel, by the short name ncu prints, from kernel_records rows."""
    at = {c: i for i, c in enumerate(columns)}
    out: dict[str, float] = {}
    for r in rows:
        name = r[at["short_name"]] or r[at["name"]]
        ns = r[at["duration_ns"]]
        if name and isinstance(ns, (int, float)):
            out[str(name)] = max(out.get(str(name), 0.0), ns / 1e9)
    return out


def marks_ranges(calls: Optional[frozenset[str]]) -> Optional[bool]:
    """Whether the program called cudaProfilerStart or cuProfilerStart (None: its API calls not known)."""
    if calls is None:
        return None
    return any(c.split("_v")[0] in ("cudaProfilerStart", "cuProfilerStart") for c in calls)


def measure_with_nsys(command: Sequence[str], config: RunConfig, nsys: str, limit_s: float,
                      on_output: Optional[Callable[[str], None]] = None, *,
                      env: Optional[Mapping[str, str]] = None) -> tuple[Optional[Calibration], str]:
    """(calibration, "") from `nsys profile --trace cuda`; (None, why) when nsys could not say.

    A timed-out nsys run is not taken as the program's hang (nsys may be the
    one stuck): the caller's plain run decides that.
    """
    work = work_dir("calibrate")  # one that a SIGKILL leaves is removed by the next run or `cleanup`
    try:
        run = profile_nsys(command, NSYS_OPTIONS.replace(output=str(work / "calibration")),
                           config.replace(timeout=limit_s, report_dir=str(work)), on_output, nsys=nsys)
        if run.status == CRASHED and run.report is not None:
            return program_verdict(timed_out=False, returncode=run.returncode or 1, elapsed_s=run.elapsed_s,
                                   limit_s=limit_s, source=NSYS, log_tail=run.log[-2000:]), ""
        if run.status in (TIMEOUT, HANG):
            return None, f"nsys did not finish within {limit_s:g} s"
        if run.status != OK or run.report_kind != "nsys-rep":
            return None, run.reason
        sqlite = nsys_export_sqlite(run.report, nsys, env=_run_env(config) if env is None else dict(env),
                                    timeout=limit_s)
        columns, rows, _, _ = kernel_records(sqlite)
        return Calibration.from_kernels(durations_by_kernel(rows, columns), program_s=run.elapsed_s, source=NSYS,
                                        marks_ranges=marks_ranges(api_calls(sqlite))), ""
    except NsightwrapError as e:
        return None, str(e).splitlines()[0]
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _nsys_path(nsys: Optional[str], env: Mapping[str, str]) -> Optional[str]:
    try:
        return find_nsys(nsys, env)
    except ToolNotFound:
        return None


def _with_tracer(command: Sequence[str], config: RunConfig, limit_s: float, env: Mapping[str, str],
                 notes: list[str], **traced) -> tuple[Optional[Calibration], Optional[Calibration]]:
    """(calibration, None) from the CUPTI tracer; else (None, the traced run's wall time or None), noting why."""
    tracer = find_tracer(env)
    if tracer.path is None:
        notes.append(f"no CUPTI tracer ({tracer.reason})")
        return None, None
    cal, why, run = measure_traced(command, config, tracer.path, limit_s, env=env, **traced)
    if cal is not None:
        return cal, None
    notes.append(f"the CUPTI tracer could not time the kernels ({why})")
    if run is None:
        return None, None
    return None, program_verdict(timed_out=False, returncode=run.returncode, elapsed_s=run.elapsed_s,
                                 limit_s=limit_s, source=PLAIN, log_tail=run.log[-2000:])


def measure(command: Sequence[str], config: RunConfig, *, limit_s: float, nsys: Optional[str] = None,
            use_nsys: bool = True, on_output: Optional[Callable[[str], None]] = None,
            stalled: Optional[StalledKernel] = None, kernel_limit_s: float = DEFAULT_CALIBRATION_LIMIT_S,
            listener: RunListener = SILENT, use_tracer: bool = True) -> Calibration:
    """How long `command`'s kernels run without ncu: the CUPTI tracer, else nsys, else a plain run.

    stalled: the kernel the calibration is for; the traced run stops once it has finished without ncu,
    or once it has run kernel_limit_s there (the program then hangs by itself: a failed Calibration).
    """
    notes: list[str] = []
    env = _run_env(config)  # once for the whole calibration
    wall = None
    if use_tracer:
        cal, wall = _with_tracer(command, config, limit_s, env, notes, on_output=on_output, stalled=stalled,
                                 kernel_limit_s=kernel_limit_s, listener=listener)
        if cal is not None:
            return replace(cal, notes=tuple(notes) + cal.notes)
    path = _nsys_path(nsys, env) if use_nsys else None
    if path is not None:
        cal, why = measure_with_nsys(command, config, path, limit_s, on_output, env=env)
        if cal is not None:
            return replace(cal, notes=tuple(notes) + cal.notes)
        notes.append(f"nsys could not time the kernels ({why}); a plain run's wall time bounds them instead")
    elif use_nsys:
        notes.append("nsys was not found; a plain run's wall time bounds the kernels")
    if wall is not None:  # the traced run timed the whole program already
        notes.append("the traced run's wall time bounds the kernels")
        return replace(wall, notes=tuple(notes) + wall.notes)
    cal = measure_plain(command, config, limit_s, on_output, env=env)
    return replace(cal, notes=tuple(notes) + cal.notes)
